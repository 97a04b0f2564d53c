"""What a registered model is: its options, its builder, and what it declares about the inputs it reads.

A model's spec lives next to its code (e.g. :data:`chillfl.models.char_lstm.SPEC`); the registry
only lists them. The run builder asks a spec's fields (:func:`chillfl.models.inputs.check_index_inputs`),
never a model's name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from torch import nn

Builder = Callable[[tuple[int, ...], int, Any, str], nn.Module]


class ModelSpec(NamedTuple):
    """Options dataclass and builder of one registered model, and its declared input kind."""

    options: type
    build: Builder
    reads_indices: Callable[[Any, int], int] | None = None
    """Set: the model reads its inputs as integer indices (rows of an embedding), each below
    ``reads_indices(options, num_classes)``. A run then refuses inputs that are not such indices
    (a standardised float dataset) and partitioners that add noise to the inputs, before it starts.
    None: the model reads real-valued features."""
    summary: str = ""
    """One line for ``chillfl list models`` and the reference (empty: its options' docstring's first line)."""
