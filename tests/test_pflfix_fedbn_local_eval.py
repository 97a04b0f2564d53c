"""FedBN's ``local_eval = "averaged"``: the med-air/FedBN authors test each site after ``communication`` (the averaged
non-BN entries with the site's own BN entries), which chillfl's default local accuracy (the trained model, before the
average) is not. The option measures theirs; the default stays what it was, bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from torch import nn

import chillfl
from chillfl.aggregation.base import ClientHalf, measured_after_average
from chillfl.aggregation.fedbabu import FedBABU
from chillfl.aggregation.fedbn import PREFIX, SPEC, FedBN, FedBNOptions, KeepLocal, batchnorm_keys
from chillfl.aggregation.fedper import FedPer, FedPerOptions
from chillfl.aggregation.lg_fedavg import LGFedAvg, LGFedAvgOptions
from chillfl.aggregation.registry import make_aggregator
from chillfl.errors import ConfigError
from chillfl.extend import Capabilities

CLIENTS = 3
CONFIG: dict[str, Any] = {
    "seed": 1,
    "device": "cpu",
    "federation": {"num_clients": CLIENTS, "clients_per_round": CLIENTS, "rounds": 2},
    "partition": {"name": "dirichlet", "alpha": 0.3},
    "client": {"lr": 0.05, "batch_size": 32},
    "checkpoint": {"client_models": True},
}


class FedBNAvgEval(FedBN):
    """The explorer report's reference: FedBN whose client half is measured after the average, built by hand."""

    capabilities = Capabilities(takes_weights=True, personal_model=True)

    def client_half(self) -> ClientHalf:
        return KeepLocal(self.bn_keys, PREFIX, after_average=True)


class FedBNBefore(FedBN):
    """FedBN's client half as it was before ``local_eval`` (no ``after_average``)."""

    capabilities = Capabilities(takes_weights=True, personal_model=True)

    def client_half(self) -> ClientHalf:
        return KeepLocal(self.bn_keys, PREFIX)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 10))


def _data() -> tuple[chillfl.TensorData, list[list[int]]]:
    """Digits, 500 training rows; 90 test rows, each client's own 30 (``client_test``), so its split is known here."""
    x, y = load_digits(return_X_y=True)
    xt, yt = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    groups = [list(range(500 + 30 * k, 530 + 30 * k)) for k in range(CLIENTS)]
    test = list(range(500, 500 + 30 * CLIENTS))
    local = [[test.index(i) for i in g] for g in groups]
    return chillfl.TensorData(xt[:500], yt[:500], xt[test], yt[test], num_classes=10, client_test=local), local


def _run(algorithm: dict[str, Any] | None = None, aggregator: FedBN | None = None) -> Any:
    data, _ = _data()
    config = {**CONFIG, "algorithm": algorithm} if algorithm is not None else CONFIG
    return chillfl.run(model=_model(), data=data, config=config, aggregator=aggregator, write=False, progress=False)


def test_averaged_is_the_own_bn_on_the_averaged_model_by_hand() -> None:
    averaged = _run({"name": "fedbn", "local_eval": "averaged"})
    assert averaged.records == _run(aggregator=FedBNAvgEval(batchnorm_keys(_model()))).records  # the report's reference, every round
    data, local = _data()
    bn = set(batchnorm_keys(_model()))
    model = _model().eval()
    accs, losses = [], []
    for cid in range(CLIENTS):
        own = averaged.client_states[cid]
        # the final global model's non-BN entries (the server's average) with the client's own BN entries
        state = {k: (own[k] if k in bn else v) for k, v in averaged.state.items()}
        assert all(torch.equal(state[k], own[k]) for k in own)
        model.load_state_dict(state)
        with torch.no_grad():
            logits = model(data.x_test[local[cid]])
        target = data.y_test[local[cid]]
        accs.append((logits.argmax(1) == target).double().mean().item())
        losses.append(nn.functional.cross_entropy(logits, target).item())
    last = averaged.records[-1]
    assert last["local_acc"] == pytest.approx(float(np.mean(accs)), abs=1e-9)
    assert last["local_loss"] == pytest.approx(float(np.mean(losses)), rel=1e-5)


def test_trained_is_unchanged_and_the_same_run() -> None:
    default = _run({"name": "fedbn"})
    assert default.records == _run({"name": "fedbn", "local_eval": "trained"}).records
    assert default.records == _run(aggregator=FedBNBefore(batchnorm_keys(_model()))).records  # the client half before the option
    averaged = _run({"name": "fedbn", "local_eval": "averaged"})
    for a, b in zip(default.records, averaged.records):  # one training: only the local measure moves
        assert (a["global_acc"], a["global_loss"], a["train_loss"]) == (b["global_acc"], b["global_loss"], b["train_loss"])
    assert [r["local_acc"] for r in default.records] != [r["local_acc"] for r in averaged.records]


def test_the_option_reaches_the_half_and_flower_refuses_it() -> None:
    model = _model()
    default, _ = make_aggregator("fedbn", {}, num_clients=2, model=model, seed=0)
    averaged, _ = make_aggregator("fedbn", {"local_eval": "averaged"}, num_clients=2, model=model, seed=0)
    assert not measured_after_average(default.client_half())
    assert measured_after_average(averaged.client_half())
    assert SPEC.declared(FedBNOptions()).on_flower is None
    assert SPEC.declared(FedBNOptions(local_eval="averaged")).limited_by == "local_eval"


def test_subclasses_on_fedbns_rule_keep_their_own_half() -> None:
    model = _model()
    for trained, averaged in ((FedPer(model), FedPer(model, FedPerOptions(local_eval="averaged"))),
                              (LGFedAvg(model), LGFedAvg(model, LGFedAvgOptions(local_eval="averaged")))):
        assert not measured_after_average(trained.client_half()) and measured_after_average(averaged.client_half())
        assert isinstance(trained.client_half(), KeepLocal) and trained.client_half().prefix != PREFIX  # type: ignore[union-attr]
    assert not measured_after_average(FedBABU(model).client_half())


def test_a_bad_value_names_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        make_aggregator("fedbn", {"local_eval": "after"}, num_clients=2, model=_model(), seed=0)
    assert info.value.field == "algorithm.local_eval"
