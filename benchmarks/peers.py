"""Create (or reuse) ``benchmarks/.venv-peers`` with BlazeFL and Flower, never touching the system python.

Installed with the venv's own pip, step by step, so that one peer failing
(offline, no wheel for this Python, a resolver conflict) still leaves the other:

* common: ``torch==2.13.0`` (the local CPU wheel; an unpinned torch would pull
  GBs of CUDA packages), numpy, tqdm.
* BlazeFL: ``pip install --ignore-requires-python blazefl==2.0.3``. Its newest
  release needs Python 3.14 and 2.0.3 declares >= 3.12, but 2.0.3 only uses
  3.11 features (``enum.StrEnum``), so it runs on this 3.11.
* Flower: ``flwr[simulation]==1.42.0`` requires ``certifi>=2026.10.19``, which
  the registry here may not have. So its dependencies (copied from the 1.42.0
  wheel's metadata, ``ray==2.55.1`` for the simulation extra) are installed
  first with ``certifi`` left unpinned (= the newest available), then
  ``flwr==1.42.0`` itself with ``--no-deps``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

TORCH = "torch==2.13.0"
BLAZEFL = "blazefl==2.0.3"
FLWR = "flwr==1.42.0"
FLWR_DEPS = [
    "certifi",  # flwr 1.42.0 wants >=2026.10.19; the newest available one is used instead
    "numpy>=1.26.0,<3.0.0",
    "grpcio>=1.70.0,<2.0.0",
    "grpcio-health-checking>=1.70.0,<2.0.0",
    "protobuf>=5.28.0,<7.0.0",
    "cryptography>=50.0.0,<51.0.0",
    "pycryptodome>=3.18.0,<4.0.0",
    "iterators>=0.0.2,<0.0.3",
    "typer>=0.13.0,<0.21.0",
    "uv>=0.13.5,<0.14.0",
    "tomli>=2.0.1,<3.0.0",
    "tomli-w>=1.0.0,<2.0.0",
    "pathspec>=1.0.4,<2.0.0",
    "prompt-toolkit>=3.0.52,<4.0.0",
    "rich>=14.0.0,<15.0.0",
    "pyyaml>=6.0.2,<7.0.0",
    "requests>=2.33.0,<3.0.0",
    "httpx>=0.28.1,<1.0.0",
    "click>=8.0.0,<9.0.0",
    "packaging>=24.0,<26.0",
    "sqlalchemy[asyncio]>=2.0.45,<3.0.0",
    "alembic>=1.18.1,<2.0.0",
    "uvicorn[standard]>=0.49.0,<0.50.0",
    "fastapi>=0.138.0,<0.139.0",
    "starlette>=1.3.1,<1.4.0",
    "ray==2.55.1",
]
CHECKS = {
    "blazefl": "import blazefl.contrib, importlib.metadata as m; print(m.version('blazefl'))",
    "flwr": "import flwr.simulation, flwr.serverapp, ray, importlib.metadata as m; print(m.version('flwr'), 'ray', ray.__version__, 'certifi', m.version('certifi'))",
}


def _run(cmd: list[str], log: Path, timeout: float) -> tuple[bool, str]:
    """Run ``cmd`` appending its output to ``log``; (ok, last meaningful line of output)."""
    with log.open("a") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            fh.write("timed out\n")
            return False, f"timed out after {timeout:.0f} s"
        fh.write(proc.stdout)
    lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR") or "Error" in ln]
    return proc.returncode == 0, (errors[-1] if errors else lines[-1] if lines else "")[:300]


def _check(python: Path, peer: str) -> tuple[bool, str]:
    proc = subprocess.run([str(python), "-c", CHECKS[peer]], capture_output=True, text=True, timeout=300)
    if proc.returncode == 0:
        return True, proc.stdout.strip()
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    return False, (lines[-1] if lines else f"exit {proc.returncode}")[:300]


def ensure_peers(venv: Path, install: bool = True, timeout: float = 1200) -> dict[str, dict[str, Any]]:
    """{"blazefl"|"flwr": {"ok", "detail" (version or reason), "python"}}; installs what is missing."""
    python = venv / "bin" / "python"
    log = venv.parent / "results" / "peer-install.log"
    if install:  # only installing writes the log: --no-install once made benchmarks/results/ even with --out elsewhere
        log.parent.mkdir(parents=True, exist_ok=True)
    status: dict[str, dict[str, Any]] = {}
    if not python.exists():
        if not install:
            return {p: {"ok": False, "detail": f"{venv} does not exist (run without --no-install)"} for p in CHECKS}
        ok, msg = _run([sys.executable, "-m", "venv", str(venv)], log, 300)
        if not ok:
            return {p: {"ok": False, "detail": f"cannot create venv: {msg}"} for p in CHECKS}
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    common_ok, common_msg = True, ""
    for peer in CHECKS:
        ok, detail = _check(python, peer)
        if ok or not install:
            status[peer] = {"ok": ok, "detail": detail if ok else f"not installed: {detail}"}
            continue
        if common_ok and not common_msg:
            common_ok, common_msg = _run([*pip, TORCH, "numpy", "tqdm"], log, timeout)
            common_msg = common_msg or "ok"
        if not common_ok:
            status[peer] = {"ok": False, "detail": f"pip install {TORCH} failed: {common_msg}"}
            continue
        if peer == "blazefl":
            ok, msg = _run([*pip, "--ignore-requires-python", BLAZEFL, "tqdm"], log, timeout)
        else:
            ok, msg = _run([*pip, *FLWR_DEPS], log, timeout)
            if ok:
                ok, msg = _run([*pip, "--no-deps", FLWR], log, timeout)
        if not ok:
            status[peer] = {"ok": False, "detail": f"install failed: {msg}"}
            continue
        ok, detail = _check(python, peer)
        status[peer] = {"ok": ok, "detail": detail if ok else f"installed but import fails: {detail}"}
    for entry in status.values():
        entry["python"] = str(python)
    return status


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    for name, entry in ensure_peers(here / ".venv-peers").items():
        print(f"{name}: {entry}")
