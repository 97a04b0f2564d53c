"""Soft-label methods: DS-FL, SCARLET, CFD, COMET, Selective-FD and the ``individual`` baseline.

The ``[distillation]`` table chooses a method and sets the protocol's shared
options (:class:`~chillfl.settings.distillation.DistillationOptions`) plus that
method's own options, all in one flat table (typed and parsed once, with the
config, in :mod:`chillfl.settings.distillation`)::

    [distillation]
    method = "scarlet"       # dsfl | scarlet | cfd | comet | selective_fd | fedmd | individual
    public_size = 400        # |P|
    subset_size = 100        # |P^t|, drawn each round (SCARLET Sec. IV-A: 1,000 of 10,000)
    beta = 2.0               # SCARLET's own option (Enhanced ERA, Eq. 4)
    cache_duration = 50      # D (Algorithm 2); any method but individual may use the cache

A method only says what differs between the papers (SCARLET Sec. IV-A,
Appendix B, Table V); the round protocol (:mod:`chillfl.protocols.softlabels`) is shared:

============  ======================================  =========================================
method        uplink (client -> server)                aggregation / downlink
============  ======================================  =========================================
dsfl          softmax outputs on I_req^t (float32)     ERA, Eq. (2): softmax(zbar / T)
scarlet       same                                     Enhanced ERA, Eq. (4): zbar^beta / sum, cache D=50
cfd           outputs quantised to ``bits_up`` bits   plain mean, quantised to ``bits_down``
comet         same as dsfl                             mean for the server; per-cluster targets down
selective_fd  only on samples the client's KuLSIF      masked mean over the clients that kept a
              selector finds in-distribution           sample; server selector drops ambiguous ones
fedmd         same as dsfl                             consensus: plain mean (transfer learning first)
individual    nothing                                  nothing (no public data, no server model)
============  ======================================  =========================================

Choices
-------
* **Cache everywhere.** ``cache_duration`` is a shared option: 50 for SCARLET
  (Sec. IV-B), 0 (no cache) for the others; SCARLET Fig. 9 plugs the cache
  into CFD, COMET and Selective-FD with D = 25. SCARLET with D = 0 is DS-FL's
  traffic with Enhanced ERA. COMET can only cache with ``granularity =
  "sample"`` (per-sample centroids, the SCARLET authors' reading): client-level
  cluster targets change with the round's clustering, so no stored entry could
  be reused.
* **COMET, client granularity** (default, COMET's paper): the server clusters
  the clients of round t on their uploads; a client sampled at t + 1 downloads
  its cluster's target (n x C values; the assignment is free, Appendix B); a
  client that did not upload at t gets the plain mean. The server model
  trains on the plain mean (Appendix B: "we extended the evaluation to include
  server-side training"). **Sample granularity**: c centroids per sample are
  sent (n x c x C) and each client distils towards the centroid nearest its
  own current prediction. The regulariser weight lambda multiplies the
  distillation loss (the distillation phase *is* COMET's regulariser here).
* **CFD** uses the block's quantiser (``quantize.compress``) and counts
  ``payload_bytes``; with ``delta_coding`` the uplink is the delta message
  (change bitmap + changed codes). The server averages the dequantised
  uploads (no ERA) and the server model trains on the same (dequantised)
  downlink values the clients receive.
* **Selective-FD's client selector** is fitted once per client, at its first
  round: KuLSIF density ratio of the client's private inputs (90 %) against
  uniform noise over the range of those inputs, threshold = the
  ``tau_client`` quantile of the ratios of the other 10 % (SCARLET authors'
  code), evaluated on every public sample; the resulting mask lives in the
  client's state. The uplink then carries the kept samples' indices too.
* Client weights in every mean are uniform (1/K, Eqs. 2 and 4).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np
import torch

from chillfl.config import RunConfig
from chillfl.data import load_dataset
from chillfl.engine.ledger import IndexEncoding
from chillfl.engine.record import Json
from chillfl.errors import ConfigError
from chillfl.options import require, short_repr
from chillfl.plugins import resolve
from chillfl.paths import check_writable_dir
from chillfl.seeds import derive_seed
from chillfl.settings.distillation import FULL_PRECISION_BITS, SECTION, COMETOptions, DistillationSetup

from .comet import cluster_clients, cluster_targets, per_sample_centroids
from .era import enhanced_era, era, mean_soft_labels, power_sharpen, tempered_softmax
from .quantize import DeltaCoder, compress, payload_bytes
from .selective import KuLSIF, client_keep_mask, client_threshold, masked_mean, server_keep_mask
from .cache import SoftLabelUplink
from .fedmd import consensus


# ---------------------------------------------------------------- the public pool


@functools.lru_cache(maxsize=2)
def _load_public_dataset(name: str, options_json: str, data_dir: str) -> Any:
    return load_dataset(name, json.loads(options_json), data_dir=data_dir)


def public_inputs(setup: DistillationSetup, data: Any, seed: int, data_dir: str) -> torch.Tensor:
    """The public pool P as inputs ``[|P|, ...]`` (row i = public index i); its labels are never used.

    Same dataset: ``FederatedData.public()`` (carved before partitioning).
    Separate dataset: a seeded uniform subset of ``public_size`` rows of its
    train split, which must have the private data's input shape.
    """
    c = setup.common
    field_name = f"{SECTION}.public_dataset"
    if c.public_dataset is None:
        x = data.public()
        require(len(x) == c.public_size, f"{SECTION}.public_size", f"the public pool has {len(x)} samples, expected {c.public_size}")
        return x
    try:
        ds = _load_public_dataset(c.public_dataset, json.dumps(c.public_dataset_options, sort_keys=True), str(data_dir))
    except ConfigError as exc:
        if exc.field.startswith("dataset"):
            raise ConfigError(field_name if exc.field == "dataset.name" else f"{SECTION}.public_dataset_options", exc.message) from None
        raise
    shape = tuple(data.dataset.input_shape)
    require(
        tuple(ds.input_shape) == shape,
        field_name,
        f"{c.public_dataset!r} has input shape {tuple(ds.input_shape)}, the private data {shape}; they must match",
    )
    n = len(ds.x_train)
    require(c.public_size <= n, f"{SECTION}.public_size", f"must be <= the {n} train samples of {c.public_dataset!r}, got {c.public_size}")
    rng = np.random.default_rng(derive_seed(seed, "public-pool"))
    rows = np.sort(rng.permutation(n)[: c.public_size])
    return ds.x_train[torch.from_numpy(rows)]


def public_labels(setup: DistillationSetup, data: Any, seed: int, data_dir: str) -> torch.Tensor:
    """The labels of the public pool, row for row with :func:`public_inputs` (FedMD's transfer learning uses them)."""
    c = setup.common
    if c.public_dataset is None:
        y = data.dataset.y_train[torch.from_numpy(data.public_indices)]
        require(len(y) == 0 or int(y.min()) >= 0, f"{SECTION}.transfer_epochs",
                "transfer learning trains on the public set's labels, and the public set passed from Python has none: pass public=(x, y) or set it to 0")
        return y
    ds = _load_public_dataset(c.public_dataset, json.dumps(c.public_dataset_options, sort_keys=True), str(data_dir))
    rng = np.random.default_rng(derive_seed(seed, "public-pool"))
    rows = np.sort(rng.permutation(len(ds.x_train))[: c.public_size])
    y = ds.y_train[torch.from_numpy(rows)]
    require(
        len(y) == 0 or int(y.max()) < data.num_classes,
        f"{SECTION}.transfer_epochs",
        f"transfer learning trains on {c.public_dataset!r}'s labels, which exceed the private data's {data.num_classes} classes; set it to 0",
    )
    return y


def check_distillation(config: RunConfig, data: Any) -> DistillationSetup:
    """Check the parsed ``[distillation]`` against the rest of the run and its data, before a run starts (called by ``build_experiment``)."""
    setup = config.distillation_setup
    assert setup is not None, "the soft-label protocol runs only when [distillation] names a method"
    algorithm = config.algorithm.get("name")
    require(
        algorithm == "fedavg",
        "algorithm.name",
        f"the soft-label protocol trains clients with the base loss only (no aggregator, no objective terms); "
        f"use 'fedavg' (the default), got {algorithm!r}",
    )
    if isinstance(setup.options, COMETOptions):
        setup.options.check_clients(config.federation.sample_size(), SECTION)
    if setup.common.state_dir is not None:  # a file or read-only folder: one line now, not a traceback in round 1
        check_writable_dir(setup.common.state_dir, f"{SECTION}.state_dir")
    if setup.spec.collaborative:
        public_inputs(setup, data, config.seed, config.data_dir)
    if getattr(setup.options, "transfer_epochs", 0):
        public_labels(setup, data, config.seed, config.data_dir)
    return setup


# ---------------------------------------------------------------- method hooks


@dataclass
class Aggregate:
    """Server-side result of one round for the requested indices.

    ``keep``: bool over I_req^t (Selective-FD drops some); ``rows``: what goes
    down (and into the cache) for the kept indices, ``[n_keep, D]``;
    ``server_rows``: the server model's targets, ``[n_keep, C]`` (same as
    ``rows`` except for COMET).
    """

    keep: torch.Tensor
    rows: torch.Tensor
    server_rows: torch.Tensor
    metrics: dict[str, Json] = field(default_factory=dict)


class SoftLabelClientHooks:
    """A soft-label method's client half; the defaults give DS-FL's client.

    :meth:`prepare_client` (once per participation, before anything else),
    :meth:`upload` (which soft-labels leave the client, as the server receives
    them), :meth:`client_target` (the distillation target from the rebuilt
    downlink rows). It travels to every client, so it holds the method's
    options only: what a client needs of the server's state comes in its
    downlink (COMET's cluster: ``hint``).
    """

    def __init__(self, options: Any, num_classes: int, seed: int) -> None:
        self.options = options
        self.num_classes = num_classes
        self.seed = seed

    def prepare_client(self, cid: int, state: Any, x_private: torch.Tensor, x_public: torch.Tensor) -> None:
        return None

    def upload(self, cid: int, round: int, indices: torch.Tensor, probs: torch.Tensor, state: Any) -> SoftLabelUplink:
        return SoftLabelUplink(client_id=cid, round=round, indices=indices, soft_labels=probs)

    def needs_own_predictions(self, hint: int | None) -> bool:
        """Whether :meth:`client_target` calls ``own_probs`` (the client then asks for them as a batchable job)."""
        return False

    def client_target(self, cid: int, rows: torch.Tensor, own_probs: Callable[[], torch.Tensor], hint: int | None = None) -> torch.Tensor:
        """The distillation target ``[n, C]`` from the rebuilt rows of the previous round."""
        return rows


class SoftLabelMethod:
    """A soft-label method's server half; the defaults give DS-FL's traffic with a plain mean.

    :meth:`aggregate`, the bytes (:meth:`uplink_bytes`, :meth:`downlink_soft_bytes`)
    and what each client must know to pick its target (:meth:`target_hint`).
    Its client half (:meth:`client_half`, a :attr:`client_hooks` instance) is a
    separate object: the server's state (COMET's assignments, CFD's delta
    decoders) never travels to a client.
    """

    name: ClassVar[str] = ""
    client_hooks: ClassVar[type[SoftLabelClientHooks]] = SoftLabelClientHooks
    distill_weight: float = 1.0
    separate_server_rows: bool = False
    uses_logits: bool = False
    """Uploads and targets are logits, distilled with an L1 loss (FedMD's reference code), not probabilities."""

    def __init__(self, options: Any, num_classes: int, seed: int, index_encoding: IndexEncoding, universe: int) -> None:
        self.options = options
        self.num_classes = num_classes
        self.seed = seed
        self.index_encoding = index_encoding
        self.universe = universe

    def client_half(self) -> SoftLabelClientHooks:
        """The hooks every client runs: the method's options, none of this object's state."""
        return self.client_hooks(self.options, self.num_classes, self.seed)

    def uplink_bytes(self, uplink: SoftLabelUplink) -> dict[str, int]:
        return uplink.nbytes(self.index_encoding, self.universe)

    def combine(self, mean: torch.Tensor) -> torch.Tensor:
        """The aggregation map applied to the clients' mean soft-labels (identity here)."""
        return mean

    def aggregate(self, round: int, indices: torch.Tensor, uplinks: Sequence[SoftLabelUplink]) -> Aggregate:
        stack, keep = stack_uplinks(indices, uplinks, self.num_classes)
        if bool(keep.all()):
            mean = mean_soft_labels(stack)
            sample_keep = torch.ones(len(indices), dtype=torch.bool)
        else:
            mean, counts = masked_mean(stack, keep)
            sample_keep = counts > 0
            mean = mean[sample_keep]
        rows = self.combine(mean)
        return Aggregate(sample_keep, rows, rows)

    def row_width(self) -> int:
        """Width D of one downlink row (C, except COMET)."""
        return self.num_classes

    def downlink_soft_bytes(self, rows: torch.Tensor) -> int:
        """Bytes one client downloads for ``rows`` fresh soft-label rows (float32)."""
        return int(rows.numel()) * 4

    def target_hint(self, cid: int) -> int | None:
        """What client ``cid`` must know to pick its target from the downlink rows (sent with them)."""
        return None

    def round_metrics(self) -> dict[str, Json]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        """The server-side state carried across rounds (checkpoints); none by default."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None


def stack_uplinks(indices: torch.Tensor, uplinks: Sequence[SoftLabelUplink], num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``[K, n, C]`` soft-labels on ``indices`` and the bool ``[K, n]`` mask of the rows each client sent.

    Each client's rows are placed by one sorted search (no per-row Python), so
    100 clients x 1,000 rows cost a few tensor ops per client.
    """
    n = int(indices.numel())
    order = torch.argsort(indices)
    ordered = indices[order]
    stack = torch.zeros((len(uplinks), n, num_classes), dtype=torch.float32)
    keep = torch.zeros((len(uplinks), n), dtype=torch.bool)
    for k, up in enumerate(uplinks):
        if up.indices.numel() == 0:
            continue
        if torch.equal(up.indices, indices):  # the usual case: the client sent every requested row, in order
            stack[k] = up.soft_labels.to(torch.float32)
            keep[k] = True
            continue
        at = torch.searchsorted(ordered, up.indices).clamp_(max=max(n - 1, 0))
        if n == 0 or not bool((ordered[at] == up.indices).all()):
            raise KeyError(f"client {up.client_id} sent soft-labels for indices that were not requested")
        rows = order[at]
        stack[k].index_copy_(0, rows, up.soft_labels.to(torch.float32))  # not stack[k, rows] = ...: an index_put, far slower on CPU
        keep[k].index_fill_(0, rows, True)
    return stack, keep


class DSFL(SoftLabelMethod):
    """DS-FL (Itahara et al. 2023): ERA, SCARLET Eq. (2): zhat = softmax(zbar / T)."""

    name = "dsfl"

    def combine(self, mean: torch.Tensor) -> torch.Tensor:
        return tempered_softmax(mean, self.options.temperature) if self.options.aggregation == "era" else mean

    def aggregate(self, round: int, indices: torch.Tensor, uplinks: Sequence[SoftLabelUplink]) -> Aggregate:
        stack, keep = stack_uplinks(indices, uplinks, self.num_classes)
        if bool(keep.all()) and self.options.aggregation == "era":  # the block's ERA, exactly Eq. (2)
            rows = era(stack, self.options.temperature)
            return Aggregate(torch.ones(len(indices), dtype=torch.bool), rows, rows)
        return super().aggregate(round, indices, uplinks)


class SCARLET(SoftLabelMethod):
    """SCARLET (Azuma et al.): Enhanced ERA, Eq. (4): zhat_i = zbar_i^beta / sum_j zbar_j^beta; cache D (Algorithm 2)."""

    name = "scarlet"

    def combine(self, mean: torch.Tensor) -> torch.Tensor:
        return power_sharpen(mean, self.options.beta)

    def aggregate(self, round: int, indices: torch.Tensor, uplinks: Sequence[SoftLabelUplink]) -> Aggregate:
        stack, keep = stack_uplinks(indices, uplinks, self.num_classes)
        if bool(keep.all()):  # the block's Enhanced ERA, exactly Eq. (4)
            rows = enhanced_era(stack, self.options.beta)
            return Aggregate(torch.ones(len(indices), dtype=torch.bool), rows, rows)
        return super().aggregate(round, indices, uplinks)


class CFDClient(SoftLabelClientHooks):
    """CFD's client: quantises its upload to b_up bits."""

    def upload(self, cid: int, round: int, indices: torch.Tensor, probs: torch.Tensor, state: Any) -> SoftLabelUplink:
        o = self.options
        values = compress(probs, o.bits_up, o.one_bit, o.renormalize)
        bits = None if o.bits_up >= FULL_PRECISION_BITS else o.bits_up
        return SoftLabelUplink(client_id=cid, round=round, indices=indices, soft_labels=values, bits=bits)


class CFD(SoftLabelMethod):
    """CFD (Sattler et al. 2022): quantised uplink (b_up bits) and downlink (b_down bits), plain mean."""

    name = "cfd"
    client_hooks = CFDClient

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._coders: dict[int, DeltaCoder] = {}

    def uplink_bytes(self, uplink: SoftLabelUplink) -> dict[str, int]:
        o = self.options
        if o.delta_coding:
            coder = self._coders.setdefault(uplink.client_id, DeltaCoder(o.bits_up, self.num_classes))
            return {"soft_labels": coder.encode(uplink.indices, uplink.soft_labels).nbytes()}
        return {"soft_labels": payload_bytes(uplink.soft_labels, o.bits_up, o.one_bit)}

    def combine(self, mean: torch.Tensor) -> torch.Tensor:
        o = self.options
        return compress(mean, o.bits_down, o.one_bit, o.renormalize)

    def state_dict(self) -> dict[str, Any]:
        """Each client's last uplink codes as the server's delta decoder holds them."""
        return {str(cid): coder.state_dict() for cid, coder in self._coders.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._coders = {}
        for cid, coder_state in state.items():
            coder = DeltaCoder(self.options.bits_up, self.num_classes)
            coder.load_state_dict(coder_state)
            self._coders[int(cid)] = coder

    def downlink_soft_bytes(self, rows: torch.Tensor) -> int:
        if rows.numel() == 0:
            return 0
        return payload_bytes(rows, self.options.bits_down, self.options.one_bit)


class COMETClient(SoftLabelClientHooks):
    """COMET's client: its cluster's target (client granularity: the block the downlink's ``hint`` names), or per sample the centroid nearest its own prediction."""

    def needs_own_predictions(self, hint: int | None) -> bool:
        return self.options.granularity != "client"  # sample granularity: the nearest centroid to the own prediction

    def client_target(self, cid: int, rows: torch.Tensor, own_probs: Callable[[], torch.Tensor], hint: int | None = None) -> torch.Tensor:
        nc, c = self.num_classes, self.options.num_clusters
        if self.options.granularity == "client":
            block = hint if hint is not None else c  # no cluster named: the last block, the plain mean
            return rows[:, block * nc : (block + 1) * nc]
        cents = rows.reshape(rows.shape[0], c, nc)
        own = own_probs()
        pick = (cents - own.unsqueeze(1)).pow(2).sum(dim=-1).argmin(dim=1)  # nearest centroid (Euclidean)
        return cents[torch.arange(rows.shape[0], device=rows.device), pick]


class COMET(SoftLabelMethod):
    """COMET (Cho et al. 2023): clustered targets; regulariser lambda * KL(target || softmax(f(x)))."""

    name = "comet"
    client_hooks = COMETClient
    separate_server_rows = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.distill_weight = float(self.options.reg_weight)
        self._assign: dict[int, int] = {}
        self._num_clusters_used = 0

    def _rng(self, round: int) -> np.random.Generator:
        return np.random.default_rng(derive_seed(self.seed, "comet", round))

    def row_width(self) -> int:
        c = self.options.num_clusters
        return (c + 1) * self.num_classes if self.options.granularity == "client" else c * self.num_classes

    def aggregate(self, round: int, indices: torch.Tensor, uplinks: Sequence[SoftLabelUplink]) -> Aggregate:
        o, nc = self.options, self.num_classes
        stack, _ = stack_uplinks(indices, uplinks, nc)
        mean = mean_soft_labels(stack)
        n, c = int(indices.numel()), o.num_clusters
        keep = torch.ones(n, dtype=torch.bool)
        if o.granularity == "client":
            labels = cluster_clients(stack, c, self._rng(round), o.n_init, o.max_iter) if n else np.zeros(len(uplinks), dtype=np.int64)
            targets = cluster_targets(stack, labels) if n else torch.zeros((1, 0, nc))
            used = targets.shape[0]
            blocks = [targets[j] for j in range(used)] + [mean] * (c - used) + [mean]  # last block: the plain mean
            rows = torch.cat(blocks, dim=1) if n else torch.zeros((0, (c + 1) * nc))
            self._assign = {up.client_id: int(lab) for up, lab in zip(uplinks, labels)}
            self._num_clusters_used = used
        else:
            if n:
                cents = per_sample_centroids(stack, c, self._rng(round), o.n_init, o.max_iter)  # [n, c', C]
                if cents.shape[1] < c:  # fewer clients than clusters: repeat the last centroid
                    cents = torch.cat([cents, cents[:, -1:].expand(-1, c - cents.shape[1], -1)], dim=1)
                rows = cents.reshape(n, c * nc)
            else:
                rows = torch.zeros((0, c * nc))
            self._num_clusters_used = min(c, len(uplinks))
        return Aggregate(keep, rows, mean)

    def downlink_soft_bytes(self, rows: torch.Tensor) -> int:
        if self.options.granularity == "client":  # each client downloads its own cluster's target only
            return int(rows.shape[0]) * self.num_classes * 4
        return int(rows.numel()) * 4

    def target_hint(self, cid: int) -> int | None:
        """Client granularity: the block of the client's cluster (last block = the plain mean when unassigned)."""
        return self._assign.get(cid, self.options.num_clusters) if self.options.granularity == "client" else None

    def round_metrics(self) -> dict[str, Json]:
        return {"comet_clusters": self._num_clusters_used}

    def state_dict(self) -> dict[str, Any]:
        return {"assign": {str(k): v for k, v in self._assign.items()}, "clusters_used": self._num_clusters_used}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._assign = {int(k): int(v) for k, v in state["assign"].items()}
        self._num_clusters_used = int(state["clusters_used"])


class SelectiveFDClient(SoftLabelClientHooks):
    """Selective-FD's client: fits its KuLSIF selector once, uploads the public samples it finds in-distribution."""

    def prepare_client(self, cid: int, state: Any, x_private: torch.Tensor, x_public: torch.Tensor) -> None:
        if state.in_distribution is None:
            state.in_distribution = self.fit_selector(cid, x_private, x_public)

    def fit_selector(self, cid: int, x_private: torch.Tensor, x_public: torch.Tensor) -> torch.Tensor:
        """Bool mask over P: public samples the client's KuLSIF selector finds in-distribution."""
        o = self.options
        n = len(x_private)
        if n < 2:
            return torch.ones(len(x_public), dtype=torch.bool)
        gen = torch.Generator().manual_seed(derive_seed(self.seed, "kulsif", cid))
        flat = x_private.reshape(n, -1).to(torch.float64)
        perm = torch.randperm(n, generator=gen)
        n_held = max(1, n // 10)
        fit, held = flat[perm[n_held:]], flat[perm[:n_held]]
        lo, hi = float(flat.min()), float(flat.max())
        noise = lo + (hi - lo) * torch.rand((len(fit), flat.shape[1]), generator=gen, dtype=torch.float64)  # the host's stream: the same draw on every device
        kulsif = KuLSIF(fit, noise.to(flat.device), o.kernel_width, o.kernel_lambda)
        threshold = client_threshold(kulsif.ratio(held), o.tau_client, o.client_threshold)
        return client_keep_mask(kulsif.ratio(x_public.reshape(len(x_public), -1)), threshold).cpu()  # selects host-side uplink rows

    def upload(self, cid: int, round: int, indices: torch.Tensor, probs: torch.Tensor, state: Any) -> SoftLabelUplink:
        keep = state.in_distribution[indices] if indices.numel() else torch.zeros(0, dtype=torch.bool)
        return SoftLabelUplink(client_id=cid, round=round, indices=indices[keep], soft_labels=probs[keep], send_indices=True)


class SelectiveFD(SoftLabelMethod):
    """Selective-FD (Shao et al. 2024): client-side KuLSIF selector (:class:`SelectiveFDClient`), server-side ambiguity selector."""

    name = "selective_fd"
    client_hooks = SelectiveFDClient

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kept: list[float] = []
        self._server_kept = 1.0

    def aggregate(self, round: int, indices: torch.Tensor, uplinks: Sequence[SoftLabelUplink]) -> Aggregate:
        n = int(indices.numel())  # the fraction each client kept (float32, as the mean of its bool mask)
        self._kept = [float(torch.tensor(float(len(up.indices))) / n) if n else 1.0 for up in uplinks]
        stack, keep = stack_uplinks(indices, uplinks, self.num_classes)
        mean, counts = masked_mean(stack, keep)
        sample_keep = counts > 0
        if bool(sample_keep.any()):
            ok = server_keep_mask(mean[sample_keep], self.options.tau_server, self.options.server_measure)
            sample_keep[sample_keep.clone()] = ok
        self._server_kept = float(sample_keep.float().mean()) if len(indices) else 1.0
        rows = mean[sample_keep]
        return Aggregate(sample_keep, rows, rows)

    def round_metrics(self) -> dict[str, Json]:
        out: dict[str, Json] = {"selective_client_kept": float(np.mean(self._kept)) if self._kept else None, "selective_server_kept": self._server_kept}
        self._kept = []
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"server_kept": self._server_kept}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._server_kept = float(state["server_kept"])


class FedMD(SoftLabelMethod):
    """FedMD (Li & Wang 2019): consensus = the plain mean of the clients' class scores (:func:`.fedmd.consensus`);
    its transfer-learning phase is the protocol's (``transfer_epochs``, see :mod:`.fedmd`)."""

    name = "fedmd"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.uses_logits = self.options.scores == "logits"

    def aggregate(self, round: int, indices: torch.Tensor, uplinks: Sequence[SoftLabelUplink]) -> Aggregate:
        stack, keep = stack_uplinks(indices, uplinks, self.num_classes)
        if bool(keep.all()):
            rows = consensus(list(stack))
            return Aggregate(torch.ones(len(indices), dtype=torch.bool), rows, rows)
        return super().aggregate(round, indices, uplinks)


class Individual(SoftLabelMethod):
    """No collaboration (SCARLET Sec. IV-B): clients train on their private data only."""

    name = "individual"


# ---------------------------------------------------------------- registry


BUILDERS: dict[str, type[SoftLabelMethod]] = {cls.name: cls for cls in (DSFL, SCARLET, CFD, COMET, SelectiveFD, FedMD, Individual)}
"""The class that runs each method; its settings (options, cache default) are :data:`chillfl.settings.distillation.METHODS`, under the same name."""


def method_class(name: str) -> type[SoftLabelMethod]:
    """The class that runs method ``name``: a built-in's, or a user's by import path or entry point (its settings:
    :func:`chillfl.settings.distillation.method_settings`)."""
    if name in BUILDERS:
        return BUILDERS[name]
    found = resolve(name, f"{SECTION}.method")
    if not (isinstance(found, type) and issubclass(found, SoftLabelMethod)):
        raise ConfigError(f"{SECTION}.method", f"{name!r} must name a chillfl.extend.SoftLabelMethod subclass, got {short_repr(found)}")
    return found


def make_method(setup: DistillationSetup, num_classes: int, seed: int) -> SoftLabelMethod:
    """The hook object of the configured method."""
    return method_class(setup.common.method)(setup.options, num_classes, seed, setup.common.index_encoding, max(setup.common.public_size, 1))
