"""Communication ledger: byte helpers and per-round / cumulative accounting on hand-counted exchanges."""

import numpy as np
import pytest
import torch

from chillfl.protocols.softlabels import SoftLabelRequest, SoftLabelUplink
from chillfl.engine.ledger import (
    CommunicationLedger,
    LedgerOptions,
    index_bits,
    index_bytes,
    signal_bytes,
    tensor_bytes,
)
from chillfl.errors import ConfigError
from chillfl.options import parse_options
from chillfl.protocols.common import state_bytes


def test_byte_helpers() -> None:
    sl = torch.zeros(10, 10)  # 10 samples x 10 classes, float32
    assert tensor_bytes(sl) == 400  # 100 x 4 B
    assert tensor_bytes(sl.double()) == 800
    assert tensor_bytes(sl, bits=1) == 13  # 100 bits -> 12.5 -> 13 B (rounded up per message)
    assert tensor_bytes(sl, bits=32) == 400
    assert index_bytes(10) == 40  # int32
    assert index_bits(10_000) == 14  # 2^13 = 8192 < 10,000 <= 16384 = 2^14
    assert index_bytes(10, universe=10_000, encoding="packed") == 18  # 140 bits -> 17.5 -> 18 B
    assert index_bytes(3, universe=2, encoding="packed") == 1  # 1 bit each -> 3 bits -> 1 B
    assert signal_bytes(10) == 3  # 20 bits -> 2.5 -> 3 B
    assert signal_bytes(4) == 1 and signal_bytes(0) == 0
    with pytest.raises(ValueError):
        index_bytes(5, encoding="packed")  # universe missing


def test_one_soft_label_round_by_hand() -> None:
    # Round 1 of DS-FL with 3 clients, 10 requested public indices, 10 classes, float32:
    #   down: request (10 int32 indices = 40 B) to each client           -> 3 x 40  = 120 B  indices
    #   up:   10 x 10 float32 soft-labels per client = 400 B             -> 3 x 400 = 1200 B soft_labels
    #   down: aggregated soft-labels 400 B + indices 40 B to each client -> 3 x 440 = 1320 B
    ledger = CommunicationLedger()
    req = SoftLabelRequest(round=1, indices=torch.arange(10))
    for cid in range(3):
        for kind, nbytes in req.nbytes().items():
            ledger.record(1, "down", kind, nbytes, client_id=cid)
        up = SoftLabelUplink(client_id=cid, round=1, indices=torch.arange(10), soft_labels=torch.rand(10, 10))
        for kind, nbytes in up.nbytes().items():
            ledger.record(1, "up", kind, nbytes, client_id=cid)
        ledger.record(1, "down", "soft_labels", tensor_bytes(torch.zeros(10, 10)), client_id=cid)
        ledger.record(1, "down", "indices", index_bytes(10), client_id=cid)
    totals = ledger.round_totals(1)
    assert totals["up.soft_labels"] == 1200
    assert totals["up"] == 1200
    assert totals["down.indices"] == 120 + 120
    assert totals["down.soft_labels"] == 1200
    assert totals["down"] == 1440
    assert totals["total"] == 2640
    assert ledger.client_totals(2) == {"up": 400, "down": 480, "total": 880, "down.indices": 80, "down.soft_labels": 400, "up.soft_labels": 400}
    assert ledger.round_totals(2) == {"up": 0, "down": 0, "total": 0}


def test_quantised_uplink_with_indices() -> None:
    # CFD b_up = 1 after Selective-FD dropped samples: 7 kept x 10 classes x 1 bit = 70 bits -> 9 B; indices 7 x 4 = 28 B
    up = SoftLabelUplink(client_id=0, round=3, indices=torch.arange(7), soft_labels=torch.rand(7, 10), bits=1, send_indices=True)
    assert up.nbytes() == {"soft_labels": 9, "indices": 28}


