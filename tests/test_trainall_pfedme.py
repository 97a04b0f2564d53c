"""pFedMe's ``train = "all"`` (Algorithm 1 and the authors' ``serverpFedMe.train``): w^t is sent to every client, every
client trains, and only the round's sampled clients are averaged.

Hand-checkable on N = 4 clients, S = 2 a round, one round: under ``"all"`` each of the 4 clients' personal model is
the one it trains when every client is sampled (the same start w^0, the same seeds), the global model is the ``"sampled"``
run's bit for bit (only the 2 uploads are averaged), ``bytes_down`` counts 4 models and ``bytes_up`` 2, and ``local_acc``
is the mean over the 4 clients under ``eval.clients = "sampled"``. The default stays ``"sampled"``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
import torch

from chillfl.aggregation.pfedme import PFedMe, PFedMeOptions
from chillfl.config import RunConfig
from chillfl.engine.loop import run_rounds
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment, build_protocol, make_executor
from chillfl.models import build_model
from chillfl.protocols.common import measured_mean, state_bytes
from chillfl.protocols.parameters import ParameterSharing
from methods_e2e import config, protocol_rounds

N, S = 4, 2

BASE: dict[str, Any] = {
    "algorithm.name": "pfedme", "algorithm.inner_steps": 2, "algorithm.personal_lr": 0.05, "model.name": "mlp",
    "federation.num_clients": N, "federation.clients_per_round": S, "federation.rounds": 1, "log.per_client": True,
}


def pfedme(**over: Any) -> RunConfig:
    return config(**{**BASE, **over})


@cache
def one_round(train: str, sampled: int = S) -> tuple[ParameterSharing, dict[str, Any]]:
    """One round of pFedMe under ``algorithm.train = train`` with ``sampled`` clients a round: its server and its record."""
    _, protocol, records = protocol_rounds(pfedme(**{"algorithm.train": train, "federation.clients_per_round": sampled}), 1)
    return protocol, records[0]


def test_every_client_trains_its_personal_model_from_the_round_model() -> None:
    _, every = one_round("all")
    _, sampled = one_round("sampled")
    _, full = one_round("sampled", N)  # every client sampled: each trains from w^0 with the same seed
    assert len(sampled["clients"]) == S and set(sampled["local_accs"]) == {str(c) for c in sampled["clients"]}
    assert every["clients"] == sampled["clients"]  # the round's sample, as drawn
    assert set(every["local_accs"]) == {str(c) for c in range(N)}  # the 2 clients outside the sample trained too
    assert every["local_accs"] == full["local_accs"] and every["local_losses"] == full["local_losses"]  # the same theta_i each


def test_the_global_model_is_the_sampled_runs_bit_for_bit() -> None:
    every, _ = one_round("all")
    sampled, _ = one_round("sampled")
    full, _ = one_round("sampled", N)
    assert every.state.keys() == sampled.state.keys()
    assert all(torch.equal(every.state[k], sampled.state[k]) for k in every.state)  # only the S uploads are averaged
    assert not all(torch.equal(every.state[k], full.state[k]) for k in every.state)  # not the mean over all 4


def test_bytes_down_counts_every_client_and_bytes_up_the_sampled() -> None:
    protocol, every = one_round("all")
    _, sampled = one_round("sampled")
    model = state_bytes(protocol.state)  # pFedMe sends the model alone, whole at a client's first round
    assert every["bytes_down"] == N * model and sampled["bytes_down"] == S * model
    assert every["bytes_up"] == sampled["bytes_up"] == S * model


def test_local_acc_is_the_mean_over_every_trained_client_under_eval_clients_sampled() -> None:
    _, every = one_round("all")
    assert every["local_clients"] == N
    assert every["local_acc"] == measured_mean([every["local_accs"][str(c)] for c in range(N)])
    assert every["local_loss"] == measured_mean([every["local_losses"][str(c)] for c in range(N)])


def test_the_default_trains_the_sampled_clients_only() -> None:
    assert PFedMeOptions().train == "sampled"
    model = build_model("mlp", (1, 8, 8), 10)
    assert not PFedMe(model).trains_every_client() and PFedMe(model, PFedMeOptions(train="all")).trains_every_client()


def test_a_dropped_client_trains_without_reporting() -> None:
    """The availability draw concerns reporting: a sampled client that drops out trains as a client outside the sample."""
    cfg = pfedme(**{"algorithm.train": "all", "federation.clients_per_round": 3, "federation.dropout": 0.5, "seed": 2})  # samples 0, 2, 3; 3 drops
    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    executor = make_executor(exp, protocol)
    try:
        (record,) = run_rounds(protocol, executor, seed=cfg.seed, num_clients=N, clients_per_round=3, rounds=1, participation=cfg.federation,
                               empty=exp.data.without_training_rows())
    finally:
        executor.close()
    assert record["sampled"] == [0, 2, 3] and record["dropped"] == [3] and record["clients"] == [0, 2]
    assert set(record["local_accs"]) == {str(c) for c in range(N)}
    assert not set(record["dropped"]) & set(record["clients"])


def test_an_unknown_value_is_refused_on_the_field() -> None:
    with pytest.raises(ConfigError, match="^algorithm.train: unknown value 'every'; allowed: sampled, all$"):
        build_experiment(pfedme(**{"algorithm.train": "every"}))


def test_flower_refuses_it_on_the_field() -> None:
    from chillfl.flower.apps import check_supported

    check_supported(pfedme())  # the default runs there
    with pytest.raises(ConfigError, match="^algorithm.train: train = 'all' trains the clients that do not report"):
        check_supported(pfedme(**{"algorithm.train": "all"}))
