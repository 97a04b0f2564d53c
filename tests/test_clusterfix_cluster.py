"""A comparison on a cluster: a full disk stops it resumably (never a table without a run), a shard says when its own
runs failed, how an interrupted shard goes on, and the ``--shard K/N`` edge cases (chillfl.sweeps.run, chillfl.sweeps.shard)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

import chillfl.runner as runner
import chillfl.sweeps.run as sweep
from chillfl.cli import main
from chillfl.errors import StorageError

from test_sweep_shard import CONFIG as SHARD_CONFIG, _config as shard_config, _run

CONFIG = SHARD_CONFIG.replace("rounds = 2", "rounds = 3\n[checkpoint]\nevery = 1")
"""The shard tests' comparison, 3 rounds, a checkpoint each."""


def _config(tmp_path: Path) -> str:
    return shard_config(tmp_path, CONFIG)


def _full(path: Path) -> StorageError:
    """What the run folder's writer raises on a full disk."""
    try:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    except OSError as exc:
        try:
            raise StorageError(f"cannot write {path}: {exc.strerror}") from exc
        except StorageError as wrapped:
            return wrapped


def _disk_full_at(monkeypatch: pytest.MonkeyPatch, run: str, round_: int) -> None:
    """Run ``run``'s checkpoint after ``round_`` meets a full disk (the one of round 1 is kept)."""
    real = runner._checkpoint

    def checkpoint(writer: Any, protocol: Any, done: int, *rest: Any) -> None:
        if writer is not None and writer.path.name.startswith(run) and done == round_:
            raise _full(writer.path / "checkpoint.safetensors.tmp")
        real(writer, protocol, done, *rest)

    monkeypatch.setattr(runner, "_checkpoint", checkpoint)


def test_a_full_disk_stops_the_comparison_resumably_and_its_resume_gives_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """Before, the run was marked failed, the comparison went on and was finalised without it (exit 0), and the printed
    `chillfl resume` was refused as finished; the run's own .partial had its config rewritten, so it resumed neither."""
    config = _config(tmp_path)
    assert _run(config, tmp_path / "whole") == 0
    capsys.readouterr()
    with monkeypatch.context() as m:
        _disk_full_at(m, "b-s0", 2)
        assert _run(config, tmp_path / "out") == 1
    err = capsys.readouterr().err.strip().splitlines()
    partial = tmp_path / "out" / "sh-compare.partial"
    assert len(err) == 1, err
    assert err[0].startswith("chillfl: error: run b-s0: cannot write "), err
    assert err[0].endswith(f"the comparison stopped (its finished runs and the run's last checkpoint are kept): free space, then chillfl resume {partial}"), err
    assert not (tmp_path / "out" / "sh-compare").exists() and partial.is_dir()  # never finalised without the run
    assert (partial / "b-s0.partial" / "checkpoint.safetensors").is_file()
    assert main(["resume", str(partial), "-q"]) == 0
    assert (tmp_path / "out" / "sh-compare" / "table.md").read_text() == (tmp_path / "whole" / "sh-compare" / "table.md").read_text()


def test_a_full_disk_while_the_tables_are_written_is_one_line_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """Before, savefig's OSError was a 40-line traceback."""
    config = _config(tmp_path)
    with monkeypatch.context() as m:
        def full(*args: Any, **kwargs: Any) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        m.setattr(sweep, "write_band_figures", full)
        assert _run(config, tmp_path) == 1
    err = capsys.readouterr().err.strip().splitlines()
    partial = tmp_path / "sh-compare.partial"
    assert err == [f"chillfl: error: cannot write the comparison's tables and figures in {partial}: No space left on device; every run is kept: "
                   f"free space, then chillfl resume {partial} writes them"], err
    assert main(["resume", str(partial), "-q"]) == 0
    assert (tmp_path / "sh-compare" / "table.md").is_file()


def test_an_unfinished_run_keeps_its_config_when_the_comparison_folder_is_renamed(tmp_path: Path) -> None:
    """Before, its out_dir was pointed at the finished folder, which its checkpoint's config checksum then refused."""
    partial, folder = tmp_path / "c.partial", tmp_path / "c"
    for run in ("done", "stopped.partial"):
        (partial / run).mkdir(parents=True)
        (partial / run / "config.toml").write_text(f'# made\nout_dir = "{partial}"\n')
    partial.rename(folder)
    sweep.point_saved_configs_to(folder, partial)
    assert (folder / "done" / "config.toml").read_text() == f'# made\nout_dir = "{folder}"\n'
    assert (folder / "stopped.partial" / "config.toml").read_text() == f'# made\nout_dir = "{partial}"\n'


def test_a_long_failure_keeps_its_command_whole() -> None:
    """Before, ``[:200]`` cut the resume command mid-path."""
    text = "x" * 300 + "; chillfl resume /a/very/long/path/to/the/run.partial"
    assert sweep.shortened(text).endswith("... chillfl resume /a/very/long/path/to/the/run.partial")
    assert sweep.shortened("short") == "short"


def test_an_io_error_reading_the_runs_input_fails_that_run_and_the_comparison_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An I/O error on a file outside the comparison's folder (a bad data file) is the run's own failure: the table is
    written with the run marked failed, as before. Stopping for it asked for a resume that met the same error each time."""
    real = runner._checkpoint

    def checkpoint(writer: Any, protocol: Any, done: int, *rest: Any) -> None:
        if writer is not None and writer.path.name.startswith("b-s1"):
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(tmp_path / "data" / "bad_shard.npy"))
        real(writer, protocol, done, *rest)

    monkeypatch.setattr(runner, "_checkpoint", checkpoint)
    assert _run(_config(tmp_path), tmp_path / "out") == 0
    table = (tmp_path / "out" / "sh-compare" / "table.md").read_text()
    assert "failed: OSError" in table


def test_which_errors_are_the_storages() -> None:
    partial = Path("/results/sh-compare.partial")
    assert sweep.storage_failed(OSError(errno.ENOSPC, "full", "/data/cache/x.npy"), partial)  # a full disk anywhere
    assert sweep.storage_failed(OSError(errno.EIO, "io", str(partial / "a-s0.partial" / "metrics.jsonl")), partial)
    assert not sweep.storage_failed(OSError(errno.EIO, "io", "/data/bad_shard.npy"), partial)
    assert not sweep.storage_failed(OSError(errno.EROFS, "ro"), partial)  # no file named: not known to be the folder's
    assert not sweep.storage_failed(ValueError("x"), partial)
    assert sweep.storage_failed(_full(partial / "a-s0.partial" / "checkpoint.safetensors"), partial)
