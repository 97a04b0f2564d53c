"""The HTML report's title is short, its groups listed below it; its bands and a comparison's ``curves.png`` are one spread.

The default title once joined every group's label (8 labels, about 400 characters, in the tab and the
heading); it is now the folders' names and the run count, at most TITLE_MAX = 80 characters. Both the
report's curves and ``compare --seeds``'s ``curves.png`` shade mean ± 1 sample std over seeds, computed
by one function (:func:`chillfl.metrics.spread.seed_band`) and named by one constant (``SPREAD``).
"""

from __future__ import annotations

import html as htmllib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import pytest

import chillfl.metrics.spread as spread
import chillfl.plots.bands as bands
import chillfl.report.html as report
from chillfl.cli import main
from chillfl.report.html import TITLE_MAX, default_title, render
from chillfl.storage.results import to_toml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

TINY = ["dataset.name=digits", "federation.num_clients=4", "federation.rounds=2", "federation.clients_per_round=2", "model.name=mlp",
        "eval.client_split_size=20", "eval.clients=none"]


def test_default_title_is_the_folders_and_the_run_count() -> None:
    assert default_title(["results/flexchill/table4-digits-compare"], 24) == "chillfl report: table4-digits-compare, 24 runs"
    assert default_title(["a", "b/"], 1) == "chillfl report: a, b, 1 run"
    many = default_title([f"results/run-{i}" for i in range(5)], 5)
    assert many == "chillfl report: run-0 and 4 more folders, 5 runs"


def test_a_long_folder_name_is_cut_to_the_bound() -> None:
    title = default_title(["x" * 300], 8)
    # 80 = len("chillfl report: ") 16 + 55 x's + "…" 1 + len(", 8 runs") 8
    assert len(title) == TITLE_MAX == 80 and title == "chillfl report: " + "x" * 55 + "…, 8 runs"


@pytest.fixture(scope="module")
def eight_groups(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny run, copied into 8 groups with long names (each its own lr): the page the 400-character title came from."""
    root = tmp_path_factory.mktemp("eight")
    assert main(["run", "-q", str(_config(root)), *TINY]) == 0
    (first,) = (root / "out").iterdir()
    folder = root / "compare"
    folder.mkdir()
    for i in range(8):
        copy = folder / f"run{i}"
        copy.mkdir()
        for f in first.iterdir():
            if f.is_file():
                (copy / f.name).write_bytes(f.read_bytes())
        saved: dict[str, Any] = tomllib.loads((copy / "config.toml").read_text(encoding="utf-8"))
        saved["name"] = f"algorithm.name=fedavg, client.lr=0.0{i + 1}, temperature.policy=fixed, temperature.value=0.{i + 1}"
        saved["client"]["lr"] = 0.01 * (i + 1)
        (copy / "config.toml").write_text(to_toml(saved), encoding="utf-8")
    return folder


def _config(root: Path) -> Path:
    path = root / "tiny.toml"
    path.write_text(f'name = "tiny"\nout_dir = "{root / "out"}"\n')
    return path


def test_the_page_title_and_heading_are_short_and_the_groups_follow(eight_groups: Path) -> None:
    page = render([eight_groups], models=False, partitions=False)
    title = htmllib.unescape(re.search(r"<title>(.*?)</title>", page).group(1))  # type: ignore[union-attr]
    heading = htmllib.unescape(re.search(r"<h1>(.*?)</h1>", page).group(1))  # type: ignore[union-attr]
    assert title == heading == "chillfl report: compare, 8 runs" and len(title) <= TITLE_MAX
    groups = htmllib.unescape(re.search(r'<p id="groups">(.*?)</p>', page).group(1))  # type: ignore[union-attr]
    labels = [f"algorithm.name=fedavg, client.lr=0.0{i + 1}, temperature.policy=fixed, temperature.value=0.{i + 1}" for i in range(8)]
    assert len(", ".join(labels)) > 400 and all(label in groups for label in labels)  # the full list, below the heading
    assert f"curves: mean over seeds, {spread.SPREAD}" in htmllib.unescape(page)


def test_seed_band_on_given_numbers() -> None:
    # two seeds, common rounds 1 and 2 (round 3 only in the first): (0.2, 0.6) and (0.4, 0.8)
    # mean 0.4 and 0.6; sample std |0.6 - 0.2| / sqrt(2) = 0.28284 (ddof 1) at both rounds
    a = [{"round": 1, "global_acc": 0.2}, {"round": 2, "global_acc": 0.4}, {"round": 3, "global_acc": 0.9}]
    b = [{"round": 1, "global_acc": 0.6}, {"round": 2, "global_acc": 0.8}, {"round": 3}]
    rounds, mean, std = spread.seed_band([a, b], "global_acc")
    assert rounds == [1, 2] and mean == pytest.approx([0.4, 0.6]) and std == pytest.approx([0.28284, 0.28284], abs=1e-5)
    assert spread.seed_band([a], "global_acc")[2] == [0.0, 0.0, 0.0]  # one seed: no spread


def test_the_report_and_curves_png_draw_one_spread_named_alike(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Both import the one band function and the one name; curves.png's shading is mean ± std at each round."""
    assert bands.seed_band is spread.seed_band and report.seed_band is spread.seed_band
    assert bands.SPREAD is spread.SPREAD and report.SPREAD is spread.SPREAD and spread.SPREAD == "band = ± 1 std over seeds"
    assert "min-max" not in inspect.getsource(bands) and "min-max" not in inspect.getsource(report)
    a = [{"round": 1, "global_acc": 0.2, "global_loss": 2.0}, {"round": 2, "global_acc": 0.4, "global_loss": 1.0}]
    b = [{"round": 1, "global_acc": 0.6, "global_loss": 2.0}, {"round": 2, "global_acc": 0.8, "global_loss": 1.0}]
    report_rounds, report_mean, report_std = report.band([a, b], "global_acc")
    assert report_std.tolist() == spread.seed_band([a, b], "global_acc")[2]
    drawn: dict[str, Any] = {}
    monkeypatch.setattr(bands, "finish_panels", lambda fig, axes, path: drawn.update(axes=axes))
    bands.plot_band_curves({"T=1": [a, b]}, tmp_path / "curves.png", title="t")
    ax_acc = drawn["axes"][0]
    assert spread.SPREAD in ax_acc.get_title()
    ys = [y for path in ax_acc.collections[0].get_paths() for x, y in path.vertices if x == 1]
    # round 1: mean 0.4 ± 0.28284 -> the band spans [0.11716, 0.68284]
    assert (min(ys), max(ys)) == pytest.approx((0.4 - 0.28284, 0.4 + 0.28284), abs=1e-5)
