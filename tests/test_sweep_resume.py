"""An interrupted comparison resumes as a whole: ``chillfl resume results/NAME-compare.partial`` (chillfl.sweeps).

Finished runs are read back, the stopped one resumes from its checkpoint, the
rest run; the table and every run's metrics equal an uninterrupted sweep's,
byte for byte (one machine, one torch build).
"""

from __future__ import annotations

import json
import os
import shutil
from chillfl.config import tomllib  # tomli on Python 3.10
from pathlib import Path
from typing import Any

import pytest

import chillfl.sweeps.run as sweep  # where the comparison's runs start
from chillfl.cli import main
from chillfl.storage.results import RunLock
from resume_cases import SigintAfter

pytestmark = pytest.mark.slow  # comparisons interrupted and resumed; `pytest -m "not slow"` leaves it out

ARGS = ["--grid", "temperature=1,0.5", "--seeds", "0,1", "-q", "federation.num_clients=4", "federation.clients_per_round=2", "federation.rounds=3",
        "eval.clients=none", "name=sw"]


def _compare(out: Path, *extra: str) -> int:
    """A 4-run comparison (2 variants x 2 seeds, 3 rounds each) of the default config into ``out``."""
    config = out / "sw.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("")
    return main(["compare", str(config), *ARGS, f"out_dir={out}", *extra])


def _interrupt(monkeypatch: pytest.MonkeyPatch, run: int, after_round: int) -> dict[str, int]:
    """Make the sweep's ``run``-th fresh run stop after ``after_round`` (once); count fresh runs and resumes."""
    calls = {"run": 0, "resume": 0}
    real_run = sweep.run_experiment
    armed = [True]

    def run_experiment(cfg: Any, **kw: Any) -> Any:
        calls["run"] += 1
        if calls["run"] == run and armed[0]:
            armed[0] = False
            kw["callbacks"] = [SigintAfter(after_round)]
        return real_run(cfg, **kw)

    import chillfl.runner as runner

    real_resume = runner.resume_experiment

    def resume_experiment(folder: Any, **kw: Any) -> Any:
        calls["resume"] += 1
        return real_resume(folder, **kw)

    monkeypatch.setattr(sweep, "run_experiment", run_experiment)
    monkeypatch.setattr(runner, "resume_experiment", resume_experiment)
    return calls


def _files(folder: Path) -> dict[str, bytes]:
    """The comparison's table and every run's metrics and summary (its wall time aside), by relative path."""
    out = {name: (folder / name).read_bytes() for name in ("table.md", "table.json")}
    for run in sorted(p for p in folder.iterdir() if p.is_dir()):
        out[f"{run.name}/metrics.jsonl"] = (run / "metrics.jsonl").read_bytes()
        summary = json.loads((run / "summary.json").read_text())
        summary.pop("wall_time_s")
        out[f"{run.name}/summary.json"] = json.dumps(summary, sort_keys=True).encode()
    return out


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("whole")
    assert _compare(out) == 0
    return _files(out / "sw-compare")


def test_an_interrupted_comparison_resumes_to_the_uninterrupted_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                                       uninterrupted: dict[str, bytes]) -> None:
    calls = _interrupt(monkeypatch, run=3, after_round=2)
    assert _compare(tmp_path) == 130
    partial = tmp_path / "sw-compare.partial"
    err = capsys.readouterr().err
    assert f"resume with: chillfl resume {partial}" in err, err  # the comparison's folder, not the stopped run's
    runs = sorted(p.name for p in partial.iterdir() if p.is_dir())
    assert len(runs) == 3 and sum(r.endswith(".partial") for r in runs) == 1  # two finished, the third stopped after round 2
    stopped = next(r for r in runs if r.endswith(".partial")).removesuffix(".partial")
    assert f"chillfl: run {stopped} interrupted by SIGINT after round 2; resume with: chillfl resume {partial}" in err.splitlines(), err  # which run
    calls.update(run=0)
    assert main(["resume", str(partial)]) == 0
    assert calls == {"run": 1, "resume": 1}  # two runs read back, the stopped one resumed, the last one run
    assert not partial.exists()
    assert _files(tmp_path / "sw-compare") == uninterrupted
    out, err = capsys.readouterr()
    assert "results: " + str(tmp_path / "sw-compare") in out
    assert err.count("(finished before: read back)") == 2 and "run 4 of 4" in err
    assert "other code or torch" not in err


