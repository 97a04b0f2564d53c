"""Byzantine-robust aggregation: coordinate-wise median, trimmed mean, (Multi-)Krum.

Each rule replaces FedAvg's weighted mean of the round's client models:

* **median** (Yin et al., ICML 2018, "coordinate-wise median"): every entry of
  the next model is the median of that entry over the clients (an even count
  takes the mean of the two middle values, as ``numpy.median``);
* **trimmed_mean** (Yin et al. 2018, "coordinate-wise trimmed mean"): per
  entry, drop the ``b = floor(beta * n)`` largest and ``b`` smallest values,
  average the other ``n - 2b``;
* **krum** (Blanchard et al., NeurIPS 2017): client i's score is the sum of
  squared L2 distances from its model to its ``n - f - 2`` nearest other
  models; Krum takes the model with the lowest score, Multi-Krum (``m > 1``,
  the same paper's variant) the plain mean of the ``m`` lowest-scored, every
  score computed once on all n models. ``selection = "repeated"`` picks the
  m by Krum again on the models not yet picked, rescoring each time (Bulyan's
  selection, El Mhamdi et al. 2018; the ``multi_krum`` of Shejwalkar &
  Houmansadr's released code, which picks until 2f + 2 are left).

What each tolerates (n = reporting clients of a round, f = byzantine among them):
the median's breakdown point is 1/2 (any f < n/2 clients cannot move an entry
outside the honest values' range); the trimmed mean tolerates f <= b = floor(beta n)
per entry; Krum needs n > 2f + 2 (Blanchard et al., Prop. 1) and then picks a
model whose distance to the honest mean is bounded. None of them is
unbiased under non-IID data: with honest but heterogeneous clients they do not
equal FedAvg (docs/baselines.md, "Robust aggregators").

Choices
-------
* The rules act on the client models, not on the updates ``y_i - x``: per entry
  median and trimmed mean commute with subtracting the same ``x``, and Krum's
  distances are the same, so the result is the same up to float rounding
  (:func:`squared_distances` takes the models' direct differences, so that
  rounding is that of the updates themselves, not of the models' norms).
* Sample counts are not used (the papers' rules are unweighted); maths in float64,
  cast back to each entry's dtype. Integer buffers (BN's ``num_batches_tracked``)
  take the max, as in FedAvg.
* Krum's distances run over every floating-point entry of the state (parameters
  and BN statistics). Ties in score go to the lower client id. When a round has
  too few clients for ``n - f - 2 >= 1`` neighbours (dropouts), it scores with
  one neighbour; ``algorithm.f`` is checked against the configured clients per round.

Checked against (2026-12-01): Blades ``blades/aggregators/aggregators.py`` (``Median``: mean of the two
middle values; ``Trimmedmean``: an integer count trimmed each side, chillfl's b); Shejwalkar & Houmansadr's
released ``multi_krum`` (NDSS21-Model-Poisoning ``portal.py``: ``|R| - 2 - f`` nearest squared distances, Krum
repeated on the rest: ``selection = "repeated"``); byzfl ``byzfl/aggregators/aggregators.py`` (``TrMean``: f each
side, as here). byzfl's ``Krum`` / ``MultiKrum`` differ on purpose: they score with the ``n - f - 1`` nearest
(mean, not sum) and average ``n - f`` models; chillfl keeps Blanchard et al.'s ``n - f - 2`` and the configured m.
Model vs gradient: none of these rules has a sign (each commutes with negating every input), so they read the
same on models, updates or gradients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Iterable, Literal, Mapping, Sequence

import torch

from chillfl.aggregation.base import AggregatorBase, ClientResult, Json, Params
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.capabilities import Capabilities
from chillfl.errors import ConfigError
from chillfl.numeric import floored_share
from chillfl.options import require

if TYPE_CHECKING:  # annotations only
    from chillfl.config import RunConfig


def _stacked(results: Sequence[ClientResult], key: str) -> torch.Tensor:
    return torch.stack([r.params[key].double() for r in results])


def _per_entry(results: Sequence[ClientResult], rule: Any) -> Params:
    """``rule(stack [n, ...] float64) -> [...]`` for every floating entry; integer entries take the max."""
    out: Params = {}
    for key, ref in results[0].params.items():
        if not torch.is_floating_point(ref):
            out[key] = torch.stack([r.params[key] for r in results]).max(dim=0).values
            continue
        out[key] = rule(_stacked(results, key)).to(ref.dtype)
    return out


def coordinate_median(values: torch.Tensor) -> torch.Tensor:
    """The median over dim 0; an even count gives the mean of the two middle values."""
    n = values.shape[0]
    ordered = values.sort(dim=0).values
    if n % 2:
        return ordered[n // 2]
    return (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def trimmed_mean(values: torch.Tensor, beta: float) -> torch.Tensor:
    """Mean over dim 0 after dropping the ``floor(beta n)`` largest and smallest values of every entry."""
    n = values.shape[0]
    b = floored_share(beta, n)  # on beta as written: floor(0.29 * 100) of the float product is 28, of 0.29 itself 29
    return values.sort(dim=0).values[b : n - b].mean(dim=0)


def float_keys(params: Params) -> list[str]:
    """The floating-point entries of a state, in its order: what the distance-based rules flatten."""
    return [k for k, v in params.items() if torch.is_floating_point(v)]


def flat_state(params: Mapping[str, torch.Tensor], keys: Iterable[str]) -> torch.Tensor:
    """A state's ``keys`` entries as one float64 vector, in the order of ``keys``: what the distance-based rules compare.
    A float64 entry is not copied before the concatenation (``.double()`` of one is itself)."""
    return torch.cat([params[k].double().reshape(-1) for k in keys])


def flat_models(results: Sequence[ClientResult], keys: Sequence[str]) -> torch.Tensor:
    """The clients' ``keys`` entries as one float64 row each (:func:`flat_state`): [n, d]."""
    return torch.stack([flat_state(r.params, keys) for r in results])


