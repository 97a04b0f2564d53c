"""PA3Fed over a base whose clients keep entries of their own (FedPer's head, FedBN's BN entries, LG-FedAvg's
representation): PA3Fed's client half is combined with the base's (:class:`~chillfl.aggregation.base.Halves`), and every
capability of the base's half (its kept entries, its personal model, its measure after the average) must hold through
the combination as it holds without PA3Fed. Under ``mode = "never"`` PA3Fed aggregates with the base's own weights, so
the run is the base's, bitwise: the same client models and the same local accuracies."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from chillfl.config import RunConfig, load_config
from chillfl.data import FederatedData
from chillfl.aggregation.fedper import head_keys
from chillfl.experiment import build_data, build_initial_model
from chillfl.runner import run_experiment

BASE: dict[str, Any] = {
    "seed": 2,
    "dataset.name": "digits",
    "partition.name": "dirichlet",
    "partition.alpha": 0.3,
    "federation.num_clients": 4,
    "federation.clients_per_round": 3,
    "federation.rounds": 3,
    "client.epochs": 1,
    "client.batch_size": 32,
    "client.lr": 0.05,
    "eval.clients": "all",
    "model.name": "flexchill_cnn",
    "model.batch_norm": True,
}

Models = dict[int, dict[str, torch.Tensor]]


def config(algorithm: dict[str, Any]) -> RunConfig:
    return load_config(None, BASE).with_overrides({"algorithm": algorithm})


@pytest.fixture(scope="module")
def data() -> FederatedData:
    return build_data(config({"name": "fedavg"}))


def run(algorithm: dict[str, Any], data: FederatedData) -> tuple[list[dict[str, Any]], Models, dict[str, torch.Tensor]]:
    """The records, the clients' own models and the global model at the end of the run."""
    models: Models = {}
    final: dict[str, torch.Tensor] = {}

    def keep(record: Any, view: Any) -> None:
        models.clear()
        models.update(view.client_states())
        final.clear()
        final.update(view.global_state() or {})

    out = run_experiment(config(algorithm), data=data, write=False, progress=False, hooks=[keep])
    return out.records, models, final


LOCAL = ("local_acc", "local_loss", "bytes_down")
REPORT = 3 * 8
"""PA3Fed's report beside the base's upload: its score, gradient norm and alpha, three Python floats of 8 bytes."""

BASES = [("fedper", {}), ("fedbn", {}), ("lg_fedavg", {}), ("fedper", {"local_eval": "averaged"}), ("lg_fedavg", {"local_eval": "averaged"})]


@pytest.mark.parametrize("base,options", BASES, ids=[f"{b}-{o.get('local_eval', 'trained')}" for b, o in BASES])
def test_pa3fed_never_over_a_personalising_base_is_the_base_bitwise(data: FederatedData, base: str, options: dict[str, Any]) -> None:
    """Checked because nobody had: the client models PA3Fed over FedPer / FedBN / LG-FedAvg saves, and the local accuracy
    it logs, are the base's (each client's own kept entries, its personal model, measured after the average where the base
    asks), not the global model's; the kept entries cost a returning client no downlink bytes, as under the base."""
    plain_records, plain_models, plain_global = run({"name": base, **options}, data)
    records, models, final = run({"name": "pa3fed", "mode": "never", "base": base, "base_options": options}, data)
    assert plain_models and sorted(models) == sorted(plain_models)
    for cid, own in plain_models.items():
        assert sorted(models[cid]) == sorted(own)
        assert all(torch.equal(models[cid][k], v) for k, v in own.items()), f"client {cid}'s model differs from the base's"
    assert all(torch.equal(final[k], v) for k, v in plain_global.items())
    assert [[r[k] for k in LOCAL] for r in records] == [[r[k] for k in LOCAL] for r in plain_records]
    assert [r["bytes_up"] for r in records] == [r["bytes_up"] + REPORT * len(r["clients"]) for r in plain_records]


def test_pa3fed_adapting_over_fedper_keeps_each_clients_own_head(data: FederatedData) -> None:
    """With its weights adapted every round, PA3Fed over FedPer still leaves each client its own head: a client's model is
    the global body with a head of its own, not the global (averaged) head, and the heads differ between clients."""
    _, models, final = run({"name": "pa3fed", "mode": "always", "base": "fedper"}, data)
    head = set(head_keys(build_initial_model(config({"name": "fedper"}), data.dataset.input_shape, data.num_classes)[0]))
    assert head < set(final)
    assert len(models) >= 2
    for cid, own in models.items():
        assert all(torch.equal(own[k], final[k]) for k in final if k not in head), f"client {cid}'s body is not the global one"
        assert not all(torch.equal(own[k], final[k]) for k in head), f"client {cid} holds the global head"
    first, second = list(models.values())[:2]
    assert not all(torch.equal(first[k], second[k]) for k in head)
