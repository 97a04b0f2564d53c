"""Per-client heterogeneity measures from label counts (FedChill, Sec. 3.2, Table 11, A.5).

Checked against papers/fedchill.txt Sec. 3.2 (Eq. 6), App. A.4.2 (Table 11) and A.5, 2026-12-02 (bounds re-derived by hand); no authors' code found.

FedChill compares each client's class distribution p_n with a reference
distribution p_g that the server can state without seeing any client data
(uniform, or known class priors), and turns the divergence into an initial
temperature (Eq. 7, :mod:`chillfl.temperature.fedchill`). Only label counts are
needed, so a client can compute its own score locally.

Every measure has a *raw* value (the paper's quantity) and two reference raw
values: the one of the least heterogeneous client and the one of the most
heterogeneous client possible. A heterogeneity in [0, 1] (0 = like p_g,
1 = as skewed as possible, large = MORE heterogeneous, as Eq. 7 needs) is

    h = (raw - least) / (most - least)

============  =================================  =======================  ===========================
measure       raw value                          least (h = 0)            most (h = 1)
============  =================================  =======================  ===========================
ratio         sum_c |p_n(c)/p_g(c) - 1| (Eq. 6)  0 (p_n = p_g)            1/p_min + C - 2 (see below)
kl            KL(p_n || p_g)                     0                        log(1/p_min)
js            JS(p_n, p_g), natural log          0                        max_j JS(e_j, p_g)
entropy_diff  |H(p_g) - H(p_n)|                  0                        max(H(p_g), log C - H(p_g))
gini          Gini coefficient of the counts     0 (equal counts)         (C - 1)/C (one class)
dominant      max_c p_n(c)                       1/C                      1
active        #classes with count > 0            C                        1
size          dataset size n = sum_c counts      max n in the federation  0
entropy       Shannon entropy H(p_n)             log C                    0
============  =================================  =======================  ===========================

So ``entropy`` becomes 1 - H/log C, ``active`` (C - k)/(C - 1), ``dominant``
(max p - 1/C)/(1 - 1/C), ``gini`` G*C/(C-1), ``size`` 1 - n/max n.
``gini``, ``dominant``, ``active``, ``size`` and ``entropy`` are A.5's
predictors and ignore p_g (they measure skew relative to uniform).

Maximum of the ratio score (Eq. 6), derived for any p_g with all p_g(c) > 0:
h(p) = sum_c |p(c)/p_g(c) - 1| is a sum of absolute values of affine functions
of p, hence convex, so its maximum over the probability simplex is reached at
a vertex, i.e. a client holding a single class j. There
h(e_j) = (1/p_g(j) - 1) + sum_{c != j} |0 - 1| = 1/p_g(j) - 1 + (C - 1)
       = 1/p_g(j) + C - 2,
largest for the class with the smallest prior: h_max = 1/p_min + C - 2.
For uniform p_g (p_min = 1/C): h_max = 2(C - 1), e.g. 18 for C = 10.
The same convexity argument gives the maxima of KL (-log p_g(j) at vertex j)
and JS (jointly convex, an f-divergence; evaluated at every vertex).

Choices
-------
* Normalisation of Eq. 6 (the paper only says "normalized to [0, 1]"):
  ``"max"`` (default) divides by the analytic maximum above, so each client
  computes its score alone and a one-class client scores 1 (uniform p_g).
  ``"minmax"`` rescales over the federation: (raw - min)/(max - min) in the
  "more heterogeneous" direction (all clients equal -> 0). ``"none"`` returns
  the raw value (direction not flipped; for correlation tables).
* p_g given as priors is normalised to sum 1; every entry must be > 0 (Eq. 6
  divides by it).
* ``entropy_diff`` takes the absolute difference, so a client more uniform than
  non-uniform priors also counts as divergent; for uniform p_g it equals
  log C - H(p_n).
* ``size`` has no per-client bound; its "max" reference is the largest client
  of the federation (smaller clients count as more heterogeneous).
* A client with no samples has no distribution: ConfigError.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass
from typing import Callable, Literal, Mapping, Sequence

import numpy as np

from chillfl.errors import ConfigError, choice_error

Normalisation = Literal["max", "minmax", "none"]
NORMALISATIONS: tuple[str, ...] = ("max", "minmax", "none")


# --------------------------------------------------------------------------- helpers


def _as_counts(counts: np.ndarray | Sequence[float], field: str = "temperature.class_counts", scale_invariant: bool = True) -> np.ndarray:
    """The validated count vector; counts whose sum overflows float64 come back scaled down by a power of two.

    Why: finite counts summing past 1.8e308 made every p_n(c) = count / inf zero (a ZeroDivisionError,
    or a silent wrong h_n and temperature). A measure of the distribution alone (``scale_invariant``)
    scores the rescaled counts exactly as the originals (scaled by a power of two, which rounds none but subnormal
    counts; counts a rescale would flush to 0 are refused); one that reads the size itself cannot, and is refused.
    Counts whose sum is finite are returned as given (bit-identical scores).
    """
    arr = np.asarray(counts, dtype=np.float64)
    if arr.ndim != 1 or arr.size < 2:
        raise ConfigError(field, f"expected a vector of at least 2 class counts, got shape {arr.shape}")
    if np.any(arr < 0) or not np.all(np.isfinite(arr)):
        raise ConfigError(field, "class counts must be finite and >= 0")
    with np.errstate(over="ignore"):
        total = arr.sum()
    if not np.isfinite(total):
        if not scale_invariant:
            raise ConfigError(field, "a client's class counts sum past float64's max (1.8e308); this measure reads the dataset size itself")
        scaled = np.ldexp(arr, -int(np.frexp(arr.max())[1]))  # by a power of two (exact but for subnormals): max in [0.5, 1)
        if np.any((scaled == 0) & (arr > 0)):  # a count under ~1e-324 of the max flushed to 0 ('active' counted one class fewer)
            raise ConfigError(field, "a client's class counts span more than float64's range (their sum overflows and the smallest would round to 0)")
        arr = scaled
        total = arr.sum()
    if total <= 0:
        raise ConfigError(field, "a client has no samples; every client needs at least one labelled sample")
    return arr


def reference_distribution(p_g: Sequence[float] | np.ndarray | None, num_classes: int) -> np.ndarray:
    """p_g normalised to sum 1; ``None`` -> uniform (Sec. 3.2: balanced global distribution)."""
    if p_g is None:
        return np.full(num_classes, 1.0 / num_classes)
    arr = np.asarray(p_g, dtype=np.float64)
    if arr.shape != (num_classes,):
        raise ConfigError("temperature.p_g", f"needs one prior per class ({num_classes}), got {arr.size}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ConfigError("temperature.p_g", "every class prior must be > 0 (Eq. 6 divides by it)")
    with np.errstate(over="ignore"):
        total = arr.sum()
    if not np.isfinite(total):  # finite priors summing past 1.8e308 normalised to all zeros (a wrong T, or a ZeroDivisionError)
        arr = arr / arr.max()
        total = arr.sum()
    return arr / total


def _entropy(p: np.ndarray) -> float:
    nz = p[p > 0]
    return float(-(nz * np.log(nz)).sum()) + 0.0  # + 0.0 turns -0.0 into 0.0


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p || q) with 0 log 0 = 0; q > 0 wherever p > 0."""
    mask = p > 0
    return float((p[mask] * np.log(p[mask] / q[mask])).sum())


