"""The seam between the soft-label protocol and a method: a typed spec with a server half and a client half.

A soft-label method is one :class:`SoftLabelSpec`, in the method's own module: its options
dataclass, its server half (:class:`SoftLabelMethod`: how the clients' soft-labels combine, what
the downlink costs, what it keeps across rounds), its client half (:class:`SoftLabelClientHalf`:
what a client uploads, which target it distils towards, and the typed state it keeps between
rounds) and its capabilities. Built-in methods and plugins are found the same way
(:func:`chillfl.settings.distillation.method_settings`). The protocol calls only what is here:
it never tests which method runs.

Every hook is typed by the method's options ``Opt`` and, on the client, by its own state ``S``
(a :class:`MethodState`: it turns into plain tensors for the disk store, checkpoints and Flower
nodes, and back through :meth:`SoftLabelClientHalf.restore`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Mapping, Protocol, Sequence, TypeVar, cast, runtime_checkable

import torch

from chillfl.capabilities import Capabilities
from chillfl.config import RunConfig
from chillfl.engine.ledger import IndexEncoding
from chillfl.engine.record import Json
from chillfl.errors import ConfigError
from chillfl.options import short_repr
from chillfl.plugins import Hook, building
from chillfl.settings.distillation import SECTION, DistillationSetup, built_in_names, method_settings

from .labels import masked_mean, mean_soft_labels, soft_target_kl, weighted_kl
from .messages import SoftLabelUplink


Opt = TypeVar("Opt")
S = TypeVar("S", bound="MethodState")
Loss = Callable[..., torch.Tensor]
"""A base loss with the signature of ``temperature_cross_entropy``: ``(logits, targets, temperature) -> scalar``."""


# ---------------------------------------------------------------- the client's own state


@runtime_checkable
class MethodState(Protocol):
    """What a method's client half keeps between rounds: plain tensors when stored, typed in between."""

    def to_tensors(self) -> dict[str, torch.Tensor]:
        """The state as named tensors (the disk store and checkpoints read them with ``weights_only=True``)."""
        ...


@dataclass(frozen=True)
class NoState:
    """The state of a client half that keeps nothing."""

    def to_tensors(self) -> dict[str, torch.Tensor]:
        return {}


@dataclass(frozen=True)
class StoredState:
    """A method state read back from the store, as tensors, until its client half :meth:`~SoftLabelClientHalf.restore`\\ s it.

    The store and the Flower node hold states of any method, so they cannot build the typed object themselves.
    """

    tensors: dict[str, torch.Tensor]

    def to_tensors(self) -> dict[str, torch.Tensor]:
        return dict(self.tensors)


# ---------------------------------------------------------------- client half


class SoftLabelClientHalf(Generic[Opt, S]):
    """A soft-label method's client half: it travels to every client, so it holds the options, never server state.

    What a client needs of the server's state comes in its downlink (``hint``). Its own state
    ``S`` is made by :meth:`new_state` at the client's first collaborative round and handed to
    every later hook; the protocol stores it with the client's model.
    """

    def __init__(self, options: Opt, num_classes: int, seed: int) -> None:
        self.options = options
        self.num_classes = num_classes
        self.seed = seed

    def new_state(self, cid: int, x_private: torch.Tensor, x_public: torch.Tensor) -> S:
        """The state of client ``cid`` at its first collaborative round (it may look at its private inputs)."""
        raise NotImplementedError

    def restore(self, tensors: Mapping[str, torch.Tensor]) -> S:
        """The typed state from :meth:`MethodState.to_tensors`' output (the store's and checkpoints' format)."""
        raise NotImplementedError

    def resume(self, cid: int, kept: MethodState | None, x_private: torch.Tensor, x_public: torch.Tensor) -> S:
        """The client's state for this round: a new one, the stored one made typed again, or the one kept in memory."""
        if kept is None:
            return _typed(self.new_state(cid, x_private, x_public), f"{type(self).__name__}.new_state()")
        if isinstance(kept, StoredState):
            return _typed(self.restore(kept.tensors), f"{type(self).__name__}.restore()")
        return cast(S, kept)

    def upload(self, cid: int, round: int, indices: torch.Tensor, probs: torch.Tensor, state: S) -> SoftLabelUplink:
        """The soft-labels that leave the client (as the server receives them); default: all of them, float32."""
        return SoftLabelUplink(client_id=cid, round=round, indices=indices, soft_labels=probs)

    def needs_own_predictions(self, hint: int | None) -> bool:
        """Whether :meth:`client_target` calls ``own_probs`` (the client then asks for them as a batchable job)."""
        return False

    def client_target(self, cid: int, rows: torch.Tensor, own_probs: Callable[[], torch.Tensor], hint: int | None = None) -> torch.Tensor:
        """The distillation target ``[n, C]`` from the rebuilt rows of the previous round; default: the rows."""
        return rows


