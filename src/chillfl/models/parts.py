"""A classifier's representation and head, for methods that need both.

MOON, FedProto, FedHKD, FedGen and the CKA analysis work on the
representation a model feeds to its classifier head. Rather than make every
architecture (and every user's own ``nn.Module``) implement a second forward
method, the head is defined as the model's *last registered* ``nn.Linear``
and the representation as that layer's input, captured with a forward
pre-hook while the model runs its ordinary ``forward``. The hook sees the
tensor the layer sees, so it works under ``torch.func.functional_call`` and
``vmap`` alike, and logits stay exactly what ``model(x)`` returns.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn


@runtime_checkable
class SlimStaged(Protocol):
    """A model whose final stage can run at reduced width (FedAlign's slimmed stage): it names that stage."""

    slim_stage: str


class NoHeadError(ValueError):
    """The model has no ``nn.Linear`` layer, so it has no classifier head to split at."""


def head_name(model: nn.Module) -> str:
    """Dotted name of the model's classifier head: its last registered ``nn.Linear``."""
    name = None
    for module_name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            name = module_name
    if name is None:
        raise NoHeadError(f"{type(model).__name__} has no nn.Linear layer to use as its classifier head")
    return name


def head_of(model: nn.Module) -> nn.Linear:
    """The classifier head module (see :func:`head_name`)."""
    head = model.get_submodule(head_name(model))
    assert isinstance(head, nn.Linear)
    return head


def forward_with_features(model: nn.Module, x: torch.Tensor, *, call: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``model`` on ``x``; return ``(representation, logits)``.

    ``call`` replaces ``model(x)`` when given (e.g. a ``functional_call``
    closure over stacked parameters); the hook is installed on ``model``'s
    head module either way, which is the module ``functional_call`` runs.
    The representation is flattened to ``[batch, features]`` as the head
    sees it.
    """
    captured: list[torch.Tensor] = []

    def grab(_module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        captured.append(inputs[0])

    handle = head_of(model).register_forward_pre_hook(grab)
    try:
        logits = model(x) if call is None else call(x)
    finally:
        handle.remove()
    if not captured:
        raise NoHeadError(f"{type(model).__name__}'s forward did not call its last nn.Linear layer")
    return captured[-1], logits
