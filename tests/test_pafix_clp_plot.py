"""``python -m chillfl.plots.pa3fed FOLDER`` reads folders as the metrics tables do: a run folder, finished runs only,
seeds of one variant together, and one line (exit 2) for a folder with no PA3Fed run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import pytest

pytest.importorskip("matplotlib")


import chillfl.plots.pa3fed as pa3fed  # noqa: E402


def pa3_records(adapted: Sequence[int], acc: float = 0.1) -> list[dict[str, Any]]:
    """Three rounds of a PA3Fed run, adapted inside the CLP in the rounds ``adapted``; accuracy ``acc`` times the round."""
    return [{"round": r, "global_acc": acc * r, "agg_clp": r in adapted, "agg_adapted": r in adapted, "agg_fgn": 1.0} for r in (1, 2, 3)]


def write_run(folder: Path, records: Sequence[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What main hands the plotting functions (one run per label, or runs per label), instead of drawing."""
    seen: dict[str, Any] = {}

    def one(curves: Any, out: Path, title: str = "") -> bool:
        seen["one"] = dict(curves)
        return True

    def seeds(groups: Any, out: Path, title: str = "") -> bool:
        seen["seeds"] = dict(groups)
        return True

    monkeypatch.setattr(pa3fed, "plot_compare_clp", one)
    monkeypatch.setattr(pa3fed, "plot_compare_clp_seeds", seeds, raising=False)  # (raising=False: the old module had none)
    return seen


def test_a_folder_without_a_pa3fed_run_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A FedChill result folder (no agg_clp anywhere) got a clp_curves.png with no CLP in it, and exit 0."""
    write_run(tmp_path / "cmp" / "FedChill", [{"round": r, "global_acc": 0.1 * r, "temperature": 0.5} for r in (1, 2)])
    assert pa3fed.main([str(tmp_path / "cmp")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "agg_clp" in err and str(tmp_path / "cmp") in err
    assert not (tmp_path / "cmp" / "clp_curves.png").exists()


def test_a_run_folder_is_read_as_one_run(tmp_path: Path, captured: dict[str, Any]) -> None:
    """A run folder (metrics.jsonl in it) was refused: "no run folders with metrics.jsonl under X"."""
    run = write_run(tmp_path / "PA3Fed", pa3_records([2]))
    assert pa3fed.main([str(run)]) == 0
    assert list(captured["one"]) == ["PA3Fed"] and captured["one"]["PA3Fed"] == pa3_records([2])


def test_failed_and_partial_runs_are_left_out(tmp_path: Path, captured: dict[str, Any]) -> None:
    folder = tmp_path / "cmp"
    write_run(folder / "PA3Fed", pa3_records([2]))
    write_run(folder / "FedAvg.failed", pa3_records([3]))
    write_run(folder / "Other.partial", pa3_records([3]))
    assert pa3fed.main([str(folder)]) == 0
    assert list(captured["one"]) == ["PA3Fed"]


def test_the_seeds_of_a_variant_are_one_group_in_table_order(tmp_path: Path, captured: dict[str, Any]) -> None:
    """Each seed was a curve of its own, labelled by its folder name (``PA3Fed-s0``)."""
    folder = tmp_path / "cmp"
    sweep = {"options": {"seeds": [0, 1], "tune": {}}, "variants": [{"label": "FedAvg", "short": None, "tune": {}},
                                                                    {"label": "PA3Fed (CLP only)", "short": None, "tune": {}}]}
    folder.mkdir()
    (folder / "sweep.json").write_text(json.dumps(sweep))
    for seed in (0, 1):
        write_run(folder / f"PA3Fed__CLP_only-s{seed}", pa3_records([2], 0.1 + seed / 100))
        write_run(folder / f"FedAvg-s{seed}", [{"round": r, "global_acc": 0.1 * r} for r in (1, 2, 3)])
    assert pa3fed.main([str(folder)]) == 0
    groups = captured["seeds"]
    assert list(groups) == ["FedAvg", "PA3Fed (CLP only)"]  # sweep.json's order, not the folders' sorted names
    assert [len(runs) for runs in groups.values()] == [2, 2]


def test_over_seeds_the_line_is_the_mean_and_dots_the_rounds_most_seeds_adapted(tmp_path: Path, drawn: list[Any]) -> None:
    figures = drawn
    runs = [pa3_records([2, 3], 0.1), pa3_records([2], 0.2)]  # round 2 adapted in both seeds, round 3 in one of two
    assert pa3fed.plot_compare_clp_seeds({"PA3Fed": runs}, tmp_path / "clp_curves.png", title="cmp")
    (ax,) = figures[0].axes
    line, dots = ax.get_lines()
    assert list(line.get_xdata()) == [1, 2, 3] and list(line.get_ydata()) == pytest.approx([0.15, 0.3, 0.45])
    assert list(dots.get_xdata()) == [2, 3] and list(dots.get_ydata()) == pytest.approx([0.3, 0.45])  # half or more
    assert line.get_label() == "PA3Fed (n=2)" and "mean over seeds" in ax.get_title()
    assert pa3fed.adapted_rounds([pa3_records([3]), pa3_records([2]), pa3_records([2])]) == {2}  # 1 of 3 is not half