def _js(p: np.ndarray, q: np.ndarray) -> float:
    m = 0.5 * (p + q)
    return 0.5 * _kl(p, m) + 0.5 * _kl(q, m)


def _vertex(j: int, num_classes: int) -> np.ndarray:
    e = np.zeros(num_classes)
    e[j] = 1.0
    return e


# --------------------------------------------------------------------------- raw measures
# Signature: raw(counts, p_g) -> float, counts a validated 1-D vector, p_g normalised.


def ratio_raw(counts: np.ndarray, p_g: np.ndarray) -> float:
    """Eq. 6: sum_c |p_n(c)/p_g(c) - 1|."""
    p = counts / counts.sum()
    return float(np.abs(p / p_g - 1.0).sum())


def kl_raw(counts: np.ndarray, p_g: np.ndarray) -> float:
    """KL(p_n || p_g) in nats (Table 11, A.5)."""
    return _kl(counts / counts.sum(), p_g)


def js_raw(counts: np.ndarray, p_g: np.ndarray) -> float:
    """Jensen-Shannon divergence in nats, in [0, log 2] (Table 11)."""
    return _js(counts / counts.sum(), p_g)


def entropy_diff_raw(counts: np.ndarray, p_g: np.ndarray) -> float:
    """|H(p_g) - H(p_n)| (Table 11 "Entropy Diff")."""
    return abs(_entropy(p_g) - _entropy(counts / counts.sum()))


