"""The docs/python-api.md examples of issue 25 run as written (tiny data, 2 rounds): a comparison with seeds and
tuning on your own model, a custom-metric callback, early stopping, your own Dataset with a public set, and one with a
random transform."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"


def example(name: str) -> str:
    """The python block right after ``<!-- example: NAME -->``."""
    found = re.search(rf"<!-- example: {re.escape(name)} -->\n```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.S | re.M)
    assert found is not None, f"no example {name!r} in {DOC}"
    return found.group(1)


@pytest.fixture
def ns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The namespace after the page's first block (data, model), run in a scratch folder."""
    monkeypatch.chdir(tmp_path)
    first = re.search(r"^```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.S | re.M)
    assert first is not None
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(first.group(1), str(DOC), "exec"), namespace)
    return namespace


def run(name: str, namespace: dict[str, Any]) -> dict[str, Any]:
    exec(compile(example(name), f"{DOC}:{name}", "exec"), namespace)
    return namespace


def test_custom_metric(ns: dict[str, Any]) -> None:
    run("custom-metric", ns)
    assert len(ns["f1"]) == 2 and all(0.0 <= v <= 1.0 for v in ns["f1"])


def test_early_stopping(ns: dict[str, Any]) -> None:
    run("early-stopping", ns)
    stopped = ns["stopped"]
    info = stopped.summary.get("stopped")
    if info is None:  # never stalled: every round ran
        assert len(stopped.records) == 8
    else:
        assert len(stopped.records) == info["round"] < 8 and info["reason"] == "no gain for 1 rounds"
        assert (stopped.folder / "checkpoint.safetensors").is_file()


def test_comparison_with_seeds_and_tuning_on_your_own_model(ns: dict[str, Any]) -> None:
    run("compare", ns)
    comparison = ns["comparison"]
    assert [r["variant"] for r in comparison.rows] == ["algorithm.name=fedavg", "algorithm.name=scaffold"]
    assert all(r["final_acc"]["n"] == 2 and "client.lr" in r["tuned"] for r in comparison.rows)
    assert ns["page"].is_file() and comparison.folder.is_dir()


def test_own_dataset_with_a_public_set(ns: dict[str, Any]) -> None:
    run("dataset-public", ns)
    scarlet = ns["scarlet"]
    assert scarlet.config.distillation["public_size"] == 200 and len(scarlet.records) == 2


def test_random_transforms_are_reproducible(ns: dict[str, Any]) -> None:
    run("dataset-public", ns)  # defines Digits and the raw arrays
    run("random-transforms", ns)
    first, second = ns["runs"]
    assert len(first.records) == 3 and first.records == second.records
