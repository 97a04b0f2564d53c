"""``local_eval = "averaged"`` (FedPer, FedRep, LG-FedAvg, FedDBE, FedCAC): the local accuracy the authors report, each client's own
part on the model the server has just averaged, measured by the server after the round."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from chillfl.aggregation.base import measured_after_average
from chillfl.aggregation.registry import make_aggregator
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.runner import run_experiment
from chillfl.training.local import evaluate

sys.path.insert(0, str(Path(__file__).parent))
from methods_e2e import assert_executors_agree, config, records, resumed_records  # noqa: E402

METHODS = [{"name": "fedper"}, {"name": "fedrep", "head_epochs": 1}, {"name": "lg_fedavg"}, {"name": "feddbe", "kappa": 1.0}, {"name": "fedcac", "beta": 2}]


def _by_hand(cfg: Any, clients: list[int], states: dict[int, dict[str, torch.Tensor]]) -> tuple[float, float]:
    """Mean accuracy and loss of each client's saved model (its own part on the final global model) on its own split."""
    exp = build_experiment(cfg)
    accs, losses = [], []
    for cid in clients:
        x, y = exp.data.client_eval(cid)
        acc, loss = evaluate(exp.model, states[cid], x, y, cfg.eval.batch_size)
        accs.append(acc)
        losses.append(loss)
    return sum(accs) / len(accs), sum(losses) / len(losses)


@pytest.mark.parametrize("method", METHODS, ids=[m["name"] for m in METHODS])
def test_averaged_local_accuracy_is_the_own_part_on_the_new_global_model(method: dict[str, Any]) -> None:
    # the run's last record against the saved client models, which are personal_model(state, final global model):
    # under "averaged" the record's local_acc is their mean on the round's clients' splits; under "trained" it is not
    cfg = config(**{"model.name": "mlp", "federation.rounds": 2, "checkpoint.client_models": True, "algorithm": {**method, "local_eval": "averaged"}})
    out = run_experiment(cfg, write=False, progress=False)
    last = out.records[-1]
    acc, loss = _by_hand(cfg, last["clients"], out.client_states)
    assert last["local_acc"] == pytest.approx(acc, abs=1e-9)
    assert last["local_loss"] == pytest.approx(loss, rel=1e-6)
    trained = run_experiment(cfg.with_overrides({"algorithm.local_eval": "trained"}), write=False, progress=False).records[-1]
    assert trained["global_acc"] == last["global_acc"] and trained["train_loss"] == last["train_loss"]  # the same run
    assert trained["local_loss"] != pytest.approx(loss, rel=1e-6)  # measured on another model (before the average)


def test_eval_clients_all_measures_every_client_that_reported() -> None:
    cfg = config(**{"model.name": "mlp", "federation.rounds": 3, "checkpoint.client_models": True, "eval.clients": "all", "algorithm": {"name": "fedper", "local_eval": "averaged"}})
    out = run_experiment(cfg, write=False, progress=False)
    last = out.records[-1]
    reported = sorted(out.client_states)
    assert last["local_clients"] == len(reported) == 4  # 3 a round of 4 over 3 rounds: every client has trained
    assert last["local_acc"] == pytest.approx(_by_hand(cfg, reported, out.client_states)[0], abs=1e-9)


@pytest.mark.slow  # four tiny runs, one in worker processes
def test_executors_agree_and_a_resumed_run_is_bitwise(tmp_path: Path) -> None:
    # measured on the server from its own state: the same under every executor, and after a checkpoint's round trip
    cfg = config(**{"model.name": "mlp", "eval.clients": "all", "algorithm": {"name": "fedrep", "head_epochs": 1, "local_eval": "averaged"}})
    seq = assert_executors_agree(cfg)
    assert resumed_records(cfg, 1, tmp_path) == records(cfg) == seq


def test_the_option_reaches_the_client_half_and_defaults_to_trained() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    for name in ("fedper", "fedrep", "lg_fedavg", "feddbe", "fedcac"):
        default, _ = make_aggregator(name, {}, num_clients=2, model=model, seed=0)
        averaged, _ = make_aggregator(name, {"local_eval": "averaged"}, num_clients=2, model=model, seed=0)
        assert not measured_after_average(default.client_half())
        assert measured_after_average(averaged.client_half())


def test_flower_refuses_it_at_start_up() -> None:
    pytest.importorskip("flwr")
    from chillfl.flower.apps import build_server

    with pytest.raises(ConfigError) as info:
        build_server(config(**{"model.name": "mlp", "algorithm": {"name": "fedrep", "local_eval": "averaged"}}))
    assert info.value.field == "algorithm.local_eval"


def test_a_bad_value_names_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        build_experiment(config(**{"algorithm": {"name": "fedper", "local_eval": "after"}}))
    assert info.value.field == "algorithm.local_eval"
