"""docs/python-api.md's ``executor = "processes"`` example runs as a script: the ``__main__`` guard keeps the
spawned workers (which re-import the main script) from starting runs of their own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"


def _example() -> str:
    found = re.search(r"<!-- example: processes -->\n```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.S | re.M)
    assert found is not None, f"no processes example in {DOC}"
    return found.group(1)


def _run(source: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(source)
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_the_guarded_example_runs_under_the_processes_executor(tmp_path: Path) -> None:
    source = _example()
    assert '"executor": "processes"' in source and 'if __name__ == "__main__":' in source
    done = _run(source, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("accuracy ") == 1  # one run: no worker started one of its own
