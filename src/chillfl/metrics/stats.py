"""Statistics over seeds: mean, sample standard deviation, Student-t confidence intervals, paired differences.

Used by ``chillfl compare --seeds`` so that a table says how much of a
difference is noise. Everything here works on plain lists of floats and needs
no SciPy.

Choices
-------
* The standard deviation is the sample one (divisor n - 1); with one seed it
  is undefined and reported as ``None`` (as is the interval).
* The 95 % interval is ``mean +- t_{0.975, n-1} * std / sqrt(n)``. The
  two-sided 95 % Student-t quantiles for df = 1..30 are tabulated below
  (6 decimals, rounded from the quantiles computed to 40 digits: error
  <= 5e-7, where a 4-decimal table's 5e-5 moved a printed interval's end by
  0.01); beyond 30 the Cornish-Fisher expansion of the t quantile around the
  normal one is used (error < 2e-6 for df > 30).
* Differences to a reference are *paired per seed*: at seed s both variants
  share the partition and the initial model, so d_s = x_s - ref_s removes the
  seed's common part; the interval is the one-sample interval of the d_s.
  "Sign holds in k/n" counts the seeds whose d_s has the sign of the mean
  difference (a zero difference never counts). A mean that is 0 up to float
  rounding (within :data:`ZERO_TOLERANCE` of the values' scale) is 0: it has
  no sign and prints as +0.00.
* No multiple-comparison correction: every interval is a 95 % interval of
  its own comparison (docs/comparisons.md says how to read m of them).
* A bounded metric (an accuracy, any fraction: :data:`FRACTION`) has its
  range in its :class:`Bounds`, given where the statistic is defined (the
  comparison's rows), not looked up by name where it is printed. The t
  interval is symmetric and knows no range, so with few seeds it can reach
  past it (3 seeds of 95, 99, 100 % give [91.43, 104.57]). Its ends stay as
  computed (``low``, ``high``, and ``table.json``'s ``ci_low``/``ci_high``);
  what is *shown* is :meth:`Summary.shown`, the interval clipped to the range
  and flagged ``clipped``, which the table marks so that a reader does not take
  ``[91.43, 100.00]`` for the t-interval's width. A paired difference of a
  bounded metric lies in :meth:`Bounds.difference` ([-1, 1] for fractions).
  Every table and figure that prints such an interval (``chillfl compare``,
  ``chillfl reproduce``, ``chillfl analyze scarlet-deficit``, the forest
  plots) shows :meth:`Summary.shown` and marks a clipped one with
  :data:`CLIPPED` (:func:`format_interval`), explained once by
  :data:`CLIPPED_NOTE`; they live here, below every one of them.

Checked against scipy.stats (``t.ppf(0.975, df)`` for df = 1..2000: the
table agrees to 5e-7 and the expansion to 2e-6; ``t.interval(0.95, n - 1, mean,
sem)`` and ``numpy.std(ddof=1)`` on worked examples) and Abramowitz and
Stegun 26.7.5 (the Cornish-Fisher terms), 2026-12-02.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

T975 = (
    12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
    2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
    2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272,
)
"""Two-sided 95 % quantiles t_{0.975, df} of Student's t, df = 1..30."""
Z975 = 1.959963984540054
"""The standard normal 0.975 quantile."""


def t_quantile_975(df: int) -> float:
    """t_{0.975, df}: tabulated for df <= 30, Cornish-Fisher expansion beyond (-> 1.96 as df -> inf)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(T975):
        return T975[df - 1]
    z = Z975
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


@dataclass(frozen=True)
class Bounds:
    """The range a metric's values lie in by its definition (an accuracy: [0, 1]): what a shown interval is clipped to."""

    low: float
    high: float

    def __post_init__(self) -> None:
        if not self.low < self.high:
            raise ValueError(f"a range needs low < high, got [{self.low}, {self.high}]")

    def difference(self) -> Bounds:
        """The range of x - y for x and y in this one: a paired difference of two accuracies lies in [-1, 1]."""
        return Bounds(self.low - self.high, self.high - self.low)

    def scaled(self, factor: float) -> Bounds:
        """The range of ``factor * x`` (factor > 0): a fraction's range in points is ``FRACTION.scaled(100)`` = [0, 100]."""
        if not factor > 0:
            raise ValueError(f"a range scales by a positive factor, got {factor}")
        return Bounds(factor * self.low, factor * self.high)


FRACTION = Bounds(0.0, 1.0)
"""Accuracies, success rates and other fractions (printed as %: 0 to 100)."""


@dataclass(frozen=True)
class Interval:
    """An interval as a table shows it: clipped to its metric's range, and whether that moved an end."""

    low: float
    high: float
    clipped: bool


def clip_interval(low: float, high: float, bounds: Bounds | None) -> Interval:
    """``[low, high]`` clipped to ``bounds`` (None: unbounded, shown as computed); ``clipped`` says an end moved."""
    if bounds is None:
        return Interval(low, high, False)
    shown_low, shown_high = max(low, bounds.low), min(high, bounds.high)
    return Interval(shown_low, shown_high, (shown_low, shown_high) != (low, high))


