"""FedHKD (Chen et al., ICLR 2023): hyper-knowledge, i.e. class means with noise and per-class soft predictions.

Checked against the official code ``CityChan/Federated-Hyper-Knowledge-Distillation``
(``Client/ClientFedHKD.py``, ``Client/ClientBase.py``, ``Server/ServerFedHKD.py``, ``utils.py``,
``option.py``) and FL-bench's ``src/client/fedhkd.py``::

    hyper-knowledge of client k, class j:  (hbar_k,j + N(0, sigma^2 I),  qbar_k,j = mean softmax(F_k(x) / tau))
    server: count-weighted means H_j, Q_j                                  (the paper's Eq. 6)
    L_k = CE(F_k(x), y)
        + lam   * 1/|J| sum_{j in J} KL(Q_j || softmax(head_k(H_j) / tau))   (official --lam = 0.05, --temp 0.5)
        + gamma * MSE(f_k(x), H_y)                                           (official --gamma = 0.05)

J: the known classes. The options' names: ``kd_weight`` is the official ``--lam``, ``lam`` its ``--gamma``.
The models are averaged too by default (``share_model``, the official ``upload_model = True``).

Choices (where the official code differs; docs/baselines.md):

* ``kd_reduction = "batchmean"`` (default) averages the KL over the known classes, as written above;
  ``"mean"`` is the official ``nn.KLDivLoss()``'s default reduction, which also divides by the number
  of classes C (the same ``kd_weight`` then weighs the term C times less).
* Noise: one independent draw per class (seeded by the run, the client and the round); the official
  code adds one noise vector to all of a client's class means.
* Server: count-weighted means of the round's uploads (the paper); the official server overwrites a
  dictionary client by client (the last client holding a class wins) and keeps it across rounds.
* The class rows are computed once after training, in eval mode (as the official code), and the
  local training is the run's ``[client]`` optimiser (the official: Adam, lr 0.001, clipping at 1.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

import torch
import torch.nn.functional as F

from chillfl.capabilities import Capabilities
from chillfl.options import Scale, require
from chillfl.prototypes.maths import PrototypeLoss, class_means
from chillfl.prototypes.methods.fedproto import ON_FLOWER, RAW_MEANS, FedProtoOptions
from chillfl.prototypes.spec import ClassRows, Head, Knowledge, PrototypeHooks, PrototypeSpec, average_rows
from chillfl.seeds import derive_seed
from chillfl.training.local import BaseLoss
from chillfl.training.objective import Context, read_tensor

SOFT = "soft"
"""The name of FedHKD's per-class rows (Q, ``[C, C]``): in the uplink, the downlink, the loss's context, checkpoints."""


@dataclass(frozen=True)
class FedHKDOptions(FedProtoOptions):
    """FedHKD's options (defaults: the official code).

    ``lam``: gamma, the weight of MSE(f(x), H_y) (0.05). ``kd_weight``: lambda on the
    hyper-knowledge KD term (0.05). ``temperature``: tau for the soft predictions and the KD term
    (0.5). ``noise_std``: sigma of the Gaussian noise on each uploaded class mean (2.0; 0 = off).
    ``share_model``: also average the models with ``[algorithm]`` (the official ``upload_model``).
    ``kd_reduction``: the KD term's KL averaged over the known classes (``batchmean``) or also over the
    classes' C entries (``mean``, the official ``nn.KLDivLoss()``).
    """

    lam: Scale = 0.05
    kd_weight: Scale = 0.05
    temperature: float = 0.5
    noise_std: Scale = 2.0
    share_model: bool = True
    kd_reduction: Literal["batchmean", "mean"] = "batchmean"

    def validate(self, section: str) -> None:
        for name in ("lam", "kd_weight", "noise_std"):
            value = vars(self)[name]
            require(value >= 0, f"{section}.{name}", f"must be >= 0, got {value}")
        require(self.temperature > 0, f"{section}.temperature", f"must be > 0, got {self.temperature}")


def hyper_knowledge_kd(
    weight: torch.Tensor, bias: torch.Tensor | None, protos: torch.Tensor, soft: torch.Tensor, mask: torch.Tensor, tau: float,
    reduction: str = "batchmean",
) -> torch.Tensor:
    """mean over known classes j of KL(Q_j || softmax(head(H_j) / tau)), the local head applied to the global means
    (``reduction = "mean"``: divided by the number of classes too, ``nn.KLDivLoss()``'s default)."""
    logits = protos.to(weight.dtype) @ weight.T
    if bias is not None:
        logits = logits + bias
    log_q = F.log_softmax(logits / tau, dim=-1)
    target = soft.to(weight.dtype)
    per_class = (torch.xlogy(target, target) - target * log_q).sum(-1)  # [C]
    known = mask.to(weight.dtype)
    value = (per_class * known).sum() / known.sum().clamp(min=1.0)
    return value / soft.shape[-1] if reduction == "mean" else value


@dataclass(frozen=True)
class HyperKnowledgeLoss(PrototypeLoss):
    """FedHKD's local objective: :class:`~chillfl.prototypes.maths.PrototypeLoss` + ``kd_weight`` * the KD term,
    the head's parameters read by name (``head_weight``, ``head_bias``), Q from the context's ``soft``."""

    kd_weight: float = 0.0
    kd_temperature: float = 1.0
    head_weight: str = ""
    head_bias: str | None = None
    kd_reduction: str = "batchmean"

    def extra(self, value: torch.Tensor, params: Mapping[str, torch.Tensor], context: Context, protos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.kd_weight:
            bias = params[self.head_bias] if self.head_bias is not None else None
            value = value + self.kd_weight * hyper_knowledge_kd(params[self.head_weight], bias, protos, read_tensor(context, SOFT), mask, self.kd_temperature, self.kd_reduction)
        return value


class FedHKD(PrototypeHooks[FedHKDOptions]):
    """Noisy class means and per-class soft predictions up; their count-weighted means down; the KD term in the loss."""

    def release(self, cid: int, round: int, features: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> ClassRows:
        o = self.options
        means, counts = class_means(features, y, self.num_classes)
        soft, _ = class_means(torch.softmax(logits / o.temperature, dim=-1), y, self.num_classes)
        if o.noise_std > 0:  # the Gaussian mechanism on the released representations
            gen = torch.Generator().manual_seed(derive_seed(self.seed, "hkd-noise", cid, round))
            noise = torch.randn(means.shape, generator=gen, dtype=means.dtype).to(means.device)
            means = means + o.noise_std * noise * (counts > 0).unsqueeze(1).to(means.dtype)
        return ClassRows(means, counts, {SOFT: soft})

    def loss(self, head: Head) -> BaseLoss:
        o = self.options
        return HyperKnowledgeLoss(o.lam, o.kd_weight, o.temperature, head.weight, head.bias, o.kd_reduction)

    def initial(self) -> dict[str, torch.Tensor]:
        return {SOFT: torch.zeros((self.num_classes, self.num_classes))}

    def combine(self, releases: Sequence[ClassRows]) -> Knowledge:
        return average_rows(releases, self.options.weighting)


def _shares_model(options: FedHKDOptions) -> bool:
    return options.share_model


SPEC = PrototypeSpec(
    "fedhkd",
    FedHKDOptions,
    FedHKD,
    summary="prototypes + soft predictions (lam = kd_weight = 0.05, noise_std = 2, share_model = true)",
    shares_model=_shares_model,
    capabilities=Capabilities(
        on_flower=ON_FLOWER,
        private_steps=RAW_MEANS + " (nor the per-class soft predictions)",
        linear_head="FedHKD's hyper-knowledge term applies the head to the global class means, W H_j + b, from its weight and bias",
    ),
)
