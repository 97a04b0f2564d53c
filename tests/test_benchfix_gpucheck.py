"""benchmarks/gpu-check.sh's command line (task benchfix): --help, an OUTDIR that is an option, no GPU without --smoke.

The script's python is a stub (``$PYTHON``) that answers torch's CUDA question with a fixed 0 or 1 and does nothing
else, so no test here runs a benchmark, whatever machine runs it; budgets of 1 s skip every step.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu-check.sh"
README = (ROOT / "benchmarks" / "README.md").read_text()


def stub_python(tmp_path: Path, cuda: int) -> Path:
    """A python3 for the script whose torch sees ``cuda`` GPUs (prints it) and which runs nothing."""
    stub = tmp_path / f"python-cuda{cuda}"
    stub.write_text(f"#!/bin/sh\necho {cuda}\n")
    stub.chmod(0o755)
    return stub


def gpu_check(tmp_path: Path, *args: str, cuda: int = 0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": str(stub_python(tmp_path, cuda))}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_the_usage_and_runs_nothing(flag: str, tmp_path: Path) -> None:
    # --help was taken as OUTDIR (the whole check ran); -h ended in "mkdir: invalid option"
    done = gpu_check(tmp_path, flag)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: bash benchmarks/gpu-check.sh OUTDIR") and "--smoke" in done.stdout
    assert not done.stderr and list(tmp_path.iterdir()) == [tmp_path / "python-cuda0"]  # nothing written


def test_an_outdir_starting_with_a_dash_exits_2_with_one_line(tmp_path: Path) -> None:
    done = gpu_check(tmp_path, "--smoke", "--budget", "1", cuda=1)
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1 and "OUTDIR '--smoke'" in done.stderr


def test_no_gpu_without_smoke_exits_2_before_writing_anything(tmp_path: Path) -> None:
    # it ran every CUDA step to failure (device cuda whatever torch said), its setup writing a .pth file first
    done = gpu_check(tmp_path, "out", "--setup", "--budget", "535")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["gpu-check.sh: no GPU here: --smoke checks the script on the CPU"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args", [
    ["--smoke", "--budget", "1"],  # the CPU check still runs without a GPU
    ["--setup", "--budget", "1"],  # the GPU session's two calls, with budgets that skip every step
    ["--only", "w1-curves,targets-curves,conv-kernels,profile-w1-gemm", "--budget", "1"],
])
def test_the_documented_calls_still_parse(args: list[str], tmp_path: Path) -> None:
    done = gpu_check(tmp_path, "out", *args, cuda=0 if "--smoke" in args else 1)
    assert done.returncode == 0, done.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "budget 1 s" in summary and "skipped" in summary


def test_the_readme_states_the_smoke_budget_and_timeouts_the_script_uses() -> None:
    script = SCRIPT.read_text()
    smoke, gpu = re.search(r'BUDGET=\$\(\[ "\$SMOKE" = 1 \] && echo (\d+) \|\| echo (\d+)\)', script).groups()  # type: ignore[union-attr]
    slow = re.search(r'\[ "\$SMOKE" = 1 \] && SLOW=(\d+)', script).group(1)  # type: ignore[union-attr]
    section = README.split("## The GPU check")[1].split("\n## ")[0]
    assert f"default {gpu} s" in section and f"`--smoke` {smoke} s" in section and f"timeout {slow}x its GPU one" in section


def test_the_readme_lists_every_output_file_and_links_no_section_to_itself() -> None:
    section = README.split("## The GPU check")[1].split("\n## ")[0]
    for name in ("profile-w1-auto-graphs.*", "OUTDIR/bench-w<k>.md", "OUTDIR/curves-w1.json"):  # written by the steps, were unlisted
        assert name in section
    assert "](#)" not in README
