"""Stop signals at the edges of a command (intrfix): while ``chillfl.cli`` imports its modules, inherited as ignored,
a comparison's run stopped before its first checkpoint, and while a comparison writes its table.

The import-time signal is forced deterministically (no timing): an import hook in the child sends the signal to its own
process when ``chillfl.config`` is first looked up, inside the command's own imports.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chillfl import cli
from chillfl.errors import ComparisonInterrupted
from chillfl.stop_signals import STARTING_LINE, stop_signals

CHILD = textwrap.dedent(
    """
    import os, runpy, signal, sys

    signum = signal.Signals[sys.argv[1]]


    class Signalling:
        '''The signal arrives while the command imports chillfl.config (before main() installs its handlers).'''

        def find_spec(self, name, path=None, target=None):
            if name == "chillfl.config":
                sys.meta_path.remove(self)
                os.kill(os.getpid(), signum)
            return None


    sys.meta_path.insert(0, Signalling())
    sys.argv = ["chillfl", "list", "--options"]
    runpy.run_module("chillfl", run_name="__main__", alter_sys=True)  # as `python -m chillfl list` runs
    """
)


def _command(signum: signal.Signals, ignored: signal.Signals | None = None) -> subprocess.CompletedProcess[str]:
    def ignore() -> None:  # the child starts as a terminal's command would, whatever this job inherited (nohup: SIGHUP ignored)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN if sig == ignored else signal.SIG_DFL)

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(Path(cli.__file__).parents[1]), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-c", CHILD, signum.name], capture_output=True, text=True, timeout=120, env=env, preexec_fn=ignore)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_while_the_command_imports_its_modules_is_its_line(signum: signal.Signals) -> None:
    """SIGINT was a KeyboardInterrupt traceback from inside the import, SIGTERM and SIGHUP a silent kill (exit -15, -1)."""
    proc = _command(signum)
    assert proc.stderr.strip().splitlines() == [STARTING_LINE], proc.stderr
    assert proc.returncode == 128 + signum, proc.stderr
    assert proc.stdout == ""  # stopped before the command ran


@pytest.mark.parametrize("signum", [signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_ignored_on_entry_stays_ignored_while_the_command_imports(signum: signal.Signals) -> None:
    """``nohup`` starts the command with SIGHUP ignored: it goes on (SIGINT is always taken: stop_signals says why)."""
    proc = _command(signum, ignored=signum)
    assert proc.returncode == 0, proc.stderr
    assert "chillfl: interrupted" not in proc.stderr
    assert "client.lr" in proc.stdout


def test_sigint_ignored_on_entry_is_still_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """A background job of a script, a CI harness or ``nohup ... &`` starts chillfl with SIGINT ignored: a ``kill -INT``
    (or ``timeout -s INT``) must still stop the run after its round; only an ignored SIGHUP (``nohup``) stays ignored."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert signal.SIGINT in stop_signals()
        with cli._CommandSignals():
            assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_comparisons_run_stopped_before_its_first_checkpoint_says_it_runs_again(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A second Ctrl-C in a comparison's run before that run's first checkpoint said "the checkpoint of round None is kept"."""
    from chillfl.runner import RunInterrupted

    exc = RunInterrupted(signal.SIGINT, None, 0, at_once=True)
    exc.folder, exc.run = tmp_path / "tiny-compare.partial", "T0.25-s0"
    assert cli._interrupted(exc) == 130
    line = capsys.readouterr().err.strip()
    assert "round None" not in line
    assert "; that run had no checkpoint yet: resuming runs it again; resume with: chillfl resume " in line, line


def test_main_says_what_had_not_started() -> None:
    """The command's own start-up (torch's import, before its arguments are parsed) names what a signal there stopped."""
    assert cli._starting(["run", "a.toml", "-q"]) == "run"
    assert cli._starting(["-q", "compare", "a.toml"]) == "comparison"
    assert cli._starting(["run", "a.toml", "--dry-run"]) is None
    assert cli._starting(["compare", "--help"]) is None
    assert cli._starting(["resume", "x.partial"]) is None
    assert cli._starting([]) is None


TINY = """\
name = "tiny"
seed = 0
threads = 1
device = "cpu"
out_dir = "{out}"
[dataset]
name = "digits"
[model]
name = "mlp"
hidden = [8]
[federation]
num_clients = 4
clients_per_round = 2
rounds = 1
[client]
epochs = 1
batch_size = 32
[eval]
client_split_size = 20
"""


@pytest.mark.parametrize("where", ["tabulate", "write_tables"])
def test_a_signal_while_a_comparison_writes_its_table_names_its_folder(where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Its runs done, a comparison tabulates and writes its table and figures: a signal there said only
    "chillfl: interrupted", without the folder that ``chillfl resume`` writes them in."""
    import chillfl.sweeps.run as sweep_run

    def stopped(*args: object, **kwargs: object) -> None:
        raise cli.Terminated()

    monkeypatch.setattr(sweep_run, where, stopped)
    config = tmp_path / "tiny.toml"
    config.write_text(TINY.format(out=(tmp_path / "out").as_posix()))
    code = cli.main(["compare", str(config), "-q", "--grid", "client.lr=0.05,0.1"])
    partial = tmp_path / "out" / "tiny-compare.partial"
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"chillfl: interrupted; resume with: chillfl resume {partial}"
    assert code == 128 + signal.SIGTERM
    assert partial.is_dir()


