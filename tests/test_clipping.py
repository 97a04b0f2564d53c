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


def test_float64_sum_rounding_down_is_allowed_for() -> None:
    # u = (1, 2^-30): float64's sum of squares 1 + 2^-60 rounds to 1, so the float64 norm is exactly C = 1, yet the
    # exact norm is over: the check allows for the sum's rounding (Higham's gamma_{n-1}) and shrinks it a step
    u = torch.tensor([1.0, 2.0**-30])
    out, norm = clip_update({"u": u}, 1.0)
    assert norm == 1.0 and torch.equal(out["u"], toward_zero(u, 1))
    assert_within([out["u"]], 1.0)


def test_exactly_at_c_is_kept() -> None:
    # the check is exact, not a tolerance: one value of norm exactly C passes as it is, and (2) at C = 1 becomes
    # exactly (1) (with more values the float64 sum's possible rounding is allowed for, so a norm of exactly C shrinks)
    out, _ = clip_update({"u": torch.tensor([1.0])}, 1.0)
    assert torch.equal(out["u"], torch.tensor([1.0]))
    out, _ = clip_update({"u": torch.tensor([2.0])}, 1.0)
    assert torch.equal(out["u"], torch.tensor([1.0]))
    out, scaled = clip_per_layer({"u": torch.tensor([-2.0]), "v": torch.tensor([0.5])}, 2 * 2**0.5)  # S = 2 exactly
    assert scaled is False and torch.equal(out["u"], torch.tensor([-2.0]))


def test_per_layer_budget_rounded_down() -> None:
    # C = fl(sqrt 3), k = 3: C / sqrt(3) rounds to S = 1, but three entries at exactly 1 have norm sqrt(3) > C;
    # S one float64 step below 1 scales each down a step
    clip = math.sqrt(3)
    assert clip / 3**0.5 == 1.0 and Fraction(clip) ** 2 < 3
    update = {k: torch.tensor([1.0]) for k in "abc"}
    out, scaled = clip_per_layer(update, clip)
    assert scaled and all(torch.equal(out[k], toward_zero(torch.tensor([1.0]), 1)) for k in "abc")
    assert_within(list(out.values()), clip)


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
