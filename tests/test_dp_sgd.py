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
    # FedBN needs the batch norm: "use a model without it" alone sent its user in a circle; the mechanisms that do not
    # touch local steps run with it (docs/privacy.md's table)
    assert err.value.message.endswith("use a model without it, or a mechanism that noises the uploads instead: dp-fedavg, local")


def test_delta_against_the_largest_client() -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(config(**{"privacy.delta": 0.1}))
    assert err.value.field == "privacy.delta"


def test_resume_bitwise(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from resume_cases import check_resume

    check_resume("algorithm.fedavg", "vectorized", 2, tmp_path, monkeypatch, **{"privacy.mechanism": "dp-sgd", "privacy.delta": 1e-3, "privacy.noise_multiplier": 1.1, "client.momentum": 0.0})


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


# The step's speed-ups (chillfl.privacy.dpsgd: float64 norms through a reused buffer, the noise drawn into one flat
# tensor, the noised sum in place) must not change a bit: each is compared here with the plain formulation it replaces,
# and the whole step with a reference that takes every sample's gradient by a loop.


def small_model() -> tuple[Any, dict[str, torch.Tensor], dict[str, torch.Tensor], Any]:
    """A 2-hidden-layer MLP on 6 features (4 parameter tensors of 48, 8, 40 and 5 entries), its loss as the DP step sees it."""
    from chillfl.models.registry import build_model
    from chillfl.training.linear_factors import factored_linears
    from chillfl.training.local import LocalSpec, StepLoss, model_state, split_state

    model = build_model("mlp", (6,), 5, {"hidden": [8]}, seed=3)
    template = factored_linears(model)
    params, buffers = split_state(template, model_state(model))
    return template, params, buffers, StepLoss(template, LocalSpec(epochs=1, batch_size=8), factor=False)


def loop_reference(
    loss_fn: Any, params: dict[str, torch.Tensor], buffers: Any, x: torch.Tensor, y: torch.Tensor, clip: float, sigma: float, seed: int, step: int, divisor: int
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Abadi et al.'s step written plainly: each sample's gradient by its own autograd call, its norm over all parameters
    in float64, scaled by min(1, C / norm), summed, plus z_k ~ N(0, (sigma C)^2) drawn parameter by parameter (float64,
    then cast) from a generator seeded derive_seed(seed, "dp-sgd", step), divided by ``divisor``. Returns (the step's
    gradients, every sample's norm)."""
    leaves = {k: v.detach().requires_grad_() for k, v in params.items()}
    grads = []
    for j in range(len(y)):
        value = loss_fn(leaves, buffers, x[j : j + 1], y[j : j + 1], 1.0, {})[0]
        grads.append([g.detach() for g in torch.autograd.grad(value, list(leaves.values()))])
    norms = torch.stack([torch.sqrt(sum((g.double() ** 2).sum() for g in gj)) for gj in grads])
    factors = torch.clamp(clip / norms, max=1.0)
    gen = torch.Generator().manual_seed(derive_seed(seed, "dp-sgd", step))
    out = []
    for i, v in enumerate(params.values()):
        total = sum(grads[j][i].double() * factors[j] for j in range(len(y)))
        z = torch.randn(v.shape, generator=gen, dtype=torch.float64) * (sigma * clip)
        out.append(((total.float() + z.float()) / divisor))
    return out, norms


@pytest.mark.parametrize("lot", [0, 12])
def test_step_equals_a_per_sample_loop(lot: int) -> None:
    # C is set between the samples' norms so that some are clipped and some kept (checked, not assumed).
    # Tolerance: float32 per-sample gradients from another kernel (one sample's matmul against vmap's batched one) and
    # a float64 sum here against a float32 one there: a few float32 ulps of gradients of size ~0.1, hence 1e-6 absolute.
    _, params, buffers, loss_fn = small_model()
    x, y = torch.randn(7, 6, generator=torch.Generator().manual_seed(0)), torch.tensor([0, 1, 2, 3, 4, 0, 1])
    _, norms = loop_reference(loss_fn, params, buffers, x, y, 1.0, 0.0, 0, 0, 1)
    clip = float(norms.median())
    assert (norms > clip).any() and (norms < clip).any()
    divisor = lot or len(y)
    for sigma, step in ((0.0, 0), (0.7, 5)):
        _, got = PerSampleClipping(clip, sigma, lot).gradients(loss_fn, params, buffers, x, y, 1.0, {}, seed=11, step=step)
        want, _ = loop_reference(loss_fn, params, buffers, x, y, clip, sigma, 11, step, divisor)
        for g, w in zip(got, want):
            assert g is not None and torch.allclose(g, w, rtol=0, atol=1e-6)


def test_stacked_step_equals_the_loop_client_by_client() -> None:
    # Two clients, their own parameters and job seeds, in one vmapped call: each as the loop computes it alone.
    _, params, buffers, loss_fn = small_model()
    second = {k: v * 1.5 for k, v in params.items()}
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(2, 5, 6, generator=gen), torch.randint(0, 5, (2, 5), generator=gen)
    stacked = {k: torch.stack([params[k], second[k]]) for k in params}
    _, got = PerSampleClipping(0.5, 0.9).stacked_gradients(lambda p, b, xi, yi, t, lc: loss_fn(p, b, xi, yi, t, {}), stacked, {}, x, y, torch.ones(2), [], [21, 22], 3)
    for c, (p, seed) in enumerate(((params, 21), (second, 22))):
        want, _ = loop_reference(loss_fn, p, buffers, x[c], y[c], 0.5, 0.9, seed, 3, 5)
        for g, w in zip(got, want):
            assert g is not None and torch.allclose(g[c], w, rtol=0, atol=1e-6)


def test_noise_has_gaussian_likes_bits() -> None:
    # One randn per parameter into slices of one float64 buffer, one scaling, one cast: gaussian_like's bits exactly,
    # for sizes under 16 (torch's scalar normal path), at 16, above it and not a multiple of it, and a 0-d entry.
    like = {"a": torch.zeros(3, 5), "b": torch.zeros(()), "c": torch.zeros(16), "d": torch.zeros(7), "e": torch.zeros(4, 33)}
    got = PerSampleClipping(0.8, 1.3).noise(like, 5, 2)
    want = gaussian_like(like, 1.3 * 0.8, derive_seed(5, "dp-sgd", 2))
    assert list(got) == list(want) and all(torch.equal(got[k], want[k]) and got[k].shape == want[k].shape for k in like)
    mixed = {"a": torch.zeros(20), "b": torch.zeros(20, dtype=torch.float64)}  # two dtypes: gaussian_like itself
    got = PerSampleClipping(0.8, 1.3).noise(mixed, 5, 2)
    want = gaussian_like(mixed, 1.3 * 0.8, derive_seed(5, "dp-sgd", 2))
    assert all(torch.equal(got[k], want[k]) and got[k].dtype == want[k].dtype for k in mixed)


def test_row_norms_have_vector_norms_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    # The float64 norms a chunk of rows at a time equal vector_norm's over all rows at once, bit for bit: one row a chunk
    # (37 > 64 // 37 ... per = 1), several (per = 3 of 7 rows, the last chunk short), a 3-d [clients, samples, n] tensor,
    # and at the real chunk size a row of 70,000 entries (not a multiple of any vector width). Non-contiguous: vector_norm.
    from chillfl.privacy import dpsgd

    gen = torch.Generator().manual_seed(2)
    cases = [torch.randn(5, 37, generator=gen), torch.randn(7, 20, generator=gen), torch.randn(2, 3, 30, generator=gen), torch.randn(20, 7, generator=gen).T]
    monkeypatch.setattr(dpsgd, "NORM_CHUNK", 64)
    for g in cases:
        assert torch.equal(dpsgd.row_norms_float64(g), torch.linalg.vector_norm(g, dim=-1, dtype=torch.float64))
    monkeypatch.undo()
    big = torch.randn(3, 70_001, generator=gen) * 1e-3
    assert big.numel() > dpsgd.NORM_CHUNK and torch.equal(dpsgd.row_norms_float64(big), torch.linalg.vector_norm(big, dim=-1, dtype=torch.float64))


def test_step_has_the_plain_formulations_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    # The whole step against the formulation the speed-ups replace, written out here: vmap(grad) per-sample gradients,
    # vector_norm(dtype=float64) of each parameter's, their norm, clip_factor, tensordot, gaussian_like, (sum + z) / b;
    # bitwise, with the chunked norms forced on (NORM_CHUNK = 64 < every parameter's per-sample entries but the last).
    from torch.func import grad, vmap

    from chillfl.clipping import cast_toward_zero, clip_factor
    from chillfl.privacy import dpsgd

    monkeypatch.setattr(dpsgd, "NORM_CHUNK", 64)
    _, params, buffers, loss_fn = small_model()
    x, y = torch.randn(9, 6, generator=torch.Generator().manual_seed(4)), torch.randint(0, 5, (9,), generator=torch.Generator().manual_seed(5))
    step = PerSampleClipping(0.3, 1.1)
    loss, got = step.gradients(loss_fn, params, buffers, x, y, 1.0, {}, seed=8, step=4)

    def one(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        value = loss_fn(p, buffers, xi[None], yi[None], 1.0, {})[0]
        return value, value.detach()

    per_sample, losses = vmap(grad(one, has_aux=True), in_dims=(None, 0, 0), randomness="different")(params, x, y)
    norms = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(per_sample[k].reshape(9, -1), dim=-1, dtype=torch.float64) for k in params]), dim=0)
    scale = cast_toward_zero(clip_factor(norms, 0.3), torch.float32)  # the factor rounded down, not to nearest
    z = gaussian_like(params, 1.1 * 0.3, derive_seed(8, "dp-sgd", 4))
    want = [(torch.tensordot(scale, per_sample[k], dims=1) + z[k]) / 9 for k in params]
    assert torch.equal(loss, losses.mean()) and all(g is not None and torch.equal(g, w) for g, w in zip(got, want))


def test_per_sample_factors_round_down_never_past_c_over_the_norm() -> None:
    # min(1, C / ||g_j||) is computed in float64 and cast to the gradients' float32; to nearest, about half the casts
    # round up, and a clipped sample's gradient would be scaled to C (1 + 2^-24): past the sensitivity C. Rounded down,
    # every factor is at most the float64 one and at most one float32 step below it (no more shrink than that).
    from chillfl.clipping import clip_factor

    g = torch.randn(400, 37, generator=torch.Generator().manual_seed(3)) * 5.0  # every sample's norm well above C = 0.7
    factor64 = clip_factor(torch.linalg.vector_norm(g, dim=-1, dtype=torch.float64), 0.7)
    got = PerSampleClipping(0.7, 1.0)._scales([g])
    assert got.dtype == torch.float32 and bool((factor64 < 1).all())
    assert bool((got.double() <= factor64).all())
    nearest = factor64.to(torch.float32)
    assert bool((nearest.double() > factor64).any())  # the case this guards against occurs in these draws
    assert torch.equal(got, torch.where(nearest.double() > factor64, torch.nextafter(nearest, torch.zeros_like(nearest)), nearest))
