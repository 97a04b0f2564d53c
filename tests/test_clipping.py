"""[privacy] clipping: a clipped update's L2 norm is at most C exactly (DP's sensitivity bound), measured on the
cast values with exact rational arithmetic and in float64, for float32, float16 and bfloat16 updates; not over-shrunk
(rounded toward zero, a further step only where float64 rounding could put it over); updates within C bit for bit."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from chillfl.clipping import clip_per_layer, clip_update, l2_norm

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def exact_norm_sq(tensors: list[torch.Tensor]) -> Fraction:
    """The exact sum of squares: float32/16/bf16 values are integer multiples of 2^-149, so it is an integer sum."""
    return Fraction(sum(int(v * 2.0**149) ** 2 for t in tensors for v in t.double().flatten().tolist()), 2**298)


def assert_within(tensors: list[torch.Tensor], bound: float) -> None:
    """Exactly (no tolerance), and in float64 measured two ways (the library's sum of per-tensor sums, one flat norm)."""
    assert exact_norm_sq(tensors) <= Fraction(bound) ** 2
    assert float(l2_norm(tensors)) <= bound
    assert float(torch.linalg.vector_norm(torch.cat([t.double().flatten() for t in tensors]))) <= bound


def toward_zero(t: torch.Tensor, steps: int) -> torch.Tensor:
    for _ in range(steps):
        t = torch.nextafter(t, torch.zeros_like(t))
    return t


def rounded_toward_zero(outs: list[torch.Tensor], originals: list[torch.Tensor], scale: float) -> bool:
    """Whether ``outs`` were shrunk a step: each is the float64 product ``original * scale`` cast toward zero (the
    largest value not above it in magnitude), or, all of them together, one step below that; never more."""
    casts = []
    for original in originals:
        product = original.double() * scale
        nearest = product.to(original.dtype)
        casts.append(torch.where(nearest.double().abs() > product.abs(), toward_zero(nearest, 1), nearest))
    if all(torch.equal(out, cast) for out, cast in zip(outs, casts)):
        return False
    assert all(torch.equal(out, toward_zero(cast, 1)) for out, cast in zip(outs, casts))
    return True


def random_update(seed: int, dtype: torch.dtype) -> tuple[dict[str, torch.Tensor], float]:
    """1-3 entries of 1-300 values at a random magnitude, and a C between a thirtieth and three times their norm."""
    gen = torch.Generator().manual_seed(seed)
    entries = int(torch.randint(1, 4, (), generator=gen))
    magnitude = 10.0 ** float(torch.empty(()).uniform_(-2, 2, generator=gen))
    update = {f"w{j}": (torch.randn(int(torch.randint(1, 301, (), generator=gen)), generator=gen, dtype=torch.float64) * magnitude).to(dtype) for j in range(entries)}
    clip = float(l2_norm(list(update.values()))) * 10.0 ** float(torch.empty(()).uniform_(-1.5, 0.5, generator=gen))
    return update, clip


def test_three_four_rounds_toward_zero() -> None:
    # u = (3, 4), ||u|| = 5, C = 1: u / 5 = (0.6, 0.8), whose nearest float32s are both above (0.6000000238, 0.8000000119),
    # so round to nearest gave a norm of 1 + 4.8e-8 > C; toward zero they are one step below, the norm just under 1
    out, norm = clip_update({"a": torch.tensor([3.0]), "b": torch.tensor([4.0])}, 1.0)
    assert norm == 5.0
    assert torch.equal(torch.cat([out["a"], out["b"]]), toward_zero(torch.tensor([0.6, 0.8]), 1))
    assert_within([out["a"], out["b"]], 1.0)


def test_representable_products_shrink_a_step() -> None:
    # u = (1, 1, 1), C = fl(sqrt 3) / 2: float64 rounds sqrt(3) down, so the scale is exactly 1/2 and u / 2 = (0.5, 0.5, 0.5)
    # is representable (rounding toward zero changes nothing) yet has exact norm sqrt(3) / 2 > C: one more step down
    assert Fraction(math.sqrt(3)) ** 2 < 3
    clip = math.sqrt(3) / 2
    ones = torch.ones(3)
    out, _ = clip_update({"u": ones}, clip)
    assert torch.equal(out["u"], toward_zero(torch.full((3,), 0.5), 1))
    assert_within([out["u"]], clip)
    per_layer, scaled = clip_per_layer({"u": ones}, clip)  # one entry: its budget is C
    assert scaled and torch.equal(per_layer["u"], out["u"])


def test_float64_norm_at_c_but_exactly_over_is_shrunk() -> None:
    # u = (1, 1, 1), C = fl(sqrt 3): the float64 norm equals C, so scaling does nothing, but the exact norm sqrt(3) > C
    clip = math.sqrt(3)
    out, norm = clip_update({"u": torch.ones(3)}, clip)
    assert norm == clip and torch.equal(out["u"], toward_zero(torch.ones(3), 1))
    assert_within([out["u"]], clip)
    per_layer, scaled = clip_per_layer({"u": torch.ones(3)}, clip)
    assert not scaled and torch.equal(per_layer["u"], out["u"])  # a rounding step, not a clip


@pytest.mark.parametrize("dtype", DTYPES)
def test_clip_update_within_c_exactly(dtype: torch.dtype) -> None:
    clipped = shrunk = 0
    for seed in range(150):
        update, clip = random_update(seed, dtype)
        values = list(update.values())
        norm = float(l2_norm(values))
        out, reported = clip_update(update, clip)
        assert reported == norm and list(out) == list(update)
        assert all(out[k].dtype == dtype and out[k].shape == v.shape for k, v in update.items())
        assert_within(list(out.values()), clip)
        if norm <= clip * 0.999:  # within C: bit for bit
            assert all(torch.equal(out[k], v) for k, v in update.items())
        else:
            clipped += 1
            shrunk += rounded_toward_zero(list(out.values()), values, min(1.0, clip / norm))
    assert 50 < clipped < 150  # both paths exercised
    assert shrunk <= 3  # the extra step is for the rare update the float64 roundings could put over


@pytest.mark.parametrize("dtype", DTYPES)
def test_clip_per_layer_within_budgets_exactly(dtype: torch.dtype) -> None:
    shrunk = 0
    for seed in range(150):
        update, clip = random_update(1000 + seed, dtype)
        budget = clip / len(update) ** 0.5
        out, scaled = clip_per_layer(update, clip)
        assert list(out) == list(update)
        assert_within(list(out.values()), clip)  # the whole within C = sqrt(k) S
        norms = {k: float(l2_norm([v])) for k, v in update.items()}
        assert scaled == any(n > budget for n in norms.values())
        for k, v in update.items():
            assert out[k].dtype == dtype
            assert exact_norm_sq([out[k]]) <= Fraction(budget) ** 2
            if norms[k] <= budget * 0.999:
                assert torch.equal(out[k], v)
            else:
                shrunk += rounded_toward_zero([out[k]], [v], min(1.0, budget / norms[k]))
    assert shrunk <= 3


def test_large_update_within_c_exactly() -> None:
    # 20000 values in two entries: the float64 norm's rounding grows with the count; the bound holds all the same
    for seed in range(3):
        gen = torch.Generator().manual_seed(seed)
        update = {"w": torch.randn(15_000, generator=gen), "b": torch.randn(5_000, generator=gen) * 0.01}
        out, _ = clip_update(update, 0.7)
        assert_within(list(out.values()), 0.7)
        layered, _ = clip_per_layer(update, 0.7)
        assert_within(list(layered.values()), 0.7)
