"""pFedMe ``train = "all"`` against ``"sampled"``: the global model is the same bit for bit only under a temperature
policy that does not observe local accuracy (a fixed T). FedChill's decay observes every trained client, so under
``"all"`` a client's T moves on rounds it does not report, and it trains at another T when next sampled
(docs/personalised.md, :mod:`chillfl.aggregation.pfedme`; rev118a finding 2)."""

from __future__ import annotations

from typing import Any

import torch

from methods_e2e import protocol_rounds
from test_trainall_pfedme import pfedme

SMALL: dict[str, Any] = {"client.batch_size": 128, "federation.clients_per_round": 1}  # 1 of 4 reports: 3 trained unreported
FEDCHILL: dict[str, Any] = {"temperature.policy": "fedchill", "temperature.patience": 1, "eval.validation": 0.2}


def _run(rounds: int, train: str, **over: Any) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    _, protocol, records = protocol_rounds(pfedme(**SMALL, **over, **{"algorithm.train": train, "federation.rounds": rounds}), rounds)
    return dict(protocol.state), records


def test_under_a_fixed_temperature_the_global_model_is_the_sampled_runs_bit_for_bit() -> None:
    every, every_records = _run(3, "all")
    sampled, sampled_records = _run(3, "sampled")
    assert [r["clients"] for r in every_records] == [r["clients"] for r in sampled_records]
    assert every.keys() == sampled.keys() and all(torch.equal(every[k], sampled[k]) for k in every)


def test_under_fedchills_decay_the_unreported_rounds_move_a_clients_temperature() -> None:
    every, every_records = _run(4, "all", **FEDCHILL)
    sampled, sampled_records = _run(4, "sampled", **FEDCHILL)
    assert [r["clients"] for r in every_records] == [r["clients"] for r in sampled_records]  # the same draws
    assert every_records[0]["temperatures"] == sampled_records[0]["temperatures"]  # round 1: nobody observed before
    # a client sampled again trains at a T its unreported rounds' observations moved, and uploads another model
    assert [r["temperatures"] for r in every_records] != [r["temperatures"] for r in sampled_records]
    assert not all(torch.equal(every[k], sampled[k]) for k in every)
