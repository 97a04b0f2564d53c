"""``chillfl reproduce``: verdicts on hand-worked differences, and every claim's config resolves."""

from __future__ import annotations

import pytest

from chillfl.cli import main
from chillfl.reproduce import CLAIMS, PAPERS, accuracy_verdict, bytes_verdict, claim_config


def test_accuracy_verdicts() -> None:
    # d = [0.02, 0.03, 0.04]: mean 0.03, std 0.01, half width 4.3027 * 0.01 / sqrt(3) = 0.024842 -> [+0.52, +5.48] points > 0
    measured, verdict = accuracy_verdict([0.02, 0.03, 0.04])
    assert verdict == "reproduces" and measured.startswith("+3.00 ± 1.00 points [95 % CI +0.52, +5.48], sign holds 3/3")
    # d = [0.05, -0.02, 0.10]: interval [-10.64, +19.31] points contains 0
    assert accuracy_verdict([0.05, -0.02, 0.10])[1] == "does not at this scale"
    assert accuracy_verdict([-0.02, -0.03, -0.04])[1] == "opposite"
    # one seed: no interval, so no verdict (it read "reproduces" from the sign alone, against the documented interval rule)
    assert accuracy_verdict([0.01]) == ("+1.00 points (one seed: no interval, so no verdict beyond this)", "does not at this scale")
    assert accuracy_verdict([-0.01])[1] == "does not at this scale"


def test_bytes_verdicts() -> None:
    # ratios 0.33 and 0.34 <= 0.5 in every seed; mean 0.335
    measured, verdict = bytes_verdict([0.33, 0.34], 0.5)
    assert verdict == "reproduces" and "0.335" in measured
    assert bytes_verdict([0.4, 0.6], 0.5)[1] == "does not at this scale"
    assert bytes_verdict([1.2, 1.1], 0.5)[1] == "opposite"


def test_every_claim_config_resolves() -> None:
    assert {c.paper for c in CLAIMS} == set(PAPERS)
    for claim in CLAIMS:
        config = claim_config(claim, [0, 1, 2], None)
        assert config.compare["seeds"] == [0, 1, 2] and config.compare["baseline"] == claim.baseline
        if claim.keep:
            assert sorted(config.variants) == sorted(claim.keep)
        if claim.tune:
            assert config.eval.validation > 0


def test_unknown_paper_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "nopaper"])
    assert exc.value.code == 2


def test_scarlet_runs_the_scaled_setting_and_a_d_sweep_in_one_comparison() -> None:
    from chillfl.reproduce import Outcome, _key, format_outcomes

    scarlet = [c for c in CLAIMS if c.paper == "scarlet"]
    headline = [c for c in scarlet if c.section == "headline"]
    assert {c.variant for c in headline} == {"SCARLET D=1"} and all(c.overrides == {"federation.rounds": 20} for c in scarlet)
    config = claim_config(headline[0], [0], None)
    durations = {label: v["distillation"]["cache_duration"] for label, v in config.variants.items() if label != "DS-FL"}
    assert durations == {"SCARLET": 20, "SCARLET D=0": 0, "SCARLET D=1": 1, "SCARLET D=5": 5}
    assert len({_key(c) for c in scarlet}) == 1  # every SCARLET row reads the same comparison
    named = [c for c in scarlet if c.text.startswith("D = 20 in 20 rounds: the cache outlives the run")]
    assert len(named) == 1 and named[0].variant == "SCARLET" and named[0].section == "sensitivity"
    text = format_outcomes([Outcome(headline[0], [0], "+1.00 points", "reproduces", 0.5), Outcome(named[0], [0], "-2.00 points", "opposite", 0.25)])
    head, sens = text.split("Sensitivity")
    assert "D=1 vs DS-FL" in head and "cache outlives" not in head
    assert "| 0.250 | **opposite** |" in sens


