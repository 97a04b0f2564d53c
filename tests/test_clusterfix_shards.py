"""``--shard K/N`` on a cluster: a shard whose own runs failed says so and exits 1, an interrupted shard says to restart it
(``chillfl resume`` is refused while other shards run), a shard restarted after the table was written ends as done, and
the K/N edge cases are named (chillfl.sweeps.run.run_shard, chillfl.cli)."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path
from typing import Any

import pytest

import chillfl.sweeps.run as sweep
from chillfl.cli import main
from chillfl.errors import StorageError
from chillfl.executors.processes import WorkerError
from chillfl.runner import RunInterrupted

from test_sweep_shard import _config, _run  # the shard tests' comparison: 2 variants x 2 seeds, 2 rounds

def _failing(monkeypatch: pytest.MonkeyPatch, names: set[str], exc: BaseException | None = None) -> None:
    """The runs ``names`` raise ``exc`` (a RuntimeError: a failed run) instead of running."""
    real = sweep.run_experiment

    def run_experiment(config: Any, *args: Any, **kwargs: Any) -> Any:
        if config.name in names:
            raise exc if exc is not None else RuntimeError("the client's code raised")
        return real(config, *args, **kwargs)

    monkeypatch.setattr(sweep, "run_experiment", run_experiment)


def test_shards_whose_own_runs_failed_say_so_and_exit_1_then_a_finished_comparison_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """Before, each said its runs "ended" and the rest were "not finished yet (other shards)", and exited 0; a shard
    restarted once the table was written exited 2 (a requeued array job showed failed)."""
    config = _config(tmp_path)
    partial = tmp_path / "sh-compare.partial"
    with monkeypatch.context() as m:
        _failing(m, {"b-s0", "b-s1"})
        assert _run(config, tmp_path, "--shard", "1/2") == 1
        err = [line for line in capsys.readouterr().err.splitlines() if "shard 1/2" in line]
        assert err == [f"chillfl: shard 1/2: 1 run failed in this shard (b-s0), so 3 runs of the comparison are not finished, 2 more in other "
                       f"shards (running, or failed there); once every shard has ended, `chillfl resume {partial}` reruns them and writes the table"], err
        assert _run(config, tmp_path, "--shard", "2/2") == 1
        out = capsys.readouterr()
        err = [line for line in out.err.splitlines() if "shard 2/2" in line]
        assert err == [f"chillfl: shard 2/2: 1 run failed in this shard (b-s1), so 2 runs of the comparison are not finished, 1 more in other "
                       f"shards (running, or failed there); once every shard has ended, `chillfl resume {partial}` reruns them and writes the table"], err
        assert f"results: {partial}" in out.out
    assert main(["resume", str(partial), "-q"]) == 0  # what the line said: it reruns them and writes the table
    assert (tmp_path / "sh-compare" / "table.md").is_file()
    capsys.readouterr()
    assert _run(config, tmp_path, "--shard", "1/2") == 0  # requeued: nothing to run, and not a failure
    out = capsys.readouterr()
    assert out.err.strip().splitlines() == [f"chillfl: shard 1/2: {tmp_path / 'sh-compare'} is finished (its table is written): nothing is left for this shard to run"]
    assert out.out.strip() == f"results: {tmp_path / 'sh-compare'}"


@pytest.mark.parametrize(("raised", "line"), [
    (RunInterrupted(signal.SIGTERM, None, 1), "chillfl: run a-s0 interrupted by SIGTERM after round 1"),
    (KeyboardInterrupt(), "chillfl: interrupted"),
    (WorkerError("worker 0 died"), "chillfl: worker failed: run a-s0: worker 0 died"),
])
def test_an_interrupted_shard_says_to_restart_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], raised: BaseException, line: str,
) -> None:
    """Before, it said `resume with: chillfl resume FOLDER`, which is refused while the other shards hold the folder."""
    _failing(monkeypatch, {"a-s0"}, raised)
    code = _run(_config(tmp_path), tmp_path, "--shard", "1/2")
    assert code != 0
    partial = tmp_path / "sh-compare.partial"
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"{line}; restart this shard with the same command (--shard 1/2), or once every shard has ended: chillfl resume {partial}", err


def test_a_0_based_shard_is_told_k_is_1_based(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(_config(tmp_path), tmp_path / "out", "--shard", "0/4") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "got 0/4 (K is 1-based: from a 0-based SLURM_ARRAY_TASK_ID give $((SLURM_ARRAY_TASK_ID+1))/N" in err[0], err
    assert not (tmp_path / "out").exists()


def test_a_shard_past_the_runs_says_so_and_a_shard_of_another_n_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """Before, a shard with K past the 4 runs said only "its 0 runs ended", and shards of different N joined one folder."""
    config = _config(tmp_path)
    monkeypatch.setattr(sweep.Sweep, "run", lambda self, *a: pytest.fail("no run is this shard's"))
    assert _run(config, tmp_path, "--shard", "5/5") == 0
    err = capsys.readouterr().err
    assert "chillfl: shard 5/5: N = 5 exceeds the comparison's 4 runs, so this shard has none (shards 5 to 5 run nothing; N = 4 is enough)" in err, err
    assert "its 0 runs ended" not in err and "chillfl: shard 5/5: it has no runs (said above);" in err, err
    assert _run(config, tmp_path, "--shard", "6/6") == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert not any("exceeds" in line for line in err_lines), err_lines  # refused first: not told it has no runs
    partial = tmp_path / "sh-compare.partial"
    assert err_lines[-1] == (f"chillfl: error: shard: {partial} is split into 5 shards (--shard K/5), this one is --shard 6/6: every shard of a comparison "
                             f"gives the same N; once every shard has ended, `chillfl resume {partial}` runs what is left"), err_lines


def test_a_full_disk_in_a_shard_says_to_restart_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A shard's full disk stops it as a lost worker does, and its line says how a shard goes on."""
    try:
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:
            raise StorageError(f"cannot write {tmp_path / 'x'}: {exc.strerror}") from exc
    except StorageError as full:
        _failing(monkeypatch, {"a-s0"}, full)
    assert _run(_config(tmp_path), tmp_path, "--shard", "1/2") == 1
    partial = tmp_path / "sh-compare.partial"
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"chillfl: error: run a-s0: cannot write {tmp_path / 'x'}: No space left on device; the comparison stopped (its finished runs "
                       f"are kept; the run starts again): free space, then restart shard 1/2 with the same command, or once every shard has ended: "
                       f"chillfl resume {partial}"), err
