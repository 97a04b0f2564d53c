"""A run folder is a transaction (issue 27): locked, created atomically, never written through a link,
tamper-evident on resume, and a full disk or a torn metrics file is one line with the last checkpoint kept.

Runs are tiny (digits, an MLP, a few rounds, checkpoint every round) and in process where the
case allows; the two concurrent resumes and the creation race use real processes.
"""

from __future__ import annotations

import errno
import fcntl
import json
import multiprocessing
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.storage.checkpoint import read_checkpoint, read_state, write_atomic, write_state
from chillfl.storage.results import ResultWriter
from chillfl.runner import run_experiment
from procs import InterruptAt

ROUNDS = 6
CONFIG = {
    "name": "tx",
    "seed": 5,
    "threads": 1,
    "device": "cpu",
    "dataset": {"name": "digits"},
    "partition": {"name": "dirichlet", "alpha": 0.5},
    "model": {"name": "mlp", "hidden": [16]},
    "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": ROUNDS},
    "client": {"epochs": 1, "batch_size": 32, "lr": 0.05},
    "eval": {"client_split_size": 20},
    "checkpoint": {"every": 1},
}
ERROR = re.compile(r"^chillfl: error: (?P<field>[^:]+): ")


def write_config(folder: Path, **over: Any) -> Path:
    lines = [f'out_dir = "{folder / "out"}"']
    table = {**CONFIG, **over}
    lines += [f"{k} = {json.dumps(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for key, sub in table.items():
        if isinstance(sub, dict):
            lines.append(f"[{key}]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in sub.items()]
    path = folder / "tx.toml"
    path.write_text("\n".join(lines) + "\n")
    return path



def interrupted(tmp_path: Path, at: int = 4, **over: Any) -> Path:
    """A ``.partial`` run folder stopped after round ``at`` with its checkpoint of round ``at - 1``."""
    config = load_config(write_config(tmp_path, **over))
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, progress=False, callbacks=[InterruptAt(at)])
    partial = tmp_path / "out" / "tx.partial"
    assert read_state(partial / "checkpoint.safetensors")["round"] == at - 1
    return partial


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """metrics.jsonl of the uninterrupted run."""
    root = tmp_path_factory.mktemp("reference")
    out = run_experiment(load_config(write_config(root)), progress=False)
    assert out.folder is not None
    return (out.folder / "metrics.jsonl").read_text()


def one_error(capfd: pytest.CaptureFixture[str]) -> tuple[str, str]:
    err = capfd.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    match = ERROR.match(lines[0])
    assert match, lines[0]
    return match["field"], lines[0]


# ---------------------------------------------------------------- one process per run folder


def test_a_folder_in_use_is_refused(tmp_path: Path, capfd: pytest.CaptureFixture[str], reference: str) -> None:
    partial = interrupted(tmp_path)
    before = (partial / "metrics.jsonl").read_bytes()
    fd = os.open(partial, os.O_RDONLY)  # as a running chillfl holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(["resume", str(partial), "-q"]) == 2
        field, line = one_error(capfd)
        assert field == "run_dir" and "in use by another chillfl process" in line
        assert (partial / "metrics.jsonl").read_bytes() == before  # untouched
    finally:
        os.close(fd)
    assert main(["resume", str(partial), "-q"]) == 0  # released: it resumes
    assert (tmp_path / "out" / "tx" / "metrics.jsonl").read_text() == reference


def _chillfl(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "chillfl", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_resumes_at_once(tmp_path: Path, reference: str) -> None:
    """One resumes; the other is refused in one line (in use, or finished if it came late). It used to exit 0
    with 4 or 6 of 8 rounds in metrics.jsonl while summary.json said 8."""
    partial = interrupted(tmp_path, at=2)
    procs = [_chillfl("resume", str(partial), "-q") for _ in range(2)]
    results = [(p.wait(timeout=300), p.communicate()[1]) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    refused = next(err for code, err in results if code == 2).strip().splitlines()
    assert len(refused) == 1 and refused[0].startswith("chillfl: error: run_dir: ") and ("in use" in refused[0] or "finished" in refused[0]), refused
    final = tmp_path / "out" / "tx"
    assert (final / "metrics.jsonl").read_text() == reference
    assert json.loads((final / "summary.json").read_text())["rounds"] == ROUNDS


def _claim_many(out: str, count: int, barrier: Any, queue: Any) -> None:
    barrier.wait()
    names, errors = [], []
    for _ in range(count):
        try:
            writer = ResultWriter(out, "race")
            names.append(writer.path.name)
            writer.abort()
        except Exception as exc:  # noqa: BLE001 - reported to the test
            errors.append(f"{type(exc).__name__}: {exc}")
    queue.put((names, errors))


def test_result_folders_are_created_without_a_race(tmp_path: Path) -> None:
    """4 processes released together create 4 x 200 folders of one name: all distinct, no FileExistsError
    (a check-then-create gave 12 in 800)."""
    ctx = multiprocessing.get_context("fork")
    barrier, queue = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_claim_many, args=(str(tmp_path / "out"), 200, barrier, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    errors = [e for _, errs in results for e in errs]
    names = [n for ns, _ in results for n in ns]
    assert not errors, errors[:3]
    assert len(names) == len(set(names)) == 800


# ---------------------------------------------------------------- links


def test_planted_tmp_links_are_not_written_through(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    partial = interrupted(tmp_path)
    victims = []
    for name in ("metrics.jsonl.tmp", "checkpoint.safetensors.tmp"):
        victim = tmp_path / f"victim-{name}"
        victim.write_text("precious")
        (partial / name).symlink_to(victim)
        victims.append(victim)
    assert main(["resume", str(partial), "-q"]) == 2
    field, line = one_error(capfd)
    assert field == "run_dir" and "is a symbolic link" in line
    assert [v.read_text() for v in victims] == ["precious", "precious"]


def test_write_atomic_replaces_a_link_never_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "file.tmp").symlink_to(victim)  # a stale .tmp that is a link
    (tmp_path / "file").symlink_to(victim)  # and the target itself
    write_atomic(tmp_path / "file", b"new")
    assert victim.read_text() == "precious"
    assert not (tmp_path / "file").is_symlink() and (tmp_path / "file").read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "victim"]


@pytest.mark.parametrize(("setting", "synced"), [(None, 2), ("0", 2), ("1", 0)])
def test_write_atomic_fsyncs_the_file_and_its_folder_unless_told_not_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str | None, synced: int) -> None:
    """Two fsyncs a write (the file, then the folder holding the rename); ``CHILLFL_NO_FSYNC=1`` (the tests' own
    setting, tests/conftest.py) skips both, and the write is still the whole new file with no ``.tmp`` left."""
    real, calls = os.fsync, []
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    if setting is None:
        monkeypatch.delenv("CHILLFL_NO_FSYNC", raising=False)
    else:
        monkeypatch.setenv("CHILLFL_NO_FSYNC", setting)
    write_atomic(tmp_path / "file", b"old")
    write_atomic(tmp_path / "file", b"new")
    assert len(calls) == 2 * synced
    assert (tmp_path / "file").read_bytes() == b"new" and sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_dangling_link_at_the_final_name(tmp_path: Path, capfd: pytest.CaptureFixture[str], reference: str) -> None:
    """It used to let the whole run train, then fail at the final rename with the checkpoint deleted."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "tx").symlink_to(tmp_path / "nowhere")
    assert main(["run", str(write_config(tmp_path)), "-q"]) == 0, capfd.readouterr().err
    assert (tmp_path / "out" / "tx-2" / "metrics.jsonl").read_text() == reference
    assert os.readlink(tmp_path / "out" / "tx") == str(tmp_path / "nowhere")  # left as it was
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("where", ["write_config", "_write_partition"])
def test_a_run_interrupted_before_its_first_round_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Ctrl-C right after ``chillfl run`` started (the folder just made): the ``.partial`` left held no checkpoint,
    even no config.toml, so it could not be resumed, and the same command run again wrote ``tx-2``."""
    import chillfl.runner as runner
    from chillfl.storage.results import ResultWriter

    def interrupt(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(*((ResultWriter, where) if where == "write_config" else (runner, where)), interrupt)
    config = load_config(write_config(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, progress=False)
    assert list((tmp_path / "out").iterdir()) == []


# ---------------------------------------------------------------- edits since the checkpoint


def test_an_edited_config_is_named(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    partial = interrupted(tmp_path)
    config = partial / "config.toml"
    config.write_text(config.read_text().replace("lr = 0.05", "lr = 0.5"))
    assert main(["resume", str(partial), "-q"]) == 2
    field, line = one_error(capfd)
    assert field == "config.toml" and "client.lr: 0.05 -> 0.5" in line and "--force" in line
    assert main(["resume", str(partial), "-q", "--force"]) == 0  # accepted: resumes with the edit
    assert "lr = 0.5" in (tmp_path / "out" / "tx" / "config.toml").read_text()


def test_deleted_rounds_in_the_metrics_are_named(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    partial = interrupted(tmp_path)
    metrics = partial / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text(lines[0] + "".join(lines[2:]))  # round 2 deleted
    assert main(["resume", str(partial), "-q"]) == 2
    field, line = one_error(capfd)
    assert field == "metrics.jsonl" and "does not match the checkpoint of round 3" in line


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes: a refused resume writes nothing."""
    return {str(f.relative_to(folder)): f.read_bytes() for f in sorted(folder.rglob("*")) if f.is_file()}


def _flip(ckpt: Path, where: int) -> bytes:
    """Flip one bit of the byte at ``where`` in ``ckpt``; the intact bytes, to put back."""
    intact = ckpt.read_bytes()
    data = bytearray(intact)
    data[where] ^= 0x01
    ckpt.write_bytes(bytes(data))
    return intact


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda c: _flip(c, -5), id="payload-bit"),  # one bit of the last tensor's payload
        pytest.param(lambda c: c.write_bytes(c.read_bytes()[:-7]), id="torn"),  # its end never written
    ],
)
def test_a_corrupt_checkpoint_is_refused_even_with_force(tmp_path: Path, capfd: pytest.CaptureFixture[str], damage: Any) -> None:
    """``--force`` accepts edits the user made on purpose (config.toml, metrics.jsonl), never a checkpoint whose own
    bytes are not the ones it was written with: resumed, the run would go on from a state no round produced."""
    partial = interrupted(tmp_path)
    ckpt = partial / "checkpoint.safetensors"
    damage(ckpt)
    before = _snapshot(partial)
    for force in ([], ["--force"]):
        assert main(["resume", str(partial), "-q", *force]) == 2
        field, line = one_error(capfd)
        assert field == "checkpoint" and str(ckpt) in line and "start the run again" in line, line
        assert "--force resumes" not in line  # no advice that would not work
    assert _snapshot(partial) == before and not (tmp_path / "out" / "tx").exists()  # nothing written


@pytest.mark.parametrize("edit", ["config.toml", "metrics.jsonl"])
def test_force_accepts_an_edit_but_not_a_flipped_checkpoint(tmp_path: Path, capfd: pytest.CaptureFixture[str], edit: str) -> None:
    """An edited config.toml (or metrics.jsonl) is what --force is for, and it still resumes with it; the same edit
    with one flipped bit in the checkpoint is refused on the checkpoint, not let through with the edit."""
    partial = interrupted(tmp_path)
    file = partial / edit
    if edit == "config.toml":
        file.write_text(file.read_text().replace("lr = 0.05", "lr = 0.5"))
    else:
        lines = file.read_text().splitlines(keepends=True)
        file.write_text(lines[0] + "".join(lines[2:]))  # round 2 deleted
    ckpt = partial / "checkpoint.safetensors"
    intact = _flip(ckpt, -5)
    assert main(["resume", str(partial), "-q", "--force"]) == 2
    field, line = one_error(capfd)
    assert field == "checkpoint" and str(ckpt) in line
    ckpt.write_bytes(intact)
    assert main(["resume", str(partial), "-q", "--force"]) == 0  # accepted: resumes with the edit
    if edit == "config.toml":
        assert "lr = 0.5" in (tmp_path / "out" / "tx" / "config.toml").read_text()


# ---------------------------------------------------------------- a checkpoint that does not fit its run


def _rewrite_checkpoint(partial: Path, change: Any) -> None:
    """Change the checkpoint's state tree and write it back with its checksums valid: intact as a file, wrong as a state."""
    ckpt = partial / "checkpoint.safetensors"
    tree, run = read_checkpoint(ckpt)
    change(tree)
    write_state(ckpt, tree, run)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda t: t.pop("round"), id="no-round"),
        pytest.param(lambda t: t.__setitem__("round", "two"), id="round-a-string"),
        pytest.param(lambda t: t.__setitem__("round", -1), id="round-negative"),
        pytest.param(lambda t: t.__setitem__("round", 2.5), id="round-a-float"),
        pytest.param(lambda t: t.pop("protocol"), id="no-protocol"),
        pytest.param(lambda t: t["protocol"].clear(), id="protocol-empty"),
        pytest.param(lambda t: t.__setitem__("environment", 5), id="environment-a-number"),
    ],
)
def test_a_checkpoint_of_no_run_state_is_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str], change: Any) -> None:
    """Loading runs no code, and a checkpoint that is no run's state is refused in one line, not a traceback."""
    partial = interrupted(tmp_path)
    _rewrite_checkpoint(partial, change)
    for force in ([], ["--force"]):
        assert main(["resume", str(partial), "-q", *force]) == 2
        field, _ = one_error(capfd)
        assert field == "checkpoint"
    assert partial.is_dir() and not (tmp_path / "out" / "tx").exists()


def test_a_checkpoint_past_the_last_round_is_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Resumed at a round past ``federation.rounds`` (edited down, resumed with --force), the run ran no round and
    looked finished with fewer rounds than its config says."""
    partial = interrupted(tmp_path)
    config = partial / "config.toml"
    config.write_text(config.read_text().replace(f"rounds = {ROUNDS}", "rounds = 2"))
    assert main(["resume", str(partial), "-q", "--force"]) == 2
    field, line = one_error(capfd)
    assert field == "federation.rounds" and "round 3" in line
    assert partial.is_dir() and not (tmp_path / "out" / "tx").exists()


@pytest.mark.parametrize(
    ("edit", "to"),
    [(('name = "fedavg"', 'name = "scaffold"'), "SCAFFOLD's state"), (("hidden = [\n    16,\n]", "hidden = [\n    8,\n]"), "another model")],
    ids=["method", "model"],
)
def test_a_forced_resume_into_another_run_is_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str], edit: tuple[str, str], to: str) -> None:
    """``--force`` after the config was edited to another method or model width: the checkpoint's state does not
    fit the run config.toml now builds. It was a traceback (SCAFFOLD) or, silently, a finished run of the old
    width under a config.toml of the new one."""
    partial = interrupted(tmp_path)
    config = partial / "config.toml"
    assert edit[0] in config.read_text()
    config.write_text(config.read_text().replace(*edit))
    assert main(["resume", str(partial), "-q", "--force"]) == 2
    field, line = one_error(capfd)
    assert field == "checkpoint" and "config.toml" in line, to
    assert partial.is_dir() and not (tmp_path / "out" / "tx").exists()


@pytest.mark.parametrize("locked", ["folder", "parent"])
def test_a_run_folder_that_cannot_be_written_is_refused_before_it_runs(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, locked: str
) -> None:
    """A ``.partial`` copied from a colleague's read-only results: the resume ran every round and failed only at the
    rename, exit 1, saying "free space". ``os.access`` stands in for the permissions (tests run as root)."""
    partial = interrupted(tmp_path)
    before = {p.name: p.read_bytes() for p in partial.iterdir()}
    target = partial if locked == "folder" else partial.parent
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path) == target else real_access(path, mode))
    assert main(["resume", str(partial), "-q"]) == 2
    field, line = one_error(capfd)
    assert field == "run_dir" and str(target) in line
    assert {p.name: p.read_bytes() for p in partial.iterdir()} == before


def test_resume_dot_from_inside_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reference: str) -> None:
    """``cd results/tx.partial && chillfl resume .``: ``Path(".")`` has no name, and the ``.partial`` check raised
    a ValueError traceback."""
    partial = interrupted(tmp_path)
    monkeypatch.chdir(partial)
    assert main(["resume", ".", "-q"]) == 0
    assert (tmp_path / "out" / "tx" / "metrics.jsonl").read_text() == reference


def test_a_forced_resume_with_fewer_clients_is_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """``federation.num_clients`` edited down, resumed with --force: FedProto's checkpoint holds the models of
    clients the run no longer has, and its first evaluation failed with an IndexError traceback."""
    partial = interrupted(tmp_path, prototypes={"method": "fedproto"})
    config = partial / "config.toml"
    assert "num_clients = 4" in config.read_text()
    config.write_text(config.read_text().replace("num_clients = 4", "num_clients = 2"))
    assert main(["resume", str(partial), "-q", "--force"]) == 2
    field, line = one_error(capfd)
    assert field == "checkpoint" and "client 3" in line and "num_clients = 2" in line
    assert partial.is_dir() and not (tmp_path / "out" / "tx").exists()


@pytest.mark.parametrize("damage", ["garbage", "missing"])
def test_a_damaged_partition_file_is_written_again(tmp_path: Path, damage: str) -> None:
    """``partition.json`` (reused with ``partition.from``) is not covered by the checkpoint's checksums: a resumed
    run finished with it garbled or missing. It follows from config.toml, so the resume writes it again."""
    partial = interrupted(tmp_path)
    partition = partial / "partition.json"
    written = partition.read_bytes()
    if damage == "missing":
        partition.unlink()
    else:
        partition.write_bytes(written[: len(written) // 2])
    assert main(["resume", str(partial), "-q"]) == 0
    assert (tmp_path / "out" / "tx" / "partition.json").read_bytes() == written


# ---------------------------------------------------------------- torn or missing metrics


def test_a_torn_last_line_after_the_checkpoint_resumes(tmp_path: Path, reference: str) -> None:
    """A kill during the write of round 4's line: round 4 is after the checkpoint and runs again."""
    partial = interrupted(tmp_path)
    metrics = partial / "metrics.jsonl"
    metrics.write_bytes(metrics.read_bytes()[:-20])
    assert main(["resume", str(partial), "-q"]) == 0
    assert (tmp_path / "out" / "tx" / "metrics.jsonl").read_text() == reference


@pytest.mark.parametrize("damage", ["garbage", "missing"])
def test_garbled_or_missing_metrics_are_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str], damage: str) -> None:
    partial = interrupted(tmp_path)
    metrics = partial / "metrics.jsonl"
    if damage == "missing":
        metrics.unlink()
    else:
        metrics.write_bytes(b"\x00\xffnot json\n" * 4)
    assert main(["resume", str(partial), "-q"]) == 2
    field, line = one_error(capfd)
    assert field == "metrics.jsonl" and ("missing" in line if damage == "missing" else "does not match" in line)


