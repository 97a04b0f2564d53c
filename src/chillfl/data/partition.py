"""Partitioners: split a labelled train set over federated clients.

Each partitioner declares a frozen options dataclass (parsed with
:func:`chillfl.options.parse_options`) and a split function. All randomness
comes from the ``np.random.Generator`` passed in, so a partition is a pure
function of (labels, num_clients, options, generator state).

Partitioners
------------
``iid``                 equal-size random split.
``dirichlet``           label skew, per class as the FedMA paper (Wang et al. 2020) writes it: each
                        class's samples are split over clients with proportions ~ Dir(alpha * 1),
                        without the cap of its code; ``scheme="client"``: per client, floor(|D_k| p_k)
                        (FLex&Chill App.; leaves rows unused).
``dirichlet_balanced``  FedChill Sec. 4.2.2: label skew with balanced client sizes,
                        then each client keeps a fraction ``frac``; its defaults are the split of
                        FedMA's, FedNova's and NIID-Bench's code ("noniid-labeldir").
``shards``              pathological split of McMahan et al. 2017 / FLex&Chill Sec. 4:
                        sort by label, cut into shards, give each client a few shards.
``quantity_skew``       NIID-Bench (Li et al. 2022) quantity skew / PA3Fed "Experimental Setup":
                        client sizes ~ Dir(h), optionally with label skew ``label_alpha``.
``feature_noise``       FedChill Sec. 5.2.3 / Table 6 (NIID-Bench's noise-based feature skew):
                        IID labels, per-client Gaussian input noise, sigma over [sigma_min, sigma_max].
``natural``             the dataset's own per-client split (``synthetic``).
``flexchill_dirichlet`` the FLex&Chill authors' code: per-class Dir(alpha) over clients,
                        ``min_samples`` (10) per class and client, legacy
                        ``np.random.RandomState(seed)`` draw order; also splits the test set.
``scarlet_dirichlet``   the SCARLET authors' code (FedLab's client-inner Dirichlet):
                        p_i ~ Dir(alpha) over classes, N // K samples per client drawn one
                        at a time, ``np.random.default_rng(seed)``; also splits the test set.

Choices
-------
* Two Dirichlet label skews circulate under one name. Per class (Wang et al.
  2020, FedMA and FedNova; NIID-Bench's "noniid-labeldir"): for each class,
  q ~ Dir(alpha * 1) over the K clients, class sizes unbalanced across
  clients. Per client (Hsu et al. 2019, whom SCARLET and FLex&Chill cite):
  each client's class mix q_i ~ Dir(alpha_Hsu * p), p the class prior, over C
  classes; for balanced classes Dir(alpha_Hsu * p) = Dir((alpha_Hsu / C) * 1),
  so Hsu's alpha is chillfl's per-client alpha times C (Hsu's alpha = 1 on
  CIFAR-10 is ``alpha = 0.1`` here). ``dirichlet_balanced`` with
  ``scheme="client"`` (equal sizes), ``scarlet_dirichlet`` (FedLab's
  client-inner split, Dir(alpha * 1) per client) and ``dirichlet`` with
  ``scheme="client"`` are per client; ``dirichlet``, ``dirichlet_balanced``
  (default) and ``flexchill_dirichlet`` (the authors' code) are per class.
* ``dirichlet`` (``scheme="class"``, default) is the per-class split as the
  papers write it, without the cap of FedMA's, FedNova's and NIID-Bench's code
  (``p * (len(idx_j) < N / n)``: a client at N / K takes no share of later
  classes); with the cap, and their redraw until every client holds >= 10
  samples, their split is ``dirichlet_balanced`` with its defaults (in
  distribution: the draws come in another order).
  ``min_size`` is 0 by default (one draw); ``min_size = 10`` (the PA3Fed
  configs set it) adds their redraw but not their cap.
  ``scheme="client"`` is the
  FLex&Chill appendix reading: p^(i) ~ Dir(alpha) per client and
  n_k^(i) = floor(|D_k| p_k^(i)); when a class is over-subscribed
  (sum_i p_k^(i) > 1) its column is scaled by 1 / sum_i p_k^(i) so that no
  sample is reused. The rows left over by the floors stay unused, and they
  are many: client i takes about a share p_k^(i) of class k, and p^(i)
  spreads over the C classes, so the clients together hold about K / C of
  the data when K < C (on digits, 10 classes, for alpha 0.05-10: 1 client
  10%, 5 clients 43-48%, 10 clients 69-93%, rising with alpha), and never
  all of it: a class nobody over-subscribes keeps its unclaimed share, and
  each floor loses up to one row per client and class (50 clients on
  digits: 95-83% for alpha 0.05-10, falling with alpha; 73% at alpha =
  1000, 97.5% at 0.01). Shares are the mean over seeds 0-9 of the split a run
  makes (its partition stream), measured 2026-12-07. A run says so in a
  note when the clients hold under 90% of the training rows.
* ``dirichlet_balanced``: FedChill's text says "for each class, sample
  proportions from Dir(alpha*1) ... adjusted to ensure balanced client
  datasets". Default ``scheme="class"``, the partition of the work FedChill
  cites for it (Chen et al. 2023, FedHKD), which is the code of FedMA
  (``hetero-dir``), FedNova and NIID-Bench (``noniid-labeldir``): each
  class is split over the clients by q ~ Dir(alpha), except that a client
  already holding >= N / K samples gets no share of the next classes, and the
  whole draw is repeated until every client holds >= ``min_size`` (10, as that
  code) samples. ``scheme="client"`` is chillfl's earlier reading of "balanced
  client datasets" (sizes equal to within one): client i draws p_i ~ Dir(alpha)
  and receives floor/ceil(N / K) samples with those proportions; when a class
  runs out, the missing samples go to the client's other classes in proportion
  to p_i (then to any class still available). Clients are filled in a random
  order so that no client id is systematically last. Not reproduced from the
  cited code: its ``frac`` subsample (int(frac n) draws with replacement).
  ``frac`` keeps round(frac * n_i) samples of each client, stratified by class.
* ``quantity_skew``: PA3Fed says client data proportions are ~ Dir(h) and that
  "both the number of data points and class distributions are unbalanced".
  ``min_rule="floor"`` (default): sizes are min_size + Dir(h)-proportional
  shares of the rest. ``min_rule="redraw"``: NIID-Bench's "iid-diff-quantity"
  (Li et al. 2022): p ~ Dir(h) over clients, redrawn (at most
  ``max_retries`` times) until every client holds >= min_size (NIID-Bench:
  10), the shuffled indices cut at floor(N * cumsum(p)). Chillfl checks the
  cut sizes, NIID-Bench min_i p_i N (a client can end one short there).
  Labels are IID by default and follow p_i ~ Dir(label_alpha) when ``label_alpha`` is set.
  The per-class scheme of Wang et al. 2020 (which skews both at once) is
  ``dirichlet`` with ``alpha = h``.
* ``feature_noise``: sigmas are evenly spaced (``spacing="linear"``, client 0
  gets sigma_min) or drawn uniformly (``spacing="random"``). NIID-Bench's
  levels, sigma * i / (N - 1) for party i = 0..N-1 in its code (its paper
  writes sigma * i / N), are ``sigma_min = 0``, ``sigma_max = sigma``. The noise
  is added to the normalised inputs the model sees and is fixed per client
  (drawn from a per-client seed), where NIID-Bench's transform draws it anew
  at every access (see ``chillfl.data.federated``).
* ``flexchill_dirichlet`` / ``scarlet_dirichlet``: ``seed`` set reproduces the
  authors' split for that seed (their scripts seed the stream once, before the
  split); unset, the stream's seed is drawn from chillfl's partition stream
  (run seed). Indices are positions in the train labels handed to the
  partitioner: with ``distillation.public_size = 0`` exactly the dataset's
  order, as in the authors' code. ``flexchill_dirichlet`` refuses a class with
  fewer than ``min_samples * num_clients`` training samples, for which the
  authors' slicing would give clients overlapping samples. Their per-client
  test splits are used with ``eval.client_split = "partition"``; a test class
  too small for the per-client test minimum is not refused (the split is used
  only with that setting): a client whose test share comes out negative gets
  none of it, where the authors' slice moved back over another client's rows.
  A NaN Dirichlet row (tiny ``alpha``, where their code raises) is one-hot.
* ``shards``: shards are cut from the label-sorted order as in McMahan et al.,
  so a shard can straddle two classes when class sizes are not multiples of
  ``shard_size``; samples beyond ``num_shards * shard_size`` are unused.
  Within a class the order is a random permutation (FedLab's
  ``shards_partition`` keeps the dataset's order there); the shards a client
  gets are the same in distribution.
* The per-class splits with a cap (``dirichlet_balanced``): when the
  Dirichlet mass of a class lands only on clients already at N / K (tiny
  alpha, where numpy's draw has exact zeros), that class is drawn again
  from Dir(alpha * 1) over the clients below the cap, one-hot when that draw
  is degenerate too: the alpha -> 0 limit, so a split grows more skewed as
  alpha falls. The reference code divides 0 by 0 there (NaN proportions);
  an equal split over the clients below the cap, chillfl's earlier
  fallback, made alpha = 1e-6 splits less skewed than alpha = 1e-3. A split
  that never reaches this branch, or reaches it with one client below the
  cap (which takes the class whole, without a draw), draws exactly as before.

Checked against, 2026-12-02: Hsu et al. 2019 (q ~ Dir(alpha p) per
client); McMahan et al. 2017 Sec. 3 (label-sorted shards of 300, 2 per
client) and FedLab ``fedlab/utils/dataset/functional.py``
(``shards_partition``, ``hetero_dir_partition``,
``client_inner_dirichlet_partition``); PFLlib
``dataset/utils/dataset_utils.py`` (``separate_data``, ``"dir"``: per-class
Dir(alpha) over clients, no share for a client with ``len >= N / K``,
redrawn until every client has ``least_samples``, the NIID-Bench split); Flower Datasets
``partitioner/dirichlet_partitioner.py`` (the same per-class draw,
``self_balancing`` zeroing clients *above* N / K, ``min_partition_size``
redrawn at most 10 times: available as ``partition.name = "flwr"``);
temperaturescaling/temperature-scaling ``DataManager/dirichlet_spliter.py``
(``flexchill_dirichlet``, draw for draw); kitsuyaazuma/SCARLET
``dataset/functional.py`` (``client_inner_dirichlet_partition_faster``:
a client drawn, then a class from its cumulative prior, an exhausted class
replaced by a uniformly drawn non-empty one); and the partitions the papers
state (papers/flexchill.txt Sec. 4 and App. Table 3: shards of 200, 5 per
client, 50 clients, Dirichlet alpha = 0.5 for CKA; papers/fedchill.txt
Sec. 4.2.2; papers/pa3fed.txt "Experimental Setup", h in {0.1, 0.2, 0.3};
papers/scarlet.txt Sec. IV-A, Table II) against the bundled experiments.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np

from chillfl.data.flwr_partition import FlwrOptions, flwr_split
from chillfl.errors import ConfigError
from chillfl.options import Chosen, Scale, parse_options, require, short_repr
from chillfl.plugins import building, check_hooks, look_up, plugin_names

if TYPE_CHECKING:
    from chillfl.data.datasets import ArrayDataset

log = logging.getLogger(__name__)

NUM_CLIENTS_FIELD = "federation.num_clients"


@dataclass
class Partition:
    """Per-client indices into the train set (sorted, disjoint) plus partitioner extras."""

    client_indices: list[np.ndarray]
    client_noise: list[float] | None = None
    class_proportions: np.ndarray | None = None
    client_test_indices: list[np.ndarray] | None = None
    """The partitioner's own per-client test split (indices into the test set), for ``eval.client_split = "partition"``."""

    @property
    def sizes(self) -> np.ndarray:
        return np.array([len(ix) for ix in self.client_indices], dtype=np.int64)


