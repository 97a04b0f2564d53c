"""Selective-FD (Shao et al. 2024): a client-side KuLSIF selector (kept in the client's own typed state) and a server-side ambiguity selector.

Selectors: :mod:`chillfl.distillation.selective`; choices: :mod:`chillfl.distillation.methods`.

Checked against: kitsuyaazuma/SCARLET (branch ``reproducibility``) ``src/algorithm/selectivefd.py`` and ``src/config/algorithm/selectivefd.yaml``;
shaojiawei07/Selective-FD ``KuLSIF.py``, ``data/MNISTTrainDataset.py``, ``Selective-FD.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from chillfl.capabilities import Capabilities, Cost
from chillfl.distillation.selective import ClientThresholdMode, KuLSIF, ServerMeasure, client_keep_mask, client_threshold, server_keep_mask
from chillfl.engine.record import Json
from chillfl.options import require, require_square_fits
from chillfl.protocols.softlabels.labels import masked_mean
from chillfl.protocols.softlabels.messages import SoftLabelUplink
from chillfl.protocols.softlabels.method import Aggregate, SoftLabelClientHalf, SoftLabelMethod, SoftLabelSpec, stack_uplinks
from chillfl.seeds import derive_seed


@dataclass(frozen=True)
class SelectiveFDOptions:
    """Selective-FD options (defaults: SCARLET Table V, CIFAR-10).

    ``kernel_width`` and ``kernel_lambda`` are not in Table V and are chillfl's own: the SCARLET authors'
    ``selectivefd.yaml`` uses width 5.0 with lambda = (private-set size)**0.5 on [-1, 1]-normalised CIFAR
    inputs, and Selective-FD's own MNIST demo width 5 with lambda = 250**-0.5 (its auxiliary-sample count).
    They also fit KuLSIF on a random half of the private set (90 % fit, 10 % threshold) against as many
    uniform samples as that half; here all of it (90 % / 10 %) against as many as the 90 %.
    """

    tau_client: float = 0.0625
    tau_server: float = 2.0
    server_measure: ServerMeasure = "l1"
    client_threshold: ClientThresholdMode = "quantile"
    kernel_width: float = 25.0
    kernel_lambda: float = 1e-3

    def validate(self, section: str) -> None:
        if self.client_threshold == "quantile":
            require(0.0 <= self.tau_client <= 1.0, f"{section}.tau_client", f"must be in [0, 1] (a quantile level), got {self.tau_client}")
        require(self.tau_server > 0, f"{section}.tau_server", f"must be > 0, got {self.tau_server}")
        require(self.server_measure in ("l1", "entropy"), f"{section}.server_measure", f"unknown value {self.server_measure!r}; allowed: entropy, l1")
        require(
            self.client_threshold in ("quantile", "absolute"),
            f"{section}.client_threshold",
            f"unknown value {self.client_threshold!r}; allowed: absolute, quantile",
        )
        require(self.kernel_width > 0, f"{section}.kernel_width", f"must be > 0, got {self.kernel_width}")
        require_square_fits(self.kernel_width, f"{section}.kernel_width", "the Gaussian kernel's 2 * width**2", factor=2.0)
        require(self.kernel_lambda > 0, f"{section}.kernel_lambda", f"must be > 0, got {self.kernel_lambda}")


@dataclass(frozen=True)
class SelectiveFDMethodOptions(SelectiveFDOptions):
    """Selective-FD options (SCARLET Table V: tau_client = 0.0625, tau_server = 2.0 = off for L1)."""


@dataclass(frozen=True)
class SelectorState:
    """What a Selective-FD client keeps: the public samples its selector, fitted once, finds in-distribution."""

    in_distribution: torch.Tensor
    """Bool ``[|P|]``, on the host (it selects uplink rows)."""

    def to_tensors(self) -> dict[str, torch.Tensor]:
        return {"in_distribution": self.in_distribution}


class SelectiveFDClient(SoftLabelClientHalf[SelectiveFDMethodOptions, SelectorState]):
    """Selective-FD's client: fits its KuLSIF selector at its first round, uploads the public samples it finds in-distribution."""

    def new_state(self, cid: int, x_private: torch.Tensor, x_public: torch.Tensor) -> SelectorState:
        return SelectorState(self.fit_selector(cid, x_private, x_public))

    def restore(self, tensors: Mapping[str, torch.Tensor]) -> SelectorState:
        """The mask on the CPU, as :meth:`fit_selector` makes it: a resume reads the checkpoint onto the run's device, and
        a mask back on a GPU indexed the CPU's public indices (torch refuses it)."""
        return SelectorState(tensors["in_distribution"].to("cpu"))

    def fit_selector(self, cid: int, x_private: torch.Tensor, x_public: torch.Tensor) -> torch.Tensor:
        """Bool mask over P: public samples the client's KuLSIF selector finds in-distribution."""
        o = self.options
        n = len(x_private)
        if n < 2:
            return torch.ones(len(x_public), dtype=torch.bool)
        gen = torch.Generator().manual_seed(derive_seed(self.seed, "kulsif", cid))
        flat = x_private.reshape(n, -1).to(torch.float64)
        perm = torch.randperm(n, generator=gen)
        n_held = max(1, n // 10)
        fit, held = flat[perm[n_held:]], flat[perm[:n_held]]
        lo, hi = float(flat.min()), float(flat.max())
        noise = lo + (hi - lo) * torch.rand((len(fit), flat.shape[1]), generator=gen, dtype=torch.float64)  # the host's stream: the same draw on every device
        kulsif = KuLSIF(fit, noise.to(flat.device), o.kernel_width, o.kernel_lambda)
        threshold = client_threshold(kulsif.ratio(held), o.tau_client, o.client_threshold)
        return client_keep_mask(kulsif.ratio(x_public.reshape(len(x_public), -1)), threshold).cpu()  # selects host-side uplink rows

    def upload(self, cid: int, round: int, indices: torch.Tensor, probs: torch.Tensor, state: SelectorState) -> SoftLabelUplink:
        keep = state.in_distribution[indices] if indices.numel() else torch.zeros(0, dtype=torch.bool)
        return SoftLabelUplink(client_id=cid, round=round, indices=indices[keep], soft_labels=probs[keep], send_indices=True)


class SelectiveFD(SoftLabelMethod[SelectiveFDMethodOptions]):
    """Selective-FD's server half: the masked mean over the clients that kept a sample, then the ambiguity selector."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kept: list[float] = []
        self._server_kept: float | None = None
        """This round's share of I_req^t kept by both filters; None until :meth:`aggregate` runs in a round (a round whose
        draw the cache served whole calls none, and reported the last aggregated round's share as its own)."""

    def aggregate(self, round: int, indices: torch.Tensor, uplinks: Sequence[SoftLabelUplink]) -> Aggregate:
        n = int(indices.numel())  # the fraction each client kept (float32, as the mean of its bool mask)
        self._kept = [float(torch.tensor(float(len(up.indices))) / n) if n else 1.0 for up in uplinks]
        stack, keep = stack_uplinks(indices, uplinks, self.num_classes)
        mean, counts = masked_mean(stack, keep)
        sample_keep = counts > 0
        if bool(sample_keep.any()):
            ok = server_keep_mask(mean[sample_keep], self.options.tau_server, self.options.server_measure)
            sample_keep[sample_keep.clone()] = ok
        self._server_kept = float(sample_keep.float().mean()) if len(indices) else 1.0
        rows = mean[sample_keep]
        return Aggregate(sample_keep, rows, rows)

    def round_metrics(self) -> dict[str, Json]:
        out: dict[str, Json] = {"selective_client_kept": float(np.mean(self._kept)) if self._kept else None, "selective_server_kept": self._server_kept}
        self._kept, self._server_kept = [], None
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"server_kept": self._server_kept}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        kept = state["server_kept"]
        self._server_kept = None if kept is None else float(kept)


