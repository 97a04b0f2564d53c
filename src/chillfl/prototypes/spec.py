"""The seam between the prototype-sharing protocol and a method: a typed spec with client and server hooks.

A prototype method is one :class:`PrototypeSpec`, ``SPEC`` in the method's own module: its
options dataclass, its hooks (:class:`PrototypeHooks`), whether its clients also send their
models, its capabilities and an optional ``check``. The protocol
(:mod:`chillfl.protocols.prototypes`) trains, evaluates and keeps the books; it calls only
these hooks and never tests which method runs:

* client: :meth:`PrototypeHooks.release` turns the client's representations and logits on its
  private split into the :class:`ClassRows` it uploads (class means and counts, plus the
  method's own per-class rows, e.g. FedHKD's soft predictions); :meth:`PrototypeHooks.loss` is
  its local objective (a :class:`~chillfl.prototypes.maths.PrototypeLoss`, which reads the
  round's :class:`Knowledge` from the job's context);
* server: :meth:`PrototypeHooks.combine` turns the round's uploads into the global
  :class:`Knowledge` sent down next round; :meth:`PrototypeHooks.initial` is the method's
  rows before any client reported.

What the prototypes are class means of is the hooks' :attr:`PrototypeHooks.space`: the model's
representation (``"features"``, the input of its classifier head: FedProto, FedHKD, FedGH) or
its logits (``"logits"``: FedDistill's per-class average logits). The protocol reads it where it
measures or sizes the prototypes itself (the nearest-prototype metrics, their width before any
client reported, one representation width across architectures); the default
:meth:`PrototypeHooks.release` takes its class means of it.

A method whose server keeps *parameters* it trains itself and sends whole (a global head
trained on the uploaded class means, FedGH's) uses three more hooks, all no-ops by default:
:meth:`PrototypeHooks.initial_params` (their start, from the default architecture's initial
head), :meth:`PrototypeHooks.update` (the server step, which also sees the previous
knowledge and the round) and :meth:`PrototypeHooks.start` (what a client's model starts
the round from, given the knowledge it received; the global evaluation measures each
client's model through it too). They travel in :attr:`Knowledge.params`, counted whole. A server that
trains something it never sends (FedTGP's prototype generator) keeps it in :attr:`Knowledge.server`:
checkpointed with the knowledge, stripped from every downlink, counted nowhere.

Wire messages: a method has none of its own. Its per-class rows travel, by name, inside the
protocol's ``KnowledgeUplink`` / ``KnowledgeDownlink`` (counted as rows of the known classes),
reach the loss as context entries of the same name, and are saved in checkpoints under it.
The hooks hold the options only (no server state): they travel to worker processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, Generic, Literal, Mapping, Sequence, TypeVar

import torch

from chillfl.capabilities import Capabilities
from chillfl.config import RunConfig
from chillfl.engine.record import Json
from chillfl.plugins import Hook
from chillfl.training.local import BaseLoss
from chillfl.training.objective import Wire

from .maths import PrototypeLoss, Weighting, aggregate_means, class_means

Opt = TypeVar("Opt")

RESERVED = frozenset({"protos", "proto_mask", "mask", "params", "server"})
"""Names a method's own per-class rows cannot take: the prototypes' own context and checkpoint entries."""

Params = Mapping[str, torch.Tensor]

Space = Literal["features", "logits"]
"""What a method's prototypes are class means of: the model's representation (the input of its classifier head) or its logits."""


@dataclass(frozen=True)
class Head:
    """The parameter names of the model's classifier head (:func:`chillfl.models.parts.head_name`), for terms that apply it to the prototypes."""

    weight: str
    bias: str | None = None
    frozen: bool = False
    """Whether any of them is frozen (``requires_grad = False``, :attr:`~chillfl.training.local.LocalSpec.frozen`): a
    method that trains the head outside the clients' training (FedGH's server) must not move it."""


