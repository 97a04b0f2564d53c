"""Every key a comparison's ``table.json`` holds is named in docs/comparisons.md's "`table.json`, key by key" section
(over seeds, with a tuning grid, and at one seed); the units it states hold (accuracies as fractions, MB as 10^6 bytes)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

import chillfl

pytestmark = pytest.mark.usefixtures("one_thread")

DOCS = Path(__file__).resolve().parents[1] / "docs" / "comparisons.md"
BASE = {"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "partition": {"name": "dirichlet", "alpha": 0.3},
        "federation": {"num_clients": 3, "clients_per_round": 3, "rounds": 2}, "eval": {"validation": 0.2}}


def _documented() -> set[str]:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## `table.json`, key by key", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`([a-z_]+)`", section))


def _keys(value: Any) -> Iterator[str]:
    """Every key of the rows and of the objects in them (a tuning point's option names are the user's, not the schema's)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield key
            if key not in ("tuned", "failed"):
                yield from _keys(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _keys(inner)


def _table(folder: Path | None) -> list[dict[str, Any]]:
    assert folder is not None
    rows = json.loads((folder / "table.json").read_text(encoding="utf-8"))
    assert isinstance(rows, list)
    return rows


@pytest.mark.parametrize("seeds, tune", [([0, 1], None), ([0], None), ([0], {"client.lr": [0.01, 0.05]})])
def test_every_key_of_a_small_comparisons_table_json_is_documented(tmp_path: Path, seeds: list[int], tune: dict[str, list[float]] | None) -> None:
    config = {**BASE, **({"tune": tune} if tune else {})}
    result = chillfl.compare(config=config, grid={"algorithm.name": ["fedavg", "fedprox"]}, seeds=seeds, out_dir=tmp_path, progress=False)
    rows = _table(result.folder)
    missing = sorted(set(_keys(rows)) - _documented())
    assert not missing, f"table.json keys not named in docs/comparisons.md: {missing}"
    for row in rows:  # the units the section states
        acc = row["final_acc"]["mean"] if isinstance(row["final_acc"], dict) else row["final_acc"]
        assert 0.0 <= acc <= 1.0
        out = result.outputs[next(k for k in result.outputs if k.startswith(row["variant"]))]
        mb = row["cumulative_mb"]["per_seed"][0] if isinstance(row["cumulative_mb"], dict) else row["cumulative_mb"]
        assert mb == out.records[-1]["bytes_cumulative"] / 1e6
