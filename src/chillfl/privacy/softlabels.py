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

Checked against: Dwork & Roth 2014 Thm A.1 and Def. 2.4 (Gaussian mechanism, L2 sensitivity: two rows clipped to C
differ by at most 2C; a row against none by C; ||r||_2 <= ||r||_1) and Sec. 2.3 (post-processing: the simplex map),
2026-12-02. For probability rows the bound is loose, never too small (two probability vectors differ by at most
sqrt(2) in L2).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

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