def test_resuming_a_finished_run_says_it_is_finished(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    partial = interrupted(tmp_path)
    assert main(["resume", str(partial), "-q"]) == 0
    capfd.readouterr()
    for folder in (partial, tmp_path / "out" / "tx"):
        assert main(["resume", str(folder), "-q"]) == 2
        field, line = one_error(capfd)
        assert field == "run_dir" and "finished" in line and "first checkpoint" not in line


def _start_again(line: str) -> str:
    """The command in backquotes of a "start it again with `...`" line."""
    found = re.search(r"start it again with `([^`]*)`", line)
    assert found, line
    return found[1]


def _as_a_shell_would(command: str) -> None:
    """``[cd DIR && ]chillfl run ...`` run here as a shell runs it (in process): what the user pastes."""
    for step in command.split(" && "):
        words = shlex.split(step)
        if words[0] == "cd":
            os.chdir(words[1])
        else:
            assert words[0] == "chillfl" and main([*words[1:], "-q"]) == 0, command


def test_a_run_stopped_before_its_first_checkpoint_gives_the_command_that_starts_it_again(tmp_path: Path, capfd: pytest.CaptureFixture[str], reference: str) -> None:
    """The line names the command (it said "start it again") and whether the folder may go; the command runs the same run."""
    partial = interrupted(tmp_path)
    (partial / "checkpoint.safetensors").unlink()  # as if stopped during round 1
    assert main(["resume", str(partial), "-q"]) == 2
    field, line = one_error(capfd)
    assert field == "run_dir" and line.endswith(
        f"the run stopped before its first checkpoint, so no round can be resumed; start it again with "
        f"`chillfl run {partial / 'config.toml'} --out {partial.parent}` "
        f"(into a new folder); {partial} holds no trained state: remove it once that run has started"
    ), line
    _as_a_shell_would(_start_again(line))  # the command as given
    assert (tmp_path / "out" / "tx-2" / "metrics.jsonl").read_text() == reference
    inner = tmp_path / "out" / "c-compare.partial" / "tx.partial"  # one run of a comparison: the comparison's resume runs it
    inner.parent.mkdir()
    partial.rename(inner)
    (inner.parent / "sweep.json").write_text("{}")
    assert main(["resume", str(inner), "-q"]) == 2
    field, line = one_error(capfd)
    assert line.endswith(f"so no round can be resumed; `chillfl resume {inner.parent}` runs it again as part of its comparison"), line


def test_the_command_that_starts_a_run_again_works_from_another_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], reference: str) -> None:
    """A run started in ``project/`` with ``out_dir = "results"`` and stopped before its first checkpoint was to be started
    again with ``chillfl run results/tx.partial/config.toml``: pasted in another folder, the config was not found, and
    with its absolute path the new run went to that folder's ``results/``, not beside the stopped one. The command now
    goes to where the run was started (``cd``), so it lands in ``project/results`` from anywhere."""
    project, elsewhere = tmp_path / "my project", tmp_path / "elsewhere"
    elsewhere.mkdir()
    partial = project / "results" / "tx.partial"
    partial.parent.mkdir(parents=True)
    interrupted(tmp_path).rename(partial)
    (partial / "checkpoint.safetensors").unlink()  # as if stopped during round 1
    saved = partial / "config.toml"
    saved.write_text(re.sub(r'(?m)^out_dir = ".*"$', 'out_dir = "results"', saved.read_text()))  # as `out_dir = "results"` wrote it
    monkeypatch.chdir(project)
    assert main(["resume", "results/tx.partial", "-q"]) == 2
    field, line = one_error(capfd)
    command = _start_again(line)
    assert field == "run_dir" and command == f"cd '{project}' && chillfl run results/tx.partial/config.toml", line
    monkeypatch.chdir(elsewhere)  # the user pastes it in another terminal
    _as_a_shell_would(command)
    assert (project / "results" / "tx-2" / "metrics.jsonl").read_text() == reference  # beside the stopped tx.partial
    assert not (elsewhere / "results").exists()


