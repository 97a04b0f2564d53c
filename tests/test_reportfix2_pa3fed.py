"""``python -m chillfl.plots.pa3fed`` on a multi-seed comparison: one mean line per variant with a ± 1 std band over its
seeds, as the comparison's other curves draw it (it drew the mean alone, with no spread); one seed each: no band."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import pytest
from matplotlib.collections import PolyCollection

import chillfl.plots.pa3fed as pa3fed


def records(acc: float, clp: bool = True) -> list[dict[str, Any]]:
    """Three rounds at accuracy ``acc`` x round; a PA3Fed run (CLP in round 2) with ``clp``."""
    return [{"round": r, "global_acc": acc * r, **({"agg_clp": r == 2, "agg_adapted": r == 2, "agg_fgn": 1.0} if clp else {})} for r in (1, 2, 3)]


def comparison(folder: Path, seeds: Sequence[int]) -> Path:
    """A comparison folder (``sweep.json`` and one run folder per variant and seed): FedAvg at 0.1 + seed/10, PA3Fed at
    0.2 + seed/10 accuracy per round."""
    folder.mkdir()
    variants = [{"label": label, "short": None, "tune": {}} for label in ("FedAvg", "PA3Fed")]
    (folder / "sweep.json").write_text(json.dumps({"options": {"seeds": list(seeds), "tune": {}}, "variants": variants}))
    for seed in seeds:
        for label, acc in (("FedAvg", 0.1), ("PA3Fed", 0.2)):
            run = folder / (f"{label}-s{seed}" if len(seeds) > 1 else label)
            run.mkdir()
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records(acc + seed / 10, clp=label == "PA3Fed")))
    return folder


def test_multi_seed_is_one_line_per_variant_with_a_seed_band(tmp_path: Path, drawn: list[Any]) -> None:
    folder = comparison(tmp_path / "cmp", (0, 1))
    assert pa3fed.main([str(folder)]) == 0
    (ax,) = drawn[-1].axes
    curves = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert [line.get_label() for line in curves] == ["FedAvg (n=2)", "PA3Fed (n=2)"]
    assert list(curves[0].get_ydata()) == pytest.approx([0.15, 0.3, 0.45])  # seeds 0.1 and 0.2 per round: mean 0.15
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2  # one per variant, not per seed folder
    std = 0.05 * 2**0.5  # sample std of 0.1 and 0.2 at round 1
    ys = bands[0].get_paths()[0].vertices[:, 1]
    assert min(ys) == pytest.approx(0.15 - std) and max(ys) == pytest.approx(0.45 + 3 * std)
    assert "std over seeds" in ax.get_title()


def test_one_seed_draws_no_band(tmp_path: Path, drawn: list[Any]) -> None:
    folder = comparison(tmp_path / "cmp", (0,))
    assert pa3fed.main([str(folder)]) == 0
    (ax,) = drawn[-1].axes
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")] == ["FedAvg", "PA3Fed"]
