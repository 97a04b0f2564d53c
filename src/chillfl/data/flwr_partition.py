"""``partition.name = "flwr"``: any flwr-datasets partitioner, by class name, with its own options.

::

    [partition]
    name = "flwr"
    partitioner = "DirichletPartitioner"
    options = { alpha = 0.3, min_partition_size = 5, self_balancing = true }

Needs the optional extra ``flwr-datasets`` (``pip install 'chillfl[flwr-datasets]'``;
it brings ``datasets``, not the Flower framework).

How: the train labels become an in-memory ``datasets.Dataset`` with columns
``label`` and ``_index`` (the sample's position); the partitioner is built with
``num_partitions = federation.num_clients`` (or checked against it, for those
that take ``partition_sizes``), ``partition_by = "label"`` and, when it takes
a ``seed`` and none is given, a seed drawn from chillfl's partition stream (so
the split follows the run seed); client i gets ``load_partition(i)["_index"]``.

Choices
-------
* The options are checked against the partitioner's constructor signature:
  an unknown or missing option is a one-line ConfigError naming
  ``partition.options.<key>`` and the allowed keys. A value is checked against
  the constructor's annotation where that is a plain type (``bool``, ``int``,
  ``float``, ``str``, a ``Literal``, a list of them: :func:`chillfl.options.coerce`),
  so ``self_balancing = "yes"`` is refused rather than read as true. The
  partitioner checks the rest itself; its error becomes a ConfigError naming
  ``partition.options.<key>`` when its message names exactly one of the
  options (``alpha``; the defaults written in, below, count), else
  ``partition.options``.
* The options are completed with the partitioner's own keyword defaults that
  chillfl passes through (:func:`with_defaults`, when the options are parsed),
  so the resolved config (``--dry-run``, a run's ``config.toml``) writes them
  as it writes every other part's: ``DirichletPartitioner`` gets
  ``min_partition_size = 10``, ``self_balancing = false``, ``shuffle = true``,
  and a rerun of ``config.toml`` under a flwr-datasets release whose defaults
  changed is still the same run. Not written: ``num_partitions`` and
  ``partition_by`` (chillfl's), ``seed`` (drawn from the partition stream when
  unset, so the class's own default is never used), and a default that TOML
  cannot hold as it is or that the annotation check would change (a tuple, an
  ``int`` default of a ``float`` option): the class applies those itself, as
  before. A ``None`` default stays unset (the file omits it, as every part's).
  Resolving such a table needs the extra, as the run does, and names an
  unknown partitioner on ``partition.partitioner`` there (``--dry-run``).
* The library's ``UserWarning`` s (``DirichletPartitioner`` warns once per
  failed draw) become log warnings naming ``partition.options``, one per
  distinct message with a count, instead of Python's ``file:line`` warnings.
  A deprecation (``DeprecationWarning``, ``FutureWarning``) raised below
  flwr-datasets (pyarrow's ``null_placement``, met inside ``datasets``' sort
  under ``ShardPartitioner``) concerns the libraries' code, not the user's
  options: it is logged at debug level only. flwr-datasets' own deprecations
  (of a partitioner's arguments, which the options are) still name
  ``partition.options``.
* ``NaturalIdPartitioner`` and ``GroupedNaturalIdPartitioner`` partition by
  the dataset's own client ids (``flwr_femnist``'s writers,
  ``flwr_shakespeare``'s speakers, ``synthetic``'s clients): chillfl supplies
  ``partition_by`` as a column holding each train row's natural client number
  (the datasets number clients in sorted id order, the order the partitioner
  uses), so ``NaturalIdPartitioner`` gives exactly ``partition.name =
  "natural"``'s clients. A dataset without natural clients is refused, and so
  is a ``partition_by`` option (it is always the natural id).
* The vertical (column) partitioners and ``IdToSizeFncPartitioner`` (a Python
  callable, not a config value) are refused.
* A partitioner without a ``seed`` parameter (``IidPartitioner``,
  ``SizePartitioner``, ``LinearPartitioner``...) cuts contiguous row ranges:
  it sees the rows in an order drawn from chillfl's partition stream, as
  ``FederatedDataset`` (``shuffle=True``) shuffles before partitioning; on a
  label-sorted train set it would otherwise give each client one class, the
  same for every seed. Partitioners with a ``seed``, and the natural-id ones
  (which split by id, not by position), see the dataset's order.
* ``NaturalIdPartitioner`` draws its own tqdm bar ("Generating
  partition_id_to_indices"), which ignored ``-q``. It is shown only when
  chillfl's info lines are (this module's logger enabled for INFO; ``-q``
  turns them off): otherwise the ``tqdm`` of the partitioner's modules is
  swapped for a disabled one while it splits, and restored after
  (:func:`quiet_bars`), so nothing else in the process changes.

Checked against Flower Datasets 0.6.1's constructor signatures (every default
is a bool, str, int or None, each passed back unchanged) and
``partitioner/dirichlet_partitioner.py``
(``DirichletPartitioner``: ``num_partitions``, ``partition_by``, ``alpha``,
``min_partition_size``, ``self_balancing``, ``seed``; its warning per failed
draw and ValueError after 10) and ``FederatedDataset`` (shuffles before a
seedless partitioner cuts rows), 2026-12-02.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chillfl.errors import ConfigError, choice_error
from chillfl.extras import need
from chillfl.numeric import is_finite_real
from chillfl.options import coerce, require, short_repr

EXCLUDED = ("Partitioner", "IdToSizeFncPartitioner", "VerticalEvenPartitioner", "VerticalSizePartitioner")
SUPPLIED = ("num_partitions", "partition_by")
BY_NATURAL_ID = ("NaturalIdPartitioner", "GroupedNaturalIdPartitioner")
"""Partitioners that split by a client id column: chillfl gives them the dataset's natural client numbers."""
NATURAL_ID = "natural_id"
BAR = "tqdm"
"""The name under which a flwr-datasets partitioner module holds the progress bar it draws."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FlwrOptions:
    """``partitioner``: a flwr-datasets partitioner class name; ``options``: its constructor's keyword arguments."""

    partitioner: str = "DirichletPartitioner"
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """``options`` completed with the partitioner's own defaults (:func:`with_defaults`), so that the resolved config
        (``--dry-run``, a run's ``config.toml``) writes them, as it writes every other part's: a rerun under a newer
        flwr-datasets whose defaults changed is still the same run."""
        object.__setattr__(self, "options", with_defaults(self.partitioner, self.options))

    def class_defaults(self) -> dict[str, Any]:
        """The keyword defaults of the partitioner class that :func:`with_defaults` writes in, whatever is set: what a run
        whose config.toml predates their writing (2026-12-06) took from the class unwritten (a resume's no news,
        :class:`chillfl.runner.ClassDefaults`)."""
        return with_defaults(self.partitioner, {})

    def validate(self, section: str) -> None:
        require(bool(self.partitioner), f"{section}.partitioner", "is required (e.g. DirichletPartitioner)")
        classes = partitioner_classes(_module(section))
        if self.partitioner not in classes:
            raise choice_error(f"{section}.partitioner", self.partitioner, sorted(classes))


