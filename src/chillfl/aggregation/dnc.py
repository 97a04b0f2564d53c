"""Divide-and-Conquer, DnC (Shejwalkar & Houmansadr, NDSS 2021, "Manipulating the Byzantine", Algorithm 2).

The same paper's Min-Max and Min-Sum attacks (``attack.kind = "min_max"`` / ``"min_sum"``) hide a malicious
update inside the benign updates' spread, where distance- and coordinate-based rules cannot see it; DnC looks
for it along the direction in which the updates vary most. On the round's n client updates g_i (f byzantine
assumed, the paper's m; filtering fraction c)::

    good = all clients
    repeat iterations times (the paper's niters):
        r    = a random subset of b of the d coordinates                    (b = ``subsample``)
        mu   = (1/n) sum_i g_i[r]
        v    = the top right singular vector of the n x b matrix [g_i[r] - mu]
        s_i  = ((g_i[r] - mu) . v)^2                                          (outlier score)
        good = good  intersect  {the n - floor(c f) clients of lowest s_i}
    next update = (1/|good|) sum_{i in good} g_i

An update far out along the top singular direction, where a large shift in many coordinates sits, has a large
score and is dropped; with c f >= f and the attackers' shift dominating that direction, every attacker is
removed while n - c f honest updates remain to average.

Choices
-------
* The authors' released code (github.com/vrt1shjwlkr/NDSS21-Model-Poisoning) holds the attacks, not DnC, and the
  paper's text was not reachable here (re-read 2026-12-01: the repository's notebooks hold Krum, Multi-krum, Bulyan,
  median, trimmed mean and the attacks, no DnC; the NDSS PDF gave its abstract only). So where Algorithm 2 leaves
  room chillfl follows the two public reimplementations, read 2026-12-01: Blades (lishenghui/blades) ``DnC``
  (``sub_dim = 10000``, ``filter_frac = 1.0`` in every version; its current ``blades/aggregators`` version, 2024-,
  has ``num_iters = 5`` and intersects the iterations' kept sets; its ``fllib/aggregators`` one, 2023-24, has
  ``num_iters = 5`` and first united, then intersected them; its first, ``src/blades/aggregators/dnc.py``, 2022,
  has ``num_iters = 1`` and unites) and FLPoison (vio1etus/FLPoison) ``DnC`` (``num_iters = 5``, b = 20 % of d,
  ``fliter_frac = 1.0``, intersection from every client, as here).
* The paper's Algorithm 2 writes ``I_good <- empty`` and then ``I_good <- I_good intersect I``, which read
  literally keeps nobody; chillfl starts from every client, so one iteration keeps its n - floor(c f) and
  more iterations intersect. ``combine = "union"`` keeps a client kept by *any* iteration instead, as Blades'
  older versions do: more clients, less robust.
* Several iterations may intersect to nobody (each drops a different c f). Then the clients kept by the most
  iterations are kept: the natural extension of the intersection (those kept by all iterations, when any are).
* Defaults: ``iterations = 5`` (the option the paper calls niters), ``subsample = 10000`` (its b; a model with at
  most b floating-point entries uses all of them, in order, and draws nothing, so every iteration keeps the same
  clients), ``c = 1.0`` (removes exactly f a round) and ``f = 0``, as Krum's and Bulyan's: nobody is removed and DnC
  is the plain mean. niters = 5 and c = 1 are what both reimplementations use, b = 10000 Blades'; none is checked
  against the paper's experiments (docs/baselines.md says what was read). Before 2026-12-01 the default was
  ``iterations = 1``, the value of Blades' first, 2022 version only; ``iterations = 1`` gives the old behaviour. Set ``f`` (the paper's m) to what you want removed; it is ``f``,
  not ``m``, as the other robust rules name it (Krum's ``m`` counts the models it averages).
* floor(c f) clients are removed (Blades' ``int(filter_frac * num_byzantine)``); ``check`` refuses
  clients per round <= floor(c f) at start-up. A round with fewer clients (dropouts) keeps at least one.
  Algorithm 2 keeps "the n - c m lowest scores", which a fractional c m leaves open: FLPoison's ``DnC`` keeps
  ``int(n - c m)``, i.e. removes ceil(c m); with the default c = 1 both remove exactly f.
* The coordinates are drawn without replacement from a ``torch.Generator`` seeded by
  ``derive_seed(seed, "dnc", round, iteration)``: a pure function of the round, the same under every executor
  and after a resume (no generator state in the checkpoint). They are sorted before use (the scores do not
  depend on the columns' order but for rounding).
* Models, not updates: subtracting the round's global model w from every row changes neither the centred
  matrix nor the scores (up to float rounding), and the mean of the kept models is w plus the mean of their
  updates. Every floating-point entry (batch-norm statistics included) is a coordinate; float64; integer
  buffers take the max over the kept clients.
* Ties in score go to the lower client id. The sign of v (which an SVD leaves open) does not change s_i.
* ``weighting = "uniform"`` (the paper's AGR_avg: the plain mean of the kept updates); ``"samples"`` weights
  them by their sample counts, as FedAvg would. A client that reports a large count gains weight that way.
* Round metric ``selected``: the kept client ids (``agg_selected`` in metrics.jsonl).

Checked (2026-12) against FLPoison (vio1etus/FLPoison ``aggregators/dnc.py``; the paper's Algorithm 2 could not be
read here): the centred subsampled updates, the top right singular vector, s_i = ((g_i - mu) . v)^2, the lowest
``n - c f`` scores kept per iteration and intersected from every client, the plain mean of the kept updates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Mapping, Sequence

import torch

from chillfl.aggregation.base import AggregatorBase, ClientResult, Json, Params, client_weights, weighted_average
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, instance_field, register_algorithm, run_value
from chillfl.aggregation.robust import ROBUST, flat_models, float_keys
from chillfl.errors import ConfigError
from chillfl.numeric import floored_share
from chillfl.options import require
from chillfl.seeds import derive_seed, instance_seed

if TYPE_CHECKING:  # annotations only
    from chillfl.config import RunConfig

MAX_COUNT = 1_000_000


@dataclass(frozen=True)
class DnCOptions:
    """``f``: byzantine clients assumed (the paper's m; 0 = the plain mean); ``c``: filtering fraction (floor(c f)
    removed); ``subsample``: coordinates scored an iteration (b); ``iterations``: niters; ``combine``: intersection
    (the paper's) or union of the iterations' kept sets; ``weighting``: the kept models' mean, uniform or by samples."""

    f: int = 0
    c: float = 1.0
    subsample: int = 10_000
    iterations: int = 5
    combine: Literal["intersection", "union"] = "intersection"
    weighting: Literal["uniform", "samples"] = "uniform"

    def validate(self, section: str) -> None:
        require(0 <= self.f <= MAX_COUNT, f"{section}.f", f"must be in [0, {MAX_COUNT}], got {self.f}")
        require(0 <= self.c <= MAX_COUNT, f"{section}.c", f"must be in [0, {MAX_COUNT}] (floor(c f) clients are removed a round), got {self.c}")
        require(1 <= self.subsample <= 2**62, f"{section}.subsample", f"must be >= 1 (coordinates scored an iteration), got {self.subsample}")
        require(1 <= self.iterations <= 10_000, f"{section}.iterations", f"must be in [1, 10000], got {self.iterations}")

    def removed(self) -> int:
        """floor(c f): the clients each iteration drops."""
        return floored_share(self.c, self.f)  # on c as written, not the float product (0.29 * 100 = 28.999999999999996)


def outlier_scores(rows: torch.Tensor) -> torch.Tensor:
    """s_i = ((x_i - mu) . v)^2 for the rows x_i of ``rows`` [n, b], mu their mean, v the top right singular vector of the centred rows."""
    centred = rows - rows.mean(dim=0)
    if not math.isfinite(float(torch.linalg.vector_norm(centred))):  # huge but finite rows (a scaling attack's 1e300): the SVD overflows
        top = rows.abs().max()  # v and the scores' order do not change with the scale; the scores are those of the rows / top
        centred = rows / top - (rows / top).mean(dim=0)
    v = torch.linalg.svd(centred, full_matrices=False).Vh[0]
    return (centred @ v) ** 2


def lowest(scores: torch.Tensor, keep: int) -> list[int]:
    """The ``keep`` rows of lowest score, ties to the lower row, in row order."""
    return sorted(torch.argsort(scores, stable=True)[:keep].tolist())


def coordinates(d: int, b: int, seed: int) -> torch.Tensor | None:
    """b of d coordinate indices without replacement, sorted, from a generator seeded ``seed``; None (all of them) when b >= d."""
    if b >= d:
        return None
    gen = torch.Generator().manual_seed(seed)
    return torch.randperm(d, generator=gen)[:b].sort().values


def dnc_select(flat: torch.Tensor, options: DnCOptions, seed: int, round: int) -> list[int]:
    """The rows of ``flat`` [n, d] DnC keeps this round, in row order.

    A row with a non-finite entry is an outlier before any score: it is never kept, and counts among the floor(c f)
    removed. Why: the SVD of such rows failed with a raw ``LinAlgError``, so the most extreme upload crashed the rule
    whose job is to drop outliers. With every row non-finite there is nothing to keep: all are returned, and the run
    stops on the non-finite average (``check_finite_state``)."""
    n, d = flat.shape
    keep = max(n - options.removed(), 1)
    finite = torch.isfinite(flat).all(dim=1).cpu()
    if not bool(finite.all()):
        ok = torch.nonzero(finite).flatten().tolist()
        if not ok:
            return list(range(n))
        inner = _select(flat[ok], min(keep, len(ok)), options, seed, round)
        return [ok[i] for i in inner]
    return _select(flat, keep, options, seed, round)


def _select(flat: torch.Tensor, keep: int, options: DnCOptions, seed: int, round: int) -> list[int]:
    """:func:`dnc_select` on finite rows, ``keep`` of them kept an iteration."""
    n, d = flat.shape
    counts = torch.zeros(n, dtype=torch.long)
    for iteration in range(options.iterations):
        cols = coordinates(d, options.subsample, derive_seed(seed, "dnc", round, iteration))
        rows = flat if cols is None else flat.index_select(1, cols.to(flat.device))
        counts[lowest(outlier_scores(rows).cpu(), keep)] += 1
    if options.combine == "union":
        return [i for i in range(n) if counts[i] > 0]
    best = int(counts.max())
    return [i for i in range(n) if counts[i] == best]  # every iteration's when the intersection is not empty


class DnC(AggregatorBase):
    """Divide-and-Conquer: drop the clients whose updates lie farthest along the top singular direction, average the rest."""

    def __init__(self, seed: int | None = None, options: DnCOptions = DnCOptions()) -> None:
        self.seed = seed
        """The run's seed, which draws each iteration's coordinates (None: the run's, which a run fills, :func:`_bind`; 0
        outside a run)."""
        self.options = options
        self._selected: list[int] = []

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        flat = flat_models(results, float_keys(results[0].params))
        chosen = [results[i] for i in dnc_select(flat, self.options, instance_seed(self.seed), round)]
        self._selected = [r.client_id for r in chosen]
        return weighted_average([r.params for r in chosen], client_weights(chosen, self.options.weighting))

    def round_metrics(self) -> Mapping[str, Json]:
        """``selected``: the client ids whose models were averaged this round (``agg_selected`` in metrics.jsonl)."""
        return {"selected": list(self._selected)}


def check_dnc(options: DnCOptions, config: RunConfig, section: str) -> None:
    """floor(c f) against the clients a round samples: at least one must remain to average."""
    clients = config.federation.sample_size()
    if options.removed() >= clients:
        raise ConfigError(f"{section}.f", f"DnC removes floor(c f) = {options.removed()} clients a round and needs one left; "
                                          f"{clients} clients per round allow floor(c f) <= {clients - 1}, got f = {options.f}, c = {options.c}")


def _bind(aggregator: DnC, ctx: BuildContext) -> None:
    """An instance passed from Python draws its coordinates from the run's seed, as the builder's does: its ``seed`` the
    run's (None: filled), another refused on ``aggregator.seed`` (``DnC(0)`` drew every seed's alike)."""
    aggregator.seed = run_value(aggregator.seed, ctx.seed, instance_field(ctx, "seed"), "seed")


SPEC = register_algorithm(
    "dnc",
    AlgorithmSpec(
        DnCOptions,
        lambda o, ctx: (DnC(ctx.seed, o), []),
        "Divide-and-Conquer: drop the top singular direction's outliers, byzantine-robust (Shejwalkar & Houmansadr 2021)",
        capabilities=ROBUST,
        check=check_dnc,
        tolerates="f",
        makes=(DnC,),  # an instance passed from Python meets this spec's checks (check_instance)
        bind=_bind,
    ),
)
