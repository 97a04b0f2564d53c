"""Runs tests/private_net/ (Ray cluster, Flower simulation and TLS deployment) in a private network namespace.

Ray advertises the host's own address, not 127.0.0.1, even when told
``--node-ip-address=127.0.0.1``; Flower's simulation starts a Ray of its own.
Our tests may send traffic to loopback only, so these tests run in a pytest
started under ``unshare --net``: a new network namespace whose one interface
is its loopback device, where no packet can reach any other address. Each
file there (or part of one, :data:`SPLIT`) is a test here, an inner session of
its own whose report is printed here, and every one of its tests must pass:
a skip inside counts as a failure, since these tests are what CI has for the
Ray and Flower backends. Each inner session is the first process of a PID namespace too (:data:`NAMESPACES`):
nothing it starts outlives it.
"""

from __future__ import annotations

import os
import re
import shutil
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from namespaces import NAMESPACES, in_namespace

pytestmark = pytest.mark.slow  # the Ray and Flower suites in a private network: about 10 minutes in all; `pytest -m "not slow"` leaves it out

HERE = Path(__file__).parent


def _private_net_available() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run([*NAMESPACES, "true"], capture_output=True, timeout=30)
    return probe.returncode == 0


SPLIT: dict[str, tuple[tuple[str, str], ...]] = {
    "test_flower.py": (("deployment", "deployment"),),
    "test_ray.py": (("signals", "sigterm or stop_signal"),),
}
"""Files run in parts, each part a namespace of its own: a ``-k`` expression per part, and a last part, ``rest``, of
every test none of them selects (``not (...)``), so the parts of a file together run each of its tests once. The parts
of 2-4 minutes each on a loaded 2-core machine: Flower's TLS deployment (a SuperLink, SuperNodes and ``flwr run``)
and the simulations; Ray's signal tests (each starts and stops a local Ray of its own) and its two-node cluster's."""


def _suites() -> list[Any]:
    """One test per file of tests/private_net/ (a file added there is a test here), or per part of a :data:`SPLIT` one."""
    suites = []
    for path in sorted((HERE / "private_net").glob("test_*.py")):
        parts = SPLIT.get(path.name, ())
        rest = f"not ({' or '.join(f'({e})' for _, e in parts)})" if parts else ""
        for part, expression in (*parts, ("rest", rest)):
            suites.append(pytest.param(path.name, expression, id=f"{path.stem}-{part}" if parts else path.stem))
    return suites


@pytest.mark.parametrize(("suite", "expression"), _suites())
def test_ray_and_flower_suites_pass_in_a_private_network(suite: str, expression: str) -> None:
    """One file of the suite (or a part of it) in a namespace of its own: separate tests, each with its own time
    limit, that pytest-xdist's workers share, where the whole suite was one test of ~10 minutes on one worker."""
    if not _private_net_available():
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the Ray and Flower suites, but `unshare --net` is not available here (needs root or user namespaces)")
        pytest.skip("the Ray and Flower suites were NOT run: `unshare --net` is not available (needs root or user namespaces)")
    for package in ("ray", "flwr"):
        if shutil.which(package) is None and not (Path(sys.executable).parent / package).exists():
            pytest.fail(f"the test extra must install {package}")
    select = f" -k {shlex.quote(expression)}" if expression else ""
    inner = f"ip link set lo up && exec {sys.executable} -m pytest -o addopts= -q -rs -p no:cacheprovider {HERE / 'private_net' / suite}{select}"
    # Flower's SuperLink starts its helpers by name: the venv's bin must be on PATH even when it is not activated
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "CHILLFL_PRIVATE_NET": "1", "PATH": path}
    suite_run = in_namespace(["sh", "-c", inner], env=env, cwd=HERE.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = suite_run.communicate(timeout=1500)
    finally:
        suite_run.kill()  # SIGKILL to unshare (a no-op once it ended): the namespace goes with it
        suite_run.wait()
    report = out + err
    print(report)
    assert suite_run.returncode == 0, report[-4000:]
    summary = re.search(r"(\d+) passed", report)
    # a whole file: at least one passed test per test function in it (parametrised ones give more); a part: one at least
    least = len(re.findall(r"^\s*def test_", (HERE / "private_net" / suite).read_text(encoding="utf-8"), re.M)) if not expression else 1
    assert summary and int(summary.group(1)) >= least, report[-2000:]
    last = report.splitlines()[-1]  # e.g. "74 passed, 20 deselected in 300.00s": nothing skipped
    assert "skipped" not in last, report[-2000:]


def _require_unshare() -> None:
    if not _private_net_available():
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the Ray and Flower suites, but `unshare` is not available here (needs root or user namespaces)")
        pytest.skip("NOT run: `unshare` is not available (needs root or user namespaces)")


def _outlived_by(marker: str, kill: Callable[[], None]) -> list[int]:
    """Host pids of ``sleep MARKER`` still running 10 s after ``kill()``, once both sleeps of a namespace began."""
    deadline = time.monotonic() + 30
    while len(_sleepers(marker)) < 2:
        assert time.monotonic() < deadline, "the namespace's two sleeps never started"
        time.sleep(0.05)
    kill()
    deadline = time.monotonic() + 10
    while _sleepers(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _sleepers(marker)


def test_nothing_started_in_the_namespace_outlives_it() -> None:
    """The reaper: a process in a session of its own (as Ray's head is) dies with the namespace when ``unshare`` is killed."""
    _require_unshare()
    marker = f"{os.getpid() % 1000 + 1000}.25"  # sleep's argument: finds the orphan among this machine's processes
    outer = in_namespace(["sh", "-c", f"setsid sleep {marker} & exec sleep {marker}"])
    try:
        assert not _outlived_by(marker, outer.kill), "a process of the namespace outlived it"  # SIGKILL: no handler runs in unshare
    finally:
        outer.kill()
        outer.wait(timeout=30)
        for pid in _sleepers(marker):
            os.kill(pid, signal.SIGKILL)


def test_the_namespace_dies_with_the_process_that_started_it() -> None:
    """A SIGTERM to the test process alone (``kill PID``, ``pkill pytest``) ends the namespace too: ``unshare``
    blocks SIGTERM while it waits, and the namespace's first process ignores what it has no handler for, so
    before ``in_namespace`` tied it to its starter the inner suite ran on to its end."""
    _require_unshare()
    marker = f"{os.getpid() % 1000 + 2000}.25"
    start = f"from namespaces import in_namespace; in_namespace(['sh', '-c', 'setsid sleep {marker} & exec sleep {marker}']).wait()"
    starter = subprocess.Popen([sys.executable, "-c", start], cwd=HERE, env={**os.environ, "PYTHONPATH": str(HERE)})
    try:
        assert not _outlived_by(marker, starter.terminate), "the namespace outlived the process that started it"
    finally:
        starter.kill()
        starter.wait(timeout=30)
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