def gini_raw(counts: np.ndarray, p_g: np.ndarray) -> float:
    """Gini coefficient of the class counts: sum_ij |x_i - x_j| / (2 C sum x), in [0, (C-1)/C].

    Scale-invariant, so counts whose pairwise sums overflow are divided by their max first (an inf
    numerator or denominator gave inf or NaN); other counts are scored as given.
    """
    c = counts.size
    with np.errstate(over="ignore", invalid="ignore"):
        gini = float(np.abs(counts[:, None] - counts[None, :]).sum() / (2.0 * c * counts.sum()))
    if math.isfinite(gini):
        return gini
    x = counts / counts.max()
    return float(np.abs(x[:, None] - x[None, :]).sum() / (2.0 * c * x.sum()))


def dominant_raw(counts: np.ndarray, p_g: np.ndarray) -> float:
    """Probability of the most frequent class, max_c p_n(c)."""
    return float(counts.max() / counts.sum())


def active_raw(counts: np.ndarray, p_g: np.ndarray) -> float:
    """Number of classes with at least one sample."""
    return float(np.count_nonzero(counts))


def size_raw(counts: np.ndarray, p_g: np.ndarray) -> float:
    """Local dataset size n."""
    return float(counts.sum())


def entropy_raw(counts: np.ndarray, p_g: np.ndarray) -> float:
    """Shannon entropy H(p_n) in nats."""
    return _entropy(counts / counts.sum())


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Measure:
    """A raw measure plus the raw values of the least and most heterogeneous client.

    ``bounds(p_g, sizes)`` -> (least, most); ``sizes`` are the federation's
    client sizes (only ``size`` needs them). Calling a Measure returns the raw value.
    ``scale_invariant``: the raw value and bounds are the same for counts * k (k > 0), so
    counts whose sum overflows can be scored divided by their max.
    """

    name: str
    raw: Callable[[np.ndarray, np.ndarray], float]
    bounds: Callable[[np.ndarray, np.ndarray], tuple[float, float]]
    description: str
    scale_invariant: bool = True

    def __call__(self, counts: np.ndarray | Sequence[float], p_g: Sequence[float] | np.ndarray | None = None) -> float:
        arr = _as_counts(counts, scale_invariant=self.scale_invariant)
        return self.raw(arr, reference_distribution(p_g, arr.size))


def _ratio_bounds(p_g: np.ndarray, sizes: np.ndarray) -> tuple[float, float]:
    return 0.0, 1.0 / float(p_g.min()) + p_g.size - 2.0


def _kl_bounds(p_g: np.ndarray, sizes: np.ndarray) -> tuple[float, float]:
    return 0.0, -math.log(float(p_g.min()))


def _js_bounds(p_g: np.ndarray, sizes: np.ndarray) -> tuple[float, float]:
    return 0.0, max(_js(_vertex(j, p_g.size), p_g) for j in range(p_g.size))


def _entropy_diff_bounds(p_g: np.ndarray, sizes: np.ndarray) -> tuple[float, float]:
    h_g = _entropy(p_g)
    return 0.0, max(h_g, math.log(p_g.size) - h_g)


def _gini_bounds(p_g: np.ndarray, sizes: np.ndarray) -> tuple[float, float]:
    return 0.0, (p_g.size - 1.0) / p_g.size


def _dominant_bounds(p_g: np.ndarray, sizes: np.ndarray) -> tuple[float, float]:
    return 1.0 / p_g.size, 1.0


def _active_bounds(p_g: np.ndarray, sizes: np.ndarray) -> tuple[float, float]:
    return float(p_g.size), 1.0


def _size_bounds(p_g: np.ndarray, sizes: np.ndarray) -> tuple[float, float]:
    return float(sizes.max()), 0.0


def _entropy_bounds(p_g: np.ndarray, sizes: np.ndarray) -> tuple[float, float]:
    return math.log(p_g.size), 0.0