def unflatten(vector: torch.Tensor, keys: Sequence[str], like: Params) -> Params:
    """Inverse of one row of :func:`flat_models`: ``keys``' entries shaped and typed as in ``like``."""
    out: Params = {}
    offset = 0
    for key in keys:
        ref = like[key]
        out[key] = vector[offset : offset + ref.numel()].reshape(ref.shape).to(ref.dtype)
        offset += ref.numel()
    return out


def integer_max(results: Sequence[ClientResult]) -> Params:
    """Integer entries (BN's ``num_batches_tracked``): the max over ``results``, as FedAvg."""
    return {k: torch.stack([r.params[k] for r in results]).max(dim=0).values for k, v in results[0].params.items() if not torch.is_floating_point(v)}


def squared_distances(flat: torch.Tensor) -> torch.Tensor:
    """Squared L2 distances between the rows of ``flat`` [n, d], with ``inf`` on the diagonal (a model is not its own neighbour).

    Each distance comes from the rows' direct differences (``torch.cdist`` without its matrix-product shortcut, about the
    Gram matrix's cost): the expansion ||a||^2 + ||b||^2 - 2 a.b would lose the digits of two close models' difference
    (norm^2 ~ 1e-7 late in training) to cancellation against their norms (~ 1e4), and no common centre avoids that
    while one far outlier is among the rows. Symmetric exactly, so equal sums of the same distances stay ties."""
    dist = torch.cdist(flat, flat, compute_mode="donot_use_mm_for_euclid_dist").square()
    dist.fill_diagonal_(math.inf)
    return dist


def scores_from_distances(dist: torch.Tensor, f: int) -> torch.Tensor:
    """Krum's scores from :func:`squared_distances` of the rows scored (a sub-matrix scores a subset: Bulyan)."""
    n = dist.shape[0]
    if n == 1:
        return torch.zeros(1, dtype=dist.dtype, device=dist.device)
    k = min(max(n - f - 2, 1), n - 1)
    return dist.sort(dim=1).values[:, :k].sum(dim=1)