def _module(section: str) -> Any:
    return need("flwr_datasets.partitioner", "flwr-datasets", "flwr-datasets partitioners (partition.name = 'flwr')")


def partitioner_classes(module: Any) -> dict[str, type]:
    """The row partitioners flwr-datasets offers, by class name."""
    base = module.Partitioner
    return {n: c for n, c in vars(module).items() if inspect.isclass(c) and issubclass(c, base) and n not in EXCLUDED}


def with_defaults(partitioner: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with each keyword default of the partitioner's constructor that chillfl passes through added, in the
    signature's order (the given options, then any key it does not take: the build refuses that one by name).

    Left out: what chillfl supplies (``num_partitions``, ``partition_by``; ``seed``, drawn from the run's partition
    stream when unset, so the class's own default is never used), and a default that a TOML file cannot hold as it is
    or that the option's annotation would change (passed back, it would no longer be the class's own default): the
    class applies those itself, as before. ``None`` is kept, as every part's unset option is (the file omits it and
    reading it back leaves it unset). An unknown partitioner gets nothing added (:meth:`FlwrOptions.validate` names it).
    """
    cls = partitioner_classes(_module("partition")).get(partitioner)
    if cls is None:
        return dict(options)
    params = inspect.signature(cls).parameters
    filled = {name: options[name] if name in options else p.default for name, p in params.items()
              if name in options or (name not in (*SUPPLIED, "seed") and _passed_back(p))}
    return {**filled, **{key: value for key, value in options.items() if key not in filled}}


def _passed_back(param: inspect.Parameter) -> bool:
    """Whether ``param``'s default, written to config.toml and read back, reaches the constructor as the very value."""
    default = param.default
    if default is inspect.Parameter.empty or not _toml_value(default):
        return False
    if param.annotation is inspect.Parameter.empty:
        return True
    try:
        held = coerce(default, param.annotation, param.name)
    except ConfigError:
        return False
    return type(held) is type(default) and held == default


