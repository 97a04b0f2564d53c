"""``dp-sgd``: the clipped, noised per-sample gradient worked by hand; sequential ~ vectorized; per-client accounting."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.clipping import gaussian_like
from chillfl.privacy.dpsgd import PerSampleClipping
from chillfl.runner import run_experiment
from chillfl.seeds import derive_seed
from float_paths import assert_records_close

pytest.importorskip("opacus")

TINY: dict[str, Any] = {
    "seed": 4,
    "device": "cpu",
    "threads": 1,
    "dataset.name": "digits",
    "model.name": "mlp",
    "model.hidden": [16],
    "federation.num_clients": 4,
    "federation.clients_per_round": 3,
    "federation.rounds": 3,
    "client.epochs": 1,
    "client.batch_size": 32,
    "client.lr": 0.05,
    "client.momentum": 0.5,
    "eval.client_split_size": 20,
    "privacy.mechanism": "dp-sgd",
    "privacy.clip_norm": 1.0,
    "privacy.noise_multiplier": 1.1,
    "privacy.delta": 1e-3,
}


def config(**over: Any) -> Any:
    return load_config(None, {**TINY, **over})


def squared(p: dict[str, torch.Tensor], buffers: Any, x: torch.Tensor, y: torch.Tensor, t: Any, context: Any) -> tuple[torch.Tensor, list[Any]]:
    """0.5 (x . w - y)^2 averaged over the batch (one sample here): sample j's gradient is (x_j . w - y_j) x_j."""
    return (0.5 * ((x @ p["w"]) - y) ** 2).mean(), []


def test_per_sample_clip_by_hand() -> None:
    # w = 0: g_j = -y_j x_j. x_1 = (3, 4), y_1 = 1: g_1 = (-3, -4), norm 5 -> clipped to (-0.6, -0.8);
    # x_2 = (0.3, 0.4), y_2 = 1: g_2 = (-0.3, -0.4), norm 0.5 <= C = 1, kept.
    # sum (-0.9, -1.2); noise z ~ N(0, (sigma C)^2) from derive_seed(job seed, "dp-sgd", step); divided by b = 2.
    w = {"w": torch.zeros(2)}
    x, y = torch.tensor([[3.0, 4.0], [0.3, 0.4]]), torch.tensor([1.0, 1.0])
    loss, (g,) = PerSampleClipping(1.0, 0.0).gradients(squared, w, {}, x, y, 1.0, {}, seed=9, step=0)
    assert g is not None and torch.allclose(g, torch.tensor([-0.45, -0.6]))
    assert loss.item() == pytest.approx((0.5 * 1 + 0.5 * 1) / 2)  # both samples' loss 0.5 (0 - 1)^2 = 0.5
    _, (noisy,) = PerSampleClipping(1.0, 2.0).gradients(squared, w, {}, x, y, 1.0, {}, seed=9, step=3)
    z = gaussian_like(w, 2.0, derive_seed(9, "dp-sgd", 3))["w"]
    assert noisy is not None and torch.allclose(noisy, (torch.tensor([-0.9, -1.2]) + z) / 2)


def test_a_samples_norm_is_over_all_parameters_together() -> None:
    # Two parameters a, b (one entry each), loss 0.5 (x_0 a + x_1 b - y)^2: at a = b = 0, g_j = (-y x_0, -y x_1).
    # x = (3, 4), y = 1: g = (-3, -4) over both together has norm 5 -> clipped to (-0.6, -0.8); clipping each
    # parameter on its own would give (-1, -1). Also under the stacked (vectorised) form, one client.
    def split(p: dict[str, torch.Tensor], buffers: Any, x: torch.Tensor, y: torch.Tensor, t: Any, context: Any) -> tuple[torch.Tensor, list[Any]]:
        return (0.5 * (x[:, 0] * p["a"][0] + x[:, 1] * p["b"][0] - y) ** 2).mean(), []

    params = {"a": torch.zeros(1), "b": torch.zeros(1)}
    x, y = torch.tensor([[3.0, 4.0]]), torch.tensor([1.0])
    _, (ga, gb) = PerSampleClipping(1.0, 0.0).gradients(split, params, {}, x, y, 1.0, {}, seed=1, step=0)
    assert ga is not None and gb is not None
    assert torch.allclose(ga, torch.tensor([-0.6])) and torch.allclose(gb, torch.tensor([-0.8]))
    stacked = {k: v[None] for k, v in params.items()}
    _, (sa, sb) = PerSampleClipping(1.0, 0.0).stacked_gradients(split, stacked, {}, x[None], y[None], torch.ones(1), [], [1], 0)
    assert sa is not None and sb is not None
    assert torch.allclose(sa, torch.tensor([[-0.6]])) and torch.allclose(sb, torch.tensor([[-0.8]]))