def test_verdict_figure_rows_are_the_claims_per_seed_values_with_their_interval(tmp_path) -> None:
    """reproduce-PAPER.md/.png: hand-worked rows, both panels drawn, every claim's folder named."""
    pytest.importorskip("matplotlib")
    from pathlib import Path

    from chillfl.reproduce import Outcome, verdict_points, write_verdicts

    scarlet = [c for c in CLAIMS if c.paper == "scarlet"]
    nbytes = next(c for c in scarlet if c.metric == "bytes")
    acc = next(c for c in scarlet if c.metric == "accuracy" and c.section == "headline")
    folder = Path(tmp_path) / "dsfl-vs-scarlet-compare"
    outcomes = [
        Outcome(nbytes, [0, 1], "m", "reproduces", 0.35, folder, (0.3, 0.4)),
        Outcome(acc, [0, 1], "m", "does not at this scale", 0.35, folder, (2.0, 4.0)),
        Outcome(acc, [0, 1], "diverged", "does not at this scale", None, folder),  # nothing to draw
    ]
    b, a = verdict_points(outcomes)
    assert (b.metric, b.per_seed, b.bound, b.interval) == ("bytes", (0.3, 0.4), 0.5, None) and b.mean == pytest.approx(0.35)
    # d = [2, 4]: mean 3, std sqrt(2), half width t(0.975, 1) * sqrt(2) / sqrt(2) = 12.7062
    assert (a.metric, a.mean) == ("accuracy", 3.0) and a.interval is not None and not a.interval.clipped
    assert (a.interval.low, a.interval.high) == pytest.approx((3.0 - 12.7062, 3.0 + 12.7062), abs=1e-4)

    path = write_verdicts("scarlet", outcomes)
    assert path == Path(tmp_path) / "reproduce-scarlet.md"
    text = path.read_text()
    assert "![verdicts](reproduce-scarlet.png)" in text and f"- {acc.text}: `{folder}`" in text and "| scarlet |" in text
    from matplotlib.image import imread

    image = imread(path.with_suffix(".png"))
    assert image.shape[1] > image.shape[0] > 100  # one wide figure, two panels side by side
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["reproduce-scarlet.md", "reproduce-scarlet.png"]  # no temp file left