def test_fedavg_parameter_upload() -> None:
    # A 2-layer model: weight 3x4 + bias 3 = 15 float32 = 60 B per upload; 2 clients up, 2 down
    params = {"w": torch.zeros(3, 4), "b": torch.zeros(3)}
    nbytes = sum(tensor_bytes(t) for t in params.values())
    ledger = CommunicationLedger()
    for cid in (0, 1):
        ledger.record(1, "up", "params", nbytes, cid)
        ledger.record(1, "down", "params", nbytes, cid)
    assert ledger.round_totals(1) == {"up": 120, "down": 120, "total": 240, "down.params": 120, "up.params": 120}


def test_cumulative_and_latest_round() -> None:
    ledger = CommunicationLedger()
    ledger.record(1, "up", "soft_labels", 100)
    ledger.record(2, "up", "soft_labels", 150)
    ledger.record(2, "down", "cache_signals", 50)
    assert ledger.cumulative() == {"up": 250, "down": 50, "total": 300, "down.cache_signals": 50, "up.soft_labels": 250}
    ledger.record(3, "down", "sync", 300)
    assert ledger.cumulative()["total"] == 600
    assert ledger.latest_round == 3 and ledger.round_totals(3) == {"up": 0, "down": 300, "total": 300, "down.sync": 300}
    assert ledger.round_totals(4) == {"up": 0, "down": 0, "total": 0}  # nothing recorded yet
    with pytest.raises(ValueError, match="latest round"):
        ledger.round_totals(2)  # only the latest round is kept: earlier rounds' bytes are in their records
    with pytest.raises(ValueError, match="latest round"):
        ledger.record(2, "up", "params", 1)


def test_record_rejects_bad_input() -> None:
    ledger = CommunicationLedger()
    with pytest.raises(ValueError):
        ledger.record(1, "sideways", "params", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ledger.record(1, "up", "params", -5)
    with pytest.raises(ValueError):
        ledger.record(1, "up", "", 5)
    with pytest.raises(ValueError):
        ledger.record(1, "up", "params", 2.5)  # type: ignore[arg-type]


def test_ledger_options() -> None:
    assert parse_options(LedgerOptions, {"index_encoding": "packed"}, "communication").index_encoding == "packed"
    with pytest.raises(ConfigError, match="communication.index_encoding"):
        parse_options(LedgerOptions, {"index_encoding": "int8"}, "communication")


def test_a_message_part_prices_its_scalars_as_they_travel() -> None:
    """Every value a message part holds is sent, so every value costs bytes: a Python float or int as a
    float64 / int64 (8), a bool 1, a numpy scalar its itemsize, a string its UTF-8 length, None nothing."""
    part = {"a": 1.5, "b": [2, 3], "w": torch.zeros(3)}  # 3 floats of 8 + a 3-float32 tensor
    assert state_bytes(part) == 8 * 3 + 12
    assert state_bytes((True, None)) == 1
    assert state_bytes({"x": np.float32(0.5), "y": np.int16(7), "z": np.zeros(2)}) == 4 + 2 + 16
    assert state_bytes("héllo") == 6  # é is two bytes in UTF-8
    assert state_bytes({}) == 0


def test_a_value_the_ledger_cannot_price_is_refused_not_free() -> None:
    with pytest.raises(TypeError, match="cannot price a object"):
        state_bytes({"mystery": object()})


def test_pa3feds_reported_floats_are_counted_in_each_uplinks_control_bytes() -> None:
    """PA3Fed's clients report their score, gradient norm and alpha (three Python floats) beside the model: over
    FedAvg the report is the uplink's whole control part, so each round's is clients x 3 x 8 bytes, and nothing else."""
    from methods_e2e import config, protocol_rounds

    _, protocol, done = protocol_rounds(config(**{"algorithm.name": "pa3fed", "model.name": "mlp"}), rounds=2)  # 3 of 4 clients a round
    ledger = protocol.book.ledger
    assert ledger.latest_round == 1 and ledger.round_totals(1).get("up.control") == 3 * 3 * 8  # the second round's
    assert ledger.cumulative().get("up.control") == 2 * 3 * 3 * 8 and ledger.cumulative().get("down.control", 0) == 0  # so the first's too
    assert [len(r["clients"]) for r in done] == [3, 3]
