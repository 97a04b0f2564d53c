"""The server-step hint survives a resume (pa3left finding 2).

``ServerBook.blown_after`` (the round whose server step blew the global model up while every client's own model was
finite) was not in the checkpoint: a run resumed between that round and the non-finite loss it causes said only
"lower client.lr?", where the uninterrupted run also named the server's step. It is checkpointed now; a checkpoint
written before it resumes as it did.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, cast

import pytest

from chillfl import runner
from chillfl.errors import LOSS_HINT, Diverged
from chillfl.protocols.book import ServerBook
from chillfl.runner import CHECKPOINT, resume_experiment, run_experiment
from chillfl.storage.checkpoint import read_checkpoint, write_state
from test_pa3fed_e2e import tiny_config

HINT = "after round 1 every client's own model had a finite loss but the global model's test loss was not finite"


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """FedAdam with a server_lr of 1e30, checkpointed every round: round 1's server step blows the model up (its
    checkpoint keeps that), round 2's clients see a NaN loss. The failed folder and the uninterrupted run's line."""
    out = tmp_path_factory.mktemp("blown")
    cfg = tiny_config({"name": "fedadam", "server_lr": 1e30}, **{
        "federation.rounds": 3, "model.name": "mlp", "eval.clients": "sampled", "out_dir": str(out), "name": "blown", "checkpoint.every": 1})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "_plots", lambda *args: None)
        with pytest.raises(Diverged) as caught:
            run_experiment(cfg, progress=False)
    said = str(caught.value)
    assert HINT in said, said
    folder = out / "blown.failed"
    assert read_checkpoint(folder / CHECKPOINT)[0]["round"] == 1  # stopped between the blow-up and the NaN
    return folder, said


def _resumed(folder: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    with pytest.raises(Diverged) as caught:
        resume_experiment(folder, progress=False, force=True)  # a diverged run resumes as it is only with force
    return str(caught.value)


def test_a_resumed_run_names_the_server_step_as_the_uninterrupted_one(failed: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, said = failed
    copy = Path(shutil.copytree(folder, tmp_path / folder.name))
    assert _resumed(copy, monkeypatch) == said  # was "... (lower client.lr?)" alone


def test_a_checkpoint_without_the_field_still_resumes(failed: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = Path(shutil.copytree(failed[0], tmp_path / failed[0].name))
    state, run = read_checkpoint(copy / CHECKPOINT)
    assert state["protocol"].pop("blown_after") == 0
    write_state(copy / CHECKPOINT, state, run)  # as an older version wrote it
    said = _resumed(copy, monkeypatch)
    assert said.startswith("round 2, ") and said.endswith(f"({LOSS_HINT})") and HINT not in said


class _Part:
    """A policy, ledger or local log with no state of its own."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Any) -> None:
        pass


def _book() -> ServerBook:
    book = ServerBook.__new__(ServerBook)  # only the parts its state holds
    book.policy, book.ledger, book.log = cast(Any, _Part()), cast(Any, _Part()), cast(Any, _Part())
    book.blown_after = None
    return book


def test_the_books_state_round_trips_blown_after() -> None:
    book = _book()
    book.blown_after = 4
    other = _book()
    other.load_state_dict(book.state_dict())
    assert other.blown_after == 4
    older = {k: v for k, v in book.state_dict().items() if k != "blown_after"}
    other.load_state_dict(older)
    assert other.blown_after is None