def krum_scores(flat: torch.Tensor, f: int) -> torch.Tensor:
    """Krum's score of every row of ``flat`` [n, d]: summed squared distances to its ``n - f - 2`` nearest other rows."""
    if flat.shape[0] == 1:
        return torch.zeros(1, dtype=flat.dtype, device=flat.device)
    return scores_from_distances(squared_distances(flat), f)


def krum_select(flat: torch.Tensor, f: int, m: int) -> list[int]:
    """Rows of the ``m`` lowest Krum scores, lowest first (ties: lower row)."""
    scores = krum_scores(flat, f)
    return torch.argsort(scores, stable=True)[: min(m, flat.shape[0])].tolist()


def repeated_krum(flat: torch.Tensor, f: int, count: int) -> list[int]:
    """Rows of ``flat`` [n, d] in the order repeated Krum picks them: Krum (same ``f``) on the rows not yet picked, its
    choice moved out, until ``count`` are picked. The scores change as the rest shrinks (``|R| - f - 2`` neighbours, at
    least 1); the distances are computed once and sub-selected; ties go to the lower row."""
    dist = squared_distances(flat)
    remaining = list(range(flat.shape[0]))
    chosen: list[int] = []
    while len(chosen) < count and remaining:
        if len(remaining) == 1:
            chosen.append(remaining.pop())
            break
        rows = torch.tensor(remaining, device=dist.device)
        scores = scores_from_distances(dist.index_select(0, rows).index_select(1, rows), f)
        chosen.append(remaining.pop(int(torch.argsort(scores, stable=True)[0])))
    return chosen


@dataclass(frozen=True)
class MedianOptions:
    """Coordinate-wise median: no options."""


@dataclass(frozen=True)
class TrimmedMeanOptions:
    """``beta``: the share trimmed at each end of every entry, in [0, 0.5) (floor(beta n) values each side)."""

    beta: float = 0.1

    def validate(self, section: str) -> None:
        require(0 <= self.beta < 0.5, f"{section}.beta", f"must be in [0, 0.5), got {self.beta}")


@dataclass(frozen=True)
class KrumOptions:
    """``f``: byzantine clients tolerated (needs clients per round > 2f + 2); ``m``: models averaged (1 = Krum, > 1 = Multi-Krum);
    ``selection``: Multi-Krum's m lowest scores of one pass (``once``, Blanchard et al.) or Krum repeated on the rest (``repeated``)."""

    f: int = 0
    m: int = 1
    selection: Literal["once", "repeated"] = "once"

    def validate(self, section: str) -> None:
        require(0 <= self.f <= 1_000_000, f"{section}.f", f"must be in [0, 1000000], got {self.f}")
        require(1 <= self.m <= 1_000_000, f"{section}.m", f"must be in [1, 1000000], got {self.m}")


class Median(AggregatorBase):
    """Coordinate-wise median of the client models (Yin et al. 2018)."""

    def __init__(self, options: MedianOptions = MedianOptions()) -> None:
        self.options = options  # recorded for an instance passed from Python: its spec's note reads it (fewer_attackers_note)

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        return _per_entry(results, coordinate_median)


class TrimmedMean(AggregatorBase):
    """Coordinate-wise beta-trimmed mean of the client models (Yin et al. 2018)."""

    def __init__(self, options: TrimmedMeanOptions = TrimmedMeanOptions()) -> None:
        self.options = options  # recorded for an instance passed from Python
        self.beta = options.beta

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        return _per_entry(results, lambda values: trimmed_mean(values, self.beta))


class Krum(AggregatorBase):
    """Krum / Multi-Krum (Blanchard et al. 2017): the mean of the m lowest-scored client models."""

    def __init__(self, options: KrumOptions = KrumOptions()) -> None:
        self.options = options  # recorded for an instance passed from Python
        self.f, self.m = options.f, options.m
        self._selected: list[int] = []

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        flat = flat_models(results, float_keys(results[0].params))
        select = krum_select if self.options.selection == "once" else repeated_krum
        rows = select(flat, self.f, self.m)
        self._selected = sorted(results[i].client_id for i in rows)
        chosen = [results[i] for i in sorted(rows)]  # averaged in client-id order
        return _per_entry(chosen, lambda values: values.mean(dim=0))

    def round_metrics(self) -> Mapping[str, Json]:
        """``selected``: the client ids whose models were averaged this round (``agg_selected`` in metrics.jsonl)."""
        return {"selected": list(self._selected)}