def test_a_diverged_run_resumes_only_when_forced_and_then_ends_under_its_own_name(tmp_path: Path, capfd: pytest.CaptureFixture[str], reference: str) -> None:
    """It resumed as it was (to diverge again, bit for bit) and, finished, stayed ``tx.failed`` beside its summary.json."""
    failed = interrupted(tmp_path).rename(tmp_path / "out" / "tx.failed")  # as if round 4 had diverged after the checkpoint of round 3
    (failed / "failure.json").write_text(json.dumps({"round": 4, "reason": "training loss is nan"}))
    assert main(["resume", str(failed), "-q"]) == 2
    field, line = one_error(capfd)
    assert field == "run_dir" and "diverged (failure.json): resumed as it is it diverges again" in line
    assert main(["resume", str(failed), "-q", "--force"]) == 0  # after an edit of its config.toml, say; here none: it runs as before
    done = tmp_path / "out" / "tx"
    assert not failed.exists() and not (done / "failure.json").exists() and (done / "summary.json").is_file()
    assert (done / "metrics.jsonl").read_text() == reference


def test_a_run_that_diverged_before_its_first_checkpoint_says_to_start_it_again(tmp_path: Path, capfd: pytest.CaptureFixture[str], reference: str) -> None:
    """It said "lower client.lr in its config.toml and `chillfl resume --force`", which then refused: no checkpoint to resume."""
    failed = interrupted(tmp_path).rename(tmp_path / "out" / "tx.failed")
    (failed / "checkpoint.safetensors").unlink()  # diverged in round 1 or 2, before checkpoint.every rounds
    (failed / "failure.json").write_text(json.dumps({"round": 1, "reason": "training loss is nan"}))
    for force in ([], ["--force"]):
        assert main(["resume", str(failed), "-q", *force]) == 2
        field, line = one_error(capfd)
        assert field == "run_dir" and line.endswith(
            f"{failed} diverged (failure.json) before its first checkpoint, so no round can be resumed; lower client.lr in its config.toml and "
            f"start it again with `chillfl run {failed / 'config.toml'} --out {failed.parent}` (into a new folder)"), line
    _as_a_shell_would(_start_again(line))  # the command as given (here with the config as it was: the same run)
    assert (tmp_path / "out" / "tx" / "metrics.jsonl").read_text() == reference


