"""A comparison's runs split over processes (``--shard K/N``, chillfl.sweeps.shard): one shared folder, the last shard
writes the table, and the table is the one a single process writes, byte for byte (one machine, one torch build)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import chillfl.sweeps.run as sweep
from chillfl.cli import main
from chillfl.errors import DIVERGED_EXIT, ConfigError
from chillfl.storage.results import RunLock
from chillfl.sweeps.shard import Shard

CONFIG = '''name = "sh"
device = "cpu"
[dataset]
name = "digits"
[model]
name = "mlp"
hidden = [8]
[federation]
num_clients = 4
clients_per_round = 2
rounds = 2
[eval]
clients = "none"
[compare]
seeds = [0, 1]
[variants.a]
client = {lr = 0.05}
[variants.b]
client = {lr = 0.1}
'''


def _config(tmp_path: Path, text: str = CONFIG) -> str:
    path = tmp_path / "sh.toml"
    path.write_text(text)
    return str(path)


def _run(config: str, out: Path, *extra: str) -> int:
    return main(["run", config, "-q", "--out", str(out), *extra])


@pytest.mark.slow
def test_shards_write_the_table_one_process_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Shard 1 ends first and leaves the folder ``.partial`` (its runs 0 and 2); shard 2, the last, writes the table."""
    config = _config(tmp_path)
    assert _run(config, tmp_path / "one") == 0
    capsys.readouterr()
    assert _run(config, tmp_path / "sh", "--shard", "1/2") == 0
    out, err = capsys.readouterr()
    partial = tmp_path / "sh" / "sh-compare.partial"
    assert out == f"results: {partial}\n"
    assert "chillfl: shard 1/2: its 2 runs ended; 2 runs of the comparison are not finished yet (other shards)." in err
    assert sorted(p.name for p in partial.iterdir()) == [".shards", "a-s0", "b-s0", "config.toml", "sweep.json"]  # runs 0 and 2 of a-s0, a-s1, b-s0, b-s1
    assert _run(config, tmp_path / "sh", "--shard", "2/2") == 0
    out = capsys.readouterr().out
    assert out.endswith(f"results: {tmp_path / 'sh' / 'sh-compare'}\n") and not partial.exists()
    for name in ("table.md", "table.json"):
        assert (tmp_path / "sh" / "sh-compare" / name).read_bytes() == (tmp_path / "one" / "sh-compare" / name).read_bytes()
    assert sorted(p.name for p in (tmp_path / "sh" / "sh-compare").iterdir()) == sorted(p.name for p in (tmp_path / "one" / "sh-compare").iterdir())
    for run in ("a-s0", "a-s1", "b-s0", "b-s1"):
        assert (tmp_path / "sh" / "sh-compare" / run / "metrics.jsonl").read_bytes() == (tmp_path / "one" / "sh-compare" / run / "metrics.jsonl").read_bytes()


def test_a_restarted_shard_reads_its_finished_runs_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(tmp_path)
    assert _run(config, tmp_path, "--shard", "2/2") == 0
    ran: list[str] = []
    real = sweep.run_experiment
    monkeypatch.setattr(sweep, "run_experiment", lambda cfg, **kw: ran.append(cfg.name) or real(cfg, **kw))
    assert _run(config, tmp_path, "--shard", "2/2") == 0
    assert ran == []  # a-s1 and b-s1 were read back
    assert _run(config, tmp_path, "--shard", "1/2") == 0
    assert ran == ["a-s0", "b-s0"] and (tmp_path / "sh-compare" / "table.md").is_file()


