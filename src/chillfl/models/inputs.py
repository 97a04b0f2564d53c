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
from chillfl.models.spec import ModelSpec

BLOCK = 1 << 22
"""Elements compared at once: the integrality test of a large dataset allocates no more than this."""


@dataclass(frozen=True)
class IndexReader:
    """A configured architecture that reads integer indices: its name, its config field, and its options as its spec reads them."""

    name: str
    field: str
    options: Any
    spec: ModelSpec

    def vocab(self, num_classes: int) -> int:
        """How many indices it reads with ``num_classes`` classes (its spec's ``reads_indices``)."""
        assert self.spec.reads_indices is not None, "only architectures that read indices are index readers"
        return self.spec.reads_indices(self.options, num_classes)

    def reads(self, num_classes: int | None = None) -> str:
        """What it reads, for an error; with the range where the class count is known."""
        where = "" if num_classes is None else f" (0..{self.vocab(num_classes) - 1})"
        return f"{self.name} reads its inputs as integer indices{where}"


def index_readers(table: Mapping[str, Any], num_clients: int) -> list[IndexReader]:
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
        readers.append(IndexReader(name, f"{section}.name", options, spec))
    return readers


def refuse_noise(table: Mapping[str, Any], num_clients: int, noise_field: str = "partition.name") -> None:
    """Refuse a partitioner that adds noise to the inputs (``noise_field`` names it) when an architecture reads indices.

    The class count is not needed: a dry run without the data's files asks it too, and says the line a built run says.
    """
    readers = index_readers(table, num_clients)
    if readers:
        first = readers[0]
        raise ConfigError(noise_field, f"adds Gaussian noise to the clients' inputs, and {first.reads()} ({first.field}); choose a partitioner that leaves inputs as they are")


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
    if data.noise is not None and any(sigma != 0 for sigma in data.noise):
        refuse_noise(table, data.num_clients, noise_field)
    readers = index_readers(table, data.num_clients)
    if not readers:
        return
    first, classes = readers[0], data.num_classes
    for split, x in (("train", data.dataset.x_train), ("test", data.dataset.x_test)):
        value = first_fraction(x)
        if value is not None:
            raise ConfigError(first.field, f"{first.reads(classes)}, and the {split} inputs of {data.dataset.name!r} hold {value:g}: real-valued features, not indices "
                                           "(a character-index dataset such as flwr_shakespeare, or another model)")
        low, high = (float(v) for v in torch.aminmax(x))  # one pass over every row: a stray index in the last row is found too
        for reader in readers:  # per-client architectures may read vocabularies of different sizes
            vocab = reader.vocab(classes)
            if low < 0 or high > vocab - 1:
                raise ConfigError(reader.field, f"{reader.reads(classes)}, and the {split} inputs of {data.dataset.name!r} hold indices {low:g}..{high:g}, "
                                                f"outside 0..{vocab - 1}; raise the model's vocab (0: the class count) or fix the data")