def test_vectorized_equals_sequential() -> None:
    seq = run_experiment(config(), write=False, progress=False).records
    vec = run_experiment(config(executor="vectorized"), write=False, progress=False).records
    assert_records_close(seq, vec)  # vmapped over clients, each client's noise its own draws: equal up to float rounding
    assert [r["epsilon"] for r in vec] == [r["epsilon"] for r in seq]  # the accountant counts the same steps
    assert run_experiment(config(executor="vectorized"), write=False, progress=False).records == vec  # bitwise repeatable
    eps = [r["epsilon"] for r in seq]
    assert all(math.isfinite(e) for e in eps) and eps[0] <= eps[1] <= eps[2] and eps[0] < eps[2]  # the worst client's: flat when it sat out


def test_noise_changes_training() -> None:
    plain = run_experiment(config(**{"privacy.mechanism": "none"}), write=False, progress=False).records
    private = run_experiment(config(), write=False, progress=False).records
    assert private[-1]["train_loss"] != plain[-1]["train_loss"]


def test_full_batch_epsilon_is_the_gaussian_mechanism() -> None:
    # batch_size >= every client's samples: q_k = 1 and one step a round; every client every round: round t spends
    # t Gaussian steps. Independent RDP: t alpha / (2 sigma^2), to (eps, delta) by Balle et al. 2020 Thm 21 (see test_privacy).
    from test_privacy import gaussian_epsilon

    records = run_experiment(config(**{"client.batch_size": 100_000, "federation.clients_per_round": 4}), write=False, progress=False).records
    assert [r["epsilon"] for r in records] == pytest.approx([gaussian_epsilon(1.1, t, 1e-3) for t in (1, 2, 3)], rel=1e-9)


def test_batch_norm_refused() -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(config(**{"model": {"name": "flexchill_cnn", "batch_norm": True}}))
    assert err.value.field == "privacy.mechanism"


def test_delta_against_the_largest_client() -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(config(**{"privacy.delta": 0.1}))
    assert err.value.field == "privacy.delta"


def test_resume_bitwise(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from resume_cases import check_resume

    check_resume("algorithm.fedavg", "vectorized", 2, tmp_path, monkeypatch,
                 **{"privacy.mechanism": "dp-sgd", "privacy.delta": 1e-3, "privacy.noise_multiplier": 1.1, "client.momentum": 0.0})


def test_divide_by_the_lot_size_by_hand() -> None:
    # Abadi et al. divide the noised sum by the lot size L, not by what the batch holds: the batch of test_per_sample_clip_by_hand
    # (clipped sum (-0.9, -1.2)) as an epoch's short last batch of 2 under L = 4 gives (-0.225, -0.3); the default divides by 2.
    # The vectorised form divides the same way. Through the spec: divide_by = "lot" is client.batch_size.
    from chillfl.privacy.mechanisms.dp_sgd import DpSgdOptions, step
    from chillfl.privacy.spec import Noise, RunSizes

    w = {"w": torch.zeros(2)}
    x, y = torch.tensor([[3.0, 4.0], [0.3, 0.4]]), torch.tensor([1.0, 1.0])
    _, (g,) = PerSampleClipping(1.0, 0.0, lot=4).gradients(squared, w, {}, x, y, 1.0, {}, seed=9, step=0)
    assert g is not None and torch.allclose(g, torch.tensor([-0.225, -0.3]))
    _, (s,) = PerSampleClipping(1.0, 0.0, lot=4).stacked_gradients(lambda p, b, xi, yi, t, lc: squared(p, b, xi, yi, t, lc), {"w": torch.zeros(1, 2)}, {}, x[None], y[None], torch.ones(1), [], [9], 0)
    assert s is not None and torch.allclose(s[0], torch.tensor([-0.225, -0.3]))
    sizes = RunSizes(2, 2, 1, 4, 1, (10, 10))
    assert step(DpSgdOptions(divide_by="lot"), Noise(1.0, 1.0, sizes, 0)).lot == 4
    assert step(DpSgdOptions(), Noise(1.0, 1.0, sizes, 0)).lot == 0