KULSIF_FIT = 8.0
"""A client's KuLSIF fit (:meth:`SelectiveFDClient.fit_selector`), once, in FLOPs a pair of its rows and an input feature
(``Cost.first_pair_flops``): two Gaussian kernels over its rows (K_xx, K_xy) and a solve. Measured 2026-12-02 on the 2-vCPU AVX2
machine, one thread, float64: 1.5e-10 s a pair and feature at n = 1,000, d = 768 (7.3 FLOPs at 50 GFLOP/s), 1.8e-10 s at n = 500.
Not counted: the server's selector (the ambiguity of each of |P^t| mean soft-labels, C numbers each)."""
KULSIF_SCORE = 3.6
"""Scoring the public set with a client's selector (:meth:`KuLSIF.ratio` on P, in :meth:`SelectiveFDClient.fit_selector`), once,
in FLOPs a pair of one of its rows and a public sample and an input feature (``Cost.first_public_pair_flops``): two Gaussian
kernels of P against the 0.9 n rows it fitted on and as many uniform ones, 2 FLOPs a pair and feature each (the squared
distances' product), 2 x 2 x 0.9. Measured 2026-12-02 on the 2-vCPU AVX2 machine, one thread, float64, |P| = 1,000-4,000:
5.2e-11 to 7.3e-11 s a pair and feature at n = 500-1,000, d = 768-3,072, 2.6-3.6 FLOPs at 50 GFLOP/s."""


SPEC = SoftLabelSpec(
    "selective_fd", SelectiveFDMethodOptions, SelectiveFD, SelectiveFDClient, summary="client/server knowledge selectors",
    capabilities=Capabilities(reports="which public samples each client labels, chosen by a density-ratio estimate fitted on its own data",
                              cost=Cost(first_pair_flops=KULSIF_FIT, first_public_pair_flops=KULSIF_SCORE)),
)
