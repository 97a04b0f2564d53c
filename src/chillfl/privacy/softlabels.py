"""``local`` under the soft-label protocol: each client clips every soft-label row it uploads and adds Gaussian noise.

Row i of client k's upload, r_i (probabilities or logits, as the method uploads them), is released as

    r_i min(1, C / ||r_i||_p) + z_i,      z_i ~ N(0, (sigma C)^2 I),   p = 2 (``row_norm = "l2"``) or 1 (``"l1"``)

An L1 bound C implies an L2 bound C, so both give the Gaussian mechanism L2 sensitivity C per row (a row
against the zero row: add/remove adjacency, as for the clipped updates of ``dp-fedavg`` and ``local``;
replace-one adjacency doubles it). Noise comes from ``derive_seed(seed, "privacy", "rows", round, client)``.
Probability rows (a method that uploads probabilities, not logits) are then mapped back to the simplex,
clamped at 0 and renormalised (uniform where nothing is left), since ERA and the others take logs and
powers of them. The method's own upload step (CFD's quantisation, ...) acts on the result. Both are
post-processing of the noised row: no privacy cost.

Any mechanism's release (a plugin's ``rows`` hook too) is checked where it is used (:class:`CheckedRelease`): the rows it
returns have the shape it was given and finite entries, and, where the method asks for probabilities, lie on the simplex.

Checked against: Dwork & Roth 2014 Thm A.1 and Def. 2.4 (Gaussian mechanism, L2 sensitivity: two rows clipped to C
differ by at most 2C; a row against none by C; ||r||_2 <= ||r||_1) and Sec. 2.3 (post-processing: the simplex map),
2026-12-02. For probability rows the bound is loose, never too small (two probability vectors differ by at most
sqrt(2) in L2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from chillfl.errors import ConfigError
from chillfl.numeric import row_sum_tolerance
from chillfl.seeds import derive_seed


@dataclass(frozen=True)
class RowNoise:
    """Clip each row to norm C (L2 or L1), add N(0, (sigma C)^2) to every entry; its own seeded stream per (round, client)."""

    clip_norm: float
    noise_multiplier: float
    norm: str
    seed: int
    probabilities: bool = True

    def release(self, rows: torch.Tensor, client_id: int, round: int) -> torch.Tensor:
        r = rows.double()
        norms = r.abs().sum(1) if self.norm == "l1" else torch.sqrt((r**2).sum(1))
        scale = torch.clamp(self.clip_norm / torch.clamp(norms, min=1e-12), max=1.0)
        gen = torch.Generator().manual_seed(derive_seed(self.seed, "privacy", "rows", round, client_id))
        noise = torch.randn(r.shape, generator=gen, dtype=torch.float64) * (self.noise_multiplier * self.clip_norm)
        out = r * scale[:, None] + noise
        if self.probabilities:
            out = out.clamp(min=0.0)
            total = out.sum(1, keepdim=True)
            out = torch.where(total > 0, out / total.clamp(min=1e-300), torch.full_like(out, 1.0 / out.shape[1]))
        return out.to(rows.dtype)


def row_problem(out: Any, rows: torch.Tensor, probabilities: bool) -> str | None:
    """What is wrong with ``out`` as the release of ``rows`` (None: nothing): not a tensor, another shape, a non-finite
    entry, or, for ``probabilities``, a negative entry or a row whose sum is not 1 within
    :func:`~chillfl.numeric.row_sum_tolerance` of its dtype (a bf16 row cannot be closer than ``2 eps``; a renormalised
    float32 row is off by a few ulps times its width, one the hook did not project by far more)."""
    if not isinstance(out, torch.Tensor):
        return f"a {type(out).__name__}, not a tensor"
    if tuple(out.shape) != tuple(rows.shape):
        return f"rows of shape {tuple(out.shape)} for rows of shape {tuple(rows.shape)}"
    r = out.detach().double()
    if not bool(torch.isfinite(r).all()):
        return "a non-finite entry"
    if not probabilities or r.numel() == 0:
        return None
    if bool((r < 0).any()):
        return f"a negative entry ({float(r.min()):.3g}) where the method uploads probabilities"
    off = float((r.sum(-1) - 1.0).abs().max())
    # a row rounded to a narrow float (a bf16 model's rows: ~3e-3 off at 10 classes) is as close as its dtype allows; the
    # analysis commands' bound (``classes * eps``, the rule before, passed an all-zero bf16 row at 128 classes)
    tolerance = row_sum_tolerance(out.dtype, out.shape[-1])
    if off > tolerance:
        return f"a row summing to 1 {'+' if float(r.sum(-1).max()) - 1 > 0 else '-'} {off:.3g} where the method uploads probabilities"
    return None


@dataclass(frozen=True)
class CheckedRelease:
    """A mechanism's row release (its ``rows`` hook's :class:`~chillfl.protocols.softlabels.client.RowRelease`) whose every
    output is checked (:func:`row_problem`); a misfit is one ConfigError on ``privacy.mechanism`` naming the mechanism.

    Why: a plugin's release that returns rows off the simplex where probabilities are asked met SCARLET's Enhanced ERA as a
    bare ValueError, and under DS-FL ran at chance without a word. Holds the release and two values: it travels to
    worker processes as the release does."""

    inner: Any
    mechanism: str
    probabilities: bool

    def release(self, rows: torch.Tensor, client_id: int, round: int) -> torch.Tensor:
        out = self.inner.release(rows, client_id, round)
        problem = row_problem(out, rows, self.probabilities)
        if problem is not None:
            project = (" (its rows hook is called with probabilities = True: project each row onto the simplex, clamped at 0 and "
                       "renormalised, as the built-in 'local' does)") if self.probabilities else ""
            raise ConfigError("privacy.mechanism", f"{self.mechanism!r}: its row release returned, for client {client_id} in round {round}, "
                                                   f"{problem}{project}")
        return out
