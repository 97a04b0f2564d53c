"""Checkpoints and resume: a run killed (SIGKILL) at a random round and resumed gives the same metrics.jsonl,
bit for bit, as an uninterrupted run; SIGTERM/SIGINT write a checkpoint, exit 143/130 and say how to resume.

Each method family of the issue runs in a subprocess, as a user would run it:
FedAvg + FedChill temperatures, SCAFFOLD, PA3Fed and SCARLET.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from chillfl.storage.checkpoint import read_state
from procs import PARENT, alive, live_pids
from signalled_runs import FAMILIES, chillfl, resume, rounds, stop_with, wait_for_round, write_config

pytestmark = pytest.mark.slow  # CLI runs killed and resumed in subprocesses; `pytest -m "not slow"` leaves it out


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

    resume(partial)
    final = tmp_path / "out" / "killed"
    assert (final / "metrics.jsonl").read_text() == expected
    assert not partial.exists() and not (final / "checkpoint.safetensors").exists()
    assert (final / "model.safetensors").is_file()


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_writes_a_checkpoint_and_says_how_to_resume(sig: int, code: int, tmp_path: Path) -> None:
    config = write_config(tmp_path, "stopped", "scaffold", checkpoint={"every": 0}, federation={"rounds": 40})
    partial = tmp_path / "out" / "stopped.partial"
    stop_with(sig, chillfl("run", str(config), "-q"), partial, code)
    resume(partial)
    assert rounds(tmp_path / "out" / "stopped") == list(range(1, 41))


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
    children = live_pids(PARENT, proc.pid)
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

