"""A lost worker (kill -9, the OOM killer) is no result of the run: a comparison stops resumable, as on a signal,
and its resume finishes that run (it was marked failed, the comparison went on and became final)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chillfl.cli import main
from chillfl.executors.processes import ClientCodeError, WorkerError
from chillfl.executors.sequential import SequentialExecutor

TINY = ["dataset.name=digits", "federation.num_clients=4", "federation.rounds=2", "model.name=mlp", "eval.client_split_size=20", "checkpoint.every=1"]


def _lose_a_worker_at(call: int, error: type[WorkerError], monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``call``-th round of the process (counting every run's) raises ``error``, as a pool whose worker died does."""
    real = SequentialExecutor.map
    calls = [0]

    def map_(self: SequentialExecutor, tasks: Any) -> Any:
        calls[0] += 1
        if calls[0] == call:
            raise error("worker chillfl-worker-0 died with exit code -9")
        return real(self, tasks)

    monkeypatch.setattr(SequentialExecutor, "map", map_)


def test_a_lost_worker_stops_the_comparison_resumable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "sweep.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n', encoding="utf-8")
    _lose_a_worker_at(4, WorkerError, monkeypatch)  # run 2's round 2, after its round-1 checkpoint
    assert main(["compare", str(config), "-q", *TINY, "--grid", "client.lr=0.05,0.1"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    partial = tmp_path / "out" / "sweep-compare.partial"
    assert last.startswith("chillfl: worker failed: run lr0.1: worker chillfl-worker-0 died") and last.endswith(f"resume with: chillfl resume {partial}")
    assert sorted(p.name for p in partial.iterdir() if p.is_dir()) == ["lr0.05", "lr0.1.partial"]
    monkeypatch.undo()
    assert main(["resume", str(partial), "-q"]) == 0
    folder = tmp_path / "out" / "sweep-compare"
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["lr0.05", "lr0.1"]
    assert [r.get("failed") for r in json.loads((folder / "table.json").read_text())] == [None, None]


def test_a_clients_own_error_in_a_worker_fails_only_that_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The client's code raising is the run's result, as it is in-process: the comparison goes on."""
    config = tmp_path / "sweep.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n', encoding="utf-8")
    _lose_a_worker_at(3, ClientCodeError, monkeypatch)
    main(["compare", str(config), "-q", *TINY, "--grid", "client.lr=0.05,0.1"])
    assert "lr0.1 failed (ClientCodeError" in capsys.readouterr().err
    assert not (tmp_path / "out" / "sweep-compare" / "lr0.1.partial").exists()  # failed in its first round: nothing to resume (plugfix3)


@pytest.mark.parametrize(("error", "call", "line"), [
    (WorkerError, 2, "chillfl: worker failed: worker chillfl-worker-0 died with exit code -9; resume with: chillfl resume {folder}"),
    (WorkerError, 1, "chillfl: worker failed: worker chillfl-worker-0 died with exit code -9; it stopped before its first checkpoint"),
    (ClientCodeError, 2, "chillfl: error: the client's code raised in a worker process (no worker was lost): worker chillfl-worker-0 died"),
])
def test_a_runs_one_line_says_what_failed(error: type[WorkerError], call: int, line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A client's exception is not a "worker failed"; a lost worker's line says how to go on: the run's folder, from the
    checkpoint of round 1 (a loss in round 2), or that there is none yet (a loss in round 1)."""
    config = tmp_path / "one.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n', encoding="utf-8")
    _lose_a_worker_at(call, error, monkeypatch)
    assert main(["run", str(config), "-q", *TINY]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(line.format(folder=tmp_path / "out" / "one.partial"))


def test_a_worker_lost_before_the_first_round_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The line says "nothing to resume, run it again": the folder of config and partition alone went with it, as on a
    signal (it stayed as one.partial, and running it again made one-1 beside it)."""
    config = tmp_path / "one.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n', encoding="utf-8")
    _lose_a_worker_at(1, WorkerError, monkeypatch)
    assert main(["run", str(config), "-q", *TINY]) == 1
    assert "nothing to resume, run it again" in capsys.readouterr().err
    assert list((tmp_path / "out").iterdir()) == []