def test_verdicts_without_matplotlib_still_write_the_table(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    import chillfl.reproduce as reproduce
    from chillfl.errors import MissingExtra

    def missing(*_a: object, **_k: object) -> None:
        raise MissingExtra("matplotlib", "plots", "plots")

    monkeypatch.setattr(reproduce, "plot_verdicts", missing)
    claim = CLAIMS[0]
    path = reproduce.write_verdicts("flexchill", [reproduce.Outcome(claim, [0], "m", "reproduces", None, Path(tmp_path) / "demo-compare", (1.0,))])
    assert path is not None and "![verdicts]" not in path.read_text() and not path.with_suffix(".png").exists()


def test_verdicts_when_every_claim_diverged_are_a_table_without_a_figure(tmp_path) -> None:
    """Nothing to draw must not fail the last step of a long reproduction (it raised ValueError from max() before)."""
    from pathlib import Path

    from chillfl.reproduce import Outcome, write_verdicts

    diverged = [Outcome(c, [0, 1], "diverged", "does not at this scale", None, Path(tmp_path) / "demo-compare") for c in CLAIMS[:2]]
    path = write_verdicts("flexchill", diverged)
    assert path is not None and "| diverged |" in path.read_text() and "![verdicts]" not in path.read_text()
    assert not path.with_suffix(".png").exists()


def test_an_accuracy_difference_past_100_points_is_shown_clipped_marked_and_footnoted() -> None:
    """d = [0.90, 0.10, 0.50]: mean 0.50, deviations +0.4, -0.4, 0 -> variance 0.32 / 2 = 0.16, std 0.40; half width
    4.302653 * 0.40 / sqrt(3) = 0.993655 -> t-interval [-0.493655, +1.493655] = [-49.37, +149.37] points. A difference of
    two accuracies lies in [-100, +100] points, so the table shows [-49.37, +100.00] and the dagger, with the shared
    footnote under the table; the verdict reads the interval as computed (it contains 0)."""
    from chillfl.metrics.stats import CLIPPED_NOTE
    from chillfl.plots.verdicts import CLIPPED_LEGEND, label
    from chillfl.reproduce import Outcome, format_outcomes, verdict_points

    measured, verdict = accuracy_verdict([0.90, 0.10, 0.50])
    assert measured == "+50.00 ± 40.00 points [95 % CI -49.37, +100.00]†, sign holds 3/3" and verdict == "does not at this scale"
    acc = next(c for c in CLAIMS if c.metric == "accuracy" and c.section == "headline")
    clipped = Outcome(acc, [0, 1, 2], measured, verdict, None, None, (90.0, 10.0, 50.0))
    inside = Outcome(acc, [0, 1, 2], accuracy_verdict([0.02, 0.03, 0.04])[0], "reproduces", None, None, (2.0, 3.0, 4.0))
    assert format_outcomes([clipped, inside]).splitlines()[-2:] == ["", CLIPPED_NOTE]
    assert CLIPPED_NOTE not in format_outcomes([inside])  # nothing clipped: no footnote
    # the figure: the same interval in points, [-49.37, +149.37] -> drawn to [-49.37, +100], the label marked
    a, b = verdict_points([clipped, inside])
    assert a.interval is not None and a.interval.clipped and (a.interval.low, a.interval.high) == (pytest.approx(-49.3655, abs=1e-4), 100.0)
    assert label(a) == f"{a.label} †" and label(b) == b.label and b.interval is not None and not b.interval.clipped
    assert CLIPPED_LEGEND.startswith("†") and "±100 points" in CLIPPED_LEGEND


def test_a_dry_run_plans_each_comparison_once_and_builds_each_variant_once(tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``reproduce --dry-run --resume`` planned each comparison four times (its variants, its check, its runs, its folder
    to resume), building each variant's config each time: once each now, the printed plan unchanged."""
    import chillfl.reproduce as reproduce
    from chillfl.reproduce import Claim
    from chillfl.sweeps import plan as planning

    small = {"federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 2, "eval.clients": "none", "model.name": "mlp"}
    claims = (  # two claims of one comparison (one plan), one of another: 2 comparisons of 2 variants each
        Claim("flexchill", "a", "demo", "T=0.05", "T=1", grid=("temperature=1,0.05",), overrides={**small, "client.lr": 0.01}),
        Claim("flexchill", "b", "demo", "T=1", "T=1", grid=("temperature=1,0.05",), overrides={**small, "client.lr": 0.01}),
        Claim("flexchill", "c", "demo", "T=0.05", "T=1", grid=("temperature=1,0.05",), overrides={**small, "client.lr": 0.05}),
    )
    monkeypatch.setattr(reproduce, "CLAIMS", claims)
    plans: list[str] = []
    builds: list[str] = []
    real_plan, real_build = planning._plan_sweep, planning.variant_config

    def counted_plan(config, *args, **kwargs):  # type: ignore[no-untyped-def]
        plans.append(config.client.lr)
        return real_plan(config, *args, **kwargs)

    def counted_build(config, label, overrides):  # type: ignore[no-untyped-def]
        builds.append(f"{config.client.lr} {label}")
        return real_build(config, label, overrides)

    monkeypatch.setattr(planning, "_plan_sweep", counted_plan)
    monkeypatch.setattr(planning, "variant_config", counted_build)
    assert main(["reproduce", "flexchill", "--seeds", "0,1", "--out", str(tmp_path / "r"), "--dry-run", "--resume"]) == 0
    printed = capsys.readouterr().out
    assert plans == [0.01, 0.05]  # once a comparison (claims a and b share one)
    assert builds == ["0.01 T=1", "0.01 T=0.05", "0.05 T=1", "0.05 T=0.05"]  # each variant's config once
    rows = [line.split(" | ")[2:6] for line in printed.splitlines() if line.startswith("| demo |")]  # variants, points, seeds, runs
    assert rows == [["T=1, T=0.05", "1", "2", "4"]] * 2 and not (tmp_path / "r").exists()


def test_dry_runs_check_on_one_thread_and_restore_the_count(tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The command line's dry runs (``reproduce``, ``compare``) build every run's parts on one intra-op thread, then
    restore the count: their shape probes keep no number, and threads only added hand-offs to their tiny ops."""
    import torch

    import chillfl.reproduce as reproduce
    import chillfl.sweeps.run as sweeps_run
    from chillfl.reproduce import Claim

    small = {"federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 2, "eval.clients": "none", "model.name": "mlp"}
    monkeypatch.setattr(reproduce, "CLAIMS", (Claim("flexchill", "a", "demo", "T=0.05", "T=1", grid=("temperature=1,0.05",), overrides=small),))
    real, seen = sweeps_run.check_runs, []

    def check_runs(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(sweeps_run, "check_runs", check_runs)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert main(["reproduce", "flexchill", "--seeds", "0", "--out", str(tmp_path / "r"), "--dry-run"]) == 0
        after_reproduce = torch.get_num_threads()
        overrides = [f"{k}={v}" for k, v in small.items()]
        assert main(["compare", "demo", "--grid", "temperature=1,0.05", "--out", str(tmp_path / "c"), "--dry-run", *overrides]) == 0
        after_compare = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    capsys.readouterr()
    assert seen == [1, 1] and after_reproduce == after_compare == 2
