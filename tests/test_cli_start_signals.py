"""A stop signal at any command's start is one true line and 128 + the signal, never lost, never a traceback.

Forced deterministically in a child process (no timing): an import hook raises the signal inside the first import of
torch and drops its exception, as torch's own code did with one (Python 3.11 reports an exception raised in a
``__set_name__`` as a RuntimeError, which an ``except Exception`` takes). Only ``run``, ``compare`` and ``resume`` held
the signals while importing, and only around their runner's import: torch itself was imported before, unheld, by
the config's resolution (``run``, ``compare``), ``is_sweep`` (``resume``), or the command's own first import
(``reproduce``, ``data show``, ``report``, ``status``, ``list``) or parser (``analyze``). The signal was lost there: the
command went on and exited 0 (or 2 on its own error).

And where a comparison (or the demo) starts, before its folder exists: the line said "unfinished results are left in
*.partial folders", of which there was none; a signal's exception that a package wrapped in another (the RuntimeError
above) there ended the command in a traceback, exit 1.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each test starts a child that imports torch (5-10 s, more under load): left out of the fast loop, run by CI

CONFIG = """\
name = "early"
seed = 1
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
rounds = 2
[client]
epochs = 1
batch_size = 32
lr = 0.05
[eval]
client_split_size = 20
"""

CHILD = textwrap.dedent(
    """
    import importlib.abc, json, signal, sys

    where, signum, command = sys.argv[1], signal.Signals[sys.argv[2]], json.loads(sys.argv[3])


    class DroppingImport(importlib.abc.MetaPathFinder):
        '''The signal lands inside torch's first import, whose code drops its exception.'''

        def __init__(self, package):
            self.package = package

        def find_spec(self, name, path=None, target=None):
            if name == self.package:
                sys.meta_path.remove(self)
                try:
                    signal.raise_signal(signum)
                except BaseException:
                    pass
            return None


    def wrapping(build):
        '''The signal lands where a comparison builds its runs' parts, and a package wraps its exception.'''

        def building(*args, **kwargs):
            try:
                signal.raise_signal(signum)
            except BaseException as exc:
                raise RuntimeError("Error calling __set_name__ on '_Thing' instance 'x' in 'Thing'") from exc
            return build(*args, **kwargs)

        return building


    def claimed(claim):
        '''The signal lands just after the comparison's folder is made, before its writing began.'''

        def claiming(*args, **kwargs):
            out = claim(*args, **kwargs)
            signal.raise_signal(signum)
            return out

        return claiming


    own = where.endswith("+own")  # as the chillfl command calls main: it owns the process (imports the runner, freezes)
    where = where.removesuffix("+own")
    if where == "torch_import":
        assert "torch" not in sys.modules
        sys.meta_path.insert(0, DroppingImport("torch"))
    elif where.startswith("import:"):  # a package that a dataset's loader imports lazily (chillfl.extras.need)
        import chillfl.sweeps.run

        assert where[7:] not in sys.modules
        sys.meta_path.insert(0, DroppingImport(where[7:]))
    else:
        import chillfl.runner, chillfl.sweeps.run

        if where == "claimed":
            chillfl.sweeps.run.claim_dir = claimed(chillfl.sweeps.run.claim_dir)
        elif where == "run_built":
            chillfl.runner.build_experiment = wrapping(chillfl.runner.build_experiment)
        elif where == "second_run":  # a comparison's first run ran; the signal lands while its second is built
            build, calls = chillfl.runner.build_experiment, []

            def second(*args, **kwargs):
                calls.append(1)
                return (wrapping(build) if len(calls) == 2 else build)(*args, **kwargs)

            chillfl.runner.build_experiment = second
        elif where == "run_started":
            chillfl.runner._write_partition = wrapping(chillfl.runner._write_partition)
        elif where == "checking":
            check = chillfl.sweeps.run.check_runs

            def checking(*args, **kwargs):
                signal.raise_signal(signum)
                return check(*args, **kwargs)

            chillfl.sweeps.run.check_runs = checking
        else:
            chillfl.sweeps.run.build_experiment = wrapping(chillfl.sweeps.run.build_experiment)
    from chillfl.cli import main

    sys.exit(main(command, own_process=own))
    """
)

NOTHING = "chillfl: interrupted; nothing was written"
RUN = "chillfl: interrupted; the run had not started: nothing was written, nothing to resume"
COMPARISON = "chillfl: interrupted; the comparison had not started: nothing was written, nothing to resume"


def _child(tmp_path: Path, where: str, signum: signal.Signals, command: list[str], config: str = CONFIG) -> tuple[int, list[str]]:
    import json

    (tmp_path / "early.toml").write_text(config.format(out=(tmp_path / "out").as_posix()))
    argv = [a.replace("CONFIG", str(tmp_path / "early.toml")).replace("TMP", str(tmp_path)) for a in command]
    proc = subprocess.run([sys.executable, "-c", CHILD, where, signum.name, json.dumps(argv)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stderr.strip().splitlines()


@pytest.mark.parametrize(("command", "said"), [
    (["run", "CONFIG", "-q"], RUN),
    (["compare", "CONFIG", "-q", "--grid", "client.lr=0.05,0.1"], COMPARISON),
    (["reproduce", "flexchill", "--seeds", "0", "--out", "TMP/out", "--dry-run"], NOTHING),
    (["data", "show", "CONFIG", "-o", "TMP/out/heat.png"], NOTHING),
    (["report", "TMP/none", "-o", "TMP/out/report.html"], NOTHING),
    (["analyze", "calibration", "TMP/none"], NOTHING),
], ids=["run", "compare", "reproduce", "data-show", "report", "analyze"])
def test_a_signal_inside_torchs_import_stops_the_command_with_its_line(tmp_path: Path, command: list[str], said: str) -> None:
    code, lines = _child(tmp_path, "torch_import", signal.SIGTERM, command)
    assert lines == [said], lines
    assert code == 128 + signal.SIGTERM, lines
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("command", "said"), [
    (["run", "CONFIG", "-q"], RUN), (["compare", "CONFIG", "-q", "--grid", "client.lr=0.05,0.1"], COMPARISON), (["resume", "TMP/none.partial"], NOTHING),
], ids=["run", "compare", "resume"])
def test_a_signal_inside_torchs_import_of_the_chillfl_command_is_its_line(tmp_path: Path, command: list[str], said: str) -> None:
    """The command (``entry``) imports the runner before parsing, to freeze it: that import was outside the held
    start-up, and a Ctrl-C there ended in a traceback from inside torch's import. ``run`` and ``compare`` say what had
    not started, as they do later in their start-up (usage.md); it said only "nothing was written"."""
    code, lines = _child(tmp_path, "torch_import+own", signal.SIGINT, command)
    assert lines == [said], lines  # before its arguments are read: nothing was written
    assert code == 128 + signal.SIGINT, lines


@pytest.mark.parametrize("command", [["resume", "TMP/none.partial"], ["status", "TMP/none"], ["list"]], ids=["resume", "status", "list"])
def test_a_ctrl_c_inside_torchs_import_is_not_lost_by_the_other_commands(tmp_path: Path, command: list[str]) -> None:
    code, lines = _child(tmp_path, "torch_import", signal.SIGINT, command)
    assert len(lines) == 1 and lines[0].startswith("chillfl: interrupted"), lines
    assert code == 128 + signal.SIGINT, lines


@pytest.mark.parametrize("command", [["compare", "CONFIG", "-q", "--grid", "client.lr=0.05,0.1"], ["run", "-q", "--out", "TMP/out"]], ids=["compare", "demo"])
def test_a_signal_before_a_comparisons_folder_exists_says_nothing_was_written(tmp_path: Path, command: list[str]) -> None:
    code, lines = _child(tmp_path, "checking", signal.SIGTERM, command)
    assert lines[-1] == COMPARISON, lines  # the demo says what it runs first
    assert code == 128 + signal.SIGTERM, lines
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_wrapped_signal_while_a_comparisons_runs_are_built_is_no_traceback(tmp_path: Path) -> None:
    code, lines = _child(tmp_path, "wrapped", signal.SIGTERM, ["compare", "CONFIG", "-q", "--grid", "client.lr=0.05,0.1"])
    assert lines == [COMPARISON], lines
    assert code == 128 + signal.SIGTERM, lines
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_signal_just_after_a_comparisons_folder_is_made_leaves_no_folder(tmp_path: Path) -> None:
    """Between the ``mkdir`` of ``NAME-compare.partial`` and the ``try`` that removes it again, a signal left the folder
    empty: nothing a resume could go on with, and the next comparison of the name went to ``NAME-compare-2``."""
    code, lines = _child(tmp_path, "claimed", signal.SIGTERM, ["compare", "CONFIG", "-q", "--grid", "client.lr=0.05,0.1"])
    assert lines == [COMPARISON], lines
    assert code == 128 + signal.SIGTERM, lines
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("where", ["run_built", "run_started"])
def test_a_wrapped_signal_while_a_single_run_starts_is_its_line_and_leaves_nothing(tmp_path: Path, where: str) -> None:
    """A signal's exception that a package wrapped (the RuntimeError above) while one run was built, or while its new
    folder was filled: the line was the generic "unfinished results are left in *.partial folders", and once the
    folder was made its ``.partial`` (config and partition only, nothing to resume) was left behind."""
    code, lines = _child(tmp_path, where, signal.SIGTERM, ["run", "CONFIG", "-q"])
    assert lines == [RUN], lines
    assert code == 128 + signal.SIGTERM, lines
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_wrapped_signal_while_a_comparisons_next_run_is_built_stops_it_resumably(tmp_path: Path) -> None:
    """The comparison took it for a failure of that run ("failed (RuntimeError: ...); the comparison goes on"): the
    signal was lost, and the run was recorded as failed in the table."""
    code, lines = _child(tmp_path, "second_run", signal.SIGTERM, ["compare", "CONFIG", "-q", "--grid", "client.lr=0.05,0.1"])
    partial = tmp_path / "out" / "early-compare.partial"
    assert lines == [f"chillfl: interrupted; resume with: chillfl resume {partial}"], lines
    assert code == 128 + signal.SIGTERM, lines
    assert sorted(p.name for p in partial.iterdir() if p.is_dir()) == ["lr0.05"]  # the first run, finished; the second never made


@pytest.mark.parametrize(("dataset", "package"), [("mnist1d", "mnist1d"), ("flwr_femnist", "pyarrow")])
def test_a_signal_inside_a_datasets_lazy_import_is_not_lost(tmp_path: Path, dataset: str, package: str) -> None:
    """A comparison's check of its runs imports a dataset's optional package (``mnist1d``; ``pyarrow`` for the LEAF
    parquet files) on first use, outside the command's held start: a signal whose exception the package's code drops
    was lost there (the dry run went on and exited 0). Now imported with the signals held (:func:`chillfl.extras.need`)."""
    config = CONFIG.replace('[dataset]\nname = "digits"', f'[dataset]\nname = "{dataset}"')
    code, lines = _child(tmp_path, f"import:{package}", signal.SIGTERM, ["compare", "CONFIG", "-q", "--grid", "client.lr=0.05,0.1", "--dry-run"], config)
    assert lines == [COMPARISON], lines
    assert code == 128 + signal.SIGTERM, lines
    assert not (tmp_path / "out").exists()


PROBE = textwrap.dedent(
    """
    import sys
    import chillfl.sweeps.run
    from chillfl.cli import main

    check, imported = chillfl.sweeps.run.check_runs, []

    def checking(*args, **kwargs):
        before = set(sys.modules)
        try:
            return check(*args, **kwargs)
        finally:
            imported.extend(sorted(m for m in set(sys.modules) - before if m.split(".")[0] != "chillfl"))

    chillfl.sweeps.run.check_runs = checking
    code = main(["compare", sys.argv[1], "-q", "--grid", "client.lr=0.05,0.1", "--dry-run"])
    print("IMPORTED=" + ",".join(imported), file=sys.stderr)
    sys.exit(code)
    """
)


def test_a_comparisons_check_imports_no_package_outside_the_held_start(tmp_path: Path) -> None:
    """Where a comparison builds its runs' parts (seconds after it starts, the CLI's own handlers raising a signal's
    exception), the first imports of numpy's lazy submodules (``np.random``, ``np.ma`` by ``np.unique``) and of
    ``torch.utils._device`` (``with torch.device("meta")``) were a window of the same kind as torch's import: a signal's
    exception that lands inside a package's import can be dropped or wrapped (once: exit 1, a traceback). They are
    imported with the modules that use them now, under the command's held start."""
    (tmp_path / "early.toml").write_text(CONFIG.format(out=(tmp_path / "out").as_posix()))
    proc = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "early.toml")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if x.startswith("IMPORTED="))
    assert line == "IMPORTED=", line


DRY_CHILD = textwrap.dedent(
    """
    import signal, sys
    import chillfl.experiment
    from chillfl.cli import main

    check = chillfl.experiment.check_config

    def checking(*args, **kwargs):
        signal.raise_signal(signal.SIGTERM)  # while a dry run checks the run's parts
        return check(*args, **kwargs)

    chillfl.experiment.check_config = checking
    sys.exit(main(["run", sys.argv[1], "--dry-run"]))
    """
)


def test_a_signal_during_a_dry_run_says_nothing_was_written(tmp_path: Path) -> None:
    """It said "unfinished results are left in *.partial folders": a dry run writes none."""
    (tmp_path / "early.toml").write_text(CONFIG.format(out=(tmp_path / "out").as_posix()))
    proc = subprocess.run([sys.executable, "-c", DRY_CHILD, str(tmp_path / "early.toml")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.stderr.strip().splitlines() == [NOTHING], proc.stderr
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert not (tmp_path / "out").exists()