def test_a_comparison_resumed_by_other_code_says_so_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The finished runs are read back as they ran and the stopped one's checkpoint compares its own record, but the
    runs still to run ran on the resuming code and torch unsaid: a table mixing two float paths (or a default changed
    since) passed for the uninterrupted comparison's."""
    import chillfl.sweeps.record as record

    _interrupt(monkeypatch, run=3, after_round=2)
    assert _compare(tmp_path) == 130
    capsys.readouterr()
    monkeypatch.setattr(record, "code_sha256", lambda: "0" * 64)  # chillfl's code changed since
    assert main(["resume", str(tmp_path / "sw-compare.partial"), "-q"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "other code or torch" in line]
    assert said == ["chillfl: resuming a comparison started with other code or torch (chillfl's code): its runs still to run may not be bitwise what an "
                    "uninterrupted comparison gives"]


def test_a_sweep_on_worker_processes_resumes_to_the_sequential_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       uninterrupted: dict[str, bytes]) -> None:
    """The resumed run and the rest borrow the sweep's one process pool; processes are bitwise sequential."""
    _interrupt(monkeypatch, run=2, after_round=2)
    assert _compare(tmp_path, "executor=processes") == 130
    assert main(["resume", str(tmp_path / "sw-compare.partial")]) == 0
    got = _files(tmp_path / "sw-compare")
    assert {k: v for k, v in got.items() if not k.endswith("summary.json")} == {k: v for k, v in uninterrupted.items() if not k.endswith("summary.json")}


def test_a_run_stopped_before_its_first_checkpoint_runs_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uninterrupted: dict[str, bytes]) -> None:
    _interrupt(monkeypatch, run=2, after_round=1)
    assert _compare(tmp_path) == 130
    partial = tmp_path / "sw-compare.partial"
    stopped = next(p for p in partial.iterdir() if p.name.endswith(".partial"))
    (stopped / "checkpoint.safetensors").unlink()  # as if stopped at once in round 1
    assert main(["resume", str(partial)]) == 0
    assert _files(tmp_path / "sw-compare") == uninterrupted


def test_a_diverged_run_stays_diverged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _interrupt(monkeypatch, run=2, after_round=1)
    assert _compare(tmp_path) == 130
    partial = tmp_path / "sw-compare.partial"
    first = next(p for p in sorted(partial.iterdir()) if p.is_dir() and not p.name.endswith(".partial"))
    failed = first.with_name(first.name + ".failed")
    first.rename(failed)
    (failed / "failure.json").write_text(json.dumps({"round": 2, "client": None, "what": "loss is nan", "last_checkpoint": None}))
    capsys.readouterr()
    assert main(["resume", str(partial)]) == 0
    out, err = capsys.readouterr()
    assert f"{first.name} (diverged at round 2)" in err and "diverged" in out