def test_the_last_shard_writes_the_table_from_the_runs_results_without_building_their_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each shard checks every run's parts before it writes; the last one then only reads the ended runs back for the
    table (it rebuilt every run's data, partition and model a second time)."""
    config = _config(tmp_path)
    assert _run(config, tmp_path, "--shard", "1/2") == 0
    built: list[str] = []
    data, experiment = sweep.build_data, sweep.build_experiment
    monkeypatch.setattr(sweep, "build_data", lambda cfg, *a, **kw: built.append(f"data {cfg.name}") or data(cfg, *a, **kw))
    monkeypatch.setattr(sweep, "build_experiment", lambda cfg, *a, **kw: built.append(cfg.name) or experiment(cfg, *a, **kw))
    assert _run(config, tmp_path, "--shard", "2/2") == 0
    assert (tmp_path / "sh-compare" / "table.md").is_file()
    assert built == ["data a-s0", "a-s0", "data a-s1", "a-s1", "b-s0", "b-s1"]  # the shard's check, once: the table read the four runs back


def test_a_shard_of_another_comparison_is_refused_and_joins_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path)
    assert _run(config, tmp_path, "--shard", "1/2") == 0
    before = sorted(p.name for p in (tmp_path / "sh-compare.partial").iterdir())
    capsys.readouterr()
    assert _run(config, tmp_path, "--shard", "2/2", "federation.rounds=3") == 2  # another config under the same name
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: shard: {tmp_path / 'sh-compare.partial'} holds another comparison (its sweep.json differs")
    assert sorted(p.name for p in (tmp_path / "sh-compare.partial").iterdir()) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # the joining shard's own folder is gone


def test_a_resume_of_the_whole_comparison_waits_for_running_shards(tmp_path: Path) -> None:
    """A shard holds a shared lock on the folder while it runs: `chillfl resume` (an exclusive one) is refused meanwhile."""
    from chillfl.sweeps.run import resume_compare

    config = _config(tmp_path)
    assert _run(config, tmp_path, "--shard", "1/2") == 0
    partial = tmp_path / "sh-compare.partial"
    other = RunLock(partial, shared=True)  # shard 2, running
    try:
        RunLock(partial, shared=True).release()  # shards run together: a second shared lock is granted, not refused
        with pytest.raises(ConfigError, match="is in use by another chillfl process"):
            resume_compare(partial, progress=False)
    finally:
        other.release()
    assert resume_compare(partial, progress=False).folder == tmp_path / "sh-compare"  # then it runs what is missing


@pytest.mark.parametrize(("argv", "line"), [
    (["--shard", "0/2"], "shard: K/N needs 1 <= K <= N, got 0/2"),
    (["--shard", "3/2"], "shard: K/N needs 1 <= K <= N, got 3/2"),
    (["--shard", "1 of 2"], "shard: give K/N (this process runs the K-th of N shares, 1 <= K <= N), got '1 of 2'"),
    (["--shard", "1/2", "variants={}", "compare={}"], "shard: sh is one run: --shard splits a comparison's runs"),
])
def test_a_bad_shard_is_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], line: str) -> None:
    assert _run(_config(tmp_path), tmp_path / "out", *argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: {line}"), err
    assert not (tmp_path / "out").exists()


def test_shards_are_every_run_once() -> None:
    shards = [Shard.parse(f"{k}/3") for k in (1, 2, 3)]
    assert [[i for i in range(7) if s.takes(i)] for s in shards] == [[0, 3, 6], [1, 4], [2, 5]]
    assert Shard.parse(" 2 / 3 ") == Shard(2, 3) and str(Shard(2, 3)) == "2/3"


@pytest.mark.slow
def test_shards_started_at_once_share_one_folder(tmp_path: Path) -> None:
    """Two processes at once (an array job): one makes the folder, the other joins it; one of them writes the table."""
    config = _config(tmp_path)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    procs = [subprocess.Popen([sys.executable, "-m", "chillfl", "run", config, "-q", "--out", str(tmp_path / "out"), "--shard", f"{k}/2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for k in (1, 2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["sh-compare"]
    assert sorted(p.name for p in (tmp_path / "out" / "sh-compare").iterdir() if p.is_dir()) == ["a-s0", "a-s1", "b-s0", "b-s1"]
    assert (tmp_path / "out" / "sh-compare" / "table.md").is_file()


DIVERGING = CONFIG.replace("client = {lr = 0.05}", "client = {lr = 1e30}").replace("client = {lr = 0.1}", "client = {lr = 1e31}")
"""Every run diverges in round 1: the last shard renames the folder ``sh-compare.failed``."""


def _finished_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], window: str, failed: bool = False,
) -> tuple[int, list[str]]:
    """Shard 1 ran; then shard 2 (the last) renames the folder to ``sh-compare`` (``failed``: every run diverged,
    ``sh-compare.failed``) exactly while shard 1, restarted by hand, joins: forced deterministically at ``window``
    by wrapping the joining shard's own step there."""
    import chillfl.sweeps.shard as shard_module

    config = _config(tmp_path, DIVERGING if failed else CONFIG)
    assert _run(config, tmp_path, "--shard", "1/2") == 0
    capsys.readouterr()
    partial, final = tmp_path / "sh-compare.partial", tmp_path / ("sh-compare.failed" if failed else "sh-compare")

    def finish() -> None:  # what the last shard's table writing ends with
        partial.rename(final)

    if window == "before_its_rename":  # after its check that no sh-compare exists, before it puts its own folder in place
        write = shard_module.write_sweep

        def writing(folder: Path, record: object) -> None:
            write(folder, record)  # type: ignore[arg-type]
            finish()

        monkeypatch.setattr(shard_module, "write_sweep", writing)
    elif window == "after":  # restarted once the last shard has ended
        finish()
    else:  # it joined the existing folder; the rename lands before ("before_its_lock") or while ("with_its_lock") it takes the shared lock
        lock = shard_module.RunLock

        def locking(folder: Path, *args: object, **kwargs: object) -> RunLock:
            if window == "before_its_lock":
                finish()
                return lock(folder, *args, **kwargs)  # type: ignore[arg-type]
            held = lock(folder, *args, **kwargs)  # type: ignore[arg-type]
            finish()  # its descriptor was opened before the rename, the lock taken after the last shard let go
            return held

        monkeypatch.setattr(shard_module, "RunLock", locking)
    ran: list[str] = []
    monkeypatch.setattr(sweep.Sweep, "run", lambda self, i, config, *a: ran.append(config.name))
    return _run(config, tmp_path, "--shard", "1/2"), ran


@pytest.mark.parametrize("window", ["before_its_rename", "before_its_lock", "with_its_lock"])
def test_a_shard_restarted_while_the_last_one_finishes_reruns_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], window: str,
) -> None:
    """Before, in the first window it made a new ``sh-compare.partial`` beside the finished folder and ran its cells again.
    It ends as done (exit 0, one line): a requeued array job is not a failed one."""
    code, ran = _finished_while(tmp_path, monkeypatch, capsys, window)
    err = capsys.readouterr().err.strip().splitlines()
    assert ran == [], ran
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["sh-compare"]  # no new .partial, no hidden folder left
    assert code == 0 and len(err) == 1, err
    assert err[0] == f"chillfl: shard 1/2: {tmp_path / 'sh-compare'} is finished (its table is written): nothing is left for this shard to run", err