# ---------------------------------------------------------------- helpers


def proportional_counts(weights: np.ndarray, total: int) -> np.ndarray:
    """Integers proportional to ``weights`` that sum exactly to ``total``.

    Largest-remainder (Hamilton) rounding: floor every share, then give the
    leftover units to the largest fractional parts (ties: lowest index).
    """
    w = np.asarray(weights, dtype=np.float64)
    counts = np.zeros(len(w), dtype=np.int64)
    if total <= 0:
        return counts
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"weights must be non-negative with a positive sum, got {w}")
    exact = w / w.sum() * total
    counts = np.floor(exact).astype(np.int64)
    left = int(total - counts.sum())
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[:left]] += 1
    return counts


def allocate_counts(total: int, weights: np.ndarray, available: np.ndarray, *, spill: bool) -> np.ndarray:
    """Per-class counts summing to ``total`` (or less), following ``weights`` but never above ``available``.

    When a class runs out, its missing share goes to the classes with positive
    weight that still have samples, in proportion to their weights. With
    ``spill=True`` any remainder then goes to the other available classes (in
    proportion to what they have left); with ``spill=False`` the result may sum
    to less than ``total``.
    """
    w = np.asarray(weights, dtype=np.float64)
    avail = np.asarray(available, dtype=np.int64)
    take = np.zeros(len(w), dtype=np.int64)
    need = int(total)
    while need > 0:
        left = avail - take
        share = np.where(left > 0, w, 0.0)
        if share.sum() <= 0:
            if not spill or left.sum() <= 0:
                break
            share = left.astype(np.float64)
        got = np.minimum(proportional_counts(share, need), left)
        if not got.any():  # every pass places at least one sample (a class with share > 0 has some left): else a bug would loop forever
            raise RuntimeError(f"allocate_counts placed nothing of the {need} samples still needed (weights {w.tolist()}, left {left.tolist()})")
        take += got
        need -= int(got.sum())
    return take


