"""A SIGTERM that reaches ``chillfl`` where no run holds the signals still ends in one true line, never a silent kill.

Each window is forced deterministically in a child process by wrapping the code at its edge (the start-up's other
windows, and a comparison's, are in ``test_cli_start_signals.py``):

* after an interrupted run gave its handlers back, while its ``RunInterrupted`` unwinds to the CLI's line;
* before any run started (building the experiment);
* after the last round, while the run writes its results (its figures): the run completes, says so, and the
  signal then ends the command as one between a comparison's runs does (before, it said "stopping after this
  round" and exited 0, and a comparison went on with its next run); a single run's line names its complete
  folder (before, it said "unfinished results are left in *.partial folders" of a folder that was final);
* after the run returned, while its table is printed: the same line.

Before the CLI held the signals itself, SIGTERM's default killed the process in each: exit -15, nothing said.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

CONFIG = """\
name = "late"
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
rounds = 4
[client]
epochs = 1
batch_size = 32
lr = 0.05
[eval]
client_split_size = 20
[checkpoint]
every = 1
"""

CHILD = textwrap.dedent(
    """
    import signal, sys
    import chillfl.experiment, chillfl.runner
    from chillfl.cli import main

    window, config = sys.argv[1], sys.argv[2]
    command = ["compare", config, "-q", "--grid", "client.lr=0.05,0.1"] if window == "compare_plots" else ["run", config, "-q"]
    if window == "after_run":
        enter, exit_ = chillfl.runner._Signals.__enter__, chillfl.runner._Signals.__exit__

        def entered(self):
            out = enter(self)
            signal.raise_signal(signal.SIGTERM)  # the first signal: stop after round 1
            return out

        def exited(self, *exc):
            exit_(self, *exc)  # the run's handlers are given back ...
            signal.raise_signal(signal.SIGTERM)  # ... and a second SIGTERM lands while RunInterrupted unwinds
            signal.raise_signal(signal.SIGTERM)

        chillfl.runner._Signals.__enter__, chillfl.runner._Signals.__exit__ = entered, exited
    elif window in ("plots", "compare_plots"):
        plots = chillfl.runner._plots

        def plotting(*args, **kwargs):
            signal.raise_signal(signal.SIGTERM)  # the rounds are done: the run writes its figures
            signal.raise_signal(signal.SIGTERM)
            return plots(*args, **kwargs)

        chillfl.runner._plots = plotting
    elif window == "resume_plots":  # stopped after round 1, then resumed: SIGTERM while the resumed run writes its figures
        enter, plots = chillfl.runner._Signals.__enter__, chillfl.runner._plots

        def stop_at_once(self):
            out = enter(self)
            signal.raise_signal(signal.SIGTERM)
            return out

        def plotting(*args, **kwargs):
            signal.raise_signal(signal.SIGTERM)
            return plots(*args, **kwargs)

        chillfl.runner._Signals.__enter__ = stop_at_once
        main(command)
        chillfl.runner._Signals.__enter__, chillfl.runner._plots = enter, plotting
        command = ["resume", config.replace("late.toml", "out/late.partial"), "-q"]
    elif window in ("last_round", "repeated"):  # SIGTERM during the last round (4 of 4), or delivered twice during round 2
        rounds_of = chillfl.runner.run_rounds

        def rounds(*args, **kwargs):
            for record in rounds_of(*args, **kwargs):
                if record["round"] == (4 if window == "last_round" else 2):
                    signal.raise_signal(signal.SIGTERM)
                    if window == "repeated":
                        signal.raise_signal(signal.SIGTERM)  # GNU timeout's copy to the process group
                yield record

        chillfl.runner.run_rounds = rounds
    elif window == "table":
        import chillfl.cli

        summary = chillfl.cli._print_summary

        def printing(*args, **kwargs):
            signal.raise_signal(signal.SIGTERM)  # the run returned, its folder final: the CLI prints its table
            return summary(*args, **kwargs)

        chillfl.cli._print_summary = printing
    elif window == "loading":  # start-up, before the run is built: reading the config (and importing the runner)
        import chillfl.cli

        load = chillfl.cli._load

        def loading(*args, **kwargs):
            signal.raise_signal(signal.SIGTERM)
            return load(*args, **kwargs)

        chillfl.cli._load = loading
    else:
        build = chillfl.experiment.build_experiment

        def building(*args, **kwargs):
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGTERM)
            return build(*args, **kwargs)

        chillfl.experiment.build_experiment = chillfl.runner.build_experiment = building
    sys.exit(main(command))
    """
)


def _run(tmp_path: Path, window: str) -> tuple[int, list[str]]:
    config = tmp_path / "late.toml"
    config.write_text(CONFIG.format(out=(tmp_path / "out").as_posix()))
    proc = subprocess.run([sys.executable, "-c", CHILD, window, str(config)], capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stderr.strip().splitlines()


def test_a_sigterm_while_an_interrupted_run_unwinds_still_says_the_runs_line(tmp_path: Path) -> None:
    code, lines = _run(tmp_path, "after_run")
    assert code == 128 + signal.SIGTERM, lines
    assert lines[-1] == f"chillfl: interrupted by SIGTERM after round 1; resume with: chillfl resume {tmp_path / 'out' / 'late.partial'}", lines
    assert (tmp_path / "out" / "late.partial" / "checkpoint.safetensors").exists()


def test_a_sigterm_before_the_run_starts_is_one_line_and_exit_143(tmp_path: Path) -> None:
    code, lines = _run(tmp_path, "before_run")
    assert code == 128 + signal.SIGTERM, lines
    # it said "unfinished results are left in *.partial folders": there is none, the run had not started
    assert lines == ["chillfl: interrupted; the run had not started: nothing was written, nothing to resume"]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_sigterm_while_the_command_starts_up_says_the_run_had_not_started(tmp_path: Path) -> None:
    """Start-up before the run is built (reading the config, importing the runner: seconds of a `chillfl run`'s first
    ones) said "unfinished results are left in *.partial folders", of which there is none; docs/usage.md promises this."""
    code, lines = _run(tmp_path, "loading")
    assert code == 128 + signal.SIGTERM, lines
    assert lines == ["chillfl: interrupted; the run had not started: nothing was written, nothing to resume"]
    assert not (tmp_path / "out").exists()


def test_a_sigterm_while_the_run_writes_its_results_completes_the_run_then_stops_the_command(tmp_path: Path) -> None:
    code, lines = _run(tmp_path, "plots")
    final = tmp_path / "out" / "late"
    assert (final / "summary.json").is_file() and not (final / "checkpoint.safetensors").exists()  # complete, not resumable
    assert not (tmp_path / "out" / "late.partial").exists()
    assert len((final / "metrics.jsonl").read_text().splitlines()) == 4
    assert not any("stopping after this round" in line for line in lines), lines
    # it said "unfinished results are left in *.partial folders": the folder is complete, and named
    assert lines == [
        "chillfl: SIGTERM: the run has done its rounds; it stops once its results are written",
        f"chillfl: interrupted; the run had completed: its results are in {final}",
    ], lines
    assert code == 128 + signal.SIGTERM, lines


def test_a_sigterm_during_the_last_round_completes_the_run_then_stops_the_command(tmp_path: Path) -> None:
    """It stopped "after round 4" of 4, leaving a ``.partial`` folder (resume only wrote the summary) of a run whose every
    round had run."""
    code, lines = _run(tmp_path, "last_round")
    final = tmp_path / "out" / "late"
    assert (final / "summary.json").is_file() and not (tmp_path / "out" / "late.partial").exists()
    assert len((final / "metrics.jsonl").read_text().splitlines()) == 4
    assert lines == [
        "chillfl: SIGTERM: stopping after this round (a second one stops at once)",
        "chillfl: SIGTERM: that was the last round; the run stops once its results are written",
        f"chillfl: interrupted; the run had completed: its results are in {final}",
    ], lines
    assert code == 128 + signal.SIGTERM, lines


def test_one_sigterm_delivered_twice_stops_the_run_after_its_round(tmp_path: Path) -> None:
    """GNU ``timeout`` signals the command, then its process group: the copy stopped the run at once ("a second SIGTERM
    during round 2"), abandoning the round."""
    code, lines = _run(tmp_path, "repeated")
    assert lines == [
        "chillfl: SIGTERM: stopping after this round (a second one stops at once)",
        f"chillfl: interrupted by SIGTERM after round 2; resume with: chillfl resume {tmp_path / 'out' / 'late.partial'}",
    ], lines
    assert code == 128 + signal.SIGTERM, lines


def test_a_sigterm_while_a_resumed_run_writes_its_results_names_its_complete_folder(tmp_path: Path) -> None:
    code, lines = _run(tmp_path, "resume_plots")
    final = tmp_path / "out" / "late"
    assert (final / "summary.json").is_file() and not (tmp_path / "out" / "late.partial").exists()
    assert lines[-1] == f"chillfl: interrupted; the run had completed: its results are in {final}", lines
    assert code == 128 + signal.SIGTERM, lines


def test_a_sigterm_while_the_runs_table_is_printed_names_the_complete_folder(tmp_path: Path) -> None:
    code, lines = _run(tmp_path, "table")
    final = tmp_path / "out" / "late"
    assert (final / "summary.json").is_file() and not (tmp_path / "out" / "late.partial").exists()
    assert lines == [f"chillfl: interrupted; the run had completed: its results are in {final}"], lines
    assert code == 128 + signal.SIGTERM, lines


def test_a_sigterm_while_a_comparisons_run_writes_its_results_stops_the_comparison(tmp_path: Path) -> None:
    """The first run completes; the comparison runs no other and stays resumable (before: it went on, exit 0)."""
    code, lines = _run(tmp_path, "compare_plots")
    assert code == 128 + signal.SIGTERM, lines
    assert lines[0] == "chillfl: SIGTERM: the run has done its rounds; it stops once its results are written", lines
    assert "stopping after this round" not in "\n".join(lines)
    partial = [p for p in (tmp_path / "out").iterdir() if p.name.endswith("-compare.partial")]
    assert len(partial) == 1, list((tmp_path / "out").iterdir())
    finished = [p for p in partial[0].rglob("summary.json")]
    assert len(finished) == 1, finished
    # the line names the comparison's folder (it said "*.partial folders (`chillfl resume FOLDER` ...)": which one?)
    assert lines[-1] == f"chillfl: interrupted; resume with: chillfl resume {partial[0]}", lines


IMPORT_CHILD = textwrap.dedent(
    """
    import importlib.abc, signal, sys
    from chillfl.cli import main


    class SwallowingImport(importlib.abc.MetaPathFinder):
        '''A SIGTERM that lands inside a third-party import whose code drops the exception: torch's import (seconds of
        a command's start) turned one into "RuntimeError: Error calling __set_name__" (Python 3.11's wrapping), and
        another time a run went on to its end, exit 0, as if no signal had come.'''

        def find_spec(self, name, path=None, target=None):
            if name == "chillfl.runner":
                try:
                    signal.raise_signal(signal.SIGTERM)
                except BaseException:
                    pass
            return None


    assert "chillfl.runner" not in sys.modules and "torch" not in sys.modules
    sys.meta_path.insert(0, SwallowingImport())
    sys.exit(main(["run", sys.argv[1], "-q"]))
    """
)


def test_a_sigterm_inside_the_start_up_imports_is_not_lost(tmp_path: Path) -> None:
    config = tmp_path / "late.toml"
    config.write_text(CONFIG.format(out=(tmp_path / "out").as_posix()))
    proc = subprocess.run([sys.executable, "-c", IMPORT_CHILD, str(config)], capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert proc.stderr.strip().splitlines() == ["chillfl: interrupted; the run had not started: nothing was written, nothing to resume"]
    assert not (tmp_path / "out").exists()
