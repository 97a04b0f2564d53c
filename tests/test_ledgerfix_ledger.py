"""The communication ledger keeps running totals and the latest round, not a table of every round: its checkpoint
stays the same size however long the run, and an older chillfl's per-round table still resumes (summed on load)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from chillfl import runner
from chillfl.config import load_config
from chillfl.engine.ledger import CommunicationLedger
from chillfl.runner import CHECKPOINT, CLIENT_MODELS, MODEL, resume_experiment, run_experiment
from chillfl.storage.checkpoint import read_checkpoint, read_state, write_state
from resume_cases import SOFT_LABELS, TINY, Crash, _CrashIn


def drive(ledger: CommunicationLedger, rounds: range) -> list[Any]:
    """Records of a few kinds and clients a round; what a round's record reads after each."""
    seen = []
    for rnd in rounds:
        for cid in range(3):
            ledger.record(rnd, "down", "params", 1000 + rnd, cid)
            ledger.record(rnd, "up", "params" if rnd % 2 else "soft_labels", 7 * rnd + cid, cid)
        if rnd % 3 == 0:
            ledger.record(rnd, "up", "control", 8)  # no client named
        seen.append((ledger.round_totals(rnd), ledger.cumulative(), [ledger.client_totals(c) for c in range(3)]))
    return seen


def leaves(tree: Any) -> int:
    return sum(leaves(v) for v in tree.values()) if isinstance(tree, dict) else 1


def test_a_checkpoint_of_the_ledger_is_the_same_size_at_round_10_and_round_1000() -> None:
    """Every round's cells went into every checkpoint: writing one grew linearly with the rounds (232 ms at 10,000)."""
    short, long = CommunicationLedger(), CommunicationLedger()
    drive(short, range(10))
    drive(long, range(1000))
    assert leaves(long.state_dict()) == leaves(short.state_dict())
    assert set(long.state_dict()) == {"total", "latest", "clients"} and list(long.state_dict()["latest"]) == ["999"]


def old_state(seen_cells: dict[int, dict[str, int]], clients: dict[str, dict[str, int]]) -> dict[str, Any]:
    """A ledger state as an older chillfl wrote it: every round's cells."""
    return {"rounds": {str(r): dict(cells) for r, cells in seen_cells.items()}, "clients": clients}


def test_an_older_per_round_state_loads_as_the_totals_and_goes_on_bitwise() -> None:
    reference = CommunicationLedger()
    before = drive(reference, range(6))
    per_round = {r: {k: v for k, v in totals.items() if "." in k} for r, (totals, _, _) in enumerate(before)}
    loaded = CommunicationLedger()
    loaded.load_state_dict(old_state(per_round, reference.state_dict()["clients"]))
    assert loaded.state_dict() == reference.state_dict()  # the new shape: totals and the latest round
    assert set(loaded.state_dict()) == {"total", "latest", "clients"}
    assert loaded.cumulative() == reference.cumulative() and loaded.round_totals(5) == reference.round_totals(5)
    assert drive(loaded, range(6, 12)) == drive(reference, range(6, 12))
    empty = CommunicationLedger()
    empty.load_state_dict({"rounds": {}, "clients": {}})  # an older run checkpointed before its first record
    assert empty.latest_round is None and empty.cumulative() == {"up": 0, "down": 0, "total": 0}


@pytest.mark.parametrize(
    ("state", "match"),
    [
        ({"total": {}, "latest": {}}, "must have keys"),
        ({"total": {"sideways.params": 1}, "latest": {}, "clients": {}}, "is not"),
        ({"total": {"up.params": -1}, "latest": {}, "clients": {}}, "non-negative integer"),
        ({"total": {}, "latest": {"1": {}, "2": {}}, "clients": {}}, "at most one latest round"),
        ({"rounds": {"1": {"up.params": 2.0}}, "clients": {}}, "non-negative integer"),
    ],
)
def test_a_malformed_state_is_refused(state: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CommunicationLedger().load_state_dict(state)


def test_a_run_resumed_from_an_older_checkpoint_is_the_uninterrupted_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A DS-FL + FedChill run checkpointed by an older chillfl (the ledger's per-round table, each client's whole A_n)
    resumes to the uninterrupted run's metrics and models, byte for byte; its next checkpoint is the bounded one."""
    monkeypatch.setattr(runner, "_plots", lambda *args: None)

    def config(name: str, every: int) -> Any:
        overrides = {**TINY, "name": name, "out_dir": str(tmp_path), "checkpoint.every": every, "federation.num_clients": 3,
                     "federation.rounds": 7, "temperature.policy": "fedchill", "temperature.patience": 1}
        return load_config(None, overrides).with_overrides({"distillation": {"method": "dsfl", **SOFT_LABELS}})

    reference = run_experiment(config("ref", 0), progress=False).folder
    with pytest.raises(Crash):
        run_experiment(config("cut", 1), progress=False, callbacks=[_CrashIn(5)])
    partial = tmp_path / "cut.partial"
    tree, run = read_checkpoint(partial / CHECKPOINT)
    assert tree["round"] == 4
    records = [json.loads(line) for line in (partial / "metrics.jsonl").read_text().splitlines()][:4]
    ledger = tree["protocol"]["ledger"]
    old = old_state({r: rec["bytes_detail"] for r, rec in enumerate(records)}, ledger["clients"])  # the table the older chillfl kept
    check = CommunicationLedger()
    check.load_state_dict(old)
    assert check.state_dict() == ledger  # the table rebuilt from the records is the run's
    tree["protocol"]["ledger"] = old
    lengthened = 0
    for own in (c["own"] for c in tree["protocol"]["clients"].values()):
        history = own["fedchill.history"]
        if len(history) == 3:  # a whole A_n of 3 or more decides as its last 3: any earlier entries would do
            own["fedchill.history"] = torch.cat([torch.linspace(0.0, 1.0, 40, dtype=torch.float64), history])
            lengthened += 1
    assert lengthened
    write_state(partial / CHECKPOINT, tree, run)

    with pytest.raises(Crash):
        resume_experiment(partial, progress=False, callbacks=[_CrashIn(6)])
    again = read_state(partial / CHECKPOINT)
    assert again["round"] == 5 and set(again["protocol"]["ledger"]) == {"total", "latest", "clients"}
    trained = json.loads((partial / "metrics.jsonl").read_text().splitlines()[4])["clients"]
    assert any(len(tree["protocol"]["clients"][str(c)]["own"]["fedchill.history"]) > 3 for c in trained)  # a lengthened A_n trained
    for cid, client in again["protocol"]["clients"].items():  # cut when it trained; a client that did not keeps its state
        kept = client["own"]["fedchill.history"]
        assert len(kept) <= 3 if int(cid) in trained else torch.equal(kept, tree["protocol"]["clients"][cid]["own"]["fedchill.history"])
    resumed = resume_experiment(partial, progress=False).folder
    assert reference is not None and resumed is not None
    assert (resumed / "metrics.jsonl").read_bytes() == (reference / "metrics.jsonl").read_bytes()
    for name in (MODEL, CLIENT_MODELS):
        assert (resumed / name).read_bytes() == (reference / name).read_bytes(), name