MEASURES: Mapping[str, Measure] = types.MappingProxyType(
    {
        m.name: m
        for m in (
            Measure("ratio", ratio_raw, _ratio_bounds, "FedChill heterogeneity score, Eq. 6"),
            Measure("kl", kl_raw, _kl_bounds, "KL(p_n || p_g)"),
            Measure("js", js_raw, _js_bounds, "Jensen-Shannon divergence"),
            Measure("entropy_diff", entropy_diff_raw, _entropy_diff_bounds, "|H(p_g) - H(p_n)|"),
            Measure("gini", gini_raw, _gini_bounds, "Gini coefficient of class counts"),
            Measure("dominant", dominant_raw, _dominant_bounds, "dominant-class probability"),
            Measure("active", active_raw, _active_bounds, "number of active classes"),
            Measure("size", size_raw, _size_bounds, "local dataset size", scale_invariant=False),
            Measure("entropy", entropy_raw, _entropy_bounds, "Shannon entropy of p_n"),
        )
    }
)
"""Read-only registry of heterogeneity measures by config name (``temperature.measure``)."""


def get_measure(name: str) -> Measure:
    if name not in MEASURES:
        raise choice_error("temperature.measure", name, list(MEASURES))
    return MEASURES[name]


# --------------------------------------------------------------------------- public API


def _scale(raw: np.ndarray, least: float, most: float) -> np.ndarray:
    span = most - least
    if span == 0:
        return np.zeros_like(raw)
    return np.clip((raw - least) / span, 0.0, 1.0) + 0.0  # no -0.0 in outputs


def heterogeneity(
    counts_matrix: np.ndarray | Sequence[Sequence[float]],
    measure: str = "ratio",
    p_g: Sequence[float] | np.ndarray | None = None,
    normalisation: str = "max",
) -> np.ndarray:
    """Per-client heterogeneity of a [clients, classes] count matrix.

    ``"max"`` / ``"minmax"``: in [0, 1], large = more heterogeneous (drives Eq. 7);
    ``"none"``: the raw measure.
    """
    if normalisation not in NORMALISATIONS:
        raise choice_error("temperature.normalisation", normalisation, NORMALISATIONS)
    spec = get_measure(measure)
    matrix = np.asarray(counts_matrix, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] < 1:
        raise ConfigError("temperature.class_counts", f"expected a [clients, classes] matrix, got shape {matrix.shape}")
    rows = [_as_counts(row, scale_invariant=spec.scale_invariant) for row in matrix]
    ref = reference_distribution(p_g, matrix.shape[1])
    raw = np.array([spec.raw(row, ref) for row in rows])
    if normalisation == "none":
        return raw
    with np.errstate(over="ignore"):  # only a scale-dependent measure reads the sizes, and its rows were checked finite
        sizes = matrix.sum(axis=1)
    least, most = spec.bounds(ref, sizes)
    if normalisation == "minmax":
        lo, hi = float(raw.min()), float(raw.max())
        least, most = (lo, hi) if most > least else (hi, lo)
    return _scale(raw, least, most)


FEDERATION_MEASURES: frozenset[str] = frozenset({"size"})
"""Measures whose ``"max"`` normalisation reads the whole federation (``size``: the largest client)."""


def client_heterogeneity(counts: np.ndarray | Sequence[float], measure: str = "ratio", p_g: Sequence[float] | np.ndarray | None = None) -> float:
    """h_n of one client from its own label counts alone (``"max"`` normalisation), as a device computes it.

    The same float as client n's entry of :func:`heterogeneity` over the whole
    federation (each row is scored alone and scaled by bounds that depend on
    p_g only), except for the :data:`FEDERATION_MEASURES` and ``"minmax"``,
    which need every client's counts: ConfigError.
    """
    if measure in FEDERATION_MEASURES:
        raise ConfigError("temperature.measure", f"{measure!r} is normalised by the largest client of the federation; a client cannot compute it alone")
    return float(heterogeneity(np.asarray(counts, dtype=np.float64)[None, :], measure, p_g, "max")[0])


def ratio_score(
    counts: np.ndarray | Sequence[float],
    p_g: Sequence[float] | np.ndarray | None = None,
    normalisation: str = "max",
) -> float:
    """Eq. 6 heterogeneity score of one client; ``"max"`` -> divided by 1/p_min + C - 2.

    ``"minmax"`` needs the whole federation: use :func:`heterogeneity`.
    """
    if normalisation not in ("max", "none"):
        if normalisation == "minmax":
            raise ConfigError("temperature.normalisation", "'minmax' needs every client's counts; use heterogeneity(matrix, 'ratio', ...)")
        raise choice_error("temperature.normalisation", normalisation, NORMALISATIONS)
    return float(heterogeneity(np.asarray(counts, dtype=np.float64)[None, :], "ratio", p_g, normalisation)[0])
