"""Runs tests/private_net/ (Ray cluster, Flower simulation and TLS deployment) in a private network namespace.

Ray advertises the host's own address, not 127.0.0.1, even when told
``--node-ip-address=127.0.0.1``; Flower's simulation starts a Ray of its own.
Our tests may send traffic to loopback only, so these tests run in a pytest
started under ``unshare --net``: a new network namespace whose one interface
is its loopback device, where no packet can reach any other address. The
inner session's report is printed here, and every one of its tests must pass:
a skip inside counts as a failure, since these tests are what CI has for the
Ray and Flower backends.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def _private_net_available() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=30)
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
    done = subprocess.run(["unshare", "--net", "sh", "-c", inner], env=env, cwd=HERE.parent, capture_output=True, text=True, timeout=1500)
    report = done.stdout + done.stderr
    print(report)
    assert done.returncode == 0, report[-4000:]
    summary = re.search(r"(\d+) passed", report)
    assert summary and int(summary.group(1)) >= 10, report[-2000:]
    assert "skipped" not in report.splitlines()[-1], report[-2000:]
