"""Attacks under the soft-label protocol: an attacker uploads forged soft-label rows (and ``gaussian``'s maths).

:class:`ForgedRows` runs the kind's :attr:`~chillfl.attacks.spec.AttackSpec.forge_rows` hook on the
client, for the attackers only. ``gaussian``: an attacker's rows r (probabilities, or logits for a method that shares logits) become
``r + N(0, sigma^2)`` per entry, drawn from (seed, "attack", "rows", round, client); probability rows
are then projected back onto the simplex the cheap way (negatives set to 0, each row renormalised
to sum 1; a row left all zero becomes uniform), so the server's method receives rows of the shape
and kind it expects. It runs on the client, through the protocol's row-release seam
(:attr:`SoftLabelClient.privacy`), before the ``[privacy]`` release an honest client applies. By default
(``attack.local_dp = "comply"``) the forged rows then go through that release as anyone's, as a forged model
update does under parameter sharing; ``"skip"`` sends them as forged. Other clients' rows go to that release unchanged.

Data poisoning (``label_flip``, ``backdoor``) needs nothing here: the attacker's model, trained on its poisoned rows
(:mod:`chillfl.attacks.poison`), predicts the flipped classes (or the target on triggered inputs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from chillfl.attacks.spec import RowsUpload, as_tensor as _as_tensor, check_forged
from chillfl.protocols.softlabels.client import RowRelease

RowForge = Callable[[Any, RowsUpload], torch.Tensor]
"""A kind's ``forge_rows`` hook: (its options, one attacker's upload) -> the rows it sends."""


def noisy_rows(rows: torch.Tensor, sigma: float, seed: int, logits: bool) -> torch.Tensor:
    """``rows + N(0, sigma^2)``; probability rows projected back (clamped at 0, renormalised, all-zero rows uniform)."""
    gen = torch.Generator().manual_seed(seed)
    noised = rows + sigma * torch.randn(rows.shape, generator=gen, dtype=rows.dtype)
    return noised if logits else to_simplex(noised)


def to_simplex(rows: torch.Tensor) -> torch.Tensor:
    """Each row with its negatives set to 0 and renormalised to sum 1 (a row left all zero: uniform; a row with +inf
    entries: uniform over those, the limit; a row with a NaN stays NaN, which the server refuses, naming its client).

    Rows whose sum overflows (a float32 sum of noised entries at ``sigma = 1e38``: inf / inf gave NaN rows, which COMET's
    k-means crashed on) are taken in float64, each divided by its largest entry before the sum; every other row is
    computed as before, bit for bit (a run's attack stays reproducible across versions)."""
    clamped = rows.clamp_min(0)
    total = clamped.sum(-1, keepdim=True)
    uniform = torch.full_like(clamped, 1.0 / rows.shape[-1])
    plain = torch.where(total > 0, clamped / total.clamp_min(torch.finfo(rows.dtype).tiny), uniform)
    nan = torch.isnan(clamped).any(-1, keepdim=True)
    plain = torch.where(nan, torch.full_like(plain, torch.nan), plain)
    overflow = torch.isinf(total) & ~nan
    if not bool(overflow.any()):
        return plain
    wide = clamped.to(torch.float64)
    infinite = torch.isposinf(wide)
    wide = torch.where(infinite.any(-1, keepdim=True), infinite.to(torch.float64), wide)
    scaled = wide / wide.amax(-1, keepdim=True)  # the largest entry is positive: the sum overflowed
    return torch.where(overflow, (scaled / scaled.sum(-1, keepdim=True)).to(rows.dtype), plain)


@dataclass(frozen=True)
class ForgedRows:
    """An attacker's rows through ``forge`` (the kind's hook, with its ``options``), then through ``then`` when it
    ``comply``s; everyone else's through ``then`` (``[privacy]``'s release, or as predicted). Holds options only: it
    travels to worker processes."""

    ids: frozenset[int]
    forge: RowForge
    options: Any
    seed: int
    logits: bool
    then: RowRelease | None = None
    comply: bool = True

    def release(self, rows: torch.Tensor, client_id: int, round: int) -> torch.Tensor:
        if client_id in self.ids:
            sent = self.forge(self.options, RowsUpload(rows, client_id, round, self.seed, self.logits))
            check_forged("forge_rows", client_id, {"rows": _as_tensor(sent, "forge_rows", client_id)}, {"rows": rows})
            return sent if self.then is None or not self.comply else self.then.release(sent, client_id, round)
        return rows if self.then is None else self.then.release(rows, client_id, round)
