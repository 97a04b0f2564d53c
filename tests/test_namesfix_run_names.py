"""A comparison's run folder names: none may be a name the comparison's folder keeps for itself.

A variant labelled ``curves.png`` ran into a folder ``curves.png/`` where the comparison's figure goes: the table and
figures could never be written, and ``chillfl resume`` failed the same way forever. ``base.partial`` beside ``base`` finished,
and ``chillfl status`` then said it had stopped; ``config.toml`` was silently renamed ``config.toml-2``. Such names now fall
back to the full labels, as colliding short names do, or are refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.run_names import COMPARISON_FILES, RecordedVariant, run_labels, taken_name
from chillfl.sweeps.plan import CompareOptions, Variant, plan_runs


def plan_names(tmp_path: Path, variants: list[Variant], seeds: list[int] | None = None) -> list[str]:
    config = tmp_path / "c.toml"
    config.write_text('name = "c"\n', encoding="utf-8")
    plan = plan_runs(load_config(config), [], CompareOptions(seeds=seeds or [0]), variants=variants)
    return [c.config.name for c in plan.cells]


def labels_config(tmp_path: Path, *labels: str) -> Path:
    body = 'name = "demo"\n' + "".join(f'[variants."{label}"]\nclient = {{ lr = {0.01 * (i + 1)} }}\n' for i, label in enumerate(labels))
    config = tmp_path / "v.toml"
    config.write_text(body, encoding="utf-8")
    return config


@pytest.mark.parametrize(("labels", "taken"), [
    (("base", "curves.png"), "curves.png"),
    (("base", "Config.TOML"), "Config.TOML"),  # one folder with config.toml on macOS and Windows
    (("base", "sweep.json"), "sweep.json"),
    (("base", "table.md.tmp"), "table.md.tmp"),  # the file table.md... is written through (write_atomic)
    (("base", "base-2"), "base-2"),  # where base's run moves when its folder is taken
])
def test_a_label_naming_a_folder_the_comparison_keeps_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], labels: tuple[str, ...], taken: str,
) -> None:
    config = labels_config(tmp_path, *labels)
    with pytest.raises(ConfigError) as err:
        plan_runs(load_config(config), [], CompareOptions(seeds=[0]))
    assert err.value.field == "variants" and f"{taken!r} names a run's folder {taken!r}" in err.value.message
    capsys.readouterr()
    out = tmp_path / "out"
    assert main(["compare", str(config), "federation.rounds=1", "--out", str(out)]) == 2
    text = capsys.readouterr().err.strip()
    assert len(text.splitlines()) == 1 and text.startswith(f"chillfl: error: variants: {taken!r}") and "Traceback" not in text
    assert not out.exists() or not any(out.iterdir())  # refused before anything was written


def test_a_short_name_the_comparison_keeps_falls_back_to_the_full_labels(tmp_path: Path) -> None:
    """As for colliding short names: every run is named by its full label, and the names read back from the comparison's
    record (:func:`run_labels`, what ``chillfl report`` labels the runs by) are those same names."""
    for shorts in (("curves.png", "b"), ("x", "x-2")):
        variants = [Variant("Alpha", {"client.lr": 0.05}, short=shorts[0]), Variant("Beta", {"client.lr": 0.1}, short=shorts[1])]
        assert plan_names(tmp_path, variants) == ["Alpha", "Beta"], shorts
        recorded = [RecordedVariant(v.label, v.short, v.tune) for v in variants]
        assert run_labels(recorded, {}, [0]) == {"Alpha": "Alpha", "Beta": "Beta"}, shorts


def test_names_the_comparison_does_not_keep_are_planned_as_before(tmp_path: Path) -> None:
    """``-N`` is kept only beside a run ``NAME`` (a grid of negative values names ``shift-2`` beside ``shift2``); a figure's
    name with the seed after it is no figure's."""
    assert plan_names(tmp_path, [Variant("top-5", {"client.lr": 0.05}), Variant("shift-2", {"client.lr": 0.1})]) == ["top-5", "shift-2"]
    assert plan_names(tmp_path, [Variant("curves.png", {"client.lr": 0.05}), Variant("b", {"client.lr": 0.1})], seeds=[0, 1]) == [
        "curves.png-s0", "curves.png-s1", "b-s0", "b-s1"]
    assert taken_name(["base", "base-1", "base-02", "impartial"]) is None  # claim_dir's -N starts at 2, without zeros


