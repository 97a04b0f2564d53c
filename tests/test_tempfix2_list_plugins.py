"""`chillfl list --options my_module:METHOD`: an option that takes a method (or dataset) name allows the plugin too."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from plugin_modules import plugin_module
from test_qa_plugins import PARTS_MODULE

ALGORITHMS = '''
from chillfl.extend import Capabilities, FedAvg


class WeightedMean(FedAvg):
    capabilities = Capabilities(takes_weights=True)


class Unweighted(FedAvg):
    capabilities = Capabilities()
'''


def _row(out: str, option: str) -> str:
    rows = [line for line in out.splitlines() if line.startswith(f"| `{option}` |")]
    assert len(rows) == 1, rows
    return rows[0]


def test_pa3fed_base_allows_a_weighted_plugin_named_by_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with plugin_module(tmp_path, monkeypatch, "tf2_algorithms", ALGORITHMS):
        assert main(["list", "--options", "tf2_algorithms:WeightedMean", "tf2_algorithms:Unweighted", "pa3fed"]) == 0
        row = _row(capsys.readouterr().out, "base")
    assert "`fedavg`" in row and row.endswith(", `tf2_algorithms:WeightedMean` |")  # PA3Fed takes it (its base_spec)
    assert "Unweighted" not in row  # declares no takes_weights: PA3Fed refuses it, so the listing does not allow it


def test_without_the_plugin_the_listing_is_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--options", "pa3fed"]) == 0
    assert ":" not in _row(capsys.readouterr().out, "base").split("|")[4]


def test_public_dataset_allows_a_plugin_dataset_named_by_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with plugin_module(tmp_path, monkeypatch, "tf2_parts", PARTS_MODULE):
        assert main(["list", "--options", "tf2_parts:blobs", "distillation"]) == 0
        out = capsys.readouterr().out
    assert _row(out, "public_dataset").endswith(", `tf2_parts:blobs` (or none) |")
    assert "tf2_parts" not in _row(out, "method")  # a dataset is no distillation method
