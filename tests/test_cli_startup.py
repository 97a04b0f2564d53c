"""``chillfl --help`` must be fast: it imports no torch (the analysis subcommands are built lazily).

No test asserts a time (the machine is shared); the imports are what makes --help slow.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")

PROBE = """
import sys
from chillfl.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
heavy = sorted(m for m in ("torch", "numpy", "matplotlib", "scipy") if m in sys.modules)
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
"""


def _probe(argv: list[str]) -> str:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True, env=env, timeout=120)
    line = next(x for x in done.stderr.splitlines() if x.startswith("HEAVY="))
    return line[len("HEAVY="):]


def test_help_imports_no_torch() -> None:
    for argv in (["--help"], ["run", "--help"], ["compare", "--help"], ["report", "--help"]):
        heavy = _probe(argv)
        assert heavy == "", f"chillfl {' '.join(argv)} imported {heavy}"


def test_analyze_still_builds_its_subcommands() -> None:
    from chillfl.cli import build_parser

    args = build_parser(analyses=True).parse_args(["analyze", "calibration", "some/run"])
    assert args.analysis == "calibration"

