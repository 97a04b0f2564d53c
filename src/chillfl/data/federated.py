"""FederatedData: a dataset split over clients, with per-client eval splits and a public pool.

:func:`build_federated_data` is a pure function of (dataset, options, seed):
every random choice draws from a generator spawned from ``seed`` for one
purpose (public pool, partition, eval splits, feature noise), so the same seed
gives identical indices and noise whatever else changes.

Client evaluation splits (``client_eval``):

* ``"proportional"``: each client's split is drawn from the global test set
  with the class proportions of the client's training data (SCARLET Sec. IV,
  Fig. 6; FedChill Sec. 4.2.2, where the validation set comes from the test
  set). Sizes per class are the largest-remainder rounding of
  ``client_eval_size * proportions`` and are drawn without replacement.
* ``"natural"``: the dataset's own per-client test split (``synthetic``).
* ``"partition"``: the partitioner's own per-client test split
  (``flexchill_dirichlet``, ``scarlet_dirichlet``: the authors' test splits).
* ``"none"``: empty arrays.

Choices
-------
* Proportions come from the client's actual train label counts
  (``eval_proportions="train"``). SCARLET partitions the test set "with the
  same Dirichlet distribution"; ``eval_proportions="drawn"`` uses the
  partitioner's drawn per-client proportions instead. A partitioner that draws
  none (``iid``, ``shards``, ``dirichlet`` / ``dirichlet_balanced`` with the
  default ``scheme="class"``, which splits each class over clients) is a
  ConfigError naming ``eval_proportions``: its only per-client mix is the
  realised train mix, which is ``"train"``, so ``"drawn"`` would silently
  mean ``"train"``.
* If the test set has fewer samples of a class than a client's share, the
  missing samples go to the client's other classes in proportion; if all of the
  client's classes run out the split is smaller than ``client_eval_size``. A
  client without training data gets an empty split. Different clients' splits
  may overlap (each is its own sample of the shared test set).
* The public pool (for distillation) is a uniform random subset of the train
  set, removed before partitioning; a natural split simply loses those indices.
* Server validation split (``eval.validation`` = fraction f > 0): the first
  ``round(f * n_test)`` indices of a permutation of the global test set drawn
  from its own stream (seed, "validation"), so it depends on the seed and the
  test-set size only. :meth:`FederatedData.test` then returns the *rest*, and
  the clients' splits (proportional, natural, partition) come from the rest too: validation
  samples are never part of any test metric, and test samples never part of
  the validation metric (``val_acc``), which ``compare``'s tuning reads.
* Local validation splits (with the server validation split and client splits):
  client i's own validation rows, on which its own model is scored as
  ``local_val_acc`` (what ``compare``'s ``local_*`` tuning rules read). With
  ``natural`` / ``partition`` splits they are the client's own test rows that
  fell into the server validation split (rows its ``local_acc`` already leaves
  out); with ``proportional`` splits they are drawn from the validation split
  as the eval split is drawn from the rest (same size and class mix, own
  stream (seed, "local validation"), so the eval splits do not change). Either
  way they are validation rows only: never part of a test metric.
  A small validation split cannot follow a skewed client's mix (the rows of a
  class it lacks go to the client's other classes):
  :meth:`FederatedData.local_validation_mismatch` measures how far each
  client's local validation mix is from its training mix, which a run records
  in its summary and a comparison selecting on ``local_val_acc`` warns about
  (:mod:`chillfl.report.caveats`). The draw is left as it is.
* Feature noise (``feature_noise`` partitioner): x + sigma_i * N(0, 1) on the
  normalised inputs, regenerated on each call from a seed derived from
  (seed, client id, split), so it is fixed per client and costs no memory.
  The global test set and the public pool stay clean. A partition read from a
  file (``partition.from``) gets the sigmas its ``partition.json`` records,
  applied by the same rule: the same seed gives the same inputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from chillfl.data.client_rows import ClientRows
from chillfl.data.datasets import ArrayDataset
from chillfl.data.partition_file import FROM_FILE, labels_digest, read_partition
from chillfl.data.partition import (
    NUM_CLIENTS_FIELD,
    Partition,
    allocate_counts,
    natural_groups,
    partition,
)
from chillfl.errors import ConfigError, choice_error
from chillfl.seeds import derive_seed
from chillfl.data.stamp import Marks, RowStamp, stamped_rows
from chillfl.options import require

CLIENT_EVAL_FIELD = "eval.client_split"
CLIENT_EVAL_SIZE_FIELD = "eval.client_split_size"
PUBLIC_SIZE_FIELD = "distillation.public_size"
VALIDATION_FIELD = "eval.validation"
CLIENT_EVAL_MODES = ("none", "proportional", "natural", "partition")
EVAL_PROPORTIONS_FIELD = "eval_proportions"  # a keyword of build_federated_data only (no config key)
EVAL_PROPORTIONS = ("train", "drawn")

_PUBLIC, _PARTITION, _EVAL, _NOISE, _VALIDATION, _LOCAL_VALIDATION = range(6)  # spawn keys of the per-purpose RNG streams


def _rng(seed: int, purpose: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(purpose,)))


def noise_seed(seed: int, client_id: int, split: int) -> int:
    """Torch seed of one client's feature noise (split 0: train, 1: eval)."""
    state = np.random.SeedSequence(seed, spawn_key=(_NOISE, client_id, split)).generate_state(1, np.uint64)[0]
    return int(state) & 0x7FFF_FFFF_FFFF_FFFF