CLIPPED = "†"
"""Marks a printed interval clipped to its metric's range (:func:`clip_interval`); :data:`CLIPPED_NOTE` explains it."""
CLIPPED_NOTE = (f"{CLIPPED} clipped to the metric's range (accuracy 0 to 100 %, a difference of two -100 to +100 points): "
                "the Student-t interval mean ± t·std/√n reaches past it, so it is wider than shown")
"""The one footnote under a table (or in a figure's caption) with a :data:`CLIPPED` interval."""


def format_interval(shown: Interval, scale: float = 100.0, signed: bool = False, lead: str = "") -> str:
    """``[lead low, high]`` of an interval as shown (:func:`clip_interval`), times ``scale`` (100: fractions as % or
    points), two decimals (``signed``: with a + on positive ends), then :data:`CLIPPED` if an end was clipped."""
    sign = "+" if signed else ""
    return f"[{lead}{scale * shown.low:{sign}.2f}, {scale * shown.high:{sign}.2f}]" + (CLIPPED if shown.clipped else "")


def any_clipped(cells: Sequence[str]) -> bool:
    """Whether a table's cells hold a :data:`CLIPPED` interval, i.e. whether :data:`CLIPPED_NOTE` goes under it."""
    return any(CLIPPED in cell for cell in cells)


@dataclass(frozen=True)
class Summary:
    """mean, sample std and 95 % interval of n values (std and interval None for n < 2); ``bounds``: the metric's range."""

    n: int
    mean: float
    std: float | None
    low: float | None
    high: float | None
    bounds: Bounds | None = None

    @property
    def half_width(self) -> float | None:
        return None if self.high is None else self.high - self.mean

    def shown(self) -> Interval | None:
        """The interval to print: the t-interval clipped to :attr:`bounds` (None without an interval)."""
        if self.low is None or self.high is None:
            return None
        return clip_interval(self.low, self.high, self.bounds)


def summarize(values: Sequence[float], bounds: Bounds | None = None) -> Summary:
    """Mean, sample std (n - 1) and the Student-t 95 % interval of ``values``; ``bounds``: the metric's range, kept for :meth:`Summary.shown`."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("no values to summarise")
    n = len(xs)
    mean = math.fsum(xs) / n
    if n < 2:
        return Summary(n, mean, None, None, None, bounds)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile_975(n - 1) * std / math.sqrt(n)
    return Summary(n, mean, std, mean - half, mean + half, bounds)


ZERO_TOLERANCE = 1e-12
"""A mean paired difference within this fraction of its values' scale (the largest magnitude among the values and the
reference) is 0: differences that cancel exactly come out of float subtraction rounded (accuracies on 24 rows, 9/24,
11/24, 6/24 against 6/24, 10/24, 10/24: 3/24 + 1/24 - 4/24 = 0, but the differences are 0.125, 0.04166666666666663 and
-0.16666666666666669, whose mean is -1.85e-17), which printed "-0.00" and "sign holds 1/3" where an exact 0 prints
"+0.00" and "0/3"."""


@dataclass(frozen=True)
class Paired:
    """Per-seed differences x_s - ref_s, their summary, and in how many seeds the mean's sign holds."""

    differences: tuple[float, ...]
    summary: Summary
    sign_holds: int

    @property
    def n(self) -> int:
        return len(self.differences)


def paired_difference(values: Sequence[float], reference: Sequence[float], bounds: Bounds | None = None) -> Paired:
    """Differences paired by position (= by seed); see the module docstring for "sign holds". ``bounds``: the range of
    the metric itself; the differences' summary carries :meth:`Bounds.difference` of it."""
    if len(values) != len(reference):
        raise ValueError(f"paired values need equal lengths, got {len(values)} and {len(reference)}")
    diffs = tuple(float(a) - float(b) for a, b in zip(values, reference))
    s = summarize(diffs, None if bounds is None else bounds.difference())
    scale = max((abs(float(x)) for x in (*values, *reference)), default=0.0)
    if math.isfinite(s.mean) and math.isfinite(scale) and abs(s.mean) <= ZERO_TOLERANCE * scale:  # 0 up to rounding: +0.00 and no sign, as an exact 0
        half = s.half_width
        s = replace(s, mean=0.0, low=None if half is None else 0.0 - half, high=None if half is None else 0.0 + half)
    sign = (s.mean > 0) - (s.mean < 0)
    holds = sum(1 for d in diffs if sign != 0 and ((d > 0) - (d < 0)) == sign)
    return Paired(diffs, s, holds)


MIN_SEEDS = 3
"""Below this many seeds the table's intervals say nothing (one seed: none; two: Student t with 1 degree of freedom)."""


def few_seeds_warning(n: int) -> str:
    """The seed tables' one-line warning (compare's, reproduce's, scarlet-deficit's) under :data:`MIN_SEEDS` seeds.

    Two seeds: the 95 % interval is mean +- t(0.975, 1 df) * std / sqrt(2) = mean +- 12.706 / 1.4142 * std
    = mean +- 8.98 std, wider than any effect it could show (``--seeds 0,1`` printed [-25.97, 136.84])."""
    if n == 1:
        return f"warning: 1 seed: no intervals and no spread; run {MIN_SEEDS} seeds or more (e.g. --seeds 0-4) to read an interval"
    return (f"warning: {n} seeds: the 95 % intervals are uninformative (Student t with 1 degree of freedom: mean ± 8.98 std); "
            f"run {MIN_SEEDS} seeds or more (e.g. --seeds 0-4)")