class SoftLabelClientHooks(SoftLabelClientHalf[Opt, NoState]):
    """The stateless client half (the default): uploads every requested soft-label, distils towards the rows."""

    def new_state(self, cid: int, x_private: torch.Tensor, x_public: torch.Tensor) -> NoState:
        return NoState()

    def restore(self, tensors: Mapping[str, torch.Tensor]) -> NoState:
        return NoState()


# ---------------------------------------------------------------- server half


@dataclass
class Aggregate:
    """Server-side result of one round for the requested indices.

    ``keep``: bool over I_req^t (a server-side selector may drop some); ``rows``: what goes
    down (and into the cache) for the kept indices, ``[n_keep, D]``; ``server_rows``: the
    server model's targets, ``[n_keep, C]`` (the same as ``rows`` unless the method sends
    more than one target per sample down).
    """

    keep: torch.Tensor
    rows: torch.Tensor
    server_rows: torch.Tensor
    metrics: dict[str, Json] = field(default_factory=dict)


def _typed(state: S, what: str) -> S:
    """A client half's state when it has ``to_tensors()`` (:class:`MethodState`); else one ConfigError on ``distillation.method``.

    Why: a plain dict (or None) passed until the half's own ``upload`` read it, as an AttributeError naming nothing, or until
    the disk store or a checkpoint could not save it.
    """
    if not isinstance(state, MethodState):
        raise ConfigError(f"{SECTION}.method", f"{what} returned a {type(state).__name__}, which has no to_tensors(): a client's state is an "
                                               "object of yours with to_tensors() (chillfl.extend.SoftLabelClientHalf)")
    return state


def check_aggregate(agg: object, requested: int, width: int, num_classes: int) -> Aggregate:
    """A method's :class:`Aggregate` of one round when its shapes fit the ``requested`` indices (``keep`` a bool
    ``[requested]``, ``rows`` ``[kept, width]``, ``server_rows`` ``[kept, num_classes]``); else one ConfigError on
    ``distillation.method``: a plugin's slip would otherwise be a RuntimeError from the cache or the server's training."""
    if not isinstance(agg, Aggregate):
        raise ConfigError(f"{SECTION}.method", f"the method's aggregate() returned a {type(agg).__name__}, not a chillfl.extend.Aggregate")
    if agg.keep.dtype != torch.bool or tuple(agg.keep.shape) != (requested,):
        raise ConfigError(f"{SECTION}.method", f"the method's aggregate() returned keep as {tuple(agg.keep.shape)} {agg.keep.dtype}; "
                                               f"it must be a bool [{requested}], one flag per requested index")
    kept = int(agg.keep.sum())
    for name, got, want in (("rows", agg.rows, (kept, width)), ("server_rows", agg.server_rows, (kept, num_classes))):
        if tuple(got.shape) != want:
            raise ConfigError(f"{SECTION}.method", f"the method's aggregate() returned {name} as {tuple(got.shape)}; it must be {list(want)} "
                                                   f"(the {kept} kept indices x {'its row width' if name == 'rows' else 'the classes'})")
    return agg


@dataclass(frozen=True)
class Pretraining:
    """Supervised training on the labelled public set before a model's first round (every client's and the server's).

    ``field``: the option that asked for it, named when the public set has no usable labels.
    """

    epochs: int
    lr: float | None = None
    field: str = ""


class SoftLabelMethod(Generic[Opt]):
    """A soft-label method's server half; the defaults give a plain mean of full-precision soft-labels.

    :meth:`aggregate`, the bytes (:meth:`uplink_bytes`, :meth:`downlink_soft_bytes`), what each
    client must know to pick its target (:meth:`target_hint`), the losses, and the server-side
    state it keeps across rounds. Its client half is a separate object (the spec's ``client``):
    the server's state never travels to a client.
    """

    distill_weight: float = 1.0
    """Weight of the clients' distillation loss (the default :meth:`distill_loss`'s); 0 with that loss: the clients skip the
    distillation phase (its steps would still decay the weights). A method with its own ``distill_loss`` distils whatever this is."""
    separate_server_rows: bool = False
    """Whether the server model trains on :attr:`Aggregate.server_rows` rather than the rows sent down."""
    uses_logits: bool = False
    """Uploads and targets are raw class scores (logits) rather than probabilities (no entropy is reported)."""
    downlink_from_server: bool = False
    """Whether the fresh rows that go down are :meth:`server_downlink` of the server model's own predictions
    after its training on :attr:`Aggregate.server_rows` (CFD's two-way distillation), not :attr:`Aggregate.rows`."""

    def __init__(self, options: Opt, num_classes: int, seed: int, index_encoding: IndexEncoding, universe: int) -> None:
        self.options = options
        self.num_classes = num_classes
        self.seed = seed
        self.index_encoding = index_encoding
        self.universe = universe

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

    def server_downlink(self, probs: torch.Tensor) -> torch.Tensor:
        """The fresh downlink rows ``[n, D]`` from the trained server model's softmax outputs ``[n, C]`` on the
        round's kept fresh indices (called only when :attr:`downlink_from_server`); identity here."""
        return probs

    def row_width(self) -> int:
        """Width D of one downlink row (C, unless several targets per sample go down)."""
        return self.num_classes

    def downlink_soft_bytes(self, rows: torch.Tensor) -> int:
        """Bytes one client downloads for ``rows`` fresh soft-label rows (float32)."""
        return int(rows.numel()) * 4

    def target_hint(self, cid: int) -> int | None:
        """What client ``cid`` must know to pick its target from the downlink rows (sent with them)."""
        return None

    def distill_loss(self) -> Loss:
        """The clients' distillation loss: KL towards the target, times :attr:`distill_weight`."""
        return weighted_kl(self.distill_weight)

    def server_loss(self) -> Loss:
        """The server model's distillation loss on the aggregated rows."""
        return soft_target_kl

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
        if tuple(up.soft_labels.shape) != (up.indices.numel(), num_classes):  # a plugin's upload(): one line, not a copy's RuntimeError
            raise ConfigError(f"{SECTION}.method", f"client {up.client_id}'s upload() sent soft-labels of shape {tuple(up.soft_labels.shape)} "
                                                   f"for {up.indices.numel()} rows; they must be [{up.indices.numel()}, {num_classes}] (a row per index, a column per class)")
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


