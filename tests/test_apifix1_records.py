"""The records of a model, aggregator and policy passed from Python (docs/python-api.md "What the saved config says"):
a comparison cannot vary them, a saved run's record is accepted with the same parts, ``result.model`` is in eval mode,
an instance's own ``Options.validate`` runs, and ``compare(callbacks=...)`` says it takes none."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError
from chillfl.extend import AggregatorBase, check_state_keys, require

BASE = {"federation": {"num_clients": 4, "rounds": 2}, "client": {"lr": 0.1}}


class TrimmedMean(AggregatorBase):
    """docs/extending.md's aggregator with options."""

    @dataclass(frozen=True)
    class Options:
        beta: float = 0.1

        def validate(self, section: str) -> None:
            require(0 <= self.beta < 0.5, f"{section}.beta", f"must be in [0, 0.5), got {self.beta}")

    def __init__(self, options: Options = Options()) -> None:
        self.options = options
        self.beta = options.beta

    def aggregate(self, global_params: Any, results: Any, round: int) -> Any:
        cut = int(self.beta * len(results))
        out = {}
        for key, ref in global_params.items():
            values = torch.stack([r.params[key] for r in results])
            out[key] = values.sort(dim=0).values[cut: len(results) - cut].double().mean(dim=0).to(ref.dtype)
        return out


class LinearWarmup:
    """docs/extending.md's temperature policy with options."""

    @dataclass(frozen=True)
    class Options:
        start: float = 1.0
        end: float = 0.25
        rounds: int = 2

        def validate(self, section: str) -> None:
            require(self.end > 0, f"{section}.end", f"must be > 0, got {self.end}")

    def __init__(self, options: Options = Options()) -> None:
        self.options = options

    def temperature(self, client_id: int, round: int) -> float:
        o = self.options
        return o.start + (o.end - o.start) * min(round, o.rounds) / o.rounds

    def observe(self, client_id: int, round: int, local_accuracy: float) -> None:
        return None

    def client_half(self, num_classes: int) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state_keys(state, (), "LinearWarmup")


def _data() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(200, 8, generator=g), torch.randint(0, 3, (200,), generator=g)
    return chillfl.TensorData(x[:160], y[:160], x[160:], y[160:], num_classes=3)


def _model(dropout: bool = False) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), *([nn.Dropout(0.5)] if dropout else []), nn.Linear(16, 3))


@pytest.mark.parametrize("kwargs, field", [
    ({"grid": {"algorithm.options.beta": [0.0, 0.2]}}, "algorithm.options.beta"),
    ({"grid": {"algorithm.class": ["a.B", "c.D"]}}, "algorithm.class"),
    ({"grid": {"temperature.options.end": [1.0, 0.5]}}, "temperature.options.end"),
    ({"grid": {"model.hidden": [16, 64]}}, "model.hidden"),
    ({"tune": {"algorithm.options.beta": [0.0, 0.2]}, "eval.validation": 0.1}, "algorithm.options.beta"),
])
def test_a_comparison_over_a_python_parts_record_is_refused_on_the_key(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        chillfl.compare(model=_model(), data=_data(), config=BASE, aggregator=TrimmedMean(), policy=LinearWarmup(),
                        write=False, progress=False, **kwargs)
    assert err.value.field == field and "passed from Python" in err.value.message


def test_a_keyword_on_a_user_modules_record_is_refused_not_dropped() -> None:
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=_model(), data=_data(), config=BASE, write=False, progress=False, **{"model.hidden": 64})
    assert err.value.field == "model.hidden"


def test_a_saved_config_of_a_run_on_python_parts_reruns_with_the_same_parts(tmp_path: Path) -> None:
    def again(config: Any) -> chillfl.Result:
        return chillfl.run(model=_model(), data=_data(), config=config, aggregator=TrimmedMean(), policy=LinearWarmup(), write=False, progress=False)

    first = chillfl.run(model=_model(), data=_data(), config=BASE, aggregator=TrimmedMean(), policy=LinearWarmup(), out_dir=tmp_path, progress=False)
    assert first.folder is not None
    assert again(first.config).records == first.records
    assert again(first.folder / "config.toml").records == first.records


def test_a_saved_record_of_other_options_is_refused_on_the_key() -> None:
    first = chillfl.run(model=_model(), data=_data(), config=BASE, aggregator=TrimmedMean(), write=False, progress=False)
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=_model(), data=_data(), config=first.config, aggregator=TrimmedMean(TrimmedMean.Options(beta=0.2)), write=False, progress=False)
    assert err.value.field == "algorithm.options.beta"


def test_result_model_of_a_user_module_is_in_eval_mode() -> None:
    model = _model(dropout=True)
    result = chillfl.run(model=model, data=_data(), config=BASE, write=False, progress=False)
    assert result.model is not None and not result.model.training and model.training
    x = _data().x_test
    assert torch.equal(result.model(x), result.model(x))


@pytest.mark.parametrize("part, obj, field", [
    ("aggregator", TrimmedMean(TrimmedMean.Options(beta=0.7)), "aggregator.options.beta"),
    ("policy", LinearWarmup(LinearWarmup.Options(end=0.0)), "policy.options.end"),
])
def test_an_instances_own_options_validate_runs(part: str, obj: object, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=_model(), data=_data(), config=BASE, write=False, progress=False, **{part: obj})
    assert err.value.field == field


def test_compare_says_it_takes_no_callbacks() -> None:
    with pytest.raises(ConfigError) as err:
        chillfl.compare(model=_model(), data=_data(), config=BASE, grid={"client.lr": [0.1, 0.2]}, write=False, progress=False,
                        callbacks=[lambda record: None])
    assert err.value.field == "callbacks" and "chillfl.run" in err.value.message


# The [variants] case needs options.plain to recurse into tables (apifix2); grid and tune lists are converted here.
@pytest.mark.parametrize("kwargs", [
    {"grid": {"client.epochs": list(np.arange(1, 3))}},
    {"tune": {"client.lr": list(np.array([0.05, 0.1], dtype=np.float32))}, "eval.validation": 0.1},
    {"tune": {"client.lr": np.array([0.05, 0.1])}, "eval.validation": 0.1},
    {"config": {**BASE, "variants": {"a": {"client.epochs": np.int64(1)}, "b": {"client.epochs": np.int64(2)}}}},
])
def test_numpy_values_in_a_comparisons_lists_are_written_as_numbers(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    kwargs = {"config": BASE, **kwargs, "federation.rounds": 1}
    result = chillfl.compare(model=_model(), data=_data(), out_dir=tmp_path, progress=False, **kwargs)
    assert result.complete and (tmp_path / "run-compare" / "config.toml").is_file()
