"""The round loop's seam for a method that trains every client and aggregates the reporting ones
(:class:`chillfl.extend.TrainsEveryClient`, asked by parameter sharing through
:class:`chillfl.engine.protocol.TrainsUnreported`).

A plugin aggregator whose client half counts its visits shows the seam without pFedMe: every client with rows is
visited each round, ``aggregate`` sees the reporting clients only. pFedMe's ``train = "all"`` under ``[privacy]`` and
``[attack]``: the wrappers see the uploads that reach the server, so epsilon, the attackers and the global model are the
``"sampled"`` run's. Under every executor, and resumed, the runs agree as any method's do.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import pytest
import torch
from torch import nn

from chillfl.engine.loop import run_rounds
from chillfl.experiment import build_experiment, build_protocol, make_executor
from chillfl.extend import ClientResult, ClientState, Context, FedAvg, Params, Report, Trained, TrainsEveryClient
from chillfl.protocols.parameters import ParameterSharing
from methods_e2e import assert_executors_agree, config, records, resumed_records
from test_trainall_pfedme import N, S, pfedme


class Visits:
    """A client half that counts its client's trainings in the client's state."""

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, Context]:
        return start, context

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {"visits": state.get("visits", torch.zeros(())) + 1}, {}


class EveryClient(FedAvg):
    """FedAvg whose every client trains each round; it notes whose uploads it averages."""

    def __init__(self) -> None:
        super().__init__("uniform")
        self.averaged: list[list[int]] = []

    def trains_every_client(self) -> bool:
        return True

    def client_half(self) -> Visits:
        return Visits()

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None) -> Params:
        self.averaged.append([r.client_id for r in results])
        return super().aggregate(global_params, results, round, weights)


def test_every_client_trains_and_the_reporting_ones_are_averaged() -> None:
    assert isinstance(EveryClient(), TrainsEveryClient)
    cfg = config(**{"algorithm.name": "fedavg", "model.name": "mlp", "federation.num_clients": N, "federation.clients_per_round": S})
    exp = build_experiment(cfg)
    aggregator = EveryClient()
    protocol = build_protocol(dataclasses.replace(exp, aggregator=aggregator))
    assert isinstance(protocol, ParameterSharing) and protocol.trains_unreported()
    executor = make_executor(exp, protocol)
    try:
        done = list(run_rounds(protocol, executor, seed=cfg.seed, num_clients=N, clients_per_round=S, rounds=2))
    finally:
        executor.close()
    assert aggregator.averaged == [r["clients"] for r in done] and all(len(r["clients"]) == S for r in done)
    for cid in range(N):  # each client trained in both rounds, sampled or not
        state = protocol.store.load(cid)
        assert state is not None and float(state["visits"]) == 2.0
    assert all(r["local_clients"] == N for r in done)


def test_without_the_capability_only_the_sampled_clients_train() -> None:
    """The same plugin saying False: the round loop trains the reporting clients alone, as before."""

    class SampledOnly(EveryClient):
        def trains_every_client(self) -> bool:
            return False

    cfg = config(**{"algorithm.name": "fedavg", "model.name": "mlp", "federation.num_clients": N, "federation.clients_per_round": S})
    exp = build_experiment(cfg)
    protocol = build_protocol(dataclasses.replace(exp, aggregator=SampledOnly()))
    assert isinstance(protocol, ParameterSharing)
    executor = make_executor(exp, protocol)
    try:
        (record,) = run_rounds(protocol, executor, seed=cfg.seed, num_clients=N, clients_per_round=S, rounds=1)
    finally:
        executor.close()
    assert sorted(protocol.store.ids()) == record["clients"] and record["local_clients"] == S


WRAPPED: dict[str, dict[str, Any]] = {
    "dp-fedavg": {"privacy.mechanism": "dp-fedavg", "privacy.noise_multiplier": 1.0},
    "local-dp": {"privacy.mechanism": "local", "privacy.noise_multiplier": 1.0},
    "sign-flip": {"attack.kind": "sign_flip", "attack.fraction": 0.5},
}


@pytest.mark.parametrize("wrapper", sorted(WRAPPED))
def test_privacy_and_attacks_see_the_reporting_uploads_only(wrapper: str) -> None:
    over = {"federation.rounds": 2, **WRAPPED[wrapper]}
    every, sampled = records(pfedme(**over, **{"algorithm.train": "all"})), records(pfedme(**over))
    for a, b in zip(every, sampled):
        assert a["clients"] == b["clients"] and a["bytes_up"] == b["bytes_up"]
        assert a["global_loss"] == b["global_loss"] and a["global_acc"] == b["global_acc"]  # the same noised / forged average
        assert a.get("epsilon") == b.get("epsilon") and a.get("attackers") == b.get("attackers")  # charged / listed: reporting only
        assert a["local_clients"] == N and b["local_clients"] == S


@pytest.mark.slow  # the process pool's start
def test_under_every_executor() -> None:
    """sequential == processes bit for bit, vectorized within float rounding (as any method's), each training all 4."""
    seq = assert_executors_agree(pfedme(**{"algorithm.train": "all", "federation.rounds": 2}))
    assert all(r["local_clients"] == N and len(r["clients"]) == S for r in seq)


def test_resume_is_bitwise(tmp_path: Path) -> None:
    cfg = pfedme(**{"algorithm.train": "all", "federation.rounds": 3})
    assert resumed_records(cfg, 2, tmp_path) == records(cfg)
