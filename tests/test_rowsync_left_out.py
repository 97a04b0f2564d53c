"""Every upload left out of a round is listed in its record's ``uploads_left_out``: the server's own check's and the
attack wrapper's forged ones (``aggregation/uploads.round_left_out``), each client once, by client id."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest
import torch

from chillfl.aggregation.base import AroundAggregator, ClientResult
from chillfl.aggregation.fedavg import FedAvg
from chillfl.aggregation.uploads import round_left_out
from chillfl.config import load_config
from chillfl.protocols.parameters import ParameterSharing
from chillfl.runner import run_experiment

from test_loss_explosion import TINY
from test_uploadfix_uploads import _poisoned

SCALING = {"attack.kind": "scaling", "attack.factor": 1e300, "attack.clients": [1]}
"""Client 1 forges an upload of float32 weights times 1e300: inf, made inside the attack's wrapper after the server's check."""
KRUM = {**TINY, "federation.num_clients": 7, "federation.clients_per_round": 7, "federation.rounds": 1, "algorithm.name": "krum", "algorithm.f": 1}


def test_a_forged_upload_left_out_is_listed(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        record = run_experiment(load_config(None, {**KRUM, **SCALING}), write=False, progress=False).records[0]
    assert record["uploads_left_out"] == [1] and "client 1's upload" in caplog.text
    assert math.isfinite(record["global_loss"])


def test_the_server_and_the_wrapper_list_theirs_once_by_client_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """Client 4's own upload is NaN (the server's check), client 1's forged one inf (the wrapper's): both, in id order."""
    monkeypatch.setattr(ParameterSharing, "server_update", _poisoned(4, math.nan))
    record = run_experiment(load_config(None, {**KRUM, **SCALING}), write=False, progress=False).records[0]
    assert record["uploads_left_out"] == [1, 4]


class _Drops(AroundAggregator):
    """A wrapper that says it left clients out of one round (:class:`~chillfl.aggregation.uploads.LeavesOutUploads`)."""

    def __init__(self, base: Any, round: int, ids: list[int]) -> None:
        super().__init__(base)
        self.round, self.ids = round, ids

    def uploads_left_out(self, round: int) -> list[int]:
        return self.ids if round == self.round else []


def test_round_left_out_merges_every_layer_once_sorted() -> None:
    chain = _Drops(AroundAggregator(_Drops(FedAvg(), 3, [2, 9])), 3, [9, 5])
    assert round_left_out([7, 2], chain, 3) == [2, 5, 7, 9]
    assert round_left_out([7, 2], chain, 4) == [2, 7]  # another round's note is not this round's
    assert round_left_out([], FedAvg(), 0) == []


def test_the_wrapper_forgets_a_round_it_did_not_aggregate() -> None:
    """Its note is for the round it aggregated: a later round that did not reach it (a server check that stopped it) lists nothing stale."""
    from chillfl.attacks.aggregate import AttackedAggregation
    from chillfl.settings.attack import AttackConfig

    wrapper = AttackedAggregation(FedAvg(), AttackConfig.from_table({"kind": "sign_flip"}, "attack"), frozenset(), 0, tolerant=True)
    ok = ClientResult(0, {"w": torch.ones(2)}, 1, 1, 0.1, 1.0, 0.5)
    bad = ClientResult(3, {"w": torch.tensor([1.0, math.inf])}, 1, 1, 0.1, 1.0, 0.5)
    wrapper.aggregate({"w": torch.zeros(2)}, [ok, bad], 2)
    assert (wrapper.uploads_left_out(2), wrapper.uploads_left_out(3)) == ([3], [])