def split_by_proportions(indices: np.ndarray, proportions: np.ndarray) -> list[np.ndarray]:
    """Cut ``indices`` into consecutive chunks of sizes floor-cumulative(p * n).

    Chunk k ends at floor(n * (p_1 + ... + p_k)), the last at n, so every index
    is used exactly once.
    """
    cuts = (np.cumsum(proportions) * len(indices)).astype(np.int64)[:-1]
    return np.split(indices, np.clip(cuts, 0, len(indices)))


def dirichlet(rng: np.random.Generator, alpha: float, size: int) -> np.ndarray:
    """One draw from Dir(alpha * 1_size); degenerate draws (tiny alpha) become one-hot, the alpha -> 0 limit."""
    p = rng.dirichlet(np.full(size, alpha))
    if not np.all(np.isfinite(p)) or p.sum() <= 0:
        p = np.zeros(size)
        p[rng.integers(size)] = 1.0
    return p


def _class_pools(labels: np.ndarray, num_classes: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled indices of each class."""
    return [rng.permutation(np.flatnonzero(labels == c)) for c in range(num_classes)]


def _fill_clients(
    sizes: np.ndarray, proportions: np.ndarray, pools: list[np.ndarray], rng: np.random.Generator
) -> list[np.ndarray]:
    """Give client i ``sizes[i]`` samples following ``proportions[i]``, without reuse (clients in random order)."""
    available = np.array([len(p) for p in pools], dtype=np.int64)
    used = np.zeros_like(available)
    out: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * len(sizes)
    for i in rng.permutation(len(sizes)):
        counts = allocate_counts(int(sizes[i]), proportions[i], available - used, spill=True)
        out[i] = np.concatenate([pools[c][used[c] : used[c] + counts[c]] for c in range(len(pools))])
        used += counts
    return out


def _subsample(indices: np.ndarray, labels: np.ndarray, frac: float, num_classes: int) -> np.ndarray:
    """Keep round(frac * n) of ``indices`` (at least 1), stratified by class; ``indices`` are already shuffled."""
    if frac >= 1.0 or len(indices) == 0:
        return indices
    keep = max(1, int(np.floor(frac * len(indices) + 0.5)))
    per_class = np.bincount(labels[indices], minlength=num_classes)
    counts = proportional_counts(per_class, keep)
    return np.concatenate([indices[labels[indices] == c][: counts[c]] for c in range(num_classes)])


def _balanced_sizes(n: int, k: int) -> np.ndarray:
    """k sizes differing by at most one and summing to n."""
    return np.array([n // k + (1 if i < n % k else 0) for i in range(k)], dtype=np.int64)


# ---------------------------------------------------------------- partitioners


@dataclass(frozen=True)
class NoOptions:
    """A partitioner without options."""


def _iid(
    labels: np.ndarray, k: int, rng: np.random.Generator, opts: NoOptions, section: str, dataset: ArrayDataset | None
) -> Partition:
    return Partition(list(np.array_split(rng.permutation(len(labels)), k)))


MAX_RETRIES = 10_000
"""An impossible ``min_size`` must fail in seconds, not loop for days."""


MAX_CONCENTRATION = 1e100
"""The largest Dirichlet concentration taken (``alpha``, ``h``, ``label_alpha``). Why: near 1e308 the gamma draws' sum
overflows and numpy returns all zeros, which :func:`dirichlet` would take for a tiny alpha's underflow and make one-hot,
the most skewed split; far below this bound (alpha ~ 1e3) a split is already as good as IID."""


def _validate_concentration(value: float, field: str) -> None:
    """``value`` in (0, :data:`MAX_CONCENTRATION`] (NaN fails the first test), else one line on ``field``."""
    require(value > 0, field, f"must be > 0, got {value}")
    require(value <= MAX_CONCENTRATION, field,
            f"must be <= {MAX_CONCENTRATION:g} (a larger one overflows the Dirichlet draw; the split is near IID long before), got {value}")


@dataclass(frozen=True)
class DirichletOptions:
    """``alpha``: concentration in (0, 1e100]; ``min_size``: redraw (at most ``max_retries`` times) until every client has this many samples."""

    alpha: float = 0.5
    min_size: int = 0
    max_retries: int = 1000
    scheme: Literal["class", "client"] = "class"

    def validate(self, section: str) -> None:
        _validate_concentration(self.alpha, f"{section}.alpha")
        _validate_redraw(self.min_size, self.max_retries, section)


def _validate_redraw(min_size: int, max_retries: int, section: str) -> None:
    require(min_size >= 0, f"{section}.min_size", f"must be >= 0, got {min_size}")
    require(1 <= max_retries <= MAX_RETRIES, f"{section}.max_retries", f"must be in [1, {MAX_RETRIES}], got {max_retries}")


def _dirichlet_once(labels: np.ndarray, k: int, c: int, rng: np.random.Generator, opts: DirichletOptions) -> Partition:
    pools = _class_pools(labels, c, rng)
    parts: list[list[np.ndarray]] = [[] for _ in range(k)]
    props = None
    if opts.scheme == "class":
        for pool in pools:
            for i, chunk in enumerate(split_by_proportions(pool, dirichlet(rng, opts.alpha, k))):
                parts[i].append(chunk)
    else:
        props = np.stack([dirichlet(rng, opts.alpha, c) for _ in range(k)])
        scale = np.maximum(props.sum(axis=0), 1.0)
        for cls, pool in enumerate(pools):
            counts = np.floor(len(pool) * props[:, cls] / scale[cls]).astype(np.int64)
            ends = np.cumsum(counts)
            for i in range(k):
                parts[i].append(pool[ends[i] - counts[i] : ends[i]])
    return Partition([np.concatenate(p) for p in parts], class_proportions=props)


def _dirichlet(
    labels: np.ndarray, k: int, rng: np.random.Generator, opts: DirichletOptions, section: str, dataset: ArrayDataset | None
) -> Partition:
    c = _num_classes(labels, dataset)
    return _redraw(lambda: _dirichlet_once(labels, k, c, rng, opts), len(labels), k, opts.min_size, opts.max_retries, section)


def _dirichlet_leaves_unused(opts: DirichletOptions) -> str | None:
    """Per client, client i takes floor(|D_k| p_k^(i)) of class k: with p_k^(i) ~ 1/C on average, about 1/C of the
    rows per client (10% with one client of 10 classes, about half with 5): the rest is used by no client."""
    if opts.scheme != "client":
        return None
    return 'partition.scheme = "client" gives client i floor(|D_k| p_k) of class k and leaves the rest of each class unused'


UNUSED_NOTE_SHARE = 0.9
"""Under this share of the training rows in the clients' hands, a partitioner that declares ``leaves_unused`` is noted."""


REDRAW_NOTE_AFTER = 20
"""Failed draws after which :func:`_redraw` notes, once, that it is still drawing."""


def _redraw(
    draw: Callable[[], Partition], n: int, k: int, min_size: int, max_retries: int, section: str, concentration: str = "alpha",
    origin: str = "",
) -> Partition:
    """Draw until every client holds ``min_size`` samples (NIID-Bench's loop); an impossible bound is one line.

    ``concentration``: the option that spreads the sizes (``alpha``; ``h`` for ``quantity_skew``), named in that line;
    ``origin``: where ``min_size`` came from when the user did not choose it (:func:`_default_origin`), added to it."""
    require(min_size * k <= n, f"{section}.min_size", f"min_size * num_clients = {min_size * k} exceeds the {n} training samples{origin}")
    closest = 0
    for tries in range(max_retries):
        part = draw()
        smallest = int(part.sizes.min())
        if smallest >= min_size:
            return part
        closest = max(closest, smallest)
        if tries + 1 == REDRAW_NOTE_AFTER and max_retries > REDRAW_NOTE_AFTER:
            # no cheap test tells a bound that no draw will meet (at 10,000 clients each draw took 0.13 s, 2 min in all):
            # say what the loop is doing, once
            log.info("%s.min_size: %d draws left a client under %d samples (the closest: %d); drawing up to %d more"
                     " (lower min_size, raise %s, or lower max_retries to stop sooner)", section, tries + 1, min_size, closest,
                     max_retries - tries - 1, concentration)
    raise ConfigError(
        f"{section}.min_size",
        f"no draw gave every client >= {min_size} samples in {max_retries} tries; lower min_size or raise {concentration}{origin}",
    )


def _default_origin(opts: Any, name: str, section: str) -> str:
    """`` (10 is the default; set partition.min_size lower, 0 for none)`` when option ``name`` of ``opts`` holds its default, else "". Why: a
    bound the user never set, refused by its value alone, reads as their mistake and does not say how to lift it."""
    value = getattr(opts, name)
    field = next(f for f in dataclasses.fields(opts) if f.name == name)
    if value != field.default:
        return ""
    return f" ({value} is the default; set {section}.{name} lower, 0 for none)"


@dataclass(frozen=True)
class DirichletBalancedOptions:
    """``alpha``: concentration in (0, 1e100]; ``frac`` in (0, 1]: share of its samples each client keeps;
    ``min_size``: redraw (at most ``max_retries`` times) until every client holds this many, before ``frac``.

    The defaults are FedChill's partition (Sec. 4.2.2) as the code it cites writes it: per-class
    proportions, no share for a client already at N / K, redrawn until every client has >= 10 samples.
    """

    alpha: float = 0.5
    frac: float = 1.0
    scheme: Literal["class", "client"] = "class"
    min_size: int = 10
    max_retries: int = 1000

    def validate(self, section: str) -> None:
        _validate_concentration(self.alpha, f"{section}.alpha")
        require(0 < self.frac <= 1, f"{section}.frac", f"must be in (0, 1], got {self.frac}")
        _validate_redraw(self.min_size, self.max_retries, section)


def _dirichlet_balanced(
    labels: np.ndarray, k: int, rng: np.random.Generator, opts: DirichletBalancedOptions, section: str, dataset: ArrayDataset | None
) -> Partition:
    c = _num_classes(labels, dataset)
    n = len(labels)
    props = None
    if opts.scheme == "client":  # sizes are floor/ceil(N / K): the bound holds or fails before any draw
        require(
            opts.min_size <= n // k,
            f"{section}.min_size",
            f"{opts.min_size} exceeds the {n // k} samples of the smallest client ({n} training samples, {k} clients)"
            f"{_default_origin(opts, 'min_size', section)}",
        )
        props = np.stack([dirichlet(rng, opts.alpha, c) for _ in range(k)])
        clients = _fill_clients(_balanced_sizes(n, k), props, _class_pools(labels, c, rng), rng)
    else:
        clients = _redraw(lambda: _balanced_by_class(labels, k, c, rng, opts.alpha), n, k, opts.min_size, opts.max_retries, section,
                          origin=_default_origin(opts, "min_size", section)).client_indices
    clients = [_subsample(rng.permutation(ix), labels, opts.frac, c) for ix in clients]
    return Partition(clients, class_proportions=props)


def _dirichlet_balanced_kept(opts: DirichletBalancedOptions, n: int, k: int) -> int:
    """About ``frac`` of the ``n`` rows (each client keeps round(frac n_i) of its share)."""
    return min(n, max(k, round(opts.frac * n)))


def _balanced_by_class(labels: np.ndarray, k: int, c: int, rng: np.random.Generator, alpha: float) -> Partition:
    """Each class split over the clients by Dir(alpha); a client already at N / K gets no share of later classes."""
    n = len(labels)
    parts: list[list[np.ndarray]] = [[] for _ in range(k)]
    held = np.zeros(k, dtype=np.int64)
    for pool in _class_pools(labels, c, rng):
        below = held < n / k
        p = dirichlet(rng, alpha, k) * below  # drawn even for an empty class: the stream, and so every split, stays as it was
        if p.sum() > 0:
            p = p / p.sum()
        elif below.any():
            # the draw's mass fell only on clients at the cap: redraw over the clients below it (one-hot when degenerate),
            # the alpha -> 0 limit, where an equal split over them (the reference code's 0 / 0) would be the IID extreme;
            # one client below the cap takes it all without a draw, as it did before (Dir over one client is that point)
            open_clients = int(below.sum())
            p = np.zeros(k)
            p[below] = dirichlet(rng, alpha, open_clients) if open_clients > 1 else 1.0
        else:  # every client at N / K holds all n rows, so this class is empty (the data's num_classes names a class absent here)
            p = np.full(k, 1.0 / k)
        for i, chunk in enumerate(split_by_proportions(pool, p)):
            parts[i].append(chunk)
            held[i] += len(chunk)
    return Partition([np.concatenate(p) for p in parts])


@dataclass(frozen=True)
class ShardsOptions:
    """``shard_size``: samples per shard (None: N // (num_clients * shards_per_client))."""

    shard_size: int | None = None
    shards_per_client: int = 2

    def validate(self, section: str) -> None:
        require(self.shard_size is None or self.shard_size >= 1, f"{section}.shard_size", f"must be >= 1, got {self.shard_size}")
        require(self.shards_per_client >= 1, f"{section}.shards_per_client", f"must be >= 1, got {self.shards_per_client}")


def _shards(
    labels: np.ndarray, k: int, rng: np.random.Generator, opts: ShardsOptions, section: str, dataset: ArrayDataset | None
) -> Partition:
    n, spc = len(labels), opts.shards_per_client
    size = opts.shard_size if opts.shard_size is not None else n // (k * spc)
    require(
        size >= 1,
        f"{section}.shards_per_client",
        f"num_clients * shards_per_client = {k * spc} exceeds the {n} training samples",
    )
    num_shards = n // size
    if opts.shard_size is not None:  # a given shard size that leaves too few shards is its own fault
        require(
            num_shards >= k,
            f"{section}.shard_size",
            f"{size} samples per shard leave {num_shards} shards of the {n} training samples for {k} clients",
        )
    require(
        k * spc <= num_shards,
        f"{section}.shards_per_client",
        f"num_clients * shards_per_client = {k * spc} exceeds the {num_shards} shards of size {size} in {n} samples",
    )
    shuffled = rng.permutation(n)
    by_label = shuffled[np.argsort(labels[shuffled], kind="stable")]
    shards = by_label[: num_shards * size].reshape(num_shards, size)
    chosen = rng.permutation(num_shards)[: k * spc].reshape(k, spc)
    return Partition([shards[row].reshape(-1) for row in chosen])


def _shards_kept(opts: ShardsOptions, n: int, k: int) -> int:
    """The rows of the ``k * shards_per_client`` shards handed out (FLex&Chill's 36 x 5 x 200 = 36,000 of MNIST's 60,000)."""
    spc = opts.shards_per_client
    size = opts.shard_size if opts.shard_size is not None else n // (k * spc)
    return min(n, k * spc * size)


@dataclass(frozen=True)
class QuantitySkewOptions:
    """``h``: Dir(h) of client sizes; ``label_alpha``: optional label skew; ``min_size`` per client by ``min_rule`` (floor | redraw).

    ``"floor"``: min_size each, then Dir(h) shares of the rest; ``"redraw"``: NIID-Bench's rule, Dir(h) redrawn until all >= min_size.
    """

    h: float = 0.5
    label_alpha: float | None = None
    min_size: int = 1
    min_rule: Literal["floor", "redraw"] = "floor"
    max_retries: int = 1000

    def validate(self, section: str) -> None:
        _validate_concentration(self.h, f"{section}.h")
        if self.label_alpha is not None:
            _validate_concentration(self.label_alpha, f"{section}.label_alpha")
        _validate_redraw(self.min_size, self.max_retries, section)


def _cut_sizes(n: int, proportions: np.ndarray) -> Partition:
    """0..n-1 cut as :func:`split_by_proportions` cuts: only the sizes matter (NIID-Bench's quantity skew)."""
    return Partition(split_by_proportions(np.arange(n), proportions))


def _quantity_skew(
    labels: np.ndarray, k: int, rng: np.random.Generator, opts: QuantitySkewOptions, section: str, dataset: ArrayDataset | None
) -> Partition:
    n = len(labels)
    require(
        opts.min_size * k <= n,
        f"{section}.min_size",
        f"min_size * num_clients = {opts.min_size * k} exceeds the {n} training samples{_default_origin(opts, 'min_size', section)}",
    )
    if opts.min_rule == "floor":
        sizes = opts.min_size + proportional_counts(dirichlet(rng, opts.h, k), n - opts.min_size * k)
    else:  # NIID-Bench "iid-diff-quantity": cut the shuffled indices at floor(N * cumsum(p)), p ~ Dir(h), until all >= min_size
        sizes = _redraw(
            lambda: _cut_sizes(n, dirichlet(rng, opts.h, k)), n, k, opts.min_size, opts.max_retries, section, concentration="h",
            origin=_default_origin(opts, "min_size", section),
        ).sizes
    if opts.label_alpha is None:
        return Partition(np.split(rng.permutation(n), np.cumsum(sizes)[:-1]))
    c = _num_classes(labels, dataset)
    props = np.stack([dirichlet(rng, opts.label_alpha, c) for _ in range(k)])
    return Partition(_fill_clients(sizes, props, _class_pools(labels, c, rng), rng), class_proportions=props)


@dataclass(frozen=True)
class FeatureNoiseOptions:
    """Per-client Gaussian input noise std in [sigma_min, sigma_max] (FedChill Table 6 uses [0.1, 0.3])."""

    sigma_min: float = 0.1
    sigma_max: Scale = 0.3
    spacing: Literal["linear", "random"] = "linear"

    def validate(self, section: str) -> None:
        require(self.sigma_min >= 0, f"{section}.sigma_min", f"must be >= 0, got {self.sigma_min}")
        if self.sigma_max < self.sigma_min:  # blame the one the user moved: sigma_min = 0.5 under the default sigma_max named sigma_max
            if self.sigma_min != FeatureNoiseOptions.sigma_min and self.sigma_max == FeatureNoiseOptions.sigma_max:
                raise ConfigError(f"{section}.sigma_min", f"must be <= sigma_max={self.sigma_max}, got {self.sigma_min}")
            raise ConfigError(f"{section}.sigma_max", f"must be >= sigma_min={self.sigma_min}, got {self.sigma_max}")


def _feature_noise(
    labels: np.ndarray, k: int, rng: np.random.Generator, opts: FeatureNoiseOptions, section: str, dataset: ArrayDataset | None
) -> Partition:
    part = _iid(labels, k, rng, NoOptions(), section, dataset)
    if opts.spacing == "linear":
        sigmas = np.linspace(opts.sigma_min, opts.sigma_max, k)
    else:
        sigmas = rng.uniform(opts.sigma_min, opts.sigma_max, k)
    part.client_noise = [float(s) for s in sigmas]
    return part


def _feature_noise_adds(opts: FeatureNoiseOptions, k: int) -> bool:
    """Whether some client's sigma is not 0: linear spacing gives the first client sigma_min (the only one when k = 1)."""
    return opts.sigma_max > 0 and (k > 1 or opts.sigma_min > 0 or opts.spacing == "random")


def natural_groups(groups: Sequence[Any], k: int, use: str) -> list[np.ndarray]:
    """A dataset's own per-client index groups as int64 arrays; there must be exactly ``k`` of them."""
    require(len(groups) == k, NUM_CLIENTS_FIELD, f"must equal the dataset's {len(groups)} natural clients for {use}, got {k}")
    return [np.asarray(g, dtype=np.int64) for g in groups]


def _natural(
    labels: np.ndarray, k: int, rng: np.random.Generator, opts: NoOptions, section: str, dataset: ArrayDataset | None
) -> Partition:
    groups = None if dataset is None else dataset.train_groups
    if groups is None:
        name = "none" if dataset is None else dataset.name
        raise ConfigError(
            f"{section}.name",
            f"'natural' needs a dataset with its own client split (e.g. synthetic); dataset {name!r} has none",
        )
    out = natural_groups(groups, k, "partition 'natural'")
    flat = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
    if len(flat) and (flat.min() < 0 or flat.max() >= len(labels) or has_repeats(flat)):
        name = dataset.name if dataset is not None else "none"
        raise ConfigError(f"{section}.name", f"dataset {name!r} has overlapping or out-of-range train_groups")
    return Partition(out)


# ---------------------------------------------------------------- the authors' own partitioners (reference-exact)


def _reference_seed(seed: int | None, rng: np.random.Generator) -> int:
    """The authors' seed when given; else one drawn from chillfl's partition stream (run seed)."""
    return int(rng.integers(2**32)) if seed is None else seed


def _test_labels(dataset: ArrayDataset | None, section: str, name: str) -> np.ndarray:
    if dataset is None:
        raise ConfigError(f"{section}.name", f"{name!r} also splits the test set; it needs the dataset")
    return dataset.y_test.cpu().numpy().astype(np.int64)


@dataclass(frozen=True)
class FlexChillDirichletOptions:
    """FLex&Chill's code (DataManager/dirichlet_spliter.py): ``alpha``, ``min_samples`` per class and client, legacy ``seed``."""

    alpha: float = 0.5
    min_samples: int = 10
    seed: int | None = None

    def validate(self, section: str) -> None:
        _validate_concentration(self.alpha, f"{section}.alpha")
        require(self.min_samples >= 0, f"{section}.min_samples", f"must be >= 0, got {self.min_samples}")
        require(self.seed is None or 0 <= self.seed < 2**32, f"{section}.seed", f"must be in [0, 2**32) (np.random.RandomState), got {self.seed}")


def flexchill_split(
    train_labels: np.ndarray, test_labels: np.ndarray, k: int, num_classes: int, alpha: float, min_samples: int, seed: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The FLex&Chill authors' per-class Dirichlet split of train and test labels, draw for draw.

    With ``rs = np.random.RandomState(seed)`` (the stream ``np.random.seed(seed)``
    gives the legacy global functions):

    1. ``d = rs.dirichlet([alpha] * k, num_classes)``: [classes, clients];
    2. per class l (ascending): ``rs.shuffle`` its train indices, then its test indices;
       client c (ascending) takes the next ``m + int(d[l, c] * (n_l - m * k))`` train
       samples and the next ``m * N_test // N_train + int(d[l, c] * (t_l - m * k * N_test // N_train))``
       test samples (n_l, t_l: the class's train/test counts; N: split sizes).

    Where the authors' code fails, chillfl departs from it: a Dirichlet row that the legacy sampler returns as NaN
    (tiny ``alpha``) becomes one-hot at ``rs.randint(k)``, drawn right after ``d`` (their code raises), and a negative
    test share (a test class with fewer than ``m * k * N_test // N_train`` rows) takes no rows (their slice moves
    back and gives clients overlapping test rows). Everywhere else the split is theirs, draw for draw.
    """
    n_train, n_test = len(train_labels), len(test_labels)
    rs = np.random.RandomState(seed)
    d = rs.dirichlet([alpha] * k, num_classes)
    for row in np.flatnonzero(~np.all(np.isfinite(d), axis=1) | (d.sum(axis=1) <= 0)):
        # a tiny alpha underflows every gamma draw of a row and the legacy sampler returns NaN (the authors' code then
        # crashes): the row becomes one-hot, the alpha -> 0 limit, as dirichlet() does. Rows that drew fine are untouched.
        d[row] = 0.0
        d[row, rs.randint(k)] = 1.0
    train: list[list[np.ndarray]] = [[] for _ in range(k)]
    test: list[list[np.ndarray]] = [[] for _ in range(k)]
    min_test = min_samples * n_test // n_train
    for label in range(num_classes):
        tr = np.where(train_labels == label)[0]
        te = np.where(test_labels == label)[0]
        rs.shuffle(tr)
        rs.shuffle(te)
        rest_tr = len(tr) - min_samples * k
        rest_te = len(te) - (min_samples * k * n_test // n_train)
        at_tr = at_te = 0
        for c in range(k):
            take = min_samples + int(d[label, c] * rest_tr)
            train[c].append(tr[at_tr : at_tr + take])
            at_tr += take
            # a test class with fewer than m * k * N_test // N_train rows makes rest_te negative and can make take
            # negative: the authors' slice then moves back and hands rows to two clients; a client gets none there instead.
            take = max(0, min_test + int(d[label, c] * rest_te))
            test[c].append(te[at_te : at_te + take])
            at_te += take
    return [np.concatenate(p) for p in train], [np.concatenate(p) for p in test]


def _flexchill_dirichlet(
    labels: np.ndarray, k: int, rng: np.random.Generator, opts: FlexChillDirichletOptions, section: str, dataset: ArrayDataset | None
) -> Partition:
    test_labels = _test_labels(dataset, section, "flexchill_dirichlet")
    c = _num_classes(labels, dataset)
    counts = np.bincount(labels, minlength=c)
    short = int(np.argmin(counts))
    require(
        counts[short] >= opts.min_samples * k,
        f"{section}.min_samples",
        f"class {short} has {counts[short]} training samples, fewer than min_samples * num_clients = {opts.min_samples * k}"
        " (the authors' code would then give clients overlapping samples)",
    )
    seed = _reference_seed(opts.seed, rng)
    train, test = flexchill_split(labels, test_labels, k, c, opts.alpha, opts.min_samples, seed)
    return Partition(train, client_test_indices=test)


@dataclass(frozen=True)
class ScarletDirichletOptions:
    """SCARLET's code (FedLab's client-inner Dirichlet): ``alpha`` over classes per client, balanced sizes, ``seed``."""

    alpha: float = 0.5
    seed: int | None = None

    def validate(self, section: str) -> None:
        _validate_concentration(self.alpha, f"{section}.alpha")
        require(self.seed is None or self.seed >= 0, f"{section}.seed", f"must be >= 0, got {self.seed}")


def client_inner_dirichlet(
    labels: np.ndarray, k: int, num_classes: int, priors: np.ndarray, rng: np.random.Generator
) -> list[np.ndarray]:
    """Fill k clients of floor(N / k) samples one sample at a time, draw for draw as SCARLET / FedLab.

    Repeat until every client is full: ``c = rng.integers(k)`` (redrawn when c is
    full); ``l = argmax(rng.uniform() <= cumsum(priors[c]))``; if class l is
    exhausted, ``l = rng.integers(num_classes)`` until one with samples left.
    The sample taken is the last unused one of class l (in index order), and it
    fills client c's slots from the back.
    """
    sizes = np.full(k, int(len(labels) / k), dtype=np.int64)
    cumsum = np.cumsum(priors, axis=1)
    pools = [np.where(labels == i)[0] for i in range(num_classes)]
    left = [len(p) for p in pools]
    out = [np.zeros(int(n), dtype=np.int64) for n in sizes]
    remaining = int(sizes.sum())
    while remaining:
        cid = rng.integers(k)
        if sizes[cid] <= 0:
            continue
        sizes[cid] -= 1
        remaining -= 1
        cls = int(np.argmax(rng.uniform() <= cumsum[cid]))
        while left[cls] <= 0:
            cls = int(rng.integers(num_classes))
        left[cls] -= 1
        out[cid][sizes[cid]] = pools[cls][left[cls]]
    return out


def _scarlet_dirichlet(
    labels: np.ndarray, k: int, rng: np.random.Generator, opts: ScarletDirichletOptions, section: str, dataset: ArrayDataset | None
) -> Partition:
    test_labels = _test_labels(dataset, section, "scarlet_dirichlet")
    c = _num_classes(labels, dataset)
    require(len(test_labels) >= k, NUM_CLIENTS_FIELD, f"must be <= the {len(test_labels)} test samples for 'scarlet_dirichlet', got {k}")
    ref = np.random.default_rng(_reference_seed(opts.seed, rng))  # SCARLET: create_rng_suite(seed).numpy
    priors = ref.dirichlet([opts.alpha] * c, size=k)
    train = client_inner_dirichlet(labels, k, c, priors, ref)
    test = client_inner_dirichlet(test_labels, k, c, priors, ref)  # the same priors and stream, continued
    return Partition(train, class_proportions=priors, client_test_indices=test)


def _flwr(labels: np.ndarray, k: int, rng: np.random.Generator, opts: FlwrOptions, section: str, dataset: ArrayDataset | None) -> Partition:
    return Partition(flwr_split(labels, k, rng, opts, section, None if dataset is None else dataset.train_groups))


# ---------------------------------------------------------------- registry


class PartitionerEntry(NamedTuple):
    """A partitioner's options dataclass, its split, and what it declares about the inputs it hands the clients."""

    options: type
    split: Callable[..., Partition]
    adds_noise: Callable[[Any, int], bool] | None = None
    """Set: whether, with these options over this many clients, it adds noise to the clients' inputs
    (``feature_noise``); a run asks it before the data are split (``--dry-run`` without the data's files too).
    None: it hands the inputs over as they are."""
    summary: str = ""
    """One line for ``chillfl list partitioners`` and the reference (empty: its options' docstring's first line)."""
    leaves_unused: Callable[[Any], str | None] | None = None
    """Set: given its options, why its split can leave many training rows to no client unasked (None: it leaves none
    but a remainder, or only those its options ask it to drop, as ``frac`` does); a run then says, in a note, how many
    rows its clients hold when that is under :data:`UNUSED_NOTE_SHARE` of them. None: it hands every row out."""
    rows_kept: Callable[[Any, int, int], int] | None = None
    """Set: given its options, the ``n`` training rows and the ``k`` clients, about how many rows its split hands the clients
    (``frac``, shards that cover part of the data), for estimates made without the data (``chillfl list experiments``'s
    cost model). None: all ``n``."""


PARTITIONERS: dict[str, PartitionerEntry] = {
    "iid": PartitionerEntry(NoOptions, _iid, summary="IID: a random permutation cut into equal shares"),
    "dirichlet": PartitionerEntry(DirichletOptions, _dirichlet, leaves_unused=_dirichlet_leaves_unused,
                                  summary='Dir(alpha) label skew per class; "client": FLex&Chill floor rule, rows unused'),
    "dirichlet_balanced": PartitionerEntry(DirichletBalancedOptions, _dirichlet_balanced, rows_kept=_dirichlet_balanced_kept,
                                           summary="Dir(alpha) per class, capped at N/K: FedMA and NIID-Bench code (FedChill)"),
    "shards": PartitionerEntry(ShardsOptions, _shards, rows_kept=_shards_kept, summary="pathological label skew: label-sorted shards, a few a client (McMahan 2017)"),
    "quantity_skew": PartitionerEntry(QuantitySkewOptions, _quantity_skew, summary="client sizes drawn by Dir(h), labels optionally skewed too (NIID-Bench)"),
    "feature_noise": PartitionerEntry(FeatureNoiseOptions, _feature_noise, adds_noise=_feature_noise_adds,
                                      summary="feature skew: IID shares, each client's own Gaussian input noise (FedChill)"),
    "natural": PartitionerEntry(NoOptions, _natural, summary="the dataset's own clients (FEMNIST's writers, Shakespeare's roles)"),
    "flexchill_dirichlet": PartitionerEntry(FlexChillDirichletOptions, _flexchill_dirichlet, summary="FLex&Chill's own Dirichlet split, as its code draws it"),
    "scarlet_dirichlet": PartitionerEntry(ScarletDirichletOptions, _scarlet_dirichlet, summary="SCARLET's split: Dir(alpha) over classes within each client, equal sizes"),
    "flwr": PartitionerEntry(FlwrOptions, _flwr, summary="any flwr-datasets partitioner, by class name and options"),  # any flwr-datasets partitioner (chillfl.data.flwr_partition)
}


SPLIT_CALL = ("labels", "num_clients", "rng", "options", "section", "dataset")
"""How a partitioner's split is called, a built-in's and a plugin's alike."""


def partitioner_names() -> list[str]:
    """Registered partitioner names and the ``chillfl.plugins`` entry points that name a partitioner, sorted."""
    return sorted({*PARTITIONERS, *plugin_names(is_partitioner, tuple(PARTITIONERS), "partition.name")})


def is_partitioner(obj: Any) -> bool:
    """Whether a plugin's object is a partitioner: a :class:`PartitionerEntry`, or a function called as a split is
    (a model's builder function takes four parameters, not six: ``chillfl list`` tells them apart by that)."""
    if isinstance(obj, PartitionerEntry):
        return True
    if not inspect.isfunction(obj):
        return False
    try:
        inspect.signature(obj).bind(*SPLIT_CALL)
    except (TypeError, ValueError):
        return False
    return True


def user_partitioner(obj: Any, name: str, field: str) -> PartitionerEntry:
    """A user's object (import path or entry point) as a :class:`PartitionerEntry`, or a ConfigError on ``field``.

    ``obj`` is a ``PartitionerEntry`` (the built-ins' form), or a function called as the built-ins' splits are,
    ``split(labels, num_clients, rng, options, section, dataset)`` returning a :class:`Partition`, with ``options``
    its ``Options`` dataclass parsed from the ``[partition]`` table (:class:`NoOptions` when it declares none).
    """
    if not (isinstance(obj, PartitionerEntry) or inspect.isfunction(obj)):
        raise ConfigError(field, f"{name!r} must name a partitioner: a PartitionerEntry or a split function, got {short_repr(obj)}")
    entry = obj if isinstance(obj, PartitionerEntry) else PartitionerEntry(getattr(obj, "Options", NoOptions), obj)
    if not (isinstance(entry.options, type) and dataclasses.is_dataclass(entry.options)):
        raise ConfigError(field, f"{name!r}: its options must be a dataclass, got {entry.options!r}")
    check_hooks(name, (("split", entry.split, SPLIT_CALL), ("adds_noise", entry.adds_noise, ("options", "num_clients"))), field)
    return entry


def partitioner_spec(name: object, section: str = "partition") -> PartitionerEntry:
    """The registered partitioner ``name``, or a user's (``"pkg.module:split"``, a ``chillfl.plugins`` entry point);
    a ConfigError on ``<section>.name`` when there is none."""
    entry: PartitionerEntry = look_up(name, f"{section}.name", PARTITIONERS, is_partitioner, partitioner_names, user_partitioner)
    return entry


def partitioner_options(name: str, options: Mapping[str, Any] | None, section: str = "partition") -> Any:
    """Partitioner ``name``'s options parsed from ``options`` (its table without ``name``)."""
    return parse_options(partitioner_spec(name, section).options, options, section, Chosen(f"{section}.name", name, lambda: PARTITIONERS))


def _num_classes(labels: np.ndarray, dataset: ArrayDataset | None) -> int:
    top = int(labels.max()) + 1 if len(labels) else 0
    return max(top, dataset.num_classes) if dataset is not None else top


def partition(
    name: str,
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    options: Mapping[str, Any] | None = None,
    *,
    section: str = "partition",
    dataset: ArrayDataset | None = None,
) -> Partition:
    """Split ``labels``' indices over ``num_clients`` clients with partitioner ``name``.

    Returned indices are sorted per client and never shared between clients.
    """
    entry = partitioner_spec(name, section)
    opts: Any = partitioner_options(name, options, section)
    labels = np.asarray(labels)
    if labels.ndim != 1 or (len(labels) and labels.min() < 0):
        raise ValueError("labels must be a 1-D array of class ids >= 0")
    labels = labels.astype(np.int64)
    require(num_clients >= 1, NUM_CLIENTS_FIELD, f"must be >= 1, got {num_clients}")
    require(
        num_clients <= len(labels),
        NUM_CLIENTS_FIELD,
        f"must be <= the number of training samples ({len(labels)}), got {num_clients}",
    )
    with building(name, f"{section}.name", name in PARTITIONERS, f" for {len(labels)} rows over {num_clients} clients"):
        part = entry.split(labels, num_clients, rng, opts, section, dataset)
    part.client_indices = checked_indices(part, name, num_clients, len(labels), f"{section}.name")
    if part.client_test_indices is not None:
        test_rows = None if dataset is None else len(dataset.y_test)
        part.client_test_indices = checked_rows(part.client_test_indices, name, num_clients, test_rows, f"{section}.name", "test")
    return part


def checked_indices(part: object, name: str, num_clients: int, rows: int, field: str) -> list[np.ndarray]:
    """A split's per-client indices, sorted, if they are what every later step assumes: a :class:`Partition` with one
    array of integer indices in ``[0, rows)`` per client, no row given to two clients (or twice to one). Else one line
    on ``field``: a plugin's wrong split otherwise ran on as an IndexError, an AttributeError, or a misleading error
    from aggregation (a wrong client count), and overlapping clients silently trained on the same rows."""
    if not isinstance(part, Partition):
        raise ConfigError(field, f"{name!r} must return a chillfl Partition, got {short_repr(part)}")
    out = checked_rows(part.client_indices, name, num_clients, rows, field, "training")
    flat = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
    if has_repeats(flat):
        raise ConfigError(field, f"{name!r} gives some training row to two clients (or twice to one)")
    return out


def checked_rows(clients: object, name: str, num_clients: int, rows: int | None, field: str, which: str) -> list[np.ndarray]:
    """``clients``, sorted, if it holds one 1-D array of integer indices in ``[0, rows)`` per client (``rows`` None: no
    upper bound known) into the ``which`` set ("training", "test"); else one line on ``field``. A plugin's own test split
    (``client_test_indices``) was taken unchecked: a row past the test set ran on as an IndexError mid-evaluation."""
    attr = "client_indices" if which == "training" else "client_test_indices"
    if not isinstance(clients, (list, tuple)) or len(clients) != num_clients:
        got = len(clients) if isinstance(clients, (list, tuple)) else short_repr(clients)
        raise ConfigError(field, f"{name!r} must give one {which} index array per client ({num_clients}, federation.num_clients) in "
                                 f"Partition.{attr}, got {got}")
    out = []
    for i, ix in enumerate(clients):
        arr = np.asarray(ix)
        if arr.ndim != 1 or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
            raise ConfigError(field, f"{name!r} gave client {i} {short_repr(ix)} in Partition.{attr}, not a 1-D array of integer row indices")
        if arr.size and (arr.min() < 0 or (rows is not None and arr.max() >= rows)):
            bound = f"outside [0, {rows - 1}] (the {which} set has {rows} rows)" if rows is not None else "below 0"
            raise ConfigError(field, f"{name!r} gave client {i} {which} row indices {bound}")
        out.append(np.sort(arr.astype(np.int64)))
    return out


def has_repeats(indices: np.ndarray) -> bool:
    """Whether some index occurs twice: a row given to two clients, or twice to one (a partition file is checked so too).
    A sort and a neighbour compare, not ``np.unique``: numpy 2.4's hash-based unique took 15-20x as long on the
    all-distinct row indices of every start-up (0.2 s at 260,000 rows)."""
    flat = np.sort(np.asarray(indices).ravel())
    return bool((flat[1:] == flat[:-1]).any())
