"""executor = "ray": a second stop signal in the middle of a round stops the run at once, as under the ``processes`` executor.

One line (``interrupted by a second SIGINT during round N; the checkpoint of round N-1 is kept; resume with: ...``), exit
128 + the signal, nothing of the run's session left behind, and the folder resumes to the uninterrupted run, bit for bit.
It used to end in a chain of SystemError tracebacks and exit 1: the runner's handler raised its RunInterrupted inside
Ray's ``ray.get`` (whose C code runs the signal handlers while it waits and takes only a KeyboardInterrupt from them).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from chillfl.stop_signals import REPEAT_WINDOW_S, SIGINT_REPEAT_WINDOW_S  # noqa: E402
from sessions import session_pids  # noqa: E402

CONFIG = """\
seed = 5
threads = 1
device = "cpu"
executor = "ray"
out_dir = "{out}"
name = "r"

[dataset]
name = "digits"

[model]
name = "mlp"

[federation]
num_clients = 4
clients_per_round = 4
rounds = 3

[client]
epochs = {epochs}
batch_size = 32
lr = 0.05

[checkpoint]
every = 1

[ray]
workers = 2
"""

EPOCHS = 120
"""Enough for a round of some seconds (two signals, a second apart, land in the same round), few enough for a quick test."""

GAP_S = {signal.SIGINT: SIGINT_REPEAT_WINDOW_S + 0.3, signal.SIGTERM: REPEAT_WINDOW_S + 0.3}
"""Between the two signals: a second one, not the first delivered twice (:class:`~chillfl.stop_signals.Repeats`)."""


def _env(ray_tmp: Path) -> dict[str, str]:
    """This process's environment, no cluster named, the local Ray's sessions in a short folder (Ray's socket paths)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
    return {**env, "RAY_USAGE_STATS_ENABLED": "0", "RAY_TMPDIR": str(ray_tmp)}


def _chillfl(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "chillfl", *args, "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)


def _stop_session(sid: int) -> None:
    try:
        os.killpg(sid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# SIGINT only (a Ray start costs this suite about a minute): SIGTERM's second signal takes the same path
# (RaisedLater holds every stop signal's handler; tests/test_rayint_raised_later.py)
@pytest.mark.parametrize("sig", [signal.SIGINT], ids=["SIGINT"])
def test_a_second_signal_mid_round_stops_at_once_with_one_line(tmp_path: Path, sig: signal.Signals) -> None:
    out = tmp_path / "out"
    config = tmp_path / "run.toml"
    config.write_text(CONFIG.format(out=out, epochs=EPOCHS))
    ray_tmp = Path(tempfile.mkdtemp(prefix="r9i", dir="/tmp"))
    env = _env(ray_tmp)
    proc = _chillfl("run", str(config), env=env)
    lines: list[str] = []  # its stderr, line by line as it comes
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
    reader.start()
    try:
        metrics = out / "r.partial" / "metrics.jsonl"
        deadline = time.monotonic() + 150
        while not (metrics.exists() and metrics.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline, ("no round within 150 s", lines)
            time.sleep(0.05)
        ack = f"chillfl: {sig.name}: stopping after this round (a second one stops at once)\n"
        proc.send_signal(sig)  # in round 2, just begun
        deadline = time.monotonic() + 30
        while ack not in lines:  # handled: two signals before the handler runs would be one (Python keeps a flag per signal)
            assert time.monotonic() < deadline and proc.poll() is None, lines
            time.sleep(0.05)
        time.sleep(GAP_S[sig])
        proc.send_signal(sig)
        proc.wait(timeout=120)
        reader.join(timeout=30)
        err = "".join(lines)
        assert proc.returncode == 128 + sig, err[-3000:]
        assert "Traceback" not in err and "SystemError" not in err, err[-3000:]
        assert len(metrics.read_text().splitlines()) == 1, "round 2 ran to its end: the second signal came too late to test anything"
        said = [line for line in err.splitlines() if not re.match(r"\[\d{4}-\d\d-\d\d ", line)]  # less Ray's own log lines (its IP lookup)
        assert said[0] == ack.strip() and len(said) == 2, err
        assert re.fullmatch(rf"chillfl: interrupted by a second {sig.name} during round 2; the checkpoint of round 1 is kept; "
                            rf"resume with: chillfl resume \S*r\.partial", said[1]), err
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and session_pids(proc.pid):
            time.sleep(0.1)
        assert not session_pids(proc.pid), "processes of the run's session outlived it by 5 s"
        assert [p.name for p in ray_tmp.iterdir()] == []  # the local Ray's sessions went with it
        if sig != signal.SIGINT:
            return
        resumed = _chillfl("resume", str(out / "r.partial"), env=env)
        reference = _chillfl("run", str(config), "executor=sequential", "name=ref", env=env)
        for p in (resumed, reference):
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-3000:]
        assert (out / "r" / "metrics.jsonl").read_bytes() == (out / "ref" / "metrics.jsonl").read_bytes()
    finally:
        _stop_session(proc.pid)
        subprocess.run(["rm", "-rf", str(ray_tmp)], check=False)
