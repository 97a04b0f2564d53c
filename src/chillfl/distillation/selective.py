"""Selective-FD selectors (Shao, Wu and Zhang, 2024; SCARLET ref. [23]).

Selective-FD filters the knowledge that is shared:

* client side -- a client uploads a soft-label for a public sample only if the
  sample looks in-distribution for its private data. The score is a density
  ratio p_private(x) / p_reference(x), estimated with KuLSIF (kernel
  unconstrained least-squares importance fitting, Kanamori et al. 2012); the
  threshold is set from held-out private samples so that a fraction
  ``tau_client`` of them would be rejected (SCARLET Table V:
  tau_client = 0.0625 for CIFAR-10);
* server side -- the server drops an aggregated soft-label that is too
  ambiguous: its L1 distance to the one-hot of its argmax, 2 (1 - max_c p_c),
  must be below ``tau_server``.
* aggregation -- each public sample is averaged over the clients that kept it
  (:func:`masked_mean`); a sample nobody kept gets no soft-label this round.

Choices and gaps
----------------
* SCARLET's Appendix B gives only the thresholds and says that tau_server =
  2.0 "effectively disables" the server selector (used as the final setting).
  That holds exactly for the L1 measure (2 (1 - max p) < 2 for every
  distribution), which the SCARLET authors' code uses, so L1 is the default;
  ``server_measure="entropy"`` (nats) is offered as the alternative reading.
* tau_client is read as a quantile level of the in-distribution scores of
  held-out private samples (as in the SCARLET authors' code);
  ``client_threshold="absolute"`` uses tau_client as the density-ratio
  threshold itself (the original paper's formulation).
* KuLSIF's reference (denominator) sample is the caller's choice; SCARLET's
  code uses uniform noise over the normalised input range. Any score where
  higher means "more in-distribution" (e.g. max softmax probability) can be
  fed to :func:`client_keep_mask` instead.
* With the SCARLET cache, pass ``cached indices + surviving fresh indices`` as
  I^t to :meth:`ServerCache.update`, with the surviving fresh rows: dropped
  samples are simply absent this round.

Checked against: shaojiawei07/Selective-FD ``KuLSIF.py``, ``data/MNISTTrainDataset.py`` and
``Selective-FD.py`` (the authors' MNIST demo: width 5, lambda = 250**-0.5, first-quartile threshold,
vote-weighted mean), and kitsuyaazuma/SCARLET (branch ``reproducibility``) ``src/algorithm/selectivefd.py`` (L1 server selector, quantile threshold).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from chillfl.errors import ConfigError
from chillfl.protocols.softlabels.labels import entropy, masked_mean

__all__ = ["KuLSIF", "ambiguity", "client_keep_mask", "client_threshold", "gaussian_kernel", "l1_to_one_hot", "masked_mean", "server_keep_mask"]

ServerMeasure = Literal["l1", "entropy"]
ClientThresholdMode = Literal["quantile", "absolute"]


# ---- server side ---------------------------------------------------------------
def l1_to_one_hot(probs: torch.Tensor) -> torch.Tensor:
    """||p - onehot(argmax p)||_1 per row: 0 for a one-hot vector, 2 (1 - max p) for a distribution."""
    one_hot = torch.zeros_like(probs)
    one_hot.scatter_(-1, probs.argmax(dim=-1, keepdim=True), 1.0)
    return (probs - one_hot).abs().sum(dim=-1)


def ambiguity(probs: torch.Tensor, measure: ServerMeasure = "l1") -> torch.Tensor:
    """Per-row ambiguity of aggregated soft-labels: L1 distance to one-hot, or entropy in nats."""
    if measure == "l1":
        return l1_to_one_hot(probs)
    if measure == "entropy":
        return entropy(probs)
    raise ConfigError("selective_fd.server_measure", f"unknown value {measure!r}; allowed: entropy, l1")


def server_keep_mask(probs: torch.Tensor, tau_server: float, measure: ServerMeasure = "l1") -> torch.Tensor:
    """Server-side selector: keep rows whose ambiguity is strictly below tau_server."""
    if not tau_server > 0:
        raise ConfigError("selective_fd.tau_server", f"must be > 0, got {tau_server}")
    return ambiguity(probs, measure) < tau_server


# ---- client side ---------------------------------------------------------------
def client_threshold(private_scores: torch.Tensor | np.ndarray, tau_client: float, mode: ClientThresholdMode = "quantile") -> float:
    """Score threshold: the tau_client quantile (linear interpolation) of held-out private scores, or tau_client itself."""
    if mode == "absolute":
        return float(tau_client)
    if mode != "quantile":
        raise ConfigError("selective_fd.client_threshold", f"unknown value {mode!r}; allowed: absolute, quantile")
    if not 0.0 <= tau_client <= 1.0:
        raise ConfigError("selective_fd.tau_client", f"must be in [0, 1] (a quantile level), got {tau_client}")
    scores = np.asarray(torch.as_tensor(private_scores, dtype=torch.float64).cpu())
    if scores.size == 0:
        raise ValueError("need at least one private score to set the client threshold")
    return float(np.quantile(scores, tau_client))


def client_keep_mask(public_scores: torch.Tensor, threshold: float) -> torch.Tensor:
    """Client-side selector: keep public samples whose in-distribution score is >= threshold."""
    return public_scores >= threshold


# ---- KuLSIF density-ratio scores -----------------------------------------------
def gaussian_kernel(a: torch.Tensor, b: torch.Tensor, width: float) -> torch.Tensor:
    """k(a_i, b_j) = exp(-||a_i - b_j||^2 / (2 width^2)) for row sets ``a [p, d]``, ``b [q, d]``."""
    sq = torch.cdist(a.to(torch.float64), b.to(torch.float64)).pow(2)
    return torch.exp(-sq / (2.0 * width**2))


class KuLSIF:
    """Density ratio w(z) = p_num(z) / p_den(z) by kernel unconstrained least-squares importance fitting.

    Minimises (1/2n) sum_i w(x_i)^2 - (1/m) sum_j w(y_j) + (lam/2) ||w||_H^2
    over the RKHS, with x_i ~ p_den (n samples), y_j ~ p_num (m samples). By the
    representer theorem (setting the functional gradient to zero)::

        w(z)  = sum_i alpha_i k(z, x_i) + (1 / (m lam)) sum_j k(z, y_j)
        (K_xx / n + lam I) alpha = -(1 / (n m lam)) K_xy 1
    """

    def __init__(self, numerator: torch.Tensor, denominator: torch.Tensor, width: float, lam: float) -> None:
        if not width > 0:
            raise ConfigError("selective_fd.kernel_width", f"must be > 0, got {width}")
        if not lam > 0:
            raise ConfigError("selective_fd.kernel_lambda", f"must be > 0, got {lam}")
        self.y = numerator.reshape(numerator.shape[0], -1).to(torch.float64)
        self.x = denominator.reshape(denominator.shape[0], -1).to(torch.float64)
        self.width = float(width)
        self.lam = float(lam)
        n, m = self.x.shape[0], self.y.shape[0]
        k_xx = gaussian_kernel(self.x, self.x, self.width)
        k_xy = gaussian_kernel(self.x, self.y, self.width)
        lhs = k_xx / n + self.lam * torch.eye(n, dtype=torch.float64, device=k_xx.device)
        rhs = -k_xy.sum(dim=1, keepdim=True) / (n * m * self.lam)
        self.alpha = torch.linalg.solve(lhs, rhs).squeeze(1)

    def ratio(self, z: torch.Tensor) -> torch.Tensor:
        """Estimated density ratio at each row of ``z`` (higher = more like the numerator sample)."""
        z2 = z.reshape(z.shape[0], -1).to(torch.float64)
        from_x = gaussian_kernel(z2, self.x, self.width) @ self.alpha
        from_y = gaussian_kernel(z2, self.y, self.width).mean(dim=1) / self.lam
        return from_x + from_y
