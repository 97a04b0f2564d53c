"""FedDecorr's decorrelation term (Shi, Liang, Zhang, Tan & Bai, "Towards Understanding and Mitigating
Dimensional Collapse in Heterogeneous Federated Learning", ICLR 2023; official code github.com/bytedance/FedDecorr).

Under label skew a client's representations collapse onto few directions, and the global model inherits
the collapse. FedDecorr penalises the correlation between the dimensions of the representation of each
training batch. With ``Z`` the batch's representations (``[N, d]``, the input of the model's last
``nn.Linear``), each column z-scored over the batch,

    Z^_j = (Z_j - mean(Z_j)) / sqrt(eps + var(Z_j))          (var with Bessel's correction, eps = 1e-8)
    C    = Z^T Z^                                             (d x d; C / (N - 1) is the correlation matrix)
    L    = (1 / N) * mean_{i != j} C_ij^2                     (the mean over the d (d - 1) off-diagonal entries)

and the local objective is base loss + beta * L (with FedAvg: FedAvg + FedDecorr). The term reads no model
but the one being trained, so it adds to any parameter-sharing method and composes with any temperature
policy and aggregator: ``[objective] terms = [{name = "decorr", beta = 0.1}]``.

Choices:

* **L is the official code's loss** (``loss.py``: z-score with ``var`` and ``eps`` inside the square root,
  the off-diagonal entries of ``Z^T Z^`` squared and averaged, divided by N). The paper describes the term
  as the squared Frobenius norm of the representations' correlation matrix; the diagonal is constant
  (about N - 1 per entry, no gradient) and the scale is that of the code, for which the published
  ``beta`` values were chosen. Changing it would change what a given beta means, so there is no option.
* **beta = 0.1 by default**: the official run scripts' ``DECORR_COEF`` for CIFAR-10 (and Tiny-ImageNet; 0.05
  for CIFAR-100); the paper tunes beta per dataset, and so should a comparison (``objective.terms.decorr.beta`` is a tuning-grid key).
* **A one-sample batch** (N = 1, e.g. a client's last partial batch) adds 0, as in the code (no variance to
  take); so does a one-dimensional representation (no off-diagonal entry; the code's mean over an empty set
  would be NaN there).
* **The representation** is that of the training forward (``StepView.features``), so the term's gradient
  flows through the feature extractor only, as in the code.

Written with a fixed off-diagonal mask, not by indexing, so it has no data-dependent shape and runs under
the vectorised executor's ``vmap``.

Checked (2026-12) against: bytedance/FedDecorr ``loss.py`` (``FedDecorrLoss``: eps = 1e-8, z-score with
``var`` inside the square root, ``_off_diagonal(x^T x).pow(2).mean() / N``, 0 for N = 1), ``approach/fedavg.py``
(``net(x, return_features=True)``, the penultimate features; CE + ``feddecorr_coef`` times the loss),
``networks/resnetcifar.py`` and ``run_scripts/*_feddecorr.sh`` (coef 0.1 for CIFAR-10 and Tiny-ImageNet, 0.05
for CIFAR-100). A re-computation of the official form agrees with :func:`decorrelation_loss`. Of the paper
(arXiv 2210.00226) only the abstract and summaries were reachable here, not its equation: whatever its
normalisation of the Frobenius norm of the correlation matrix K (``Z^T Z = (N - 1) K``), the code's form, for
which the published betas hold, is kept. No difference found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from chillfl.options import require
from chillfl.training.terms import Context, StepView, TermSpec, read_number, register_term

EPS = 1e-8
"""Inside the z-score's square root, as in the official code: a constant column gives zeros, not NaN."""


def decorrelation_loss(features: torch.Tensor) -> torch.Tensor:
    """``(1 / N) mean_{i != j} (Z^T Z)_ij^2`` of the z-scored ``[N, d]`` features (module docstring); 0 when N or d is 1."""
    n, d = features.shape
    if n < 2 or d < 2:
        return features.sum() * 0.0  # a zero that stays on the graph (and in the features' dtype and device)
    centred = features - features.mean(dim=0, keepdim=True)
    z = centred / torch.sqrt(EPS + centred.var(dim=0, keepdim=True))
    gram = z.T @ z
    off = ~torch.eye(d, dtype=torch.bool, device=features.device)
    return torch.where(off, gram.square(), torch.zeros_like(gram)).sum() / (d * (d - 1) * n)


class DecorrTerm:
    """``decorr_beta * L(features)``: a batch term (reads the step's representation), and nothing of the run but beta."""

    per_batch = True
    couples_samples = True  # the batch's correlation matrix: a built term says so too (a method or Python may add it)
    captures: tuple[str, ...] = ()
    reads: tuple[str, ...] = ("decorr_beta",)

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context, step: StepView) -> torch.Tensor:
        return read_number(context, "decorr_beta") * decorrelation_loss(step.features)


@dataclass(frozen=True)
class DecorrOptions:
    """Options of the ``decorr`` term: ``beta`` its weight (the official run scripts' 0.1 for CIFAR-10)."""

    beta: float = 0.1

    def validate(self, section: str) -> None:
        require(0 <= self.beta <= 1e6, f"{section}.beta", f"must be in [0, 1e6], got {self.beta}")


DECORR = register_term(
    "decorr",
    TermSpec(DecorrOptions, lambda o: DecorrTerm(), "representation decorrelation beta * (1/N) mean_{i!=j} (Z^T Z)_ij^2 of the z-scored features (FedDecorr)",
             sends=lambda o: {"decorr_beta": o.beta}, couples_samples=True),  # the batch's correlation: 0 per sample, so dp-sgd refuses it
)
"""FedDecorr's term on top of any parameter-sharing aggregator: it reads ``decorr_beta`` and the step's representation."""
