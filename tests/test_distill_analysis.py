"""Fig. 3 cache-ratio simulation and Fig. 4 entropy curves."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from chillfl.analysis.softlabels import (
    entropy_vs_beta,
    entropy_vs_temperature,
    plot_cache_ratio,
    plot_entropy_vs_beta,
    plot_entropy_vs_temperature,
    simulate_cache_ratio,
)
from chillfl.protocols.softlabels import CacheSignal, ServerCache


def test_cache_ratio_by_hand_when_every_sample_is_drawn() -> None:
    # |P| = |P^t| = 2: both indices every round, D = 2 (valid iff t - t_c <= 2)
    # drop:    t1 absent 0 | t2 (1) 1 | t3 (2) 1 | t4 (3) expired 0, dropped | t5 absent 0, stored 5 | t6 1 | t7 1 | t8 0
    assert simulate_cache_ratio(2, 2, 2, 8, seed=0) == [0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    # refresh: t4 expired -> re-stored at 4 -> t5 1, t6 1, t7 expired 0, t8 1
    assert simulate_cache_ratio(2, 2, 2, 8, seed=0, on_expire="refresh") == [0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0]


def test_duration_zero_never_hits() -> None:
    assert simulate_cache_ratio(50, 10, 0, 20, seed=1) == [0.0] * 20


def test_simulation_matches_server_cache() -> None:
    num_public, subset, d, rounds, seed = 30, 6, 3, 25, 7
    ratios = simulate_cache_ratio(num_public, subset, d, rounds, seed)
    rng = np.random.default_rng(seed)  # same draws as the simulation
    server = ServerCache(duration=d)
    for t in range(1, rounds + 1):
        idx = rng.choice(num_public, size=subset, replace=False).tolist()
        req = server.request(t, idx)
        upd = server.update(t, idx, torch.zeros((req.numel(), 2)))
        cached = (upd.downlink.signals == CacheSignal.CACHED).float().mean().item()
        assert cached == pytest.approx(ratios[t - 1]), t


def test_mean_ratio_grows_with_duration() -> None:
    means = [float(np.mean(simulate_cache_ratio(200, 20, d, 60, seed=3))) for d in (0, 5, 20, 60)]
    assert all(a < b for a, b in zip(means, means[1:])), means


P_HIGH = torch.tensor([[0.4, 0.35, 0.25]], dtype=torch.float64)  # Fig. 4a-like: high entropy
P_LOW = torch.tensor([[0.9, 0.07, 0.03]], dtype=torch.float64)  # Fig. 4b-like: low entropy


def test_entropy_curves() -> None:
    temps = [1.0, 0.5, 0.1, 0.05, 0.01]
    h = entropy_vs_temperature(P_HIGH, temps)
    assert all(a > b for a, b in zip(h, h[1:]))
    betas = [1.0, 1.5, 2.0, 3.0]
    hb = entropy_vs_beta(P_LOW, betas)
    # beta = 1 recovers the original entropy: -(0.9 ln 0.9 + 0.07 ln 0.07 + 0.03 ln 0.03)
    #   = 0.9 * 0.1053605 + 0.07 * 2.6592600 + 0.03 * 3.5065579 = 0.0948245 + 0.1861482 + 0.1051967 = 0.3861694
    assert hb[0] == pytest.approx(0.3861694, abs=1e-6)
    assert all(a > b for a, b in zip(hb, hb[1:]))
    # per-client input [K, n, C] is averaged first: mean of [1, 0, 0] and [0, 1, 0] is [1/2, 1/2, 0] -> ln 2 at beta 1
    two = torch.tensor([[[1.0, 0.0, 0.0]], [[0.0, 1.0, 0.0]]], dtype=torch.float64)
    assert entropy_vs_beta(two, [1.0])[0] == pytest.approx(math.log(2))


def test_plots_write_png(tmp_path) -> None:
    paths = [
        plot_cache_ratio({0: [0.0, 0.0], 5: [0.0, 0.5]}, tmp_path / "fig3.png"),
        plot_entropy_vs_temperature({"high": P_HIGH, "low": P_LOW}, [1.0, 0.1, 0.01], tmp_path / "fig4c.png"),
        plot_entropy_vs_beta({"high": P_HIGH, "low": P_LOW}, [1.0, 2.0, 4.0], tmp_path / "sub" / "fig4d.png"),
    ]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("args", "field"), [
    (["analyze", "cache-ratio", "--rounds", "3", "-o", "{f}/x.png"], "--out"),
    (["analyze", "cache-ratio", "--rounds", "3", "-o", "{d}"], "--out"),
    (["analyze", "soft-label-entropy", "--out-dir", "{f}/x"], "--out-dir"),
])
def test_an_unwritable_output_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], field: str) -> None:
    """An output under a file (or a folder given as the PNG) was a FileExistsError/IsADirectoryError traceback."""
    from chillfl.cli import main

    (tmp_path / "f").write_text("")
    assert main([a.format(f=tmp_path / "f", d=tmp_path) for a in args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: {field}:"), err


@pytest.mark.parametrize(("fraction", "duration", "on_expire", "expected"), [
    (0.1, 50, "drop", 5 / 7),  # the paper's Fig. 3 setting, D = 50: Dp = 5 hits per cycle, 2 misses
    (0.1, 10, "drop", 1 / 3),
    (0.1, 50, "refresh", 5 / 6),
    (1.0, 2, "drop", 0.5),  # test_cache_ratio_by_hand_...: 0, 1, 1, 0 repeating
    (1.0, 2, "refresh", 2 / 3),  # 1, 1, 0 repeating
    (0.5, 0, "drop", 0.0),
])
def test_steady_state_closed_form_by_hand(fraction: float, duration: int, on_expire: str, expected: float) -> None:
    from chillfl.analysis.softlabels import steady_state_cache_ratio

    assert steady_state_cache_ratio(fraction, duration, on_expire) == pytest.approx(expected, abs=1e-12)  # type: ignore[arg-type]


@pytest.mark.parametrize("on_expire", ["drop", "refresh"])
def test_simulation_converges_to_the_closed_form(on_expire: str) -> None:
    """The Fig. 3 simulation's long-run mean is Dp / (2 + Dp) (drop) or Dp / (1 + Dp) (refresh)."""
    from chillfl.analysis.softlabels import steady_state_cache_ratio

    r = simulate_cache_ratio(2000, 200, 5, 1200, seed=3, on_expire=on_expire)  # type: ignore[arg-type]
    assert float(np.mean(r[200:])) == pytest.approx(steady_state_cache_ratio(0.1, 5, on_expire), abs=0.01)  # type: ignore[arg-type]


