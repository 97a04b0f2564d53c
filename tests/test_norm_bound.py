"""Norm bounding (Sun, Kairouz, Suresh & McMahan 2019): the clipped weighted average worked by hand, per-entry
clipping, the seeded weak-DP noise replayed, model replacement bounded, the config errors, short runs under every
executor and a bitwise resume."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from chillfl.aggregation.base import ClientResult, FedAvg
from chillfl.aggregation.norm_bound import NormBound, NormBoundOptions
from chillfl.aggregation.registry import algorithm_spec, make_aggregator
from chillfl.aggregation.robust import ROBUST
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.seeds import derive_seed

sys.path.insert(0, str(Path(__file__).parent))
from methods_e2e import assert_executors_agree, config  # noqa: E402
from resume_cases import check_resume  # noqa: E402
from test_robust_aggregators import _results  # noqa: E402  (client i uploads values[i] as entry w, float32, and reports 10 (i + 1) samples)

# Global model w = (1, 1); updates u0 = (3, 4) (norm 5), u1 = (0, 0.5) (norm 0.5), u2 = (-6, -8) (norm 10); samples 10, 20, 30.
W = {"w": torch.tensor([1.0, 1.0])}
UPLOADS = [[4.0, 5.0], [1.0, 1.5], [-5.0, -7.0]]


def test_clipped_weighted_average_by_hand() -> None:
    # M = 1: u0 -> (0.6, 0.8), u1 as is, u2 -> (-0.6, -0.8); weights 1/6, 2/6, 3/6:
    # x = (0.6 + 0 - 1.8) / 6 = -0.2, y = (0.8 + 1.0 - 2.4) / 6 = -0.1; next = w + (-0.2, -0.1) = (0.8, 0.9)
    agg = NormBound(0, NormBoundOptions(max_norm=1.0))
    out = agg.aggregate(W, _results(UPLOADS), 1)["w"]
    assert out.tolist() == pytest.approx([0.8, 0.9], abs=1e-6) and out.dtype == torch.float32
    assert agg.round_metrics() == {"clipped": pytest.approx(2 / 3)}  # u0 and u2
    # FedAvg of the same uploads: w + ((3 + 0 - 18) / 6, (4 + 1 - 24) / 6) = (-1.5, -13/6): dragged by u2
    assert FedAvg().aggregate(W, _results(UPLOADS), 1)["w"].tolist() == pytest.approx([-1.5, 1 - 19 / 6], abs=1e-6)
    # uniform: ((0.6 + 0 - 0.6) / 3, (0.8 + 0.5 - 0.8) / 3) = (0, 1/6)
    uniform = NormBound(0, NormBoundOptions(max_norm=1.0, weighting="uniform")).aggregate(W, _results(UPLOADS), 1)["w"]
    assert uniform.tolist() == pytest.approx([1.0, 1 + 1 / 6], abs=1e-6)


def test_a_bound_above_every_update_is_fedavg() -> None:
    agg = NormBound(0, NormBoundOptions(max_norm=10.0))  # ||u2|| = 10 is not above M: nothing clipped
    assert agg.aggregate(W, _results(UPLOADS), 1)["w"].tolist() == pytest.approx(FedAvg().aggregate(W, _results(UPLOADS), 1)["w"].tolist(), abs=1e-6)
    assert agg.round_metrics() == {"clipped": 0.0}


def _two_entries(values: list[tuple[list[float], list[float], int]]) -> list[ClientResult]:
    return [ClientResult(i, {"a": torch.tensor(a), "b": torch.tensor(b), "n": torch.tensor(k)}, 10, 1, 0.1, 1.0, 0.0) for i, (a, b, k) in enumerate(values)]


def test_global_norm_spans_every_float_entry_per_entry_clips_each() -> None:
    # one client from w = 0: a = (3, 4), b = (12,): ||u|| = sqrt(9 + 16 + 144) = 13
    glob = {"a": torch.zeros(2), "b": torch.zeros(1), "n": torch.tensor(0)}
    results = _two_entries([([3.0, 4.0], [12.0], 5)])
    out = NormBound(0, NormBoundOptions(max_norm=1.0)).aggregate(glob, results, 1)
    # global, M = 1: everything x 1/13
    assert out["a"].tolist() == pytest.approx([3 / 13, 4 / 13], abs=1e-7) and out["b"].tolist() == pytest.approx([12 / 13], abs=1e-7)
    assert out["n"].item() == 5 and list(out) == ["a", "b", "n"]
    # per entry, M = 1: a (norm 5) x 1/5 = (0.6, 0.8), b (norm 12) x 1/12 = 1: ||total|| = sqrt 2 > M
    each = NormBound(0, NormBoundOptions(max_norm=1.0, norm="per_entry")).aggregate(glob, results, 1)
    assert each["a"].tolist() == pytest.approx([0.6, 0.8], abs=1e-7) and each["b"].tolist() == pytest.approx([1.0], abs=1e-7)
    # per entry, M = 6: a (norm 5) passes, b (norm 12) is clipped; a client counts as clipped when any of its entries is;
    # a second client at a = (6, 8) (norm 10, clipped), b = (1,) (passes) counts too: clipped share 2/2
    agg = NormBound(0, NormBoundOptions(max_norm=6.0, norm="per_entry"))
    agg.aggregate(glob, _two_entries([([3.0, 4.0], [12.0], 5), ([6.0, 8.0], [1.0], 1)]), 1)
    assert agg.round_metrics() == {"clipped": 1.0}


def test_weak_dp_noise_replays_its_seeded_stream() -> None:
    # sigma = 0.01: the noiseless (0.8, 0.9) plus N(0, 0.01^2) per coordinate from (seed, "norm_bound", round), float64 on the CPU
    agg = NormBound(11, NormBoundOptions(max_norm=1.0, sigma=0.01))
    out = agg.aggregate(W, _results(UPLOADS), 4)["w"]
    z = torch.randn(2, generator=torch.Generator().manual_seed(derive_seed(11, "norm_bound", 4)), dtype=torch.float64) * 0.01
    assert out.tolist() == pytest.approx((torch.tensor([0.8, 0.9], dtype=torch.float64) + z).tolist(), abs=1e-6)
    assert float(z.abs().max()) > 1e-4  # the noise is there (above float32 rounding of the result)
    assert torch.equal(agg.aggregate(W, _results(UPLOADS), 4)["w"], out)  # a pure function of (seed, round)
    assert not torch.equal(agg.aggregate(W, _results(UPLOADS), 5)["w"], out)  # another round, another draw
    assert not torch.equal(NormBound(12, NormBoundOptions(max_norm=1.0, sigma=0.01)).aggregate(W, _results(UPLOADS), 4)["w"], out)


def test_model_replacement_is_bounded_by_its_weight_times_m() -> None:
    """Four honest clients move 0.1 each; one scales its update by 1000 (w + 1000 u): FedAvg moves ~200, norm bounding
    at M = 0.2 at most 0.2 (everyone's weight sums to 1) - the attacker's share is 1/5 of M = 0.04."""
    honest = [[0.1]] * 4
    results = _results([*honest, [100.0]])
    for r in results:
        r.num_samples = 10
    zero = {"w": torch.zeros(1)}
    assert FedAvg().aggregate(zero, results, 1)["w"].item() == pytest.approx((0.4 + 100) / 5, rel=1e-6)
    # honest 0.1 < M pass; the attacker's 100 -> 0.2: (0.4 + 0.2) / 5 = 0.12
    assert NormBound(0, NormBoundOptions(max_norm=0.2)).aggregate(zero, results, 1)["w"].item() == pytest.approx(0.12, abs=1e-6)


# ---------------------------------------------------------------- registry and config errors


def test_registered_robust() -> None:
    assert algorithm_spec("norm_bound").capabilities == ROBUST  # not a weighted mean of the models: pa3fed and dp-fedavg refuse it


@pytest.mark.parametrize(
    "options,field",
    [({}, "algorithm.max_norm"), ({"max_norm": 0.0}, "algorithm.max_norm"), ({"max_norm": -1.0}, "algorithm.max_norm"),
     ({"max_norm": float("inf")}, "algorithm.max_norm"), ({"max_norm": 1.0, "sigma": -0.1}, "algorithm.sigma"),
     ({"max_norm": 1.0, "norm": "layer"}, "algorithm.norm"), ({"max_norm": 1.0, "weighting": "median"}, "algorithm.weighting")],
)
def test_bad_option_values_name_their_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_aggregator("norm_bound", options, num_clients=10, model=torch.nn.Linear(2, 2), seed=0)
    assert err.value.field == field


@pytest.mark.parametrize("overrides,field", [([], "algorithm.max_norm"), (["algorithm.max_norm=0"], "algorithm.max_norm"),
                                             (["algorithm.max_norm=1", "algorithm.sigma=-1"], "algorithm.sigma")])
def test_bad_options_exit_2_with_one_line_naming_the_field(overrides: list[str], field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "exp.toml").write_text(f'out_dir = "{tmp_path / "out"}"\n')
    tiny = ["dataset.name=digits", "federation.num_clients=4", "federation.rounds=1", "model.name=mlp", "algorithm.name=norm_bound"]
    assert main(["run", str(tmp_path / "exp.toml"), "-q", *tiny, *overrides]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"chillfl: error: {field}:")


def test_dp_fedavg_refuses_it_as_a_base() -> None:
    """Its per-client clipping of dp-fedavg's noised shares would not be post-processing of the noised sum: refused."""
    cfg = load_config(None, {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 4, "algorithm": {"name": "norm_bound", "max_norm": 1.0},
                             "privacy.mechanism": "dp-fedavg", "privacy.clip_norm": 1.0, "privacy.noise_multiplier": 1.0})
    pytest.importorskip("opacus")
    with pytest.raises(ConfigError) as err:
        build_experiment(cfg)
    assert err.value.field == "privacy.mechanism" and "takes no external per-client weights" in err.value.message


# ---------------------------------------------------------------- end to end


@pytest.mark.slow  # three runs, one of them in worker processes
def test_end_to_end_under_every_executor() -> None:
    seq = assert_executors_agree(config(**{"model.name": "mlp", "algorithm": {"name": "norm_bound", "max_norm": 0.3, "sigma": 0.001}}))
    assert [r["round"] for r in seq] == [1, 2, 3] and seq[-1]["global_acc"] > 0.2
    assert all(0.0 <= r["agg_clipped"] <= 1.0 for r in seq) and any(r["agg_clipped"] > 0 for r in seq)  # M = 0.3 clips some


def test_run_resumes_bitwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped after round 1 and resumed: the noise drawn from (seed, round) is the uninterrupted run's."""
    check_resume("algorithm.norm_bound", "sequential", 1, tmp_path, monkeypatch)  # max_norm = 0.3, sigma = 0.001 (resume_cases.NEEDS)
