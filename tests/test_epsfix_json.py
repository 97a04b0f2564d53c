"""``chillfl report``'s search for a garbled ``metrics.jsonl`` line reads lines as
:func:`~chillfl.storage.results.read_metrics` does (:func:`chillfl.errors.json_loads`, depth-limited), not with a bare
``json.loads``, whose RecursionError on a deeply nested line no ``except ValueError`` caught."""

from __future__ import annotations

import json
from pathlib import Path

from chillfl.report.html import _not_json


def test_the_garbled_line_search_reads_lines_depth_limited(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n{garbled\n", encoding="utf-8")
    try:
        json.loads("{garbled")
    except json.JSONDecodeError as exc:
        said = _not_json(path, exc)  # a bare json.loads raised RecursionError on line 1, a traceback from `chillfl report`
    assert said.startswith("metrics.jsonl line 1: not JSON (")