def _toml_value(value: Any) -> bool:
    """A value TOML writes and reads back as itself: None (omitted: unset), a bool, a str, a finite number, a list of them."""
    if isinstance(value, list):
        return all(item is not None and _toml_value(item) for item in value)
    return value is None or isinstance(value, (bool, str)) or is_finite_real(value)


def build_partitioner(opts: FlwrOptions, k: int, rng: np.random.Generator, section: str) -> Any:
    """The configured partitioner, its options checked against its signature."""
    classes = partitioner_classes(_module(section))
    if opts.partitioner not in classes:
        raise choice_error(f"{section}.partitioner", opts.partitioner, sorted(classes))
    cls = classes[opts.partitioner]
    params = {n: p for n, p in inspect.signature(cls).parameters.items()}
    kwargs = dict(opts.options)
    for key in kwargs:
        if key not in params:
            allowed = [n for n in params if n not in SUPPLIED]
            takes = f"allowed: {', '.join(allowed)}" if allowed else f"{opts.partitioner} takes no options (num_partitions is federation.num_clients)"
            raise ConfigError(f"{section}.options.{key}", f"unknown option of {opts.partitioner}; {takes}")
        if key not in SUPPLIED and params[key].annotation is not inspect.Parameter.empty:  # the annotation's plain types; the rest the partitioner checks
            kwargs[key] = coerce(kwargs[key], params[key].annotation, f"{section}.options.{key}")
    if "num_partitions" in kwargs:
        raise ConfigError(f"{section}.options.num_partitions", "is federation.num_clients; leave it out")
    by_id = opts.partitioner in BY_NATURAL_ID
    if by_id and "partition_by" in kwargs:
        raise ConfigError(f"{section}.options.partition_by", f"{opts.partitioner} splits by the dataset's natural client id; leave it out")
    if kwargs.get("partition_by", "label") != "label":
        raise ConfigError(f"{section}.options.partition_by", f"chillfl partitions by the class label; got {short_repr(kwargs['partition_by'])}")
    if "num_partitions" in params:
        kwargs["num_partitions"] = k
    if "partition_by" in params:
        kwargs["partition_by"] = NATURAL_ID if by_id else "label"
    if "seed" in params and "seed" not in kwargs:
        kwargs["seed"] = int(rng.integers(2**31))
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in kwargs]
    if missing:
        raise ConfigError(f"{section}.options.{missing[0]}", f"is required by {opts.partitioner}")
    try:
        with library_warnings(opts.partitioner, section):
            return cls(**kwargs)
    except Exception as exc:  # noqa: BLE001 - the partitioner's own validation of user values
        raise library_error(exc, opts, section) from None


def library_error(exc: Exception, opts: FlwrOptions, section: str) -> ConfigError:
    """The partitioner's own error as one line, on the one given option its message names (else on ``options``)."""
    text = " ".join(str(exc).split())
    named = [k for k in opts.options if re.search(rf"(?<![A-Za-z0-9_]){re.escape(k)}(?![A-Za-z0-9_])", text, re.IGNORECASE)]
    return ConfigError(f"{section}.options.{named[0]}" if len(named) == 1 else f"{section}.options", f"{opts.partitioner}: {text}")


DEPRECATIONS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
"""Warnings that a library's code calls a deprecated API: the code's concern, not the user's, unless it is flwr-datasets'."""


def _flwr_datasets_file(filename: str) -> bool:
    """Whether a warning was raised in flwr-datasets' own code (where the partitioner's arguments are read)."""
    return "flwr_datasets" in re.split(r"[\\/]", filename)


