"""A wrapper (``AroundAggregator``: a plugin's server EMA, ``[attack]``'s forged uploads) is transparent to the
capabilities the run asks of its base: the client models the base makes (``MakesClientModels``) and the run's model
it learns its parameter names from (``LearnsParameters``).

Before, the protocol asked the outer aggregator alone: an identity EMA over FedCAC with ``local_eval = "averaged"``
measured other local accuracies than FedCAC alone, over pFedHN it saved no client models, over FedCP it failed with a
ValueError traceback, and ``Ema(FedOpt("adam"))`` passed from Python stepped batch-norm statistics with Adam.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest
import torch
from plugin_modules import plugin_module
from torch import nn

import chillfl
from chillfl.aggregation.base import FedAvg, client_base, client_maker, with_run_model
from chillfl.aggregation.fedopt import FedOpt
from chillfl.extend import AroundAggregator, ClientResult, Params

from test_wrapfix_seams import WRAPPER  # extending.md's server EMA over any base

TINY: dict[str, Any] = {"executor": "sequential", "device": "cpu", "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]},
                        "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 2}, "client": {"lr": 0.05, "batch_size": 32}}
MODELS = {"checkpoint": {"client_models": True}}


@pytest.fixture
def ema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with plugin_module(tmp_path, monkeypatch, "wrapfix2_wrapper", WRAPPER):
        yield


def _run(algorithm: dict[str, Any], **extra: Any) -> Any:
    return chillfl.run(config={**TINY, "algorithm": algorithm, **extra}, write=False, progress=False)


def _wrapped(base: str, options: dict[str, Any]) -> dict[str, Any]:
    return {"name": "wrapfix2_wrapper:EMA", "base": base, "base_options": options, "beta": 0.0}  # beta = 0: the identity


def _same_client_models(a: dict[int, dict[str, torch.Tensor]], b: dict[int, dict[str, torch.Tensor]]) -> None:
    assert a and sorted(a) == sorted(b)
    for cid in a:
        assert sorted(a[cid]) == sorted(b[cid])
        for key in a[cid]:
            assert torch.allclose(a[cid][key].double(), b[cid][key].double(), atol=1e-6), (cid, key)


def _local(out: Any) -> list[float]:
    return [r["local_acc"] for r in out.records]


@pytest.mark.parametrize(("base", "options", "extra"), [
    ("fedcac", {"local_eval": "averaged"}, {}),  # FedCAC's customised start_i: the model measured after the average
    ("pfedhn", {}, MODELS),  # h(v_i; phi): the only model a pFedHN client has
    ("fedcp", {"local_eval": "averaged"}, MODELS),  # the server's CPN, which each client's own model runs
])
def test_an_identity_wrapper_gives_the_plain_methods_local_accuracy_and_client_models(ema: None, base: str, options: dict[str, Any],
                                                                                      extra: dict[str, Any]) -> None:
    plain = _run({"name": base, **options}, **extra)
    wrapped = _run(_wrapped(base, options), **extra)
    assert _local(wrapped) == pytest.approx(_local(plain), abs=1e-9)
    if extra:
        _same_client_models(plain.client_states, wrapped.client_states)


@pytest.mark.parametrize(("base", "options", "extra"), [
    ("fedcac", {"local_eval": "averaged"}, MODELS),  # the server-made client models under the averaged local_eval (FedCP's case before)
    ("pfedhn", {}, MODELS),  # (FedCP trains its head from the one it keeps: a model attack on it is refused)
    ("feddbe", {"local_eval": "averaged"}, MODELS),  # the averaged local_eval with saved client models, no server-made part
    ("fedper", {"global_head": "keep", "local_eval": "averaged"}, MODELS),  # its head kept out of the average: not refused
])
def test_an_attack_that_forges_nothing_passes_the_bases_client_models_on(base: str, options: dict[str, Any], extra: dict[str, Any]) -> None:
    """``scaling`` with factor 1 sends w + 1 * (w_i - w): each upload as trained, up to rounding."""
    plain = _run({"name": base, **options}, **extra)
    attacked = _run({"name": base, **options}, attack={"kind": "scaling", "factor": 1.0, "clients": [1]}, **extra)
    assert _local(attacked) == pytest.approx(_local(plain), abs=0.011)  # one sample of a 100-row split either way, at most
    if extra:
        _same_client_models(plain.client_states, attacked.client_states)


class Maker(FedAvg):
    """Makes entry ``w`` of each client's model: ``client_id`` itself."""

    def client_model(self, client_id: int, global_params: Params) -> Params:
        return {"w": torch.tensor(float(client_id))}


class Identity(AroundAggregator):
    pass


class Shifts(AroundAggregator):
    """Changes the model so that the base's client models no longer fit, and says so by making them itself."""

    def client_model(self, client_id: int, global_params: Params) -> Params:
        return {"w": torch.tensor(-1.0)}


def test_the_client_models_are_the_first_makers_down_the_chain() -> None:
    glob = {"w": torch.tensor(0.0), "b": torch.tensor(5.0)}
    maker = Maker()
    assert client_maker(Identity(Identity(maker))) is maker
    assert client_base(Identity(Identity(maker)), 3, glob) == {"w": torch.tensor(3.0), "b": torch.tensor(5.0)}
    assert client_base(Identity(Shifts(maker)), 3, glob)["w"] == -1.0  # the wrapper that defines its own answers
    assert client_maker(Identity(FedAvg())) is None and client_base(Identity(FedAvg()), 3, glob) is glob


class BnNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.bn = nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.fc(x))


class Ema(AroundAggregator):
    def __init__(self, base: Any, beta: float) -> None:
        super().__init__(base)
        self.beta = beta

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        new = self.base.aggregate(global_params, results, round)
        return {k: self.beta * global_params[k] + (1 - self.beta) * v if v.is_floating_point() else v for k, v in new.items()}


def test_fedopt_under_a_wrapper_learns_the_run_models_parameter_names() -> None:
    base = FedOpt("adam")
    with_run_model(Ema(Identity(base), 0.0), BnNet())
    assert base.param_keys == ["fc.weight", "fc.bias", "bn.weight", "bn.bias"]  # no running_mean / running_var


def test_a_wrapped_fedopt_passed_from_python_steps_no_batch_norm_statistic() -> None:
    """Ema(FedOpt("adam"), 0) is FedOpt alone: Adam on the parameters, the buffers averaged."""
    config = {**TINY, "model": {"name": "custom"}, "federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 2}}
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 10))
    plain = chillfl.run(config=config, model=model, aggregator=FedOpt("adam"), write=False, progress=False)
    wrapped = chillfl.run(config=config, model=model, aggregator=Ema(FedOpt("adam"), 0.0), write=False, progress=False)
    assert plain.state is not None and wrapped.state is not None
    for key, value in plain.state.items():
        assert torch.allclose(value.double(), wrapped.state[key].double(), atol=1e-6), key
