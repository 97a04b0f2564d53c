"""What counts as a number in a config, a results file or a run's record: an ``int`` or a ``float``, never a ``bool``.

Why bool is excluded: ``bool`` is a subclass of ``int`` (``isinstance(True, int)`` holds), so a bare
``isinstance(x, (int, float))`` takes TOML's and JSON's ``true`` for the number 1: ``lr = true`` would train at
1.0, ``seeds = [true]`` would run seed 1, a hand-edited ``"final_global_acc": false`` would read as 0 %. A value
written as true/false is a switch, not a number, and every check here refuses it.

What counts: Python's own ``int`` and ``float`` and their subclasses. ``numpy.float64`` subclasses ``float`` and is
a number here; ``numpy.int64``, ``numpy.float32``, ``numpy.bool_``, tensors, ``Decimal`` and strings are not (what
TOML and JSON read back is never one of them; a check that takes NumPy integers says so itself).

Why its own module: the predicate was written out a dozen times (config, options, reports, sinks, data files, the
vectorised executor), each a chance to forget the bool. It is a leaf: it imports nothing from chillfl, so any
layer may use it and imports keep flowing one way. It also holds the few arithmetic helpers whose result a run
records and that must not depend on the CPU (:func:`weighted_mean`).
"""

from __future__ import annotations

import math
from fractions import Fraction
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeGuard

if TYPE_CHECKING:
    import torch

__all__ = ["floored_share", "is_finite_real", "is_real", "is_whole", "rounded_share", "weighted_mean"]


def is_real(x: object) -> TypeGuard[int | float]:
    """``x`` is an int or a float and not a bool (NaN and the infinities included: see :func:`is_finite_real`)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def is_finite_real(x: object) -> TypeGuard[int | float]:
    """``x`` is an int or a finite float and not a bool: NaN and +-inf pass every ``x > 0`` style range check (or fail
    it silently), so a value that will be compared or averaged is asked this. Every int is finite, even one too large
    for a float (``math.isfinite(10**400)`` would raise instead of answering)."""
    if isinstance(x, float):
        return math.isfinite(x)
    return is_whole(x)


def is_whole(x: object) -> TypeGuard[int]:
    """``x`` is an int and not a bool: a seed, an index, a round or a byte count (a float, even ``3.0``, is not)."""
    return isinstance(x, int) and not isinstance(x, bool)


def weighted_mean(values: Sequence[float], weights: Sequence[float]) -> float:
    """``sum(w * v) / sum(w)`` with both sums exactly rounded (:func:`math.fsum` of the products, each product one IEEE
    rounding), so the same bits on every CPU; NaN when the weights sum to 0 (no weight, no mean; NumPy's 0/0 said the same).

    Why not ``np.dot``: it is BLAS's ``ddot``, whose summation order is the kernel's (OpenBLAS picks Haswell or SkylakeX
    ones by the CPU, or by ``OPENBLAS_CORETYPE``): a round's ``train_loss`` of the same clients' bit-identical losses
    was 1.2488999374468361 under one and 1.248899937446836 under the other. A non-finite product (a client's NaN or
    infinite loss) makes the mean NaN or infinite as the plain sum does, in a fixed left-to-right order."""
    if len(values) != len(weights):
        raise ValueError(f"weighted_mean: {len(values)} values but {len(weights)} weights")
    products = [float(w) * float(v) for v, w in zip(values, weights)]
    total = math.fsum(float(w) for w in weights)
    if total == 0:
        return math.nan
    try:
        return math.fsum(products) / total
    except (ValueError, OverflowError):  # inf - inf (NaN), or finite products whose sum passes the float range
        return sum(products) / total


def rounded_share(fraction: float, total: int) -> int:
    """round(fraction * total), halves to the even count, on the fraction as meant (see below), not on
    the float product: 0.35 of 90 is 31.5 -> 32 (the float product, 31.499999999999996, rounded to 31), 0.14 of 75 is
    10.5 -> 10 (10.500000000000002 gave 11), 5/6 of 3 is 2.5 -> 2 (its shortest decimal, 0.8333333333333334, gave 3). Where
    the product is exact in floating point (0.25 of 10, 0.3 of 5) nothing changes. The fraction as meant: as in
    :func:`floored_share`."""
    return round(_as_meant(fraction) * total)


def floored_share(fraction: float, total: int) -> int:
    """floor(fraction * total) on the fraction as meant: 0.29 of 100 is 29 (the float product, 28.999999999999996,
    floored to 28), 1/3 of 3 is 1 and 2/3 of 3 is 2 (their shortest decimals, 0.333...3 and 0.666...6, lie just below
    and floor them to 0 and 1). A trimmed mean's or a filter's count of clients.

    The fraction as meant: the shortest fraction (denominator up to a million) that is this float, where one is (1/3,
    29/100), else the decimal as written (0.1234567). Why: a floor is off by one client wherever the value read lies
    just below a whole count, and both the float and a never-ending decimal's digits do."""
    return math.floor(_as_meant(fraction) * total)


def _as_meant(fraction: float) -> Fraction:
    """The shortest fraction (denominator up to a million) that is this float, where one is (5/6, 29/100), else the
    decimal as written (0.1234567): the value a person typed or computed, not the float's binary neighbour."""
    x = float(fraction)
    written = Fraction(repr(x))
    short = written.limit_denominator(10**6)
    return short if float(short) == x else written


ROW_SUM_FLOOR = 1e-3
"""The least a row of probabilities may sum off 1 (:func:`row_sum_tolerance`)."""


def row_sum_tolerance(dtype: "torch.dtype", classes: int) -> float:
    """How far from 1 a row of ``classes`` probabilities stored as ``dtype`` may sum:
    ``max(1e-3, 2 * eps + classes * tiny * eps / 2)``, with ``eps`` and ``tiny`` (the smallest normal) of ``dtype``;
    1e-3 for an integer dtype. One rule for every reader of such rows (the analysis commands, the privacy check of
    released rows, ``soft_label_entropy``).

    Why this much: a stored entry is off its value by at most half a unit in the last place: ``eps / 2`` of it where it
    is normal, and ``tiny * eps / 2`` (half the smallest subnormal: 3e-8 for float16) where it is subnormal or flushed to
    0. The stored row's sum (added here in float64) is therefore off the computed row's by at most
    ``eps / 2 * sum + classes * tiny * eps / 2``, for any class count. The second term is what a confident softmax over
    a vocabulary needs in float16: 128,256 entries near 3e-8 each moved the sum by up to 3.8e-3, and a correct row was
    refused. It is negligible for float32 and bfloat16, whose ``tiny`` is 2**-126. A softmax computed in float32 (torch's,
    on the CPU and GPU, also for float16/bfloat16 inputs) is off 1 by about ``classes * 2**-24`` in the worst summation
    order, 6e-5 at 1000 classes. 1e-3 covers a float32 row with room (no row is refused for its rounding on one machine
    and accepted on another), and ``2 * eps`` covers a float16 (2e-3) or bfloat16 (1.6e-2) one. ``classes * eps``, the
    first rule, reached 1 for bfloat16 at 128 classes and let an all-zero row through (every entropy NaN); this one stays
    under 1 for float16 up to 33 million classes."""
    import torch  # here: this module is a leaf that imports no torch

    if not dtype.is_floating_point:
        return ROW_SUM_FLOOR
    info = torch.finfo(dtype)
    return max(ROW_SUM_FLOOR, 2 * info.eps + classes * info.tiny * info.eps / 2)