# ---------------------------------------------------------------- a full disk


def _fail_writes(monkeypatch: pytest.MonkeyPatch, suffix: str, after: int, code: int = errno.ENOSPC) -> None:
    """``os.write`` to a file whose name ends with ``suffix`` fails with ``code`` (ENOSPC) after ``after`` such writes."""
    real_write = os.write
    seen = [0]

    def write(fd: int, data: Any) -> int:
        try:
            name = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            name = ""
        if name.endswith(suffix):
            seen[0] += 1
            if seen[0] > after:
                if suffix == ".tmp" and len(data) > 8:
                    real_write(fd, bytes(data[:8]))  # a partly written temp file, as a full disk leaves it
                raise OSError(code, os.strerror(code))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)


@pytest.mark.parametrize(("suffix", "after"), [("checkpoint.safetensors.tmp", 2), ("metrics.jsonl", 3), ("summary.json.tmp", 0)])
def test_a_full_disk_is_one_line_and_the_last_checkpoint_resumes(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, reference: str, suffix: str, after: int
) -> None:
    """ENOSPC while writing a checkpoint, a metrics line or the summary: exit 1 and one line saying which
    checkpoint is kept; no ``.tmp`` is left; once there is space, resume finishes the same run bit for bit."""
    config = write_config(tmp_path)
    _fail_writes(monkeypatch, suffix, after)
    assert main(["run", str(config), "-q"]) == 1
    err = capfd.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "no space left on the device" in lines[0] and "is kept" in lines[0], lines[0]
    monkeypatch.undo()
    partial = tmp_path / "out" / "tx.partial"
    assert not [p.name for p in partial.iterdir() if p.name.endswith(".tmp")]
    kept = read_state(partial / "checkpoint.safetensors")["round"]
    assert f"the checkpoint of round {kept} is kept" in lines[0]
    assert main(["resume", str(partial), "-q"]) == 0, capfd.readouterr().err
    assert (tmp_path / "out" / "tx" / "metrics.jsonl").read_text() == reference


