"""A plugin hook that exists with the wrong parameters is one ConfigError naming the part and the hook, raised before
anything is written: it passed every check that the hook exists, and the run wrote its folder and stopped at round 1
with a TypeError traceback from inside chillfl (report-apiref F1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError
from chillfl.aggregation.base import AroundAggregator
from chillfl.extend import AggregatorBase, ConstantTemperature, Downlink, FedAvg

CONFIG = {"federation": {"num_clients": 2, "rounds": 1}}


def _data() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(60, 8, generator=g), torch.randint(0, 3, (60,), generator=g)
    return chillfl.TensorData(x[:48], y[:48], x[48:], y[48:], num_classes=3)


class NoRound(AggregatorBase):
    def aggregate(self, global_params: Any, results: Any) -> Any:  # no `round`
        return dict(global_params)


class WrongDownlink(FedAvg):
    def downlink(self, client_id: int, global_params: Any) -> Downlink:  # type: ignore[override]  # no `round`
        return Downlink()


class HalfWrong:
    def prepare(self, state: Any, start: Any) -> Any:  # no `context`
        return start, {}

    def finish(self, model: Any, state: Any, trained: Any) -> Any:
        return {}, {}


class WrongHalf(FedAvg):
    def client_half(self) -> Any:
        return HalfWrong()


class TermWrong:
    reads = ()

    def __call__(self, params: Any) -> torch.Tensor:  # no `context`
        return torch.zeros(())


class BatchTermWrong:
    per_batch = True
    reads = ()
    captures = ()

    def __call__(self, params: Any, context: Any) -> torch.Tensor:  # a batch term without `step`
        return torch.zeros(())


class PolicyWrong(ConstantTemperature):
    def temperature(self, client_id: int) -> float:  # type: ignore[override]  # no `round`
        return 1.0


class Around(AroundAggregator):
    """A user's wrapper: it calls its base's hooks as the run calls its own."""

    def aggregate(self, global_params: Any, results: Any, round: int) -> Any:
        return self.base.aggregate(global_params, results, round)

    def round_metrics(self) -> dict[str, Any]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Any) -> None:
        pass


class Optional(AggregatorBase):
    """Extra parameters with defaults, *args and **kwargs: callable as the run calls it, so accepted."""

    def aggregate(self, global_params: Any, *results: Any, scale: float = 1.0, **extra: Any) -> Any:
        return dict(global_params)


def _run(tmp_path: Path, **parts: Any) -> Callable[[], Any]:
    return lambda: chillfl.run(model=nn.Linear(8, 3), data=_data(), config=CONFIG, out_dir=tmp_path, name="r", progress=False, **parts)


@pytest.mark.parametrize(("parts", "field", "words"), [
    ({"aggregator": NoRound()}, "aggregator", "NoRound.aggregate(global_params, results) cannot be called as aggregate(global_params, results, round)"),
    ({"aggregator": Around(NoRound())}, "aggregator", "NoRound.aggregate(global_params, results) cannot be called as aggregate(global_params, results, round)"),
    ({"aggregator": WrongDownlink()}, "aggregator", "WrongDownlink.downlink(client_id, global_params) cannot be called as downlink(client_id, round, global_params)"),
    ({"aggregator": WrongHalf()}, "aggregator", "HalfWrong.prepare(state, start) cannot be called as prepare(state, start, context)"),
    ({"aggregator": FedAvg(), "terms": [TermWrong()]}, "terms[0]", "TermWrong.__call__(params) cannot be called as __call__(params, context)"),
    ({"aggregator": FedAvg(), "terms": [BatchTermWrong()]}, "terms[0]", "cannot be called as __call__(params, context, step)"),
    ({"policy": PolicyWrong(1.0)}, "policy", "PolicyWrong.temperature(client_id) cannot be called as temperature(client_id, round)"),
], ids=["aggregate", "wrapped-base", "downlink", "half-prepare", "term", "batch-term", "policy"])
def test_a_hook_of_the_wrong_arity_is_one_line_before_anything_is_written(tmp_path: Path, parts: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        _run(tmp_path, **parts)()
    assert err.value.field == field and words in err.value.message, err.value
    assert list(tmp_path.iterdir()) == []  # no r.partial


def test_a_hook_with_optional_extras_runs(tmp_path: Path) -> None:
    result = chillfl.run(model=nn.Linear(8, 3), data=_data(), config=CONFIG, aggregator=Optional(), write=False, progress=False)
    assert result is not None


def test_a_class_named_by_path_is_checked_on_algorithm_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=nn.Linear(8, 3), data=_data(), config={**CONFIG, "algorithm": {"name": f"{__name__}:NoRound"}}, out_dir=tmp_path,
                    name="r", progress=False)
    assert err.value.field == "algorithm.name" and "NoRound.aggregate(global_params, results)" in err.value.message
    assert list(tmp_path.iterdir()) == []
