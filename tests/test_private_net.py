"""Runs tests/private_net/ (Ray cluster, Flower simulation and TLS deployment) in a private network namespace.

Ray advertises the host's own address, not 127.0.0.1, even when told
``--node-ip-address=127.0.0.1``; Flower's simulation starts a Ray of its own.
Our tests may send traffic to loopback only, so these tests run in a pytest
started under ``unshare --net``: a new network namespace whose one interface
is its loopback device, where no packet can reach any other address. The
inner session's report is printed here, and every one of its tests must pass:
a skip inside counts as a failure, since these tests are what CI has for the
Ray and Flower backends. The inner session is the first process of a PID namespace too (:data:`NAMESPACES`):
nothing it starts outlives it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the Ray and Flower suites in a private network: about 10 minutes; `pytest -m "not slow"` leaves it out

HERE = Path(__file__).parent


NAMESPACES = ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child"]
"""A private network, and a PID namespace whose first process is the inner pytest: when it ends, or is killed
(``--kill-child``: also when ``unshare`` itself is, e.g. by this test's timeout), the kernel kills every process
left in the namespace. Ray's head and nodes run in sessions of their own, so without it a suite killed half-way
left them running (a Ray head outlived an interrupted run by 45 minutes)."""


def _private_net_available() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run([*NAMESPACES, "true"], capture_output=True, timeout=30)
    return probe.returncode == 0


def test_ray_and_flower_suites_pass_in_a_private_network() -> None:
    if not _private_net_available():
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the Ray and Flower suites, but `unshare --net` is not available here (needs root or user namespaces)")
        pytest.skip("the Ray and Flower suites were NOT run: `unshare --net` is not available (needs root or user namespaces)")
    for package in ("ray", "flwr"):
        if shutil.which(package) is None and not (Path(sys.executable).parent / package).exists():
            pytest.fail(f"the test extra must install {package}")
    inner = f"ip link set lo up && exec {sys.executable} -m pytest -o addopts= -q -rs -p no:cacheprovider {HERE / 'private_net'}"
    # Flower's SuperLink starts its helpers by name: the venv's bin must be on PATH even when it is not activated
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "CHILLFL_PRIVATE_NET": "1", "PATH": path}
    done = subprocess.run([*NAMESPACES, "sh", "-c", inner], env=env, cwd=HERE.parent, capture_output=True, text=True, timeout=1500)
    report = done.stdout + done.stderr
    print(report)
    assert done.returncode == 0, report[-4000:]
    summary = re.search(r"(\d+) passed", report)
    assert summary and int(summary.group(1)) >= 10, report[-2000:]
    assert "skipped" not in report.splitlines()[-1], report[-2000:]


def test_nothing_started_in_the_namespace_outlives_it() -> None:
    """The reaper: a process in a session of its own (as Ray's head is) dies with the namespace when ``unshare`` is killed."""
    if not _private_net_available():
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the Ray and Flower suites, but `unshare` is not available here (needs root or user namespaces)")
        pytest.skip("NOT run: `unshare` is not available (needs root or user namespaces)")
    marker = f"{os.getpid() % 1000 + 1000}.25"  # sleep's argument: finds the orphan among this machine's processes
    outer = subprocess.Popen([*NAMESPACES, "sh", "-c", f"setsid sleep {marker} & exec sleep {marker}"])
    try:
        deadline = time.monotonic() + 30
        while len(_sleepers(marker)) < 2:
            assert time.monotonic() < deadline and outer.poll() is None, "the namespace's two sleeps never started"
            time.sleep(0.05)
        outer.kill()  # SIGKILL: no handler runs in unshare
        outer.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _sleepers(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _sleepers(marker), "a process of the namespace outlived it"
    finally:
        for pid in _sleepers(marker):
            os.kill(pid, signal.SIGKILL)


def _sleepers(marker: str) -> list[int]:
    """Host pids of the processes running ``sleep <marker>``."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if (proc / "cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", marker.encode()]:
                    found.append(int(proc.name))
            except OSError:
                pass
    return found