@contextmanager
def library_warnings(partitioner: str, section: str) -> Iterator[None]:
    """The library's warnings while it builds or splits, logged once per distinct message (the values in it aside)
    with a count; none when it fails (its error is then the one line the user gets)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    counts: dict[str, tuple[str, int]] = {}
    for w in caught:
        text = " ".join(str(w.message).split())
        if issubclass(w.category, DEPRECATIONS) and not _flwr_datasets_file(w.filename):
            log.debug("%s: %s from %s (a library's, not the options'): %s", partitioner, w.category.__name__, w.filename, text)
            continue
        key = " ".join(w for w in text.split() if not re.search(r"[\d()\[\]]", w))  # its words, the values in it aside
        first, n = counts.get(key, (text, 0))
        counts[key] = (first, n + 1)
    for text, n in counts.values():
        log.warning("%s.options: %s: %s%s", section, partitioner, text, f" ({n} times)" if n > 1 else "")


def natural_ids(groups: Sequence[Any] | None, n: int, partitioner: str, section: str) -> np.ndarray:
    """Each train row's natural client number (its group's position) for the natural-id partitioners."""
    if groups is None:
        raise ConfigError(f"{section}.partitioner", f"{partitioner} needs a dataset with natural clients (flwr_femnist, flwr_shakespeare, synthetic); this one has none")
    ids = np.full(n, -1, dtype=np.int64)
    for g, rows in enumerate(groups):
        ids[np.asarray(rows, dtype=np.int64)] = g
    if (ids < 0).any():
        raise ConfigError(f"{section}.partitioner", f"{partitioner}: {int((ids < 0).sum())} train rows belong to no natural client")
    return ids


@contextmanager
def quiet_bars(partitioner: Any) -> Iterator[None]:
    """While it runs, the progress bars the partitioner's own modules draw are off, unless chillfl's info lines are on.

    flwr-datasets' ``NaturalIdPartitioner`` calls its module's ``tqdm`` directly (no option turns it off), so each
    module of the partitioner's class hierarchy that holds one gets a disabled ``tqdm`` here and its own back after.
    """
    if log.isEnabledFor(logging.INFO):
        yield
        return
    modules = {m for m in (sys.modules.get(c.__module__) for c in type(partitioner).__mro__) if m is not None and BAR in vars(m)}
    saved = {m: vars(m)[BAR] for m in modules}
    try:
        for module, bar in saved.items():
            vars(module)[BAR] = functools.partial(bar, disable=True)
        yield
    finally:
        for module, bar in saved.items():
            vars(module)[BAR] = bar


def flwr_split(
    labels: np.ndarray, k: int, rng: np.random.Generator, opts: FlwrOptions, section: str, groups: Sequence[Any] | None = None
) -> list[np.ndarray]:
    """Client i's train positions: ``load_partition(i)`` of the partitioner over the labels (and natural ids)."""
    partitioner = build_partitioner(opts, k, rng, section)
    import datasets

    order = np.arange(len(labels), dtype=np.int64)
    if "seed" not in inspect.signature(type(partitioner)).parameters and opts.partitioner not in BY_NATURAL_ID:
        # it draws nothing itself (IidPartitioner, SizePartitioner...: contiguous row ranges), so on a label-sorted
        # train set (Tiny-ImageNet, Caltech-256) "IID" would be one class a client, whatever the seed; flwr's
        # FederatedDataset shuffles before partitioning, and so does this, from chillfl's partition stream
        order = rng.permutation(len(labels)).astype(np.int64)
    columns = {"label": labels.astype(np.int64)[order], "_index": order}
    if opts.partitioner in BY_NATURAL_ID:
        columns[NATURAL_ID] = natural_ids(groups, len(labels), opts.partitioner, section)
    partitioner.dataset = datasets.Dataset.from_dict(columns)
    try:
        with quiet_bars(partitioner), library_warnings(opts.partitioner, section):
            count = partitioner.num_partitions
            if count != k:
                raise ConfigError("federation.num_clients", f"must equal the {count} partitions of {opts.partitioner}, got {k}")
            return [np.asarray(partitioner.load_partition(i)["_index"], dtype=np.int64) for i in range(k)]
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. DirichletPartitioner cannot meet min_partition_size
        raise library_error(exc, opts, section) from None