@dataclass(frozen=True)
class ClassRows:
    """What one client releases about its classes: means ``[C, d]``, counts ``[C]`` (int64), the method's own rows.

    ``extra``: per-class rows ``[C, w]`` by name (FedHKD: ``soft``, the mean softmax per class),
    averaged by the server like the means unless the method combines them its own way.
    """

    means: torch.Tensor
    counts: torch.Tensor
    extra: Mapping[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        clash = RESERVED & set(self.extra)
        if clash:
            raise ValueError(f"a method's per-class rows cannot be named {sorted(clash)}: the protocol's own entries")

    def width(self) -> int:
        """Floats per class row on the wire: the mean's and every extra row's."""
        return int(self.means.shape[1]) + sum(int(t.shape[1]) for t in self.extra.values())


@dataclass
class Knowledge:
    """The server's global knowledge: prototypes ``[C, d]``, the known-class mask ``[C]``, the method's global rows by name.

    ``params``: tensors the server trains itself and sends whole, by name (FedGH's global head,
    ``weight`` and ``bias``); none for a method that only averages rows. Not in the loss's context:
    :meth:`PrototypeHooks.start` puts them into the client's model.

    ``server``: tensors the server keeps between rounds and never sends, by name (FedTGP's prototype
    generator): in checkpoints, not in any downlink (:meth:`sent`), so not in the bytes either.
    """

    protos: torch.Tensor
    mask: torch.Tensor
    extra: dict[str, torch.Tensor] = field(default_factory=dict)
    params: dict[str, torch.Tensor] = field(default_factory=dict)
    server: dict[str, torch.Tensor] = field(default_factory=dict)

    def width(self) -> int:
        """Floats per class row on the wire."""
        return int(self.protos.shape[1]) + sum(int(t.shape[1]) for t in self.extra.values())

    def context(self) -> dict[str, Wire]:
        """What the local objective reads: ``protos``, ``proto_mask`` and the method's rows under their names."""
        return {"protos": self.protos, "proto_mask": self.mask, **self.extra}

    def to(self, device: torch.device | str) -> Knowledge:
        return Knowledge(
            self.protos.to(device),
            self.mask.to(device),
            {k: v.to(device) for k, v in self.extra.items()},
            {k: v.to(device) for k, v in self.params.items()},
            {k: v.to(device) for k, v in self.server.items()},
        )

    def sent(self) -> Knowledge:
        """What goes down to the clients: everything but :attr:`server` (itself when there is none)."""
        return replace(self, server={}) if self.server else self

    def state_dict(self) -> dict[str, Any]:
        """Rows by name; ``params`` and ``server`` as one table each, only when there are some (so that other methods'
        checkpoints are unchanged)."""
        tables = {name: dict(t) for name, t in (("params", self.params), ("server", self.server)) if t}
        return {"protos": self.protos, "mask": self.mask, **self.extra, **tables}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Knowledge:
        """The inverse of :meth:`state_dict` (an entry saved as None, by older checkpoints, is no row)."""
        protos, mask = state["protos"], state["mask"]
        assert protos is not None and mask is not None
        extra = {k: v for k, v in state.items() if k not in RESERVED and v is not None}
        return cls(protos, mask, extra, dict(state.get("params") or {}), dict(state.get("server") or {}))


def average_rows(releases: Sequence[ClassRows], weighting: Weighting = "count") -> Knowledge:
    """Each class's mean and each of the method's rows averaged over the clients that hold the class
    (:func:`~chillfl.prototypes.maths.aggregate_means`, with every client's counts)."""
    counts = [r.counts for r in releases]
    protos, mask = aggregate_means([r.means for r in releases], counts, weighting)
    extra = {name: aggregate_means([r.extra[name] for r in releases], counts, weighting)[0] for name in releases[0].extra}
    return Knowledge(protos, mask, extra)


class PrototypeHooks(Generic[Opt]):
    """A prototype method's client and server hooks; the defaults are plain prototype sharing (FedProto with lambda = 1).

    Built once per run from the options (:meth:`PrototypeSpec.build`); it holds no server state,
    so one object serves the server and travels to every client.
    """

    space: ClassVar[Space] = "features"
    """What the prototypes (:attr:`Knowledge.protos`, :attr:`ClassRows.means`) are class means of: the representation
    (``[n, d]``, the default) or the logits (``[n, C]``). The protocol's nearest-prototype metrics measure that
    space, the prototypes start ``[C, d]`` or ``[C, C]``, and only ``"features"`` needs one representation width
    across architectures."""

    def __init__(self, options: Opt, num_classes: int, seed: int) -> None:
        self.options = options
        self.num_classes = num_classes
        self.seed = seed
        """The run's seed: derive a client's randomness from it (:func:`chillfl.seeds.derive_seed`), never from a global generator."""

    def represent(self, features: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """Of a model's representations and logits, the ones the prototypes live among (:attr:`space`)."""
        return features if self.space == "features" else logits

    # ---- client

    def release(self, cid: int, round: int, features: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> ClassRows:
        """What client ``cid`` uploads after training, from its trained model's representations ``[n, d]`` and logits
        ``[n, C]`` on its private split (labels ``y``); default: the class means (of :attr:`space`) and counts."""
        means, counts = class_means(self.represent(features, logits), y, self.num_classes)
        return ClassRows(means, counts)

    def loss(self, head: Head) -> BaseLoss:
        """The clients' local objective (one per architecture: ``head`` names its last layer's parameters)."""
        return PrototypeLoss(1.0)

    # ---- server

    def initial(self) -> dict[str, torch.Tensor]:
        """The method's global rows before any client reported (every class unknown); default: none."""
        return {}

    def combine(self, releases: Sequence[ClassRows]) -> Knowledge:
        """The round's global knowledge from the sampled clients' uploads (in client order); default: count-weighted means."""
        return average_rows(releases)

    # ---- parameters the server trains and sends whole (FedGH's global head): no-ops by default

    def initial_params(self, head: Params) -> dict[str, torch.Tensor]:
        """The server's own parameters before round 1, from the default architecture's initial head
        (``weight`` ``[C, d]`` and, when it has one, ``bias`` ``[C]``); default: none."""
        return {}

    def update(self, previous: Knowledge, releases: Sequence[ClassRows], round: int) -> Knowledge:
        """The server step of round ``round`` (0-based): the next global knowledge from the previous one and the uploads.

        Default: :meth:`combine` (a method whose server keeps nothing between rounds), any
        :attr:`Knowledge.params` and :attr:`Knowledge.server` carried over unchanged. A method that trains
        its ``params`` (or its ``server`` state) on the uploads overrides this (randomness: from ``self.seed``
        and ``round``).
        """
        out = check_knowledge(self.combine(releases), previous)
        if previous.params and not out.params:
            out = replace(out, params=dict(previous.params))
        return replace(out, server=dict(previous.server)) if previous.server and not out.server else out

    def round_metrics(self, knowledge: Knowledge, releases: Sequence[ClassRows], round: int) -> Mapping[str, Json]:
        """The method's own numbers of round ``round``'s server step (``knowledge``: what :meth:`update` returned from
        ``releases``), written to ``metrics.jsonl`` with the ``agg_`` prefix (:attr:`~chillfl.engine.record.RoundRecord.method`,
        as an aggregator's ``round_metrics``); default: none. The hooks keep no state: recompute from the arguments."""
        return {}

    def start(self, params: Params, knowledge: Knowledge, head: Head) -> Params:
        """The model a client starts its training from: its own (or the shared) model ``params`` and the knowledge it
        received (``head`` names its architecture's last layer). Default: ``params`` unchanged. The global evaluation
        measures each client's kept model through it too (the model it would start its next round from)."""
        return params


def _keeps_models(options: Any) -> bool:
    return False


@dataclass(frozen=True)
class PrototypeSpec(Generic[Opt]):
    """One prototype method: everything the protocol, the config and ``chillfl list`` may ask of it.

    ``options``: its options (a dataclass with an optional ``validate(section)``), parsed from
    ``[prototypes]`` beside ``method``. ``hooks``: the class of its hooks. ``shares_model``:
    whether, with these options, clients also upload their models, which the server averages
    with ``[algorithm]`` (then every client trains one architecture); otherwise each client keeps
    its own. ``check``: its options against the rest of the run, before anything is built (a
    :class:`~chillfl.errors.ConfigError` naming the field).
    """

    name: str
    options: type[Opt]
    hooks: type[PrototypeHooks[Opt]] = PrototypeHooks
    summary: str = ""
    shares_model: Callable[[Opt], bool] = _keeps_models
    capabilities: Capabilities = Capabilities()
    check: Callable[[Opt, RunConfig], None] | None = None
    capabilities_of: Callable[[Opt], Capabilities] | None = None
    """What it declares under its parsed options, where they change it (FedGH's cost grows with its ``server_epochs``);
    None: ``capabilities`` under any options."""
    global_prototypes: bool = True
    """Whether its server keeps global class prototypes (a :class:`Knowledge` whose ``mask`` sets classes). False (FedGH's
    server trains a header only, its mask always empty): no model is measured by nearest prototype on the test set
    (``global_proto_acc`` stays empty). The time estimates no longer read it: the accuracy by nearest prototype reads the
    representations of the model's own test pass (:class:`~chillfl.protocols.prototypes.HeadTap`), one pass a model either way."""

    def calls(self) -> list[Hook]:
        """Each hook the runtime calls: (field, the hook or None, the parameters it is called with), checked where the spec is read."""
        return [("shares_model", self.shares_model, ("options",)), ("check", self.check, ("options", "config")),
                ("capabilities_of", self.capabilities_of, ("options",))]

    def declared(self, options: Opt) -> Capabilities:
        """What it declares under ``options`` (:attr:`capabilities_of`, else :attr:`capabilities`)."""
        return self.capabilities if self.capabilities_of is None else self.capabilities_of(options)

    def build(self, options: Opt, num_classes: int, seed: int) -> PrototypeHooks[Opt]:
        """The hooks for one run."""
        return self.hooks(options, num_classes, seed)


def check_knowledge(new: object, old: Knowledge) -> Knowledge:
    """The server step's :class:`Knowledge` when its prototypes and mask keep the previous round's shapes; else one
    ConfigError on ``prototypes.method`` (a plugin's ``combine`` / ``update`` slip, which would otherwise be an
    AttributeError or a shape error in the clients' loss)."""
    from chillfl.errors import ConfigError

    if not isinstance(new, Knowledge):
        raise ConfigError("prototypes.method", f"the method's combine/update returned a {type(new).__name__}, not a chillfl.extend.Knowledge")
    for name, got, want in (("protos", new.protos, old.protos), ("mask", new.mask, old.mask)):
        if tuple(got.shape) != tuple(want.shape):
            raise ConfigError("prototypes.method", f"the method's combine/update returned {name} as {tuple(got.shape)}, the knowledge's is {tuple(want.shape)}")
    return new
