"""DnC (Divide-and-Conquer, Shejwalkar & Houmansadr, NDSS 2021): scores and kept sets worked by hand on five clients
in 2 and 3 dimensions, the seeded subsampling replayed, intersection and union of iterations, the config errors, short
runs under every executor and a bitwise resume."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from chillfl.aggregation.dnc import DnC, DnCOptions, coordinates, dnc_select, lowest, outlier_scores
from chillfl.aggregation.registry import algorithm_spec, make_aggregator
from chillfl.aggregation.robust import ROBUST, Median
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.seeds import derive_seed

sys.path.insert(0, str(Path(__file__).parent))
from methods_e2e import assert_executors_agree, config  # noqa: E402
from resume_cases import check_resume  # noqa: E402
from test_robust_aggregators import _results  # noqa: E402  (client i uploads values[i] as entry w, float32, and reports 10 (i + 1) samples)

# Five clients in 2-D, mean (1, 2). Centred: x = -3, -2, -1, 0, 6 and y = -1, 1, 1, -1, 0, so that
# X^T X = [[9 + 4 + 1 + 0 + 36, 3 - 2 - 1 + 0 + 0], [., 1 + 1 + 1 + 1]] = [[50, 0], [0, 4]]: the top right
# singular vector is v = (1, 0) (eigenvalue 50 > 4) and s_i = (x_i - 1)^2 = 9, 4, 1, 0, 36.
# Client 4's y (2) is the median's, its x (7) far out along v.
MODELS = [[-2.0, 1.0], [-1.0, 3.0], [0.0, 3.0], [1.0, 1.0], [7.0, 2.0]]


def _zeros(dim: int) -> dict[str, torch.Tensor]:
    return {"w": torch.zeros(dim)}


def test_scores_in_two_dimensions_by_hand() -> None:
    scores = outlier_scores(torch.tensor(MODELS, dtype=torch.float64))
    assert scores.tolist() == pytest.approx([9.0, 4.0, 1.0, 0.0, 36.0], abs=1e-9)


def test_scores_along_a_diagonal_in_three_dimensions_by_hand() -> None:
    # the 2-D case with its x column repeated as y: centred rows (x, x, z), x = -3, -2, -1, 0, 6, z = -1, 1, 1, -1, 0;
    # X^T X = [[50, 50, 0], [50, 50, 0], [0, 0, 4]]: eigenvalues 100 (v = (1, 1, 0) / sqrt 2), 4 and 0;
    # s_i = ((x + x) / sqrt 2)^2 = 2 x^2 = 18, 8, 2, 0, 72. Offset by (5, -1, 0.5): the scores do not move.
    rows = [[x + 5.0, x - 1.0, z + 0.5] for x, z in zip([-3, -2, -1, 0, 6], [-1, 1, 1, -1, 0])]
    assert outlier_scores(torch.tensor(rows, dtype=torch.float64)).tolist() == pytest.approx([18.0, 8.0, 2.0, 0.0, 72.0], abs=1e-9)
    # f = 2: the 3 lowest, clients 1, 2, 3; centred x mean (-2 - 1 + 0) / 3 = -1: (-1 + 5, -1 - 1, (1 + 1 - 1) / 3 + 0.5)
    agg = DnC(0, DnCOptions(f=2))
    out = agg.aggregate(_zeros(3), _results(rows), 1)["w"]
    assert agg.round_metrics() == {"selected": [1, 2, 3]}
    assert out.tolist() == pytest.approx([4.0, -2.0, 5 / 6], abs=1e-6)


@pytest.mark.parametrize(
    "options,kept,mean",
    [
        # f = 1 (c = 1): the 4 lowest of 9, 4, 1, 0, 36 -> 0..3; mean ((-2 - 1 + 0 + 1) / 4, (1 + 3 + 3 + 1) / 4)
        (DnCOptions(f=1), [0, 1, 2, 3], [-0.5, 2.0]),
        # f = 2: the 3 lowest -> 1, 2, 3; mean (0, 7/3)
        (DnCOptions(f=2), [1, 2, 3], [0.0, 7 / 3]),
        # c = 0.5, f = 3: floor(1.5) = 1 removed, as f = 1
        (DnCOptions(f=3, c=0.5), [0, 1, 2, 3], [-0.5, 2.0]),
        # c = 2, f = 1: 2 removed, as f = 2
        (DnCOptions(f=1, c=2.0), [1, 2, 3], [0.0, 7 / 3]),
        # f = 0: nobody removed, the plain mean (5/5, 10/5)
        (DnCOptions(), [0, 1, 2, 3, 4], [1.0, 2.0]),
        # f = 1 by samples 10, 20, 30, 40: x = (-20 - 20 + 0 + 40) / 100 = 0, y = (10 + 60 + 90 + 40) / 100 = 2
        (DnCOptions(f=1, weighting="samples"), [0, 1, 2, 3], [0.0, 2.0]),
    ],
)
def test_kept_set_and_mean_by_hand(options: DnCOptions, kept: list[int], mean: list[float]) -> None:
    agg = DnC(0, options)
    out = agg.aggregate(_zeros(2), _results(MODELS), 1)["w"]
    assert agg.round_metrics() == {"selected": kept}
    assert out.tolist() == pytest.approx(mean, abs=1e-6) and out.dtype == torch.float32


def test_ties_go_to_the_lower_client_and_a_small_round_keeps_one() -> None:
    assert lowest(torch.tensor([4.0, 1.0, 4.0, 9.0, 4.0]), 3) == [0, 1, 2]  # 1, then the 4s of rows 0 and 2
    # f = 4 on a round of 3 (dropouts): max(3 - 4, 1) = 1 kept. Centred 1-D values -2, -1, 3: scores 4, 1, 9 -> client 1
    agg = DnC(0, DnCOptions(f=4))
    assert agg.aggregate(_zeros(1), _results([[0.0], [1.0], [5.0]]), 1)["w"].tolist() == [1.0]
    assert agg.round_metrics() == {"selected": [1]}


def test_integer_buffers_take_the_max_over_the_kept_clients() -> None:
    # client 4 (dropped at f = 1) holds the largest count: the kept clients' max, 8, is what comes out
    out = DnC(0, DnCOptions(f=1)).aggregate({}, _results(MODELS, ints=[3, 8, 5, 2, 99]), 1)
    assert out["n"].item() == 8 and list(out) == ["w", "n"]


# Two coordinates, subsampled one at a time (b = 1 < d = 2). With one column, v = 1 and s_i = (value - mean)^2:
#   column 0: 0, 1, -1, 0, 10 (mean 2): 4, 1, 9, 4, 64 -> f = 1 drops client 4
#   column 1: 0, 1, -1, 10, 0 (mean 2): 4, 1, 9, 64, 4 -> f = 1 drops client 3
SPLIT = torch.tensor([[0.0, 0.0], [1.0, 1.0], [-1.0, -1.0], [0.0, 10.0], [10.0, 0.0]], dtype=torch.float64)
DROPS = {0: [0, 1, 2, 3], 1: [0, 1, 2, 4]}


def drawn(seed: int, round: int, iteration: int) -> int:
    """The coordinate iteration ``iteration`` of ``round`` scores: b = 1 of 2 from (seed, "dnc", round, iteration), as documented."""
    gen = torch.Generator().manual_seed(derive_seed(seed, "dnc", round, iteration))
    return int(torch.randperm(2, generator=gen)[0])


def test_subsampling_replays_the_documented_stream() -> None:
    seen = set()
    for r in range(1, 9):
        kept = dnc_select(SPLIT, DnCOptions(f=1, subsample=1, iterations=1), 7, r)
        assert kept == DROPS[drawn(7, r, 0)]
        assert dnc_select(SPLIT, DnCOptions(f=1, subsample=1, iterations=1), 7, r) == kept  # a pure function of (seed, round)
        seen.add(tuple(kept))
    assert len(seen) == 2  # both coordinates drawn over 8 rounds: the draw is random, not fixed
    # b >= d scores every coordinate: centred rows (-2, -2), (-1, -1), (-3, -3), (-2, 8), (8, -2);
    # X^T X = [[82, -18], [-18, 82]]: v = (1, -1) / sqrt 2 (eigenvalue 100 > 64); s = (x - y)^2 / 2 = 0, 0, 0, 50, 50
    assert outlier_scores(SPLIT).tolist() == pytest.approx([0.0, 0.0, 0.0, 50.0, 50.0], abs=1e-9)
    assert dnc_select(SPLIT, DnCOptions(f=2), 7, 1) == [0, 1, 2]


def test_drawn_coordinates_are_distinct_and_sorted() -> None:
    # b = 5 of d = 40 from the documented stream: the first 5 of randperm(40), without replacement, sorted before use
    gen = torch.Generator().manual_seed(derive_seed(7, "dnc", 3, 0))
    first = torch.randperm(40, generator=gen)[:5]
    cols = coordinates(40, 5, derive_seed(7, "dnc", 3, 0))
    assert cols is not None and cols.tolist() == sorted(first.tolist())
    assert coordinates(40, 40, 0) is None and coordinates(40, 41, 0) is None  # b >= d: every coordinate, nothing drawn


def test_iterations_intersect_or_unite() -> None:
    rounds = [r for r in range(1, 40) if drawn(3, r, 0) != drawn(3, r, 1)]
    same = [r for r in range(1, 40) if drawn(3, r, 0) == drawn(3, r, 1)]
    assert rounds and same
    two = DnCOptions(f=1, subsample=1, iterations=2)
    union = DnCOptions(f=1, subsample=1, iterations=2, combine="union")
    # different columns: {0, 1, 2, 3} and {0, 1, 2, 4} intersect to {0, 1, 2}, unite to everyone
    assert dnc_select(SPLIT, two, 3, rounds[0]) == [0, 1, 2]
    assert dnc_select(SPLIT, union, 3, rounds[0]) == [0, 1, 2, 3, 4]
    # the same column twice: that column's set either way
    assert dnc_select(SPLIT, two, 3, same[0]) == DROPS[drawn(3, same[0], 0)] == dnc_select(SPLIT, union, 3, same[0])


def test_an_empty_intersection_keeps_the_clients_kept_most_often() -> None:
    # three clients, f = 2 (keep 1 an iteration): column 0: 0, 1, 5 (mean 2): scores 4, 1, 9 -> {1};
    # column 1: 1, 0, 5: scores 1, 4, 9 -> {0}. Different columns: the intersection is empty, each of 0 and 1 was kept once
    rows = torch.tensor([[0.0, 1.0], [1.0, 0.0], [5.0, 5.0]], dtype=torch.float64)
    r = next(r for r in range(1, 40) if drawn(3, r, 0) != drawn(3, r, 1))
    assert dnc_select(rows, DnCOptions(f=2, subsample=1, iterations=2), 3, r) == [0, 1]


def test_dnc_drops_what_the_median_lets_through() -> None:
    """A shift hidden inside every coordinate's honest range but all in one direction (the Min-Max attacks' idea):
    the median of each coordinate takes the attackers' values where they are central; DnC drops them by their scores
    (about 32 against at most 13 for an honest client here; at half this shift the honest spread of 12 clients in
    50 dimensions dominates the top direction and DnC keeps them: it needs the shift to stand out)."""
    gen = torch.Generator().manual_seed(1)
    honest = torch.randn(12, 50, generator=gen, dtype=torch.float64)
    spread = honest.std(dim=0)
    bad = honest.mean(dim=0) - spread  # within each coordinate's honest range, all on one side
    rows = torch.cat([honest, bad.expand(3, -1)])
    assert bool(((bad >= honest.min(dim=0).values) & (bad <= honest.max(dim=0).values)).all())
    agg = DnC(0, DnCOptions(f=3))
    agg.aggregate(_zeros(50), _results(rows.tolist()), 1)
    assert agg.round_metrics() == {"selected": list(range(12))}
    median = Median().aggregate(_zeros(50), _results(rows.tolist()), 1)["w"].double()
    honest_median = honest.median(dim=0).values
    assert float((median - honest_median).norm()) > 0.1  # pulled toward the attackers


# ---------------------------------------------------------------- registry and config errors


def test_defaults_are_the_documented_ones() -> None:
    # Algorithm 2's parameters as the reimplementations set them (Blades: filter_frac 1.0, sub_dim 10000, num_iters 5;
    # FLPoison: num_iters 5, fliter_frac 1.0; the paper's values not read): c = 1 removes exactly floor(c f) = f;
    # f = 0 (nobody assumed byzantine) makes DnC the plain mean
    o = DnCOptions()
    assert (o.c, o.subsample, o.iterations, o.combine, o.weighting, o.f) == (1.0, 10_000, 5, "intersection", "uniform", 0)


def test_a_model_within_the_subsample_keeps_the_same_clients_at_any_iterations() -> None:
    # d <= b: every iteration scores all coordinates, so 5 iterations intersect 5 equal kept sets: the set of one
    # (why the default's change from 1 to 5 leaves the digits MLP's runs, 2,410 entries, bitwise as they were)
    flat = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [9.0, 9.0, 9.0], [0.5, 0.5, 0.0]], dtype=torch.float64)
    one = dnc_select(flat, DnCOptions(f=1, iterations=1), seed=0, round=3)
    assert one == [0, 1, 2, 4]
    assert dnc_select(flat, DnCOptions(f=1), seed=0, round=3) == one
    assert DnCOptions(f=3).removed() == 3 and DnCOptions(f=3, c=1.5).removed() == 4  # floor(4.5)


def test_registered_robust() -> None:
    assert algorithm_spec("dnc").capabilities == ROBUST  # no client weights: pa3fed and dp-fedavg refuse it as a base


def _config(**overrides: Any) -> Any:
    return load_config(None, {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 10, **overrides})


def test_check_needs_one_client_left() -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(_config(**{"federation.clients_per_round": 3, "algorithm": {"name": "dnc", "f": 2, "c": 1.5}}))
    assert err.value.field == "algorithm.f" and "floor(c f) = 3" in err.value.message
    build_experiment(_config(**{"federation.clients_per_round": 3, "algorithm": {"name": "dnc", "f": 2}}))  # 2 removed, 1 left


@pytest.mark.parametrize(
    "options,field",
    [({"f": -1}, "algorithm.f"), ({"c": -0.5}, "algorithm.c"), ({"subsample": 0}, "algorithm.subsample"), ({"iterations": 0}, "algorithm.iterations"),
     ({"combine": "both"}, "algorithm.combine"), ({"weighting": "median"}, "algorithm.weighting"), ({"m": 3}, "algorithm.m")],
)
def test_bad_option_values_name_their_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_aggregator("dnc", options, num_clients=10, model=torch.nn.Linear(2, 2), seed=0)
    assert err.value.field == field


@pytest.mark.parametrize("override,field", [("algorithm.c=-1", "algorithm.c"), ("algorithm.f=5", "algorithm.f"), ("algorithm.subsample=0", "algorithm.subsample")])
def test_bad_options_exit_2_with_one_line_naming_the_field(override: str, field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "exp.toml").write_text(f'out_dir = "{tmp_path / "out"}"\n')
    tiny = ["dataset.name=digits", "federation.num_clients=4", "federation.rounds=1", "model.name=mlp", "algorithm.name=dnc"]
    assert main(["run", str(tmp_path / "exp.toml"), "-q", *tiny, override]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"chillfl: error: {field}:")


# ---------------------------------------------------------------- end to end


@pytest.mark.slow  # three runs, one of them in worker processes
def test_end_to_end_under_every_executor() -> None:
    # one iteration, so that each round removes exactly c f = 1 of its 3 clients (5 iterations on 500 random coordinates
    # of 3 honest clients drop different ones and intersect to 1; test_iterations_intersect_or_unite covers that)
    seq = assert_executors_agree(config(**{"model.name": "mlp", "algorithm": {"name": "dnc", "f": 1, "subsample": 500, "iterations": 1}}))
    assert [r["round"] for r in seq] == [1, 2, 3] and seq[-1]["global_acc"] > 0.2
    assert all(len(r["agg_selected"]) == 2 and set(r["agg_selected"]) <= set(r["clients"]) for r in seq)  # 3 a round, c f = 1 removed


def test_run_resumes_bitwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped after round 1 and resumed: the coordinates drawn from (seed, round) are the uninterrupted run's."""
    check_resume("algorithm.dnc", "sequential", 1, tmp_path, monkeypatch)  # f = 1, subsample = 100 (resume_cases.NEEDS)