def check_krum(options: KrumOptions, config: RunConfig, section: str) -> None:
    """Krum's ``f`` and ``m`` against the clients a round samples: n > 2f + 2 (Blanchard et al.), m <= n - f."""
    clients = config.federation.sample_size()
    if clients < 3:  # no f is tolerated: the bound below would suggest f <= 0 and then refuse f = 0
        raise ConfigError(config.federation.size_field, f"{clients} clients per round are too few for Krum (it needs at least 3)")
    if clients <= 2 * options.f + 2:
        raise ConfigError(f"{section}.f", f"Krum needs clients per round > 2f + 2; {clients} clients per round tolerate f <= {max((clients - 3) // 2, 0)}, got {options.f}")
    if options.m > clients - options.f:
        raise ConfigError(f"{section}.m", f"Multi-Krum averages at most clients per round - f = {clients - options.f} models, got {options.m}")


ROBUST = Capabilities(withstands_bad_clients=True)
"""A robust rule withstands bad clients (a non-finite upload is left out of its round, not the end of the run), and its
``aggregate`` takes no external per-client weights (no ``takes_weights``: a wrapper's weights, PA3Fed's,
cannot reach it; its point is to ignore how much any client claims to weigh). Not every such rule is unweighted: geomed and
norm_bound weight by sample counts unless ``weighting = "uniform"``."""


def fewer_than_half(options: object, clients: int) -> int:
    """The attackers a round of ``clients`` holds below half of it, ceil(n / 2) - 1: the breakdown point of the
    median (and of the geometric median, counted in clients of equal weight). At half, an even round's median is the
    mean of two middle values the attackers may both send."""
    return (clients - 1) // 2


def trims(options: TrimmedMeanOptions, clients: int) -> int:
    """floor(beta n): the values dropped at each end of every entry, so that many attackers' values are all dropped."""
    return floored_share(options.beta, clients)


def beta_trimming(options: TrimmedMeanOptions, attackers: int, clients: int) -> tuple[str, float] | None:
    """The smallest beta (to three decimals, more where those would reach 0.5) that trims ``attackers`` of ``clients``
    at each end, floor(beta n) >= attackers; None where that needs beta >= 0.5 (the option's bound): 2 attackers >= n."""
    if 2 * attackers >= clients:
        return None
    for digits in range(3, 19):  # ceil(a 10^d / n) / 10^d stays below 1/2 once 10^d >= 2n
        scale = 10**digits
        beta = Fraction(-(-attackers * scale // clients), scale)  # a / n rounded up to d decimals: floor(beta n) >= a
        if beta < Fraction(1, 2):
            return "beta", float(beta)
    return None


MEDIAN = register_algorithm(
    "median", AlgorithmSpec(MedianOptions, lambda o, ctx: (Median(), []), "coordinate-wise median, byzantine-robust (Yin et al. 2018)", capabilities=ROBUST,
                            makes=(Median,), withstands=fewer_than_half)
)
TRIMMED_MEAN = register_algorithm(
    "trimmed_mean",
    AlgorithmSpec(TrimmedMeanOptions, lambda o, ctx: (TrimmedMean(o), []), "coordinate-wise trimmed mean, byzantine-robust (Yin et al. 2018)", capabilities=ROBUST,
                 makes=(TrimmedMean,), withstands=trims, withstanding=beta_trimming),
)
KRUM = register_algorithm(
    "krum",
    AlgorithmSpec(KrumOptions, lambda o, ctx: (Krum(o), []), "(Multi-)Krum, byzantine-robust (Blanchard et al. 2017)", capabilities=ROBUST, check=check_krum, tolerates="f",
                 makes=(Krum,)),
)
