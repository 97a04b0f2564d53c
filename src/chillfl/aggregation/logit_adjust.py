"""The shared client half of FedAvg-family methods whose local loss adjusts the logits by the client's own label counts.

FedRS (:mod:`chillfl.aggregation.fedrs`) and FedLC (:mod:`chillfl.aggregation.fedlc`)
keep FedAvg's server rule; each client trains with the run's base loss on adjusted
logits, ``base_loss(adjust(z, n), y, T)``, ``n`` its per-class training counts.

How it runs on the one training path: the client half is :class:`Personalising`
with one objective, the run's spec with its base loss wrapped in
:class:`AdjustedLoss`; its ``train`` computes ``n`` from ``local.y`` and asks
for one training of the run's start model with ``n`` in the context under the
method's own key (one training a round, the round's seed: at an adjustment that
is the identity the run is FedAvg's bitwise). The loss reads ``n`` from the
context as a tensor, so the vectorised executor stacks the clients' counts and
vmaps the step (no ``.item()``, no branch on data).

Composes with the run's terms (``[objective]``, batch terms) and with a base loss
that itself reads the representation (it is passed through). It does not compose
with a wrapper that brings its own client half (PA3Fed): the two halves would run
side by side and this half's objective would be lost, so the specs declare
``not_a_base``.

Checked (2026-12) for FedRS and FedLC against their reference code (see those modules): the counts are the client's
whole training set's (every local step uses the same n, as FedRepo's ``client_cnts`` and FL-bench's
``clients_label_counts``), the adjustment is in the training loss only, and the server is FedAvg.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, ClassVar, Mapping

import torch
from torch import nn

from chillfl.aggregation.base import ClientHalf, ClientState, Context, FedAvg, Local, LocalProgram, Params, Personal, Report, Train, Trained, Weighting, Wire
from chillfl.training.local import BaseLoss, DeclaredLoss, LocalSpec, reads_features
from chillfl.training.objective import read_tensor

Adjust = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(logits [B, C], counts [C]) -> adjusted logits [B, C]; tensor ops only (vmapped over clients)."""


def label_counts(y: torch.Tensor, num_classes: int, dtype: torch.dtype) -> torch.Tensor:
    """n_c, the client's training count of every class c (0 for a class it has no sample of)."""
    return torch.bincount(y, minlength=num_classes).to(dtype)


class AdjustedLoss:
    """``base_loss(adjust(logits, n), y, T)``: the run's base loss at its temperature on the adjusted logits.

    ``n`` is read from the context under ``key``. A base loss that reads the representation
    (``uses_features``) gets it, the parameters and the context as StepLoss passed them.
    A :class:`~chillfl.training.local.DeclaredLoss` (public in :mod:`chillfl.extend`): it reads the context
    always, and the features where its base loss does or a head bias is taken out.
    """

    uses_context: ClassVar[bool] = True
    uses_features: bool

    def __init__(self, base_loss: BaseLoss, adjust: Adjust, key: str, bias: str | None = None) -> None:
        """``bias``: the head's bias entry to take out of the logits before ``adjust`` (FedRS's authors' code trains on
        ``W h`` alone); None: the whole logit is adjusted."""
        self.base_loss = base_loss
        self.adjust = adjust
        self.key = key
        self.bias = bias
        self.base_features = reads_features(base_loss)
        self.uses_features = self.base_features or bias is not None  # the parameters come with the features

    def __call__(
        self,
        logits: torch.Tensor,
        y: torch.Tensor,
        temperature: Any,
        *,
        features: torch.Tensor | None = None,
        params: Mapping[str, torch.Tensor] | None = None,
        context: Context | None = None,
    ) -> torch.Tensor:
        if context is None:
            raise TypeError("AdjustedLoss needs the client's context (StepLoss passes it to a loss that declares uses_context)")
        if self.bias is not None and params is not None and self.bias in params:
            logits = logits - params[self.bias]
        adjusted = self.adjust(logits, read_tensor(context, self.key).to(logits.dtype))
        if self.base_features:
            return self.base_loss(adjusted, y, temperature, features=features, params=params, context=context)  # type: ignore[call-arg]
        return self.base_loss(adjusted, y, temperature)


@dataclass(frozen=True)
class CountsClient:
    """The client half: one training of the run's start model under :class:`AdjustedLoss`, the client's counts in the context."""

    adjust: Adjust
    key: str
    """The context key of the counts (the method's own)."""
    num_classes: int
    bias: str | None = None
    """The head's bias entry left out of the training logits (:class:`AdjustedLoss`); None: kept."""

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        """0: the run's spec with its base loss on the adjusted logits (its terms, optimiser and frozen keys as they are)."""
        loss: DeclaredLoss = AdjustedLoss(spec.base_loss, self.adjust, self.key, self.bias)  # its flags, checked by type
        return (replace(spec, base_loss=loss),)

    def train(self, local: Local) -> LocalProgram:
        dtype = next((t.dtype for t in local.start.values() if t.is_floating_point()), torch.float32)
        context = {**local.context, self.key: label_counts(local.y, self.num_classes, dtype)}
        out = yield Train(local.start, context, objective=0)
        return Personal(out.params, out.num_steps, out.mean_loss)

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}


class AdjustedFedAvg(FedAvg):
    """FedAvg's server rule; each client trains under ``adjust``ed logits (:class:`CountsClient`): FedRS's and FedLC's aggregator."""

    def __init__(
        self, adjust: Adjust, key: str, num_classes: int, weighting: Weighting = "samples", options: object = None, bias: str | None = None
    ) -> None:
        """``options``: the method's options dataclass (FedRS's, FedLC's), recorded for an instance passed from Python;
        ``bias``: the head's bias entry left out of the training logits (None: kept)."""
        super().__init__(weighting)
        self.client = CountsClient(adjust, key, num_classes, bias)
        self.options = options

    def client_half(self) -> ClientHalf:
        return self.client


def logit_width(model: nn.Module, method: str) -> int:
    """The number of classes the counts cover: the out_features of the model's classifier head (ConfigError on ``model.name`` without one)."""
    from chillfl.errors import ConfigError
    from chillfl.models.parts import NoHeadError, head_size

    try:
        return head_size(model).classes
    except NoHeadError as exc:
        raise ConfigError("model.name", f"{method} counts the client's labels over the classifier head's outputs, and {exc}") from None
