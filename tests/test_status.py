"""``chillfl status FOLDER`` (chillfl.status): each run of a comparison in plan order, its state read from the folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.storage.checkpoint import write_state
from chillfl.storage.results import RunLock
from chillfl.storage.run_folder import CHECKPOINT

from test_sweep_shard import CONFIG


def test_a_sharded_comparison_shows_every_run_in_plan_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Shard 1 of 2 ran a-s0 and b-s0; the other runs are set up by hand in each remaining state."""
    (tmp_path / "sh.toml").write_text(CONFIG)
    assert main(["run", str(tmp_path / "sh.toml"), "-q", "--out", str(tmp_path), "--shard", "1/2"]) == 0
    partial = tmp_path / "sh-compare.partial"
    finished = json.loads((partial / "a-s0" / "summary.json").read_text())["final_global_acc"]
    shutil.copytree(partial / "b-s0", partial / "a-s1.partial")  # a-s1: stopped with a checkpoint after its 2 rounds' lines
    (partial / "a-s1.partial" / CHECKPOINT).write_bytes(b"")
    (partial / "b-s0" / "summary.json").unlink()
    (partial / "b-s0").rename(partial / "b-s0.partial")  # b-s0: running (locked below), 2 rounds written
    (partial / "b-s1.failed").mkdir()
    (partial / "b-s1.failed" / "failure.json").write_text(json.dumps({"round": 1}))
    lock = RunLock(partial / "b-s0.partial")
    try:
        capsys.readouterr()
        assert main(["status", str(partial)]) == 0
        out = capsys.readouterr().out.splitlines()
    finally:
        lock.release()
    assert out == [
        f"{partial}: comparison, 4 runs: 1 finished, 1 stopped, 1 running, 1 diverged",
        "| run | state | rounds | accuracy % |",
        "|---|---|---|---|",
        f"| a-s0 | finished | 2/2 | {100 * finished:.2f} |",
        "| a-s1 | stopped (checkpoint damaged: resume refuses it; remove its folder and resume the comparison, which runs it again) | 2/2 | - |",
        "| b-s0 | running | 2/2 | - |",
        "| b-s1 | diverged (at round 1) | 0/2 | - |",
    ]
    (partial / "a-s1.partial" / CHECKPOINT).unlink()
    (partial / "a-s1.partial" / "summary.json").unlink()  # copied from a finished run: with it, every round ran (a final write failed)
    shutil.rmtree(partial / "b-s0.partial")
    assert main(["status", str(partial)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{partial}: comparison, 4 runs: 1 finished, 1 stopped, 1 not started, 1 diverged"
    assert out[4:6] == ["| a-s1 | stopped (before its first checkpoint: runs again) | 2/2 | - |", "| b-s0 | not started | - | - |"]
    write_state(partial / "a-s1.partial" / CHECKPOINT, {"round": 1, "protocol": {}})  # cut after round 2's line, before its checkpoint
    assert main(["status", str(partial)]) == 0
    assert capsys.readouterr().out.splitlines()[4] == "| a-s1 | stopped (resumes after round 1, its checkpoint) | 2/2 | - |"
    assert main(["status", str(partial / "a-s0")]) == 0
    assert capsys.readouterr().out.splitlines()[::3] == [f"{partial / 'a-s0'}: one run", f"| a-s0 | finished | 2/2 | {100 * finished:.2f} |"]


@pytest.mark.parametrize(("what", "words"), [("missing", "does not exist"), ("empty", "is not a chillfl result folder (no config.toml)")])
def test_a_folder_that_is_no_result_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str, words: str) -> None:
    folder = tmp_path / what
    if what == "empty":
        folder.mkdir()
    assert main(["status", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"chillfl: error: run_dir: {folder} {words}" + ("" if what == "empty" else " (give a run's or a comparison's result folder)")]


def test_a_diverged_run_folder_is_told_diverged_not_a_later_run_of_its_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``chillfl status NAME.failed`` was read as a run named ``NAME.failed`` (stopped early), and a finished
    ``NAME`` beside it (a rerun at a lower lr) must not stand in for the diverged folder."""
    failed = tmp_path / "x.failed"
    failed.mkdir()
    (failed / "config.toml").write_text(CONFIG.replace('name = "sh"', 'name = "x"').split("[compare]")[0])
    (failed / "failure.json").write_text(json.dumps({"round": 1}))
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "summary.json").write_text(json.dumps({"final_global_acc": 0.5, "rounds": 2}))
    capsys.readouterr()
    assert main(["status", str(failed)]) == 0
    assert capsys.readouterr().out.splitlines()[::3] == [f"{failed}: one run", "| x | diverged (at round 1) | 0/2 | - |"]


@pytest.mark.parametrize("cut", [0, 3, 8, 20, None])
def test_a_checkpoint_round_is_read_from_its_header_or_not_at_all(tmp_path: Path, cut: int | None) -> None:
    """``saved_round`` reads the header only: a file cut anywhere in it, or garbage, is None, never an error."""
    from chillfl.storage.checkpoint import encode_state, saved_round

    data = encode_state({"round": 7, "weights": [1.0, 2.0]})
    (tmp_path / "c").write_bytes(data if cut is None else data[:cut])
    assert saved_round(tmp_path / "c") == (7 if cut is None else None)
    (tmp_path / "c").write_bytes(b"\xff" * 8 + data[8:])  # a header length past any file
    assert saved_round(tmp_path / "c") is None
    assert saved_round(tmp_path / "missing") is None


def _stopped_run(tmp_path: Path, rounds: list[int]) -> Path:
    """A stopped run of 2 planned rounds (``x.partial``, no checkpoint) whose ``metrics.jsonl`` holds one line a round of ``rounds``."""
    folder = tmp_path / "x.partial"
    folder.mkdir()
    (folder / "config.toml").write_text(CONFIG.replace('name = "sh"', 'name = "x"').split("[compare]")[0])
    lines = [json.dumps({"round": r, "clients": [0]}) for r in rounds]
    (folder / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    return folder


@pytest.mark.parametrize(("rounds", "cell"), [
    ([1, 2, 1, 2], "2/2"),  # a round written twice (a run resumed by an older chillfl, which appended): one round
    ([1, 2, 2], "2/2"),
    ([1], "1/2"),
    ([1, 2, 3], "3 (past the 2 planned)"),  # config.toml's rounds lowered after the run went on: said, not "3/2"
])
def test_a_runs_rounds_are_its_distinct_rounds_and_never_silently_past_the_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rounds: list[int], cell: str
) -> None:
    """``status`` counted the lines of ``metrics.jsonl``: a round written twice showed ``4/2``, which reads as a run
    past its end. It counts distinct rounds, and a run with rounds past the planned ones says so."""
    folder = _stopped_run(tmp_path, rounds)
    capsys.readouterr()
    assert main(["status", str(folder)]) == 0
    assert capsys.readouterr().out.splitlines()[3] == f"| x | stopped (before its first checkpoint: resume refuses it; run its config.toml again) | {cell} | - |"


def test_a_line_that_is_no_rounds_record_is_no_round(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A line of ``metrics.jsonl`` that holds no round's record (garbled, an object without an integer round) counts no round."""
    folder = _stopped_run(tmp_path, [1])
    with (folder / "metrics.jsonl").open("a") as fh:
        fh.write('{"clients": [0]}\nnot json\n{"round": "2"}\n[2]\n{"round": true}\n{"round": 0}\n')
    capsys.readouterr()
    assert main(["status", str(folder)]) == 0
    assert capsys.readouterr().out.splitlines()[3].split(" | ")[2] == "1/2"


def test_a_finished_run_past_its_plan_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A comparison's run resumed (``--force``) with more rounds in its config.toml than the comparison planned: its
    summary's last round is past the plan, shown as such rather than as ``5/2``."""
    from chillfl.storage.run_state import run_state

    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "summary.json").write_text(json.dumps({"final_global_acc": 0.5, "rounds": 5}))
    assert run_state(tmp_path, "x", 2).cells() == ["x", "finished", "5 (past the 2 planned)", "50.00"]
    assert run_state(tmp_path, "x", 5).cells() == ["x", "finished", "5/5", "50.00"]


def test_a_damaged_summary_says_so(tmp_path: Path) -> None:
    """A summary.json that is no JSON object (cut short, hand-edited) read "finished" with no rounds or accuracy, as if all
    were well; the row now says it is unreadable, with the rounds that metrics.jsonl holds."""
    from chillfl.storage.run_state import run_state

    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "metrics.jsonl").write_text('{"round": 1}\n{"round": 2}\n')
    for text in ('{"final_global_acc": 0.5, "rou', "[1, 2]"):
        (tmp_path / "x" / "summary.json").write_text(text)
        assert run_state(tmp_path, "x", 2).cells() == ["x", "finished (its summary.json is unreadable)", "2/2", "-"]


