"""Bulyan (El Mhamdi, Guerraoui & Rouault, ICML 2018, "The Hidden Vulnerability of Distributed Learning in Byzantium").

Krum alone picks a model whose *distance* to the honest ones is bounded, but an
attacker may hide a large change in one coordinate inside that distance (the
paper's "hidden vulnerability" in high dimension). Bulyan adds a per-coordinate
trim after a Krum-based selection. On the round's n client models, f byzantine
tolerated (needs n >= 4f + 3)::

    theta = n - 2f;  R = all models, S = {}
    while |S| < theta:  c = Krum(R, f);  move c from R to S         (the selection)
    beta  = theta - 2f
    next[j] = mean of the beta values of S's models closest to median_{s in S}(s[j])   (every coordinate j)

The per-coordinate step keeps, entry by entry, only values close to the median
of the selected models: with at most f byzantine models in S, the median lies in
the honest values' range and the 2f values left out include an honest one, so
every averaged value is no farther from the median than some honest value. A
large change hidden in one coordinate of a Krum-acceptable model is trimmed away.

Choices
-------
* Krum inside the selection is :mod:`chillfl.aggregation.robust`'s Krum with
  the same ``f`` on the *remaining* set R: each model's score is its summed
  squared distance to its ``|R| - f - 2`` nearest others in R (clamped to
  at least 1, as ``krum_scores``), so the scores change as R shrinks. The
  distance matrix is computed once per round and sub-selected; ties in score
  go to the lower client id.
* The median over S is :func:`~chillfl.aggregation.robust.coordinate_median`
  (an even ``|S|`` takes the mean of the two middle values). "Closest to the
  median" is ``|s[j] - median_j|``; ties go to the lower client id (S is
  ordered by client id for this step, whatever order Krum picked it in).
* Rounds with too few clients for ``n >= 4f + 3`` (dropouts: ``f`` is checked
  against the configured clients per round, not each round's arrivals) do not
  fail: ``theta = clamp(n - 2f, 1, n)`` and ``beta = max(theta - 2f, 1)``, so
  the rule degrades towards Krum (beta = 1 keeps the single value nearest the
  median of S) instead of stopping the run.
* ``f = 0`` (the default, as Krum's) tolerates nobody: S is every model and
  beta = n, the plain mean. Set ``f`` to what you want tolerated.
* Models, not updates ``w_i - w`` (as the other robust rules: distances and
  per-coordinate medians commute with subtracting the same ``w``); every
  floating-point entry (BN statistics included), float64, unweighted; integer
  buffers take the max over S.

Checked against (2026-12-01) the paper's theta = n - 2f, beta = theta - 2f and n >= 4f + 3, and, for the
selection, the repeated Krum of Shejwalkar & Houmansadr's released ``multi_krum`` (NDSS21-Model-Poisoning).
No sign convention: selection and trim commute with negating every input (models, updates or gradients).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

import torch

from chillfl.aggregation.base import AggregatorBase, ClientResult, Json, Params
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.aggregation.robust import (
    ROBUST,
    coordinate_median,
    flat_models,
    float_keys,
    integer_max,
    repeated_krum,
)
from chillfl.errors import ConfigError
from chillfl.options import require

if TYPE_CHECKING:  # annotations only
    from chillfl.config import RunConfig


@dataclass(frozen=True)
class BulyanOptions:
    """``f``: byzantine clients tolerated among a round's n (needs clients per round >= 4f + 3; 0 = the plain mean)."""

    f: int = 0

    def validate(self, section: str) -> None:
        require(0 <= self.f <= 1_000_000, f"{section}.f", f"must be in [0, 1000000], got {self.f}")


def sizes(n: int, f: int) -> tuple[int, int]:
    """(theta, beta) for n models: n - 2f selected, theta - 2f averaged per coordinate, each clamped to >= 1 for small rounds."""
    theta = min(max(n - 2 * f, 1), n)
    return theta, max(theta - 2 * f, 1)


def bulyan_select(flat: torch.Tensor, f: int, theta: int) -> list[int]:
    """Rows of ``flat`` [n, d] in the order Bulyan's repeated Krum moves them into S, until ``|S| = theta``."""
    return repeated_krum(flat, f, theta)


def closest_to_median_mean(values: torch.Tensor, beta: int) -> torch.Tensor:
    """Per entry, the mean of the ``beta`` values of ``values`` [m, ...] closest to the entry's median (ties: lower row)."""
    distance = (values - coordinate_median(values)).abs()
    nearest = torch.argsort(distance, dim=0, stable=True)[:beta]
    return values.gather(0, nearest).mean(dim=0)


class Bulyan(AggregatorBase):
    """Bulyan: repeated Krum selects n - 2f models, then a per-coordinate mean of the n - 4f nearest each median."""

    def __init__(self, options: BulyanOptions = BulyanOptions()) -> None:
        self.options = options  # recorded for an instance passed from Python
        self.f = options.f
        self._selected: list[int] = []

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        keys = float_keys(results[0].params)
        theta, beta = sizes(len(results), self.f)
        rows = sorted(bulyan_select(flat_models(results, keys), self.f, theta))  # client-id order: ties in the trim go to the lower id
        chosen = [results[i] for i in rows]
        self._selected = [r.client_id for r in chosen]
        out = integer_max(chosen)
        for key in keys:
            ref = chosen[0].params[key]
            values = torch.stack([r.params[key].double() for r in chosen])
            out[key] = closest_to_median_mean(values, min(beta, len(chosen))).to(ref.dtype)
        return {k: out[k] for k in results[0].params}

    def round_metrics(self) -> Mapping[str, Json]:
        """``selected``: the client ids in Bulyan's selection S this round (``agg_selected`` in metrics.jsonl)."""
        return {"selected": list(self._selected)}


def check_bulyan(options: BulyanOptions, config: RunConfig, section: str) -> None:
    """Bulyan's ``f`` against the clients a round samples: n >= 4f + 3 (El Mhamdi et al. 2018)."""
    clients = config.federation.sample_size()
    if clients < 4 * options.f + 3:
        tolerated = f"tolerate f <= {(clients - 3) // 4}" if clients >= 3 else "are too few for any f (Bulyan needs at least 3)"
        raise ConfigError(f"{section}.f", f"Bulyan needs clients per round >= 4f + 3; {clients} clients per round {tolerated}, got {options.f}")


SPEC = register_algorithm(
    "bulyan",
    AlgorithmSpec(
        BulyanOptions,
        lambda o, ctx: (Bulyan(o), []),
        "Bulyan: Krum selection, then a per-coordinate trim, byzantine-robust (El Mhamdi et al. 2018)",
        capabilities=ROBUST,
        check=check_bulyan,
        tolerates="f",
        makes=(Bulyan,),  # an instance passed from Python meets this spec's checks (check_instance)
    ),
)
