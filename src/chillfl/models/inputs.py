"""What a model that reads integer indices asks of its inputs: whole numbers in its range, untouched by noise.

A model declares it in its spec (:attr:`~chillfl.models.spec.ModelSpec.reads_indices`, e.g. ``char_lstm``).
Fed a standardised float dataset it would read casts of floats as indices, and a partitioner that adds
Gaussian noise to each client's inputs (``feature_noise``) would add it to indices: both ran to the end
without a word; an index past the embedding's rows was clamped (an IndexError or a device-side assert
where nothing clamps). The run builder checks every row once, before the run: a min/max pass, and an
integrality pass in blocks (no copy of the data).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from chillfl.data.federated import FederatedData
from chillfl.errors import ConfigError
from chillfl.models.assign import arch_section, plan_models
from chillfl.models.projection import PROJECTION_OPTION
from chillfl.models.registry import MODELS, model_options

BLOCK = 1 << 22
"""Elements compared at once: the integrality test of a large dataset allocates no more than this."""


@dataclass(frozen=True)
class IndexReader:
    """A configured architecture that reads integer indices: its name, its config field, how many indices it reads."""

    name: str
    field: str
    vocab: int


def index_readers(table: Mapping[str, Any], num_clients: int, num_classes: int) -> list[IndexReader]:
    """The ``[model]`` table's architectures (per-client ones too) whose spec declares ``reads_indices``."""
    plan = plan_models(table, num_clients)
    readers = []
    for i, arch in enumerate(plan.archs):
        name = arch.get("name")
        spec = MODELS.get(name) if isinstance(name, str) else None
        if not isinstance(name, str) or spec is None or spec.reads_indices is None:
            continue
        section = arch_section(plan, i)
        options = model_options(name, {k: v for k, v in arch.items() if k not in ("name", PROJECTION_OPTION)}, section)
        readers.append(IndexReader(name, f"{section}.name", spec.reads_indices(options, num_classes)))
    return readers


def first_fraction(x: torch.Tensor) -> float | None:
    """The first value of ``x`` that is not a whole number; None when all are (always for integer dtypes)."""
    if not x.is_floating_point():
        return None
    flat = x.reshape(-1)
    for start in range(0, flat.numel(), BLOCK):
        block = flat[start : start + BLOCK]
        bad = (block != block.trunc()).nonzero()
        if len(bad):
            return float(block[int(bad[0, 0])])
    return None


def check_index_inputs(table: Mapping[str, Any], data: FederatedData, noise_field: str = "partition.name") -> None:
    """Refuse, before the run, index-reading models on inputs that are not whole numbers or that carry feature noise.

    ``noise_field`` names the setting that adds the noise (the partitioner). One ConfigError, one line.
    """
    readers = index_readers(table, data.num_clients, data.num_classes)
    if not readers:
        return

    def reads(reader: IndexReader) -> str:
        return f"{reader.name} reads its inputs as integer indices (0..{reader.vocab - 1})"

    first = readers[0]
    if data.noise is not None and any(sigma != 0 for sigma in data.noise):
        raise ConfigError(noise_field, f"adds Gaussian noise to the clients' inputs, and {reads(first)} ({first.field}); choose a partitioner that leaves inputs as they are")
    for split, x in (("train", data.dataset.x_train), ("test", data.dataset.x_test)):
        value = first_fraction(x)
        if value is not None:
            raise ConfigError(first.field, f"{reads(first)}, and the {split} inputs of {data.dataset.name!r} hold {value:g}: real-valued features, not indices "
                                           "(a character-index dataset such as flwr_shakespeare, or another model)")
        low, high = (float(v) for v in torch.aminmax(x))  # one pass over every row: a stray index in the last row is found too
        for reader in readers:  # per-client architectures may read vocabularies of different sizes
            if low < 0 or high > reader.vocab - 1:
                raise ConfigError(reader.field, f"{reads(reader)}, and the {split} inputs of {data.dataset.name!r} hold indices {low:g}..{high:g}, "
                                                f"outside 0..{reader.vocab - 1}; raise the model's vocab (0: the class count) or fix the data")