@pytest.mark.parametrize("window", ["before_its_rename", "before_its_lock", "with_its_lock", "after"])
def test_a_shard_restarted_as_or_after_an_all_failed_comparison_is_renamed_says_it_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], window: str,
) -> None:
    """Before, it made a new ``sh-compare.partial`` beside ``sh-compare.failed`` and ran its cells again, and that
    folder then waited for good for the other shards' runs."""
    code, ran = _finished_while(tmp_path, monkeypatch, capsys, window, failed=True)
    err = capsys.readouterr().err.strip().splitlines()
    assert ran == [], ran
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["sh-compare.failed"]  # no new .partial, no hidden folder left
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"chillfl: error: shard: {tmp_path / 'sh-compare.failed'}: every run of this comparison failed: nothing is left for shard 1/2"), err


def test_an_all_failed_comparison_of_another_config_does_not_stop_a_new_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``sh-compare.failed`` of another comparison (the lr that diverged, lowered): the new one runs in a new ``.partial``."""
    (tmp_path / "sh-compare.failed").mkdir()
    (tmp_path / "sh-compare.failed" / "sweep.json").write_text("{}")
    assert _run(_config(tmp_path), tmp_path, "--shard", "1/2") == 0
    assert (tmp_path / "sh-compare.partial" / "a-s0" / "summary.json").is_file()


def test_a_finished_comparison_of_another_config_is_named_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A shard of a new grid found ``sh-compare`` of an earlier one finished and said it was finished, "give another
    out_dir to run the comparison again": this comparison had never run."""
    (tmp_path / "sh-compare").mkdir()
    (tmp_path / "sh-compare" / "sweep.json").write_text("{}")
    assert _run(_config(tmp_path), tmp_path, "--shard", "1/2") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: shard: {tmp_path / 'sh-compare'} is another comparison's, finished"), err
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["sh-compare"]


def test_an_all_failed_comparison_beside_another_failed_one_is_failed_2_and_a_restarted_shard_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """``sh-compare.failed`` (another comparison) is taken: the last shard renames this one ``sh-compare.failed-2``, and a
    shard restarted after finds it there and runs nothing (before: it stayed ``.partial``)."""
    (tmp_path / "sh-compare.failed").mkdir()
    (tmp_path / "sh-compare.failed" / "sweep.json").write_text("{}")
    config = _config(tmp_path, DIVERGING)
    assert _run(config, tmp_path, "--shard", "1/2") == 0
    assert _run(config, tmp_path, "--shard", "2/2") == DIVERGED_EXIT
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["sh-compare.failed", "sh-compare.failed-2"]
    capsys.readouterr()
    assert _run(config, tmp_path, "--shard", "1/2") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: shard: {tmp_path / 'sh-compare.failed-2'}: every run of this comparison failed"), err
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["sh-compare.failed", "sh-compare.failed-2"]


class _Stopped(KeyboardInterrupt):
    """What the test's SIGTERM handler raises (the CLI's raises its own kin of KeyboardInterrupt)."""


def test_a_signal_just_after_a_shards_private_folder_is_made_leaves_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first shard fills a private ``.NAME.shard-PID-HEX`` folder before renaming it into place; a signal between
    its ``mkdir`` and the ``try`` that removes it again left it behind, empty, in the shared ``--out``."""
    import signal

    from chillfl.sweeps.shard import join_folder

    made = Path.mkdir

    def mkdir(self: Path, *args: object, **kwargs: object) -> None:
        made(self, *args, **kwargs)  # type: ignore[arg-type]
        if self.name.startswith(".sh-compare.shard-"):
            signal.raise_signal(signal.SIGTERM)

    def stop(signum: int, frame: object) -> None:
        raise _Stopped

    monkeypatch.setattr(Path, "mkdir", mkdir)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(_Stopped):
            join_folder(tmp_path / "out", "sh-compare", "", {}, Shard(1, 2))  # type: ignore[typeddict-item]  # an empty record: the stop comes first
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert list((tmp_path / "out").iterdir()) == []