def test_cache_ratio_prints_the_closed_form(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from chillfl.cli import main

    assert main(["analyze", "cache-ratio", "--public-size", "100", "--subset-size", "10", "--durations", "50",
                 "--rounds", "5", "-o", str(tmp_path / "c.png")]) == 0
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 50 |")][0]
    assert row.split("|")[4].strip() == "0.714"


def test_cache_ratio_output_names_the_file_it_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``-o fig`` wrote ``fig`` as a PNG without its suffix (``data show -o`` adds ``.png``: now both, through one function);
    a suffix matplotlib writes no format for is one line on --out before the simulation, not a traceback after it."""
    from chillfl.cli import main

    small = ["analyze", "cache-ratio", "--public-size", "100", "--subset-size", "10", "--durations", "5", "--rounds", "5"]
    assert main([*small, "-o", str(tmp_path / "fig")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.png"]
    assert capsys.readouterr().out.splitlines()[-1] == f"plot: {tmp_path / 'fig.png'}"
    assert main([*small, "-o", str(tmp_path / "fig.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("chillfl: error: --out: ") and "no image format is written as '.txt'" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.png"]


@pytest.mark.parametrize(("args", "field"), [
    (["--betas", "nan"], "--betas"),  # was half the output, then "enhanced_era.beta: must be > 0"
    (["--temps", "nan"], "--temps"),
    (["--temps", "inf"], "--temps"),
    (["--betas", "1,,3"], "--betas"),  # an empty item was dropped
])
def test_non_finite_grid_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], field: str) -> None:
    from chillfl.cli import main

    assert main(["analyze", "soft-label-entropy", "--out-dir", str(tmp_path), *args]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: {field}:"), err
    assert captured.out == "" and not list(tmp_path.iterdir())


def test_non_finite_soft_labels_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from chillfl.cli import main

    np.save(tmp_path / "s.npy", np.array([[0.5, np.nan], [0.2, 0.8]]))
    assert main(["analyze", "soft-label-entropy", "--soft-labels", str(tmp_path / "s.npy"), "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: --soft-labels:"), err