def test_a_write_that_fails_for_another_reason_does_not_say_free_space(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The folder's file system turned read-only mid-run (an NFS remount): the line said "free space, then chillfl
    resume", whatever the error was."""
    config = write_config(tmp_path)
    with pytest.MonkeyPatch.context() as patch:
        _fail_writes(patch, "metrics.jsonl", 3, errno.EROFS)
        assert main(["run", str(config), "-q"]) == 1
    (line,) = capfd.readouterr().err.strip().splitlines()
    assert os.strerror(errno.EROFS) in line and "free space" not in line, line
    assert line.endswith(f"the checkpoint of round 3 is kept: chillfl resume {tmp_path / 'out' / 'tx.partial'}"), line


@pytest.fixture
def small_disk(tmp_path: Path) -> Any:
    """A 1 MiB tmpfs (needs root and mount rights; otherwise the test is skipped as not run), unmounted after."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=1000", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"NOT RUN: cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}); the patched-write tests above cover ENOSPC")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.mark.parametrize("free_kib", [3, 12, 40, 80])  # the finished folder needs about 100 KiB (a 60 KB plot)
def test_a_really_full_disk(small_disk: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], reference: str, free_kib: int) -> None:
    """ENOSPC from a real file system at four fill levels: exit 1 and one line, no ``.tmp`` left, and once
    space is freed the kept checkpoint resumes to the same metrics (it was a traceback, exit 1 and a
    0-byte checkpoint.safetensors.tmp)."""
    filler = small_disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)  # fill the disk, then give back free_kib KiB
    try:
        for chunk in (65536, 4096):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError:
                pass
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - free_kib * 1024))
    finally:
        os.close(fd)
    config = write_config(tmp_path)
    config.write_text(config.read_text().replace(f'out_dir = "{tmp_path / "out"}"', f'out_dir = "{small_disk / "out"}"'))
    code = main(["run", str(config), "-q"])
    err = capfd.readouterr().err
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert "no space left on the device" in lines[0] or "No space left on device" in lines[0], lines[0]
    assert not [p for p in small_disk.rglob("*.tmp")], list(small_disk.rglob("*"))
    filler.unlink()
    partial = small_disk / "out" / "tx.partial"
    if "is kept" in lines[0]:
        assert main(["resume", str(partial), "-q"]) == 0, capfd.readouterr().err
        assert (small_disk / "out" / "tx" / "metrics.jsonl").read_text() == reference
    else:  # full before the first checkpoint: nothing to resume, and the line says so
        assert "no checkpoint was written yet" in lines[0]


def test_a_nan_last_loss_is_the_final_loss_after_a_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run checkpointed after its last round (an older chillfl stopped by a signal in the last round did that; today
    such a run completes, so here a run of ROUNDS + 1 rounds is stopped after round ROUNDS and its config cut to ROUNDS)
    is only finished by its resume, from the records read back. Its last global loss overflowed (NaN, written null): the
    summary said round 5's finite loss was the final one."""
    import math
    import os
    import signal

    import chillfl.runner as runner_module
    from chillfl.storage.results import NONFINITE, read_metrics

    observe = runner_module.LossWatch.observe

    def overflow_last(self: Any, record: dict[str, Any]) -> None:  # the last evaluation's loss overflows (weights finite)
        observe(self, record)
        if record["round"] == ROUNDS:
            record["global_loss"] = math.nan

    class SigintAtLast:
        def on_round(self, record: Any) -> None:
            if record["round"] == ROUNDS:
                os.kill(os.getpid(), signal.SIGINT)

        def on_end(self, output: Any) -> None:
            pass

    monkeypatch.setattr(runner_module.LossWatch, "observe", overflow_last)
    with pytest.raises(runner_module.RunInterrupted):
        run_experiment(load_config(write_config(tmp_path, federation={**CONFIG["federation"], "rounds": ROUNDS + 1})),  # type: ignore[dict-item]
                       progress=False, callbacks=[SigintAtLast()])
    partial = tmp_path / "out" / "tx.partial"
    assert read_state(partial / "checkpoint.safetensors")["round"] == ROUNDS  # every round recorded: the resume reads them all back
    assert json.loads((partial / "metrics.jsonl").read_text().splitlines()[-1])[NONFINITE] == {"global_loss": "nan"}
    saved = partial / "config.toml"
    saved.write_text(saved.read_text().replace(f"rounds = {ROUNDS + 1}\n", f"rounds = {ROUNDS}\n"))
    assert main(["resume", str(partial), "-q", "--force"]) == 0
    folder = tmp_path / "out" / "tx"
    summary = json.loads((folder / "summary.json").read_text())
    assert "final_global_loss" in summary and summary["final_global_loss"] is None  # NaN, written null: not round 5's loss
    assert math.isfinite(summary["best_global_loss"]) and summary["best_global_loss_round"] < ROUNDS
    assert math.isnan(read_metrics(folder)[-1]["global_loss"])  # what `chillfl report` reads