# ---------------------------------------------------------------- the spec


def _no_pretraining(options: Any) -> Pretraining | None:
    return None


@dataclass(frozen=True)
class SoftLabelSpec(Generic[Opt]):
    """One soft-label method: everything the protocol, the config and the docs may ask of it.

    ``options``: its own options (a dataclass, parsed beside the shared ``[distillation]``
    options; ``check`` reads those as ``config.distillation_setup``).
    ``server`` / ``client``: its two halves. ``default_cache_duration``: D when
    ``cache_duration`` is unset. ``collaborative``: whether clients share soft-labels at all
    (False: no public set, no server model). ``pretraining``: the public-set pretraining its
    options ask for (None: none). ``check``: its options against the rest of the run, before
    anything is built (a :class:`~chillfl.errors.ConfigError` naming the field).
    ``notes``: what its options say about the rest of the run that is not an error, one warning line each on stderr,
    once a process (a pitfall its options fall into: the run stands, but a reader should know).
    ``figures``: the run figures its round metrics feed besides the protocol's (as an
    aggregator's spec declares them). Its wire messages are the protocol's (:mod:`.messages`):
    a client half uploads a :class:`~.messages.SoftLabelUplink`, whatever it puts in it.
    """

    name: str
    options: type[Opt]
    server: type[SoftLabelMethod[Opt]]
    client: type[SoftLabelClientHalf[Opt, Any]] = SoftLabelClientHooks
    summary: str = ""
    default_cache_duration: int = 0
    collaborative: bool = True
    capabilities: Capabilities = Capabilities()
    pretraining: Callable[[Opt], Pretraining | None] = _no_pretraining
    check: Callable[[Opt, RunConfig], None] | None = None
    figures: tuple[str, ...] = ()
    notes: Callable[[Opt, RunConfig], Sequence[str]] | None = None

    def calls(self) -> list[Hook]:
        """Each hook the runtime calls: (field, the hook or None, the parameters it is called with), checked where the spec is read."""
        return [("pretraining", self.pretraining, ("options",)), ("check", self.check, ("options", "config")), ("notes", self.notes, ("options", "config"))]

    def build(self, options: Opt, num_classes: int, seed: int, index_encoding: IndexEncoding, universe: int) -> SoftLabelMethod[Opt]:
        """The server half for one run."""
        with self._building(" (its server half, called as server(options, num_classes, seed, index_encoding, universe))"):
            return self.server(options, num_classes, seed, index_encoding, universe)

    def client_half(self, options: Opt, num_classes: int, seed: int) -> SoftLabelClientHalf[Opt, Any]:
        """The client half every client runs (the options only, none of the server's state)."""
        with self._building(" (its client half, called as client(options, num_classes, seed))"):
            return self.client(options, num_classes, seed)

    def _building(self, called: str) -> AbstractContextManager[None]:
        """A plugin's half whose constructor raises: one line on ``distillation.method`` (:func:`~chillfl.plugins.building`)."""
        built_in = self.name in built_in_names() and method_settings(self.name) is self
        return building(self.name, f"{SECTION}.method", built_in, called)


def spec_of(setup: DistillationSetup) -> SoftLabelSpec[Any]:
    """The spec of the method ``setup`` names (looked up by the settings, which cannot import this module)."""
    spec = setup.spec
    if not isinstance(spec, SoftLabelSpec):
        raise ConfigError(f"{SECTION}.method", f"{setup.common.method!r} must name a chillfl.extend.SoftLabelSpec, got {short_repr(spec)}")
    return spec
