"""Checkpoints and resume: a run killed (SIGKILL) at a random round and resumed gives the same metrics.jsonl,
bit for bit, as an uninterrupted run; SIGTERM/SIGINT write a checkpoint, exit 143/130 and say how to resume.

Each method family of the issue runs in a subprocess, as a user would run it:
FedAvg + FedChill temperatures, SCAFFOLD, PA3Fed and SCARLET.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chillfl.storage.checkpoint import read_state
from procs import alive

pytestmark = pytest.mark.slow  # CLI runs killed and resumed in subprocesses; `pytest -m "not slow"` leaves it out

TINY = {
    "seed": 3,
    "threads": 1,
    "device": "cpu",
    "dataset": {"name": "digits"},
    "partition": {"name": "dirichlet", "alpha": 0.3},
    "model": {"name": "mlp"},
    "federation": {"num_clients": 6, "clients_per_round": 3, "rounds": 8},
    "client": {"epochs": 1, "batch_size": 32, "lr": 0.05},
    "eval": {"client_split_size": 20},
    "checkpoint": {"every": 1},
}

FAMILIES = {
    "fedavg-fedchill": {"temperature": {"policy": "fedchill"}},
    "scaffold": {"algorithm": {"name": "scaffold"}},
    "pa3fed": {"algorithm": {"name": "pa3fed", "mode": "always"}},
    "scarlet": {
        "distillation": {"method": "scarlet", "public_size": 120, "subset_size": 40, "cache_duration": 3},
        "federation": {"num_clients": 6, "clients_per_round": 3, "rounds": 8},
    },
}


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def write_config(folder: Path, name: str, family: str, **extra: object) -> Path:
    table: dict[str, object] = {**TINY, "name": name, "out_dir": str(folder / "out")}
    for key, value in {**FAMILIES[family], **extra}.items():
        table[key] = {**table[key], **value} if isinstance(value, dict) and isinstance(table.get(key), dict) else value  # type: ignore[dict-item]
    lines = [f"{k} = {_toml(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for key, sub in table.items():
        if isinstance(sub, dict):
            lines.append(f"[{key}]")
            lines += [f"{k} = {_toml(v)}" for k, v in sub.items()]
    path = folder / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def chillfl(*args: str, tmpdir: Path | None = None, **kw: object) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **({"TMPDIR": str(tmpdir)} if tmpdir is not None else {})}
    return subprocess.Popen([sys.executable, "-m", "chillfl", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kw)  # type: ignore[call-overload]


def wait_for_round(metrics: Path, round: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Block until ``metrics`` holds at least ``round`` lines (the run is past that round)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= round:
            return
        if proc.poll() is not None:
            raise AssertionError(f"the run ended early: {proc.communicate()}")
        time.sleep(0.05)
    proc.kill()  # a hung run must not outlive its test
    raise AssertionError(f"no round {round} within {timeout} s: {proc.communicate()}")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_kill_9_then_resume_is_bitwise_identical(family: str, tmp_path: Path) -> None:
    reference = chillfl("run", str(write_config(tmp_path, "ref", family)), "-q")
    out, err = reference.communicate(timeout=300)
    assert reference.returncode == 0, err
    expected = (tmp_path / "out" / "ref" / "metrics.jsonl").read_text()
    assert len(expected.splitlines()) == 8

    kill_after = random.Random(family).randint(2, 6)  # a different round per family, the same on every CI run
    proc = chillfl("run", str(write_config(tmp_path, "killed", family)), "-q")
    partial = tmp_path / "out" / "killed.partial"
    wait_for_round(partial / "metrics.jsonl", kill_after, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert read_state(partial / "checkpoint.safetensors")["round"] >= kill_after - 1

    resumed = chillfl("resume", str(partial), "-q")
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    final = tmp_path / "out" / "killed"
    assert (final / "metrics.jsonl").read_text() == expected
    assert not partial.exists() and not (final / "checkpoint.safetensors").exists()
    assert (final / "model.safetensors").is_file()


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_writes_a_checkpoint_and_says_how_to_resume(sig: int, code: int, tmp_path: Path) -> None:
    config = write_config(tmp_path, "stopped", "scaffold", checkpoint={"every": 0}, federation={"rounds": 40})
    proc = chillfl("run", str(config), "-q")
    partial = tmp_path / "out" / "stopped.partial"
    wait_for_round(partial / "metrics.jsonl", 2, proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("chillfl: interrupted by ") and lines[-1].endswith(f"resume with: chillfl resume {partial}")
    assert "Traceback" not in err
    assert f"chillfl: {signal.Signals(sig).name}: stopping after this round" in err and "stopping" not in out  # the notice is not output
    done = read_state(partial / "checkpoint.safetensors")["round"]
    assert len((partial / "metrics.jsonl").read_text().splitlines()) == done >= 2

    resumed = chillfl("resume", str(partial), "-q")
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    records = [json.loads(line) for line in (tmp_path / "out" / "stopped" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == list(range(1, 41))


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGKILL, -signal.SIGKILL)])
def test_processes_workers_do_not_outlive_their_parent(sig: int, code: int, tmp_path: Path, short_temp: Path) -> None:
    """SIGTERM (checkpoint, exit 143) or SIGKILL of a ``processes`` run: no worker survives its parent by 5 s, and the temp dir is empty.

    The run's temporary folders are multiprocessing's ``pymp-*`` folder (the
    parent's, shared by its workers: their resource-sharer sockets
    ``listener-*``). A terminated parent removes it at exit; a SIGKILLed one
    cannot, so the workers remove it when they find their parent gone
    (``executors/processes.py``). Either way nothing is left once the workers are.
    """
    config = write_config(tmp_path, "pool", "fedavg-fedchill", executor="processes", federation={"rounds": 40})
    temp = short_temp  # the run's temporary folders (multiprocessing's pymp-*) go here
    proc = chillfl("run", str(config), "-q", tmpdir=temp)
    wait_for_round(tmp_path / "out" / "pool.partial" / "metrics.jsonl", 1, proc)
    children = _children(proc.pid)
    assert children, "the processes executor started no worker"
    assert [p.name[:5] for p in temp.iterdir()] == ["pymp-"]  # the folder under test exists while the run does
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(pid) for pid in children):
        time.sleep(0.1)
    assert not [pid for pid in children if alive(pid)]
    assert list(temp.iterdir()) == []


def test_resume_refuses_a_folder_without_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "run.partial").mkdir()
    proc = chillfl("resume", str(tmp_path / "run.partial"))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and err.strip().splitlines() == [f"chillfl: error: run_dir: {tmp_path / 'run.partial'} is not a chillfl run folder (no config.toml)"]


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out