def test_every_file_the_comparison_writes_is_kept_from_its_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The figures' writers name their files by the constants :data:`COMPARISON_FILES` is made of: a figure added there
    is kept from the runs' names too. Here every figure is asked for (seeds, local accuracy, a privacy budget)."""
    import chillfl.plots.bands
    import chillfl.plots.differences
    import chillfl.plots.privacy_utility
    import chillfl.plots.run
    import chillfl.report.compare as compare

    written: list[Path] = []

    def record(*args: Any, **kwargs: Any) -> None:
        written.append(next(a for a in args if isinstance(a, Path)))

    monkeypatch.setattr(compare, "plot_compare_accuracy_vs_bytes", record)
    for module, name in ((chillfl.plots.bands, "plot_band_curves"), (chillfl.plots.differences, "plot_differences"),
                         (chillfl.plots.privacy_utility, "plot_privacy_utility"), (chillfl.plots.run, "plot_curves")):
        monkeypatch.setattr(module, name, record)
    records = [{"round": 1, "global_acc": 0.5, "local_acc": 0.5, "bytes_cumulative": 10}]
    rows = [{"variant": "a", "seeds": [0, 1], "diverged_seeds": [], "epsilon": 1.0}, {"variant": "b", "seeds": [0, 1], "diverged_seeds": []}]
    compare.write_band_figures({"a": [records, records], "b": [records, records]}, 0, tmp_path, "cmp", rows, "a", local=True)
    compare.write_compare_figures({}, tmp_path, "cmp", ["a"], rows)
    names = {p.name for p in written} | {p.name for p in tmp_path.iterdir()}
    assert {"curves.png", "local_curves.png", "differences.png", "accuracy_vs_bytes.png", "privacy_utility.png"} <= names
    assert names <= set(COMPARISON_FILES)
    assert {"config.toml", "sweep.json", "table.md", "table.json", "clp_curves.png"} <= set(COMPARISON_FILES)


def test_a_folder_begun_before_the_rule_is_planned_as_it_was_begun(tmp_path: Path) -> None:
    """A comparison made before names were kept (variants ``a`` and ``a-2``) is still read (``status``) and resumed as
    it was begun: ``existing`` plans its own names where the rule would refuse them; a fresh comparison is refused."""
    config = load_config(labels_config(tmp_path, "a", "a-2", "c"))
    with pytest.raises(ConfigError):
        plan_runs(config, [], CompareOptions(seeds=[0]))
    plan = plan_runs(config, [], CompareOptions(seeds=[0]), existing=True)
    assert [c.config.name for c in plan.cells] == ["a", "a-2", "c"]


def test_a_label_ending_like_an_unfinished_folder_names_a_finished_one(tmp_path: Path) -> None:
    """A label or short name ``base.partial`` / ``a.failed`` (refused as a folder the comparison keeps before
    2026-12-06) is made a name that reads as finished, as config.safe_name makes every label a valid run name."""
    variants = [Variant("base.partial", {"client.lr": 0.05}), Variant("a.failed", {"client.lr": 0.1})]
    assert plan_names(tmp_path, variants) == ["base_partial", "a_failed"]
    shorts = [Variant("Alpha", {"client.lr": 0.05}, short="x.partial"), Variant("Beta", {"client.lr": 0.1}, short="b")]
    assert plan_names(tmp_path, shorts) == ["x_partial", "b"]
