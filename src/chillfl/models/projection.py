"""MOON's projection head, as an option of every registered model: ``[model] projection_dim = 256``.

MOON (Li et al., CVPR 2021, Sec. 3.2 and its official code) puts a 2-layer
MLP between the base encoder and the output layer: the encoder's
representation h (dimension d) goes through ``Linear(d, d) -> ReLU ->
Linear(d, projection_dim)`` and the output layer reads that projection z.
The contrastive loss is computed on z.

Here any model gets that head by replacing its classifier head (the one it
declares, :mod:`chillfl.models.parts`) with the MLP followed by a new
``Linear(projection_dim, num_classes)``, a :class:`ProjectionHead` that declares
that output layer as its head. The model's declaration then leads to the new
output layer (and so does the last-``nn.Linear`` rule for a model that declares
none), so :func:`~chillfl.models.parts.forward_with_features` returns z for every
method, not only for MOON; the head's parameters travel and are averaged like the
rest of the model. 0 (the default) leaves the model as built.

Checked against: MOON's official ``ModelFedCon`` (``l1`` d -> d, ReLU, ``l2`` d ->
out_dim, ``l3`` out_dim -> classes; the loss on ``l2``'s output).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from chillfl.errors import ConfigError
from chillfl.models.parts import NoHeadError, head_name, head_size
from chillfl.numeric import is_whole

PROJECTION_OPTION = "projection_dim"


@dataclass(frozen=True)
class EveryModelOptions:
    """Taken by any model beside its own options: ``projection_dim`` > 0 adds MOON's projection head (0: none); per-client architectures (``assign``, ``[[model.groups]]``): docs/baselines.md.

    Read by :func:`chillfl.models.registry.build_model` from the raw table; this class is what
    ``chillfl list --options`` shows, so the reference names the option every model takes.
    """

    projection_dim: int = 0


class ProjectionHead(nn.Sequential):
    """Linear(d, d), ReLU, Linear(d, p), Linear(p, C) in place of a model's head; its own head is the last layer."""

    def __init__(self, features: int, projection_dim: int, classes: int) -> None:
        super().__init__(nn.Linear(features, features), nn.ReLU(), nn.Linear(features, projection_dim), nn.Linear(projection_dim, classes))

    def head_name(self) -> str:
        """The output layer (:class:`~chillfl.models.parts.DeclaresHead`): the model's declared head leads here."""
        return "3"


def check_projection_dim(projection_dim: object, field: str) -> int:
    """Refuse a ``projection_dim`` that is no integer in [0, 65536]: read from the raw table, it is no dataclass field that
    :func:`~chillfl.options.parse_options` checks, and a dry run without the data builds no model to check it."""
    if not is_whole(projection_dim) or not 0 <= projection_dim <= 65536:
        raise ConfigError(field, f"must be an integer in [0, 65536] (0: no projection head), got {projection_dim!r}")
    return projection_dim


def with_projection_head(model: nn.Module, projection_dim: object, field: str) -> nn.Module:
    """``model`` with its classifier head (d -> C) replaced by Linear(d, d), ReLU, Linear(d, p), Linear(p, C)."""
    dim = check_projection_dim(projection_dim, field)
    if dim == 0:
        return model
    try:
        name = head_name(model)
    except NoHeadError as exc:
        raise ConfigError(field, f"a projection head replaces the model's classifier head, and {exc}") from None
    classes, d = head_size(model)
    mlp = ProjectionHead(d, dim, classes)
    parent_name, _, attr = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, attr, mlp)
    return model