def test_named_if_stopped_leaves_a_finished_folder_unnamed(tmp_path: Path) -> None:
    """Once the folder is renamed final there is nothing to resume: the signal's own exception goes on."""
    from chillfl.sweeps.run import SweepFolder, named_if_stopped

    with pytest.raises(KeyboardInterrupt) as info, named_if_stopped(SweepFolder(tmp_path / "done", tmp_path / "done.partial")):
        raise KeyboardInterrupt
    assert not isinstance(info.value, ComparisonInterrupted)
    (tmp_path / "done.partial").mkdir()
    with pytest.raises(ComparisonInterrupted) as named, named_if_stopped(SweepFolder(tmp_path / "done", tmp_path / "done.partial")):
        raise KeyboardInterrupt
    assert named.value.folder == tmp_path / "done.partial"


def test_named_if_stopped_names_the_folder_for_a_signal_a_package_wrapped(tmp_path: Path) -> None:
    """A signal landing in a lazily imported class body (matplotlib's, while the figures are drawn) arrives as a
    RuntimeError from the KeyboardInterrupt: the line named no folder."""
    from chillfl.sweeps.run import SweepFolder, named_if_stopped

    (tmp_path / "done.partial").mkdir()
    with pytest.raises(ComparisonInterrupted) as named, named_if_stopped(SweepFolder(tmp_path / "done", tmp_path / "done.partial")):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise RuntimeError("Error calling __set_name__") from exc
    assert named.value.folder == tmp_path / "done.partial"
    with pytest.raises(ValueError), named_if_stopped(SweepFolder(tmp_path / "done", tmp_path / "done.partial")):
        raise ValueError("not a signal")  # any other error goes on as it is


def test_status_says_a_single_run_without_a_checkpoint_is_run_again_from_its_config(tmp_path: Path) -> None:
    """``chillfl status`` said "runs again" for any ``.partial`` without a checkpoint; ``chillfl resume`` refuses a single
    one (inside a comparison its resume does run it again)."""
    from chillfl.storage.run_state import SINGLE_UNCHECKPOINTED, folder_state

    single = tmp_path / "tiny.partial"
    single.mkdir()
    (single / "metrics.jsonl").write_text("")
    assert folder_state(single, "tiny").detail == SINGLE_UNCHECKPOINTED
    inner = tmp_path / "tiny-compare.partial" / "T1-s0.partial"
    inner.mkdir(parents=True)
    (inner.parent / "sweep.json").write_text("{}")
    assert folder_state(inner, "T1-s0").detail == "before its first checkpoint: runs again"


def test_a_single_run_stopped_at_once_in_its_first_round_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A second signal in round 1 said "nothing to resume" and left ``NAME.partial`` (its config, an empty metrics.jsonl,
    its partition), which ``chillfl resume`` refuses and which pushed the next run of the name to ``NAME-2``."""
    import chillfl.executors.sequential as sequential

    train, calls = sequential.train_job, []

    def stopped_twice(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 1:
            signal.raise_signal(signal.SIGINT)  # stop after this round
            signal.raise_signal(signal.SIGTERM)  # another signal: at once
        return train(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sequential, "train_job", stopped_twice)
    config = tmp_path / "tiny.toml"
    config.write_text(TINY.format(out=(tmp_path / "out").as_posix()))
    code = cli.main(["run", str(config), "-q"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1] == "chillfl: interrupted by a second SIGTERM during round 1; no checkpoint had been written yet, so there is nothing to resume", lines
    assert code == 128 + signal.SIGTERM
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_a_comparisons_run_stopped_at_once_in_its_first_round_runs_again_on_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Its folder removed (nothing in it), the stopped run of a comparison is run again by ``chillfl resume``."""
    import chillfl.executors.sequential as sequential

    train, calls = sequential.train_job, []

    def stopped_twice(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 1:
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGTERM)
        return train(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sequential, "train_job", stopped_twice)
    config = tmp_path / "tiny.toml"
    config.write_text(TINY.format(out=(tmp_path / "out").as_posix()))
    assert cli.main(["compare", str(config), "-q", "--grid", "client.lr=0.05,0.1"]) == 128 + signal.SIGTERM
    partial = tmp_path / "out" / "tiny-compare.partial"
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "; that run had no checkpoint yet: resuming runs it again; resume with: chillfl resume " in line, line
    assert cli.main(["resume", str(partial), "-q"]) == 0, capsys.readouterr().err
    assert (tmp_path / "out" / "tiny-compare" / "table.json").is_file()
