"""CLI runs in subprocesses, signalled and resumed: the steps ``tests/test_resume.py`` and ``tests/test_hangup.py`` share.

A tiny config per method family (:func:`write_config`), ``python -m chillfl`` started as a user starts it
(:func:`chillfl`), waiting for its round ``n`` (:func:`wait_for_round`), a stop signal and the one line that says
how to resume (:func:`stop_with`), and the resume that finishes the run (:func:`resume`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from chillfl.storage.checkpoint import read_state

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
    """``folder/NAME.toml``: :data:`TINY` with the family's tables and ``extra`` merged in, its runs under ``folder/out``."""
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


def chillfl(*args: str, tmpdir: Path | None = None, **kw: Any) -> subprocess.Popen:
    """``python -m chillfl ARGS``, unbuffered, its output piped; ``tmpdir``: its TMPDIR; ``kw``: more of Popen's (``preexec_fn``)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **({"TMPDIR": str(tmpdir)} if tmpdir is not None else {})}
    return subprocess.Popen([sys.executable, "-m", "chillfl", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kw)


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


def stop_with(sig: int, proc: subprocess.Popen, partial: Path, code: int, after: int = 2) -> str:
    """Send ``sig`` to the run ``proc`` writes into ``partial`` once it is past round ``after``: it must exit ``code``,
    say it stops after the round (not on stdout) and, last, in one line, the round of its checkpoint and how to resume,
    without a traceback; its metrics end at that checkpoint. Returns its stderr."""
    wait_for_round(partial / "metrics.jsonl", after, proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    name = signal.Signals(sig).name
    assert f"chillfl: {name}: stopping after this round" in err and "stopping" not in out  # the notice is not output
    done = read_state(partial / "checkpoint.safetensors")["round"]
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1] == f"chillfl: interrupted by {name} after round {done}; resume with: chillfl resume {partial}", lines
    assert len((partial / "metrics.jsonl").read_text().splitlines()) == done >= after
    return err


def resume(partial: Path, timeout: float = 300) -> None:
    """``chillfl resume PARTIAL -q`` to the end: it must exit 0."""
    resumed = chillfl("resume", str(partial), "-q")
    _, err = resumed.communicate(timeout=timeout)
    assert resumed.returncode == 0, err


def rounds(folder: Path) -> list[int]:
    """The rounds ``folder/metrics.jsonl`` records, in order."""
    return [json.loads(line)["round"] for line in (folder / "metrics.jsonl").read_text().splitlines()]