def test_a_corrupt_checkpoint_of_a_stopped_run_is_refused_even_with_force(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                                          uninterrupted: dict[str, bytes]) -> None:
    """One flipped bit in the stopped run's checkpoint: refused with and without --force, nothing written; the line says
    how that run starts again within the comparison, and done so, the tables are the uninterrupted ones."""
    _interrupt(monkeypatch, run=2, after_round=2)
    assert _compare(tmp_path) == 130
    partial = tmp_path / "sw-compare.partial"
    stopped = next(p for p in partial.iterdir() if p.name.endswith(".partial"))
    ckpt = stopped / "checkpoint.safetensors"
    data = bytearray(ckpt.read_bytes())
    data[-5] ^= 0x01  # one bit of the last tensor's payload
    ckpt.write_bytes(bytes(data))
    before = {str(f.relative_to(partial)): f.read_bytes() for f in sorted(partial.rglob("*")) if f.is_file()}
    capsys.readouterr()
    for force in ([], ["--force"]):
        assert main(["resume", str(partial), "-q", *force]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith(f"chillfl: error: checkpoint: {ckpt}: "), err
        assert f"remove {stopped} and `chillfl resume {partial}` runs it again" in err, err
    assert {str(f.relative_to(partial)): f.read_bytes() for f in sorted(partial.rglob("*")) if f.is_file()} == before
    shutil.rmtree(stopped)  # as the line says
    assert main(["resume", str(partial), "-q"]) == 0

    def setup_aside(files: dict[str, bytes]) -> dict[str, Any]:  # the last run's summary records the executor it ran on
        return {k: {**json.loads(v), "environment": None} if k.endswith("summary.json") else v for k, v in files.items()}

    assert setup_aside(_files(tmp_path / "sw-compare")) == setup_aside(uninterrupted)


def test_what_cannot_be_resumed_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _interrupt(monkeypatch, run=1, after_round=1)
    assert _compare(tmp_path) == 130
    partial = tmp_path / "sw-compare.partial"
    capsys.readouterr()
    lock = RunLock(partial)  # another process goes on with it
    try:
        assert main(["resume", str(partial)]) == 2
    finally:
        lock.release()
    assert capsys.readouterr().err.strip() == f"chillfl: error: run_dir: {partial} is in use by another chillfl process (a run or resume of it is going on)"
    record = json.loads((partial / "sweep.json").read_text())
    (partial / "sweep.json").write_text(json.dumps({**record, "resumable": False}))
    assert main(["resume", str(partial)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"chillfl: error: run_dir: {partial} compared a user's own data") and len(err.splitlines()) == 1
    (partial / "sweep.json").write_text(json.dumps(record))
    config = partial / "config.toml"
    config.write_text(config.read_text().replace("rounds = 3", "rounds = 4"))  # every run's config would change under the read-back runs
    assert main(["resume", str(partial)]) == 2
    assert capsys.readouterr().err.strip() == (f"chillfl: error: config.toml: {config} changed since the comparison started: "
                                               "federation.rounds: 3 -> 4; `chillfl resume --force` resumes with it as it is now")  # named, as a run's resume does
    record.pop("config_toml")  # a sweep.json of an older chillfl: the line cannot name the change
    (partial / "sweep.json").write_text(json.dumps(record))
    assert main(["resume", str(partial)]) == 2
    assert capsys.readouterr().err.strip() == (f"chillfl: error: config.toml: {config} changed since the comparison started; "
                                               "`chillfl resume --force` resumes with it as it is now")
    done = tmp_path / "done-compare"
    shutil.copytree(partial, done)
    assert main(["resume", str(done)]) == 2
    assert capsys.readouterr().err.strip() == f"chillfl: error: run_dir: {done} is a finished comparison (its table is written); nothing to resume"


def test_read_back_runs_keep_their_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``resume_compare`` returns each read-back run's global and personal models, as the uninterrupted sweep's outputs."""
    import torch

    from chillfl.config import load_config
    from chillfl.sweeps.plan import CompareOptions
    from chillfl.sweeps.run import resume_compare, run_compare

    config = load_config(None, {"federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 2, "eval.clients": "none",
                                "algorithm.name": "ditto", "model.name": "mlp", "checkpoint.client_models": True, "name": "dt", "out_dir": str(tmp_path / "a")})
    grid, options = ["temperature=1,0.5"], CompareOptions(seeds=[0])
    whole = run_compare(config, grid, progress=False, options=options)
    _interrupt(monkeypatch, run=2, after_round=1)
    with pytest.raises(Exception, match="interrupted by SIGINT"):
        run_compare(config.with_overrides({"out_dir": str(tmp_path / "b")}), grid, progress=False, options=options)
    resumed = resume_compare(tmp_path / "b" / "dt-compare.partial", progress=False)
    assert resumed.table == whole.table and list(resumed.outputs) == list(whole.outputs)
    for label, out in whole.outputs.items():
        got = resumed.outputs[label]
        assert got.records == out.records and out.model_state is not None and got.model_state is not None
        assert all(torch.equal(got.model_state[k], v) for k, v in out.model_state.items())
        assert sorted(got.client_states) == sorted(out.client_states) != []
        assert all(torch.equal(got.client_states[c][k], v) for c, m in out.client_states.items() for k, v in m.items())


@pytest.mark.parametrize("locked", ["folder", "parent"])
def test_a_comparison_folder_that_cannot_be_written_is_refused_before_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], locked: str
) -> None:
    """Read-only (``os.access`` stands in: tests run as root), the resume ran the remaining runs and failed at the
    end, renaming the folder; it is refused in one line before anything runs, as a run folder is."""
    _interrupt(monkeypatch, run=1, after_round=1)
    assert _compare(tmp_path) == 130
    partial = tmp_path / "sw-compare.partial"
    before = sorted(p.name for p in partial.rglob("*"))
    target = partial if locked == "folder" else tmp_path
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path) == target else real_access(path, mode))
    capsys.readouterr()
    assert main(["resume", str(partial), "-q"]) == 2
    assert capsys.readouterr().err.strip() == f"chillfl: error: run_dir: {target} is not writable by this user"
    assert sorted(p.name for p in partial.rglob("*")) == before


def test_resume_dot_from_inside_the_comparison_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uninterrupted: dict[str, bytes]) -> None:
    """``cd results/sw-compare.partial && chillfl resume .``: was refused as "a finished comparison" (``Path(".")``
    has no ``.partial`` in its name)."""
    _interrupt(monkeypatch, run=2, after_round=1)
    assert _compare(tmp_path) == 130
    monkeypatch.chdir(tmp_path / "sw-compare.partial")
    assert main(["resume", ".", "-q"]) == 0
    assert _files(tmp_path / "sw-compare") == uninterrupted


# relative start and an absolute resume with a trailing slash; the reverse; a resume through a link to results/
@pytest.mark.parametrize("started, resumed", [("results", "{abs}/results/sw-compare.partial/"), ("{abs}/results", "results/sw-compare.partial"), ("results", "alias/sw-compare.partial")])
def test_every_saved_config_names_the_finished_folder_whatever_spelling_resumed_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: str, resumed: str) -> None:
    """A resume typed as another spelling of the ``.partial`` path than the start's left the runs that started before it
    naming the ``.partial`` folder as their ``out_dir`` (an exact string match), a folder gone once the comparison ends."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "alias").symlink_to(tmp_path / "results")
    calls = _interrupt(monkeypatch, run=3, after_round=2)
    (tmp_path / "sw.toml").write_text("")
    assert main(["compare", "sw.toml", *ARGS, f"out_dir={started.format(abs=tmp_path)}"]) == 130
    calls.update(run=0)
    assert main(["resume", resumed.format(abs=tmp_path)]) == 0
    assert calls == {"run": 1, "resume": 1}  # two runs had ended, the third resumes, the fourth starts under the resume's spelling
    final = tmp_path / "results" / "sw-compare"
    saved = {p.parent.name: tomllib.loads(p.read_text())["out_dir"] for p in final.glob("*/config.toml")}
    assert len(saved) == 4
    assert all(os.path.exists(out_dir) and os.path.samefile(out_dir, final) for out_dir in saved.values()), saved  # as spelled (relative: to tmp_path)


def test_a_stopped_comparison_moves_to_another_executor_of_its_float_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str], uninterrupted: dict[str, bytes]) -> None:
    """A run's folder takes an edit of ``executor`` alone between sequential, processes and ray without --force (the same
    float path, bitwise); a comparison's folder refused it (backends 5). It resumes now, to the uninterrupted tables;
    the same edit beside another one, or a move to vectorized, is still refused."""
    _interrupt(monkeypatch, run=3, after_round=2)
    assert _compare(tmp_path) == 130
    partial = tmp_path / "sw-compare.partial"
    config = partial / "config.toml"
    text = config.read_text()
    assert 'executor = "sequential"' in text
    for other in (text.replace('executor = "sequential"', 'executor = "vectorized"'),
                  text.replace('executor = "sequential"', 'executor = "processes"').replace("rounds = 3", "rounds = 4")):
        config.write_text(other)
        capsys.readouterr()
        assert main(["resume", str(partial), "-q"]) == 2
        assert "changed since the comparison started" in capsys.readouterr().err
    config.write_text(text.replace('executor = "sequential"', 'executor = "processes"'))
    assert main(["resume", str(partial), "-q"]) == 0

    def setup_aside(files: dict[str, bytes]) -> dict[str, Any]:  # the last run's summary records the executor it ran on
        return {k: {**json.loads(v), "environment": None} if k.endswith("summary.json") else v for k, v in files.items()}

    assert setup_aside(_files(tmp_path / "sw-compare")) == setup_aside(uninterrupted)