def test_a_run_stopped_by_a_callback_is_stopped_not_finished(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An early-stopped run writes its summary.json (with ``"stopped"``) and keeps its checkpoint, which ``chillfl resume``
    continues; ``status`` read the summary and called it finished (``2/3``), so nothing said it could go on."""
    import chillfl
    from chillfl.engine.view import RunView

    class Stop:
        def on_round(self, record: dict[str, object], run: RunView) -> None:
            if record["round"] == 2:
                run.stop("no gain")

    config = {"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "federation": {"num_clients": 3, "rounds": 3}, "checkpoint": {"every": 1}}
    stopped = chillfl.run(config=config, callbacks=[Stop()], out_dir=tmp_path, progress=False)
    assert stopped.folder is not None
    capsys.readouterr()
    assert main(["status", str(stopped.folder)]) == 0
    accuracy = 100 * stopped.summary["final_global_acc"]
    line = f"| run | stopped (early, by a callback: no gain; `chillfl resume` continues it) | 2/3 | {accuracy:.2f} |"
    assert capsys.readouterr().out.splitlines() == [f"{stopped.folder}: one run", "| run | state | rounds | accuracy % |", "|---|---|---|---|", line]
    assert main(["resume", str(stopped.folder), "-q"]) == 0
    capsys.readouterr()
    assert main(["status", str(stopped.folder)]) == 0
    assert capsys.readouterr().out.splitlines()[3].startswith("| run | finished | 3/3 |")


@pytest.mark.parametrize("ended", ["x", "x.failed"])
def test_a_partial_folder_that_ended_points_to_its_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str], ended: str) -> None:
    """A ``.partial`` path typed from the progress line, once the run ended: before, "is not a folder"."""
    (tmp_path / ended).mkdir()
    assert main(["status", str(tmp_path / "x.partial")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"chillfl: error: run_dir: {tmp_path / 'x.partial'} does not exist: it ended, and its folder is {tmp_path / ended}; `chillfl status {tmp_path / ended}`"]
