"""What a model that reads integer indices asks of its inputs: whole numbers in its range, untouched by noise.

A model declares it in its spec (:attr:`~chillfl.models.spec.ModelSpec.reads_indices`, e.g. ``char_lstm``).
Fed a standardised float dataset it would read casts of floats as indices, and a partitioner that adds
Gaussian noise to each client's inputs (``feature_noise``) would add it to indices: both ran to the end
without a word; an index past the embedding's rows was clamped (an IndexError or a device-side assert
where nothing clamps). The run builder checks every row once, before the run: a min/max pass, and an
integrality pass in blocks (no copy of the data), once per loaded dataset (:mod:`chillfl.data.values`).
Inputs read apart from the dataset's splits are checked where they are read, in the same words: a public
set taken from another dataset (before the run), a user Dataset's items redrawn for a round (when they are).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from chillfl.data.federated import FederatedData
from chillfl.data.values import InputValues, input_values
from chillfl.errors import ConfigError
from chillfl.models.assign import arch_section, plan_models
from chillfl.models.projection import PROJECTION_OPTION
from chillfl.models.registry import model_options, model_spec
from chillfl.models.spec import ModelSpec
from chillfl.plugins import is_custom

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
        section = arch_section(plan, i)
        spec = model_spec(name, section) if isinstance(name, str) and not is_custom(name) else None
        if not isinstance(name, str) or spec is None or spec.reads_indices is None:
            continue
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


def refuse_real_inputs(table: Mapping[str, Any], num_clients: int, dataset: str, what: str | None = None) -> None:
    """Refuse an architecture that reads indices on registered dataset ``dataset``, whose entry declares real-valued
    inputs (:data:`~chillfl.data.datasets.InputKind`): what a dry run without the files can tell, in the words of
    the built run's line (:func:`refuse_values`), which scans the values once they are read. ``what``: which of the
    run's inputs they are, for the line (default: the data's, ``the inputs of 'cifar10'``; a public set's too)."""
    readers = index_readers(table, num_clients)
    if readers:
        first = readers[0]
        raise ConfigError(first.field, f"{first.reads()}, and {what or f'the inputs of {dataset!r}'} are real-valued features, not indices "
                                       "(a character-index dataset such as flwr_shakespeare, or another model)")


def check_index_inputs(table: Mapping[str, Any], data: FederatedData, noise_field: str = "partition.name") -> None:
    """Refuse, before the run, index-reading models on inputs that are not whole numbers or that carry feature noise.

    ``noise_field`` names the setting that adds the noise (the partitioner). One ConfigError, one line.
    """
    if data.noise is not None and any(sigma != 0 for sigma in data.noise):
        refuse_noise(table, data.num_clients, noise_field)
    readers = index_readers(table, data.num_clients)
    train, test = data.dataset.split_values if readers else (None, None)  # scanned once for this dataset object
    for split, values in (("train", train), ("test", test)):
        if values is not None:
            refuse_values(readers, data.num_classes, values, f"the {split} inputs of {data.dataset.name!r}")


def check_index_rows(table: Mapping[str, Any], data: FederatedData, x: torch.Tensor, what: str) -> None:
    """:func:`check_index_inputs` for inputs read apart from the dataset's splits: a public set taken from another
    dataset, a user Dataset's items redrawn for a round. ``what`` says which, in the line (``the public inputs of 'x'``)."""
    readers = index_readers(table, data.num_clients)
    if readers:
        refuse_values(readers, data.num_classes, input_values(x), what)


def refuse_values(readers: Sequence[IndexReader], num_classes: int, values: InputValues, what: str) -> None:
    """One line on the first reader when ``what`` holds a value that is not a whole number, and on each reader whose
    vocabulary it leaves (per-client architectures may read vocabularies of different sizes)."""
    first = readers[0]
    if values.fraction is not None:
        raise ConfigError(first.field, f"{first.reads(num_classes)}, and {what} hold {values.fraction!r}: real-valued features, not indices "
                                       "(a character-index dataset such as flwr_shakespeare, or another model)")
    for reader in readers:
        vocab = reader.vocab(num_classes)
        if values.low < 0 or values.high > vocab - 1:  # min/max over every row: a stray index in the last row is found too
            raise ConfigError(reader.field, f"{reader.reads(num_classes)}, and {what} hold indices {values.low:g}..{values.high:g}, "
                                            f"outside 0..{vocab - 1}; raise the model's vocab (0: the class count) or fix the data")