@dataclass
class FederatedData:
    """Per-client index views of one :class:`ArrayDataset`.

    ``train_indices`` / ``eval_indices``: one index array per client, as a list or,
    compactly, a :class:`~chillfl.data.client_rows.ClientRows` (what
    :func:`build_federated_data` makes; two flat arrays whatever the number of
    clients, see :mod:`chillfl.data.client_rows`). The dataset's tensors may be
    memory-mapped (``torch.from_numpy(np.load(path, mmap_mode="c"))``): a client's
    rows are read when it is sampled.
    """

    dataset: ArrayDataset
    train_indices: Sequence[np.ndarray]
    eval_indices: Sequence[np.ndarray]
    noise: list[float] | None
    public_indices: np.ndarray
    seed: int = 0
    class_proportions: np.ndarray | None = None
    validation_indices: np.ndarray | None = None
    """Indices into the test set held out for server-side validation (None: no validation split)."""
    client_validation_indices: Sequence[np.ndarray] | None = None
    """Per client, its own validation rows of the test set, all inside ``validation_indices`` (None: none)."""
    row_labels: str | None = None
    """A digest of the training labels in row order (:func:`~chillfl.data.partition_file.labels_digest`), taken when the
    data were split, before an attack relabels rows: ``partition.json`` records it so that ``partition.from`` notices
    rows in another order. None: not taken (the file then records none)."""
    stamps: Mapping[int, Marks] | None = None
    """Client -> its training rows a data-poisoning attack marks with a pattern (:meth:`with_stamps`): stamped where the
    client's inputs are read (:meth:`client_train`), and after the crop and flip of an augmented training batch
    (:meth:`client_stamp`, :mod:`chillfl.data.stamp`); ``dataset.x_train`` itself stays clean. None: no marks."""

    def _test_rows(self) -> np.ndarray | None:
        """Test-set indices the test metrics use (None: all of them)."""
        if self.validation_indices is None:
            return None
        return np.setdiff1d(np.arange(len(self.dataset.y_test)), self.validation_indices)

    @property
    def num_clients(self) -> int:
        return len(self.train_indices)

    def train_sizes(self) -> np.ndarray:
        """Each client's number of training rows, from its index rows alone (no pass over the labels, as
        :meth:`class_counts` makes: a FedChill server on Flower reads none, and 100,000 clients cost 8 B each)."""
        train = self.train_indices
        return train.lengths() if isinstance(train, ClientRows) else np.fromiter((len(t) for t in train), dtype=np.int64, count=len(train))

    def eval_sizes(self) -> np.ndarray:
        """Each client's number of evaluation rows (:meth:`client_eval`), from its index rows alone. Why: a client whose split
        is empty measures nothing, and ``local_acc`` must leave it out rather than take its NaN for a broken model's."""
        rows = self.eval_indices
        return rows.lengths() if isinstance(rows, ClientRows) else np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))

    def validation_sizes(self) -> np.ndarray | None:
        """Each client's number of own validation rows (:meth:`client_validation`); None without local validation."""
        rows = self.client_validation_indices
        if rows is None:
            return None
        return rows.lengths() if isinstance(rows, ClientRows) else np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))

    def without_training_rows(self) -> frozenset[int]:
        """The clients the partition gave no training rows (a Dirichlet draw with a small alpha, ``min_size = 0``, a
        file): they cannot train, so the round loop never configures them (:func:`chillfl.engine.loop.availability`)."""
        return frozenset(int(c) for c in np.flatnonzero(self.train_sizes() == 0))

    @property
    def num_classes(self) -> int:
        return self.dataset.num_classes

    def _noisy(self, x: torch.Tensor, cid: int, split: int) -> torch.Tensor:
        if self.noise is None or self.noise[cid] == 0 or len(x) == 0:
            return x
        gen = torch.Generator().manual_seed(noise_seed(self.seed, cid, split))
        return x + self.noise[cid] * torch.randn(x.shape, generator=gen, dtype=x.dtype).to(x.device)  # drawn on the CPU on every device

    def _train_rows(self, cid: int) -> slice | torch.Tensor:
        """Client ``cid``'s rows of the training set: a slice where they are a range (a view, no copy), else an index."""
        train = self.train_indices
        span = train.span(cid) if isinstance(train, ClientRows) else None
        if span is not None:  # a contiguous range: a view, no copy, no index array
            return span
        idx = train[cid]
        contiguous = len(idx) and idx[-1] - idx[0] == len(idx) - 1 and (np.diff(idx) == 1).all()
        return slice(int(idx[0]), int(idx[-1]) + 1) if contiguous else torch.from_numpy(idx)

    def client_train(self, cid: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client ``cid``'s training inputs (its marked rows stamped, then its fixed feature noise, if any) and labels."""
        rows = self._train_rows(cid)
        x = self.dataset.x_train[rows]
        marks = None if self.stamps is None else self.stamps.get(cid)
        if marks is not None:
            x = stamped_rows(x, marks)
        return self._noisy(x, cid, 0), self.dataset.y_train[rows]

    def client_stamp(self, cid: int) -> RowStamp | None:
        """Client ``cid``'s marked rows as its augmented training steps read them (:mod:`chillfl.data.stamp`):
        its inputs without the pattern (with its noise, as :meth:`client_train`'s), which rows, the pattern; None: none.
        The pattern then lands on the noisy, augmented row (a read has the noise on top of it): its pixels are exact in
        training as on the probe."""
        marks = None if self.stamps is None else self.stamps.get(cid)
        if marks is None:
            return None
        clean = self._noisy(self.dataset.x_train[self._train_rows(cid)], cid, 0)
        marked = torch.zeros(len(clean), dtype=torch.bool, device=clean.device)
        marked[torch.from_numpy(np.asarray(marks.rows, dtype=np.int64)).to(clean.device)] = True
        return RowStamp(clean, marked, marks.pattern)

    def with_stamps(self, stamps: Mapping[int, Marks]) -> FederatedData:
        """This split with ``stamps`` added (a data-poisoning attack's marked rows; :attr:`stamps`). A client marked
        twice is a ValueError: its rows take one pattern."""
        have = dict(self.stamps or {})
        twice = sorted(set(have) & set(stamps))
        if twice:
            raise ValueError(f"client {twice[0]} is already marked with a pattern; a client's rows take one")
        return dataclasses.replace(self, stamps={**have, **stamps})

    def client_redraw(self, cid: int, round: int) -> torch.Tensor | None:
        """Client ``cid``'s training inputs read anew for ``round`` (0-based) from the user's Dataset, in
        :meth:`client_train`'s row order (and with its noise); None when the inputs are fixed.

        Item ``k`` of the client's rows is read under the ``k``-th seed drawn from
        (run seed, "transform", round, client) (:mod:`chillfl.data.items`): a random
        transform is drawn afresh at every visit, and bitwise the same in every run.
        """
        items = self.dataset.train_items
        if items is None:
            return None
        train = self.train_indices
        span = train.span(cid) if isinstance(train, ClientRows) else None
        rows = np.arange(span.start, span.stop) if span is not None else np.asarray(train[cid])
        x = items.read(rows, derive_seed(self.seed, "transform", round, cid), self.dataset.x_train)
        return self._noisy(x.to(self.dataset.x_train.device), cid, 0)

    def client_eval(self, cid: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client ``cid``'s own validation/test split, taken from the test set (same noise rule)."""
        idx = torch.from_numpy(self.eval_indices[cid])
        return self._noisy(self.dataset.x_test[idx], cid, 1), self.dataset.y_test[idx]

    def client_validation(self, cid: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Client ``cid``'s own validation split (same noise rule as its eval split); None without local validation."""
        if self.client_validation_indices is None:
            return None
        idx = torch.from_numpy(self.client_validation_indices[cid])
        return self._noisy(self.dataset.x_test[idx], cid, 1), self.dataset.y_test[idx]

    def test(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The global (server) test set, clean, without the validation split."""
        rows = self._test_rows()
        if rows is None:
            return self.dataset.x_test, self.dataset.y_test
        idx = torch.from_numpy(rows)
        return self.dataset.x_test[idx], self.dataset.y_test[idx]

    def validation(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The server validation split (``eval.validation``), clean; None without one."""
        if self.validation_indices is None:
            return None
        idx = torch.from_numpy(self.validation_indices)
        return self.dataset.x_test[idx], self.dataset.y_test[idx]

    def public(self) -> torch.Tensor:
        """Unlabelled public pool inputs (empty when public_size == 0)."""
        return self.dataset.x_train[torch.from_numpy(self.public_indices)]

    def to(self, device: torch.device | str) -> FederatedData:
        """The same split with the dataset's tensors on ``device`` (indices stay NumPy arrays)."""
        ds = self.dataset
        moved = dataclasses.replace(ds, x_train=ds.x_train.to(device), y_train=ds.y_train.to(device), x_test=ds.x_test.to(device), y_test=ds.y_test.to(device))
        return dataclasses.replace(self, dataset=moved)

    def local_validation_mismatch(self) -> float | None:
        """Mean over clients of the total variation distance between the class mix of its training rows and that of its
        local validation split: ``0.5 * sum_c |train_c / n_train - val_c / n_val|`` (0: the same mix; 1: no class in common).

        Clients without training rows or with an empty split are left out; None without local validation splits (or
        with no client left). Why: ``local_val_acc`` scores a client on that split, so a split flatter than the client's
        own mix scores it on classes it rarely sees and ``compare``'s ``local_*`` rules select on that number.
        """
        if self.client_validation_indices is None:
            return None
        train = self.class_counts().astype(np.float64)
        y = self.dataset.y_test.cpu().numpy()
        distances = []
        for counts, split in zip(train, self.client_validation_indices):
            if counts.sum() <= 0 or len(split) == 0:
                continue
            val = np.bincount(y[split], minlength=self.num_classes).astype(np.float64)
            distances.append(0.5 * float(np.abs(counts / counts.sum() - val / val.sum()).sum()))
        return float(np.mean(distances)) if distances else None

    def class_counts(self) -> np.ndarray:
        """[clients, classes] train label counts."""
        y = self.dataset.y_train.cpu().numpy()
        if isinstance(self.train_indices, ClientRows):  # every client at once, no loop over clients
            return self.train_indices.class_counts(y, self.num_classes)
        return np.stack([np.bincount(y[ix], minlength=self.num_classes) for ix in self.train_indices]).astype(np.int64)


def validation_split(num_test: int, fraction: float, seed: int) -> np.ndarray | None:
    """Sorted test-set indices of the server validation split (see the module docstring); None for fraction 0."""
    require(0.0 <= fraction < 1.0, VALIDATION_FIELD, f"must be in [0, 1), got {fraction}")
    if fraction == 0.0:
        return None
    size = int(round(fraction * num_test))
    require(1 <= size < num_test, VALIDATION_FIELD, f"{fraction} of {num_test} test samples leaves an empty validation or test set")
    return np.sort(_rng(seed, _VALIDATION).permutation(num_test)[:size]).astype(np.int64)


def _proportional_eval(
    counts: np.ndarray, test_labels: np.ndarray, size: int, num_classes: int, rng: np.random.Generator, exclude: np.ndarray | None = None,
    only: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Per client, test indices whose class mix follows ``counts[i]`` (rows: weights per class), never from ``exclude``
    (and only from ``only`` when given)."""
    allowed = np.ones(len(test_labels), dtype=bool)
    if only is not None:
        allowed[:] = False
        allowed[only] = True
    if exclude is not None:
        allowed[exclude] = False
    pools = [np.flatnonzero((test_labels == c) & allowed) for c in range(num_classes)]
    available = np.array([len(p) for p in pools], dtype=np.int64)
    out = []
    for row in counts:
        if row.sum() <= 0:
            out.append(np.zeros(0, dtype=np.int64))
            continue
        take = allocate_counts(size, row, available, spill=False)
        parts = [rng.choice(pools[c], size=int(take[c]), replace=False) for c in range(num_classes) if take[c] > 0]
        out.append(np.sort(np.concatenate(parts)).astype(np.int64) if parts else np.zeros(0, dtype=np.int64))  # the test set lacks all its classes
    return out


def build_federated_data(
    dataset: ArrayDataset,
    *,
    num_clients: int,
    partitioner: str,
    partition_options: Mapping[str, Any] | None,
    seed: int,
    client_eval: str = "proportional",
    client_eval_size: int = 100,
    public_size: int = 0,
    eval_proportions: Literal["train", "drawn"] = "train",
    validation: float = 0.0,
) -> FederatedData:
    """Split ``dataset`` over ``num_clients`` clients; see the module docstring."""
    n = len(dataset.y_train)
    if client_eval not in CLIENT_EVAL_MODES:
        raise choice_error(CLIENT_EVAL_FIELD, client_eval, CLIENT_EVAL_MODES)
    if eval_proportions not in EVAL_PROPORTIONS:
        raise choice_error(EVAL_PROPORTIONS_FIELD, eval_proportions, EVAL_PROPORTIONS)
    require(client_eval_size >= 1, CLIENT_EVAL_SIZE_FIELD, f"must be >= 1, got {client_eval_size}")
    require(n >= 1, "dataset", "has no training rows (its options split every row off to test): nothing to share out")  # before public_size's empty range [0, -1]
    require(0 <= public_size < n, PUBLIC_SIZE_FIELD, f"must be in [0, {n - 1}] (train set has {n} samples), got {public_size}")
    require(num_clients >= 1, NUM_CLIENTS_FIELD, f"must be >= 1, got {num_clients}")
    pool = max(public_size, dataset.public_rows)
    require(  # the two options together: the message names the other, which a smaller value of frees rows too
        num_clients <= n - pool,
        NUM_CLIENTS_FIELD,
        f"must be <= the {n - pool} training samples left after the public pool of {pool} rows, got {num_clients}"
        + (f" (or lower distillation.public_size to at most {n - num_clients})" if public_size > 0 and num_clients <= n - dataset.public_rows else ""),
    )
    require(seed >= 0, "seed", f"must be >= 0, got {seed}")
    held_out = validation_split(len(dataset.y_test), validation, seed)

    if dataset.public_rows:  # a public set passed from Python or a builder's ArrayDataset: its rows, and only those
        own = dataset.public_rows
        # "set it to": a builder's config cannot leave it unset (a [distillation] method asks for public_size before its
        # data exist), so "leave it unset" contradicted that line; Python data fill it in, and take the same value too
        require(public_size in (0, own), PUBLIC_SIZE_FIELD, f"is {public_size}; the public set that comes with the data has {own} samples: set it to {own}")
        public = np.arange(n - own, n, dtype=np.int64)
    else:
        public = np.sort(_rng(seed, _PUBLIC).permutation(n)[:public_size]).astype(np.int64)
    # public is sorted and distinct (an arange, or a sorted permutation prefix): assume_unique skips numpy 2.4's
    # hash-based unique over every training row (0.2 s at 260,000 rows); no public pool: all rows, no set operation
    rest = np.setdiff1d(np.arange(n), public, assume_unique=True) if len(public) else np.arange(n)
    sub = dataset
    if dataset.train_groups is not None and public_size > 0:
        position = np.full(n, -1, dtype=np.int64)
        position[rest] = np.arange(len(rest))
        groups = tuple(position[g][position[g] >= 0] for g in dataset.train_groups)
        sub = dataclasses.replace(dataset, train_groups=groups)
    part: Partition
    if partitioner == FROM_FILE:  # partition.from: the clients of an earlier run (its partition.json)
        read = read_partition(partition_options or {}, n, num_clients, public, labels=dataset.y_train.numpy())
        train = read.clients
        part = Partition([np.searchsorted(rest, ix) for ix in train], client_noise=read.noise)  # the writer's noise, as it applied it
    else:
        labels = dataset.y_train.numpy()[rest]
        part = partition(partitioner, labels, num_clients, _rng(seed, _PARTITION), partition_options, dataset=sub)
        train = [rest[ix] for ix in part.client_indices]

    evals: Sequence[np.ndarray]
    local_val: list[np.ndarray] | None = None
    if client_eval == "none":
        evals = ClientRows.empty(num_clients)
    elif client_eval == "natural":
        test_groups = dataset.test_groups
        if test_groups is None:
            raise ConfigError(
                CLIENT_EVAL_FIELD,
                f"'natural' needs a dataset with per-client test groups (e.g. synthetic); "
                f"{dataset.name!r} has none; allowed here: none, proportional",
            )
        evals = natural_groups(test_groups, num_clients, "client_split 'natural'")
        if held_out is not None:
            local_val = [np.intersect1d(e, held_out).astype(np.int64) for e in evals]
            evals = [np.setdiff1d(e, held_out).astype(np.int64) for e in evals]
    elif client_eval == "partition":
        if part.client_test_indices is None:
            raise ConfigError(CLIENT_EVAL_FIELD, f"'partition' needs a partitioner that splits the test set (flexchill_dirichlet, scarlet_dirichlet); {partitioner!r} does not")
        evals = part.client_test_indices
        if held_out is not None:  # the validation split stays out of every test metric
            local_val = [np.intersect1d(e, held_out).astype(np.int64) for e in evals]
            evals = [np.setdiff1d(e, held_out).astype(np.int64) for e in evals]
    else:
        y = dataset.y_train.numpy()
        weights = np.stack([np.bincount(y[ix], minlength=dataset.num_classes) for ix in train]).astype(np.float64)
        if eval_proportions == "drawn":
            if part.class_proportions is None:  # its realised mix is the train counts: "drawn" would silently mean "train"
                raise ConfigError(
                    EVAL_PROPORTIONS_FIELD,
                    f"'drawn' needs a partitioner that draws a class mix per client (dirichlet or dirichlet_balanced with scheme = 'client', "
                    f"quantity_skew with label_alpha, scarlet_dirichlet); {partitioner!r} with these options draws none; use 'train'",
                )
            weights = np.where(weights.sum(axis=1, keepdims=True) > 0, part.class_proportions, 0.0)
        evals = _proportional_eval(weights, dataset.y_test.numpy(), client_eval_size, dataset.num_classes, _rng(seed, _EVAL), held_out)
        if held_out is not None:
            local_val = _proportional_eval(weights, dataset.y_test.numpy(), client_eval_size, dataset.num_classes, _rng(seed, _LOCAL_VALIDATION), only=held_out)

    return FederatedData(dataset, train, evals, part.client_noise, public, seed, part.class_proportions, held_out, local_val, labels_digest(dataset.y_train.numpy()))
