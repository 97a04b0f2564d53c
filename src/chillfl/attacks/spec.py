"""The seam between the runtime and an attack: a typed spec whose hooks say what the attackers rewrite.

An attack is one :class:`AttackSpec`, ``SPEC`` in the attack's own module (a built-in's module under
``chillfl/attacks/kinds/``, or a user's named by import path or entry point, found the same way:
:mod:`chillfl.settings.attack`). Core code calls only these hooks and never tests which attack runs;
each hook is one of the places where an attacker can act:

* :attr:`AttackSpec.poison`: the attackers' training data, rewritten once before any client is built
  (so it holds under every protocol and executor);
* :attr:`AttackSpec.forge_models`: under parameter sharing, what the attackers upload instead of their
  honest models, given the whole round (:class:`ModelRound`), in the driver before aggregation;
* :attr:`AttackSpec.forge_rows`: under soft-label sharing, an attacker's soft-label rows on the client,
  before they leave it (:class:`RowsUpload`);
* :attr:`AttackSpec.forge_prototypes`: under prototype sharing, an attacker's class prototypes where the
  server receives them (:class:`PrototypeUpload`);
* :attr:`AttackSpec.probe`: a labelled set on which the global model's accuracy is the attack's success
  (``attack_success_rate`` in every record);
* :attr:`AttackSpec.check`: the options (as :attr:`AttackSpec.resolve` fills them in) against the rest of the run,
  before anything is built.
* :attr:`AttackSpec.figures`: the run figures it adds (``attack.png``, accuracy and attack success over rounds,
  unless it says otherwise).

Which protocols an attack runs under follows from its hooks (:meth:`AttackSpec.runs_under`): data
poisoning runs under all of them; a forging hook under its own protocol. Hooks hold no state: a
random draw comes from the run's ``seed`` through :func:`chillfl.seeds.derive_seed`, so every
executor and a resumed run draw the same. This module imports no torch (its types only for checking).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, Mapping, Sequence, TypeVar

from chillfl.errors import ConfigError
from chillfl.options import short_repr
from chillfl.plugins import Hook
from chillfl.settings.attack import AttackConfig

if TYPE_CHECKING:
    import torch

    from chillfl.aggregation.base import ClientResult, Params
    from chillfl.config import RunConfig
    from chillfl.data import FederatedData
    from chillfl.prototypes.spec import ClassRows

Opt = TypeVar("Opt")

PARAMETERS, SOFTLABELS, PROTOTYPES = "parameters", "softlabels", "prototypes"
"""The protocols a forging hook belongs to (:attr:`chillfl.config.RunConfig.protocol`)."""

UPLOADS = {
    PARAMETERS: "its clients upload their models",
    SOFTLABELS: "its clients upload soft-labels on public inputs",
    PROTOTYPES: "its clients upload class prototypes",
}
"""What each protocol's clients send: why an attack that rewrites something else finds nothing there."""


@dataclass(frozen=True)
class ModelRound:
    """One round under parameter sharing, as :attr:`AttackSpec.forge_models` sees it (the attackers collude and see every upload)."""

    global_params: Params
    """The round's global model w (what every client started from, unless :attr:`starts` says otherwise)."""
    results: Sequence[ClientResult]
    """Every upload of the round, honest ones included, in client order."""
    attackers: frozenset[int]
    """The run's attackers (some may not be in this round)."""
    round: int
    seed: int
    """The run's seed: derive a draw from it (:func:`chillfl.seeds.derive_seed`) with the round and the client."""
    starts: Mapping[int, Params] = dataclasses.field(default_factory=dict)
    """Client id -> the model it started from, for each client the method sent a model of its own (cluster models,
    pFedHN's generated ones, FedMut's mutations: ``Downlink.params``); a client not in it started from
    :attr:`global_params`. Client i's update is w_i - :meth:`start` (i), never w_i - w under such a method."""

    def start(self, client_id: int) -> Params:
        """The model ``client_id`` started from this round: the one it was sent, or :attr:`global_params`."""
        return self.starts.get(client_id, self.global_params)

    def by_start(self, results: Sequence[ClientResult]) -> list[tuple[Params, list[ClientResult]]]:
        """``results`` grouped by the model they started from, in order of first appearance: one group, the global
        model's, under a method with one model; an attack that forges one model for all its attackers forges one a group."""
        groups: dict[int, tuple[Params, list[ClientResult]]] = {}
        for r in results:
            start = self.start(r.client_id)
            groups.setdefault(id(start), (start, []))[1].append(r)
        return list(groups.values())

    def onto(self, start: Params, results: Sequence[ClientResult]) -> list[Params]:
        """``results``' models as their updates taken from ``start``: start + (w_j - start_j) on every float entry; a model
        that started from ``start`` itself as it is (so a method with one model reads the very models it uploaded)."""
        import torch

        out: list[Params] = []
        for r in results:
            own = self.start(r.client_id)
            if own is start:
                out.append(r.params)
            else:
                out.append({**r.params, **{k: start[k] + (v - own[k]) for k, v in r.params.items() if k in start and torch.is_floating_point(v)}})
        return out

    @property
    def bad(self) -> list[ClientResult]:
        """The round's attackers' honest results, in client order (never empty when the hook is called)."""
        return [r for r in self.results if r.client_id in self.attackers]

    @property
    def benign(self) -> list[ClientResult]:
        """The round's honest clients' results, in client order."""
        return [r for r in self.results if r.client_id not in self.attackers]


@dataclass(frozen=True)
class RowsUpload:
    """One attacker's soft-label rows of one round on the client, as :attr:`AttackSpec.forge_rows` sees them."""

    rows: torch.Tensor
    """Probabilities, one row per public input (logits where :attr:`logits`)."""
    client_id: int
    round: int
    seed: int
    logits: bool
    """Whether the method shares logits instead of probabilities (then the rows need not sum to 1)."""


@dataclass(frozen=True)
class PrototypeUpload:
    """One attacker's class prototypes of one round where the server receives them, as :attr:`AttackSpec.forge_prototypes` sees them."""

    rows: ClassRows
    client_id: int
    round: int
    seed: int


@dataclass(frozen=True)
class AttackSpec(Generic[Opt]):
    """One attack: everything the runtime, the config and ``chillfl list`` may ask of it.

    ``options``: its own options (a frozen dataclass with an optional ``validate(section)``), parsed from
    ``[attack]`` beside the options every attack shares (``kind``, ``fraction``, ``clients``). Each hook
    receives the parsed options first; leave out the ones the attack does not use (at least one is needed):

    * ``poison(options, data, attackers, seed)``: the run's :class:`~chillfl.data.FederatedData` with the
      attackers' training rows rewritten (a new object; never mutate ``data``); a pixel pattern goes in as marks
      (:meth:`~chillfl.data.FederatedData.with_stamps`), which an augmented training batch stamps after its
      crop and flip (:mod:`chillfl.data.stamp`), so the pattern stays where the probe has it;
    * ``forge_models(options, round)``: attacker id -> the model it sends (every entry of its honest
      model's state), for the round's attackers (``round.bad``); an id left out sends its honest model;
    * ``forge_rows(options, upload)``: the soft-label rows the attacker sends instead of ``upload.rows``;
    * ``forge_prototypes(options, upload)``: the :class:`~chillfl.prototypes.spec.ClassRows` it sends;
    * ``probe(options, data)``: inputs and labels on which the global model's accuracy is recorded as
      ``attack_success_rate`` each round (e.g. triggered inputs labelled with the backdoor's target);
    * ``check(options, config)``: refuse a run these options make no sense in (a
      :class:`~chillfl.errors.ConfigError` naming the field); given the options ``resolve`` returns;
    * ``resolve(options, attackers)``: the options with what the run's attackers decide filled in (``dba``'s
      ``parts`` left unset: one local trigger per attacker, at most 4); called first, and every other hook, ``check``
      included, is given what it returns, so an option whose default depends on the attackers is decided once, the
      same way in each.

    ``figures``: the run figures it adds, by name (:func:`chillfl.plots.registry.register_figure`), drawn after the
    run: ``attack`` (global accuracy and ``attack_success_rate`` over rounds; written only where the records hold
    that rate, i.e. with a ``probe``) by default; an attack with round metrics of its own adds its figure beside it.
    """

    name: str
    options: type[Opt]
    summary: str = ""
    poison: Callable[[Opt, FederatedData, frozenset[int], int], FederatedData] | None = None
    forge_models: Callable[[Opt, ModelRound], Mapping[int, Params]] | None = None
    forge_rows: Callable[[Opt, RowsUpload], torch.Tensor] | None = None
    forge_prototypes: Callable[[Opt, PrototypeUpload], ClassRows] | None = None
    probe: Callable[[Opt, FederatedData], tuple[torch.Tensor, torch.Tensor]] | None = None
    check: Callable[[Opt, RunConfig], None] | None = None
    resolve: Callable[[Opt, frozenset[int]], Opt] | None = None
    figures: tuple[str, ...] = ("attack",)

    def calls(self) -> list[Hook]:
        """Each hook the runtime calls: (field, the hook or None, the parameters it is called with), checked where the spec is read."""
        return [
            ("poison", self.poison, ("options", "data", "attackers", "seed")), ("forge_models", self.forge_models, ("options", "round")),
            ("forge_rows", self.forge_rows, ("options", "upload")), ("forge_prototypes", self.forge_prototypes, ("options", "upload")),
            ("probe", self.probe, ("options", "data")), ("check", self.check, ("options", "config")),
            ("resolve", self.resolve, ("options", "attackers")),
        ]

    def __post_init__(self) -> None:
        if self.poison is None and not self.rewrites():
            raise ValueError(f"attack {self.name!r} has no hook: give it poison, forge_models, forge_rows or forge_prototypes")

    def rewrites(self) -> dict[str, str]:
        """Protocol -> what the attack rewrites there, one entry per forging hook it has."""
        out = {}
        if self.forge_models is not None:
            out[PARAMETERS] = "a model update"
        if self.forge_rows is not None:
            out[SOFTLABELS] = "soft-label rows"
        if self.forge_prototypes is not None:
            out[PROTOTYPES] = "class prototypes"
        return out

    def runs_under(self, protocol: str) -> bool:
        """Whether the attack acts under ``protocol``: data poisoning acts under every one, a forging hook under its own."""
        return self.poison is not None or protocol in self.rewrites()


def spec_of(attack: AttackConfig) -> AttackSpec[Any]:
    """The spec of ``[attack]``'s kind (which must be on); a ConfigError on ``attack.kind`` when it names no :class:`AttackSpec`."""
    spec = attack.spec
    if not isinstance(spec, AttackSpec):
        raise ConfigError("attack.kind", f"{attack.kind!r} must name a chillfl.extend.AttackSpec, got {short_repr(spec)}")
    return spec


def resolved(attack: AttackConfig, ids: frozenset[int]) -> AttackConfig:
    """``attack`` with its options as its kind's ``resolve`` hook fills them in for the attackers ``ids`` (as written
    when it has none, or ``[attack]`` is off): what every other hook of the run is given."""
    if not attack.enabled:
        return attack
    resolve = spec_of(attack).resolve
    if resolve is None:
        return attack
    options = resolve(attack.options, ids)
    if type(options) is not type(attack.options):  # a plugin's hook: one line, not an AttributeError in the next hook
        raise ConfigError("attack.kind", f"the attack's resolve hook must return its options ({type(attack.options).__name__}), got {type(options).__name__}")
    return dataclasses.replace(attack, options=options)


def check_forged(hook: str, client_id: int, sent: Mapping[str, Any], honest: Mapping[str, Any]) -> None:
    """What a forging hook returned for one attacker has the honest upload's entries, shapes and dtypes; else one
    ConfigError on ``attack.kind``.

    Why: the hook is a plugin's code, and an entry it drops or reshapes would otherwise surface as a RuntimeError or
    AttributeError deep in aggregation (or as the aggregator's own error, naming ``algorithm.name``, which is not at fault).
    """
    import torch

    for key, want in honest.items():
        got = sent.get(key)
        if got is None:
            raise ConfigError("attack.kind", f"the attack's {hook} returned for client {client_id} no {key!r}; return every entry of the honest upload")
        if not isinstance(got, torch.Tensor):
            raise ConfigError("attack.kind", f"the attack's {hook} returned for client {client_id} {key!r} as {type(got).__name__}, the honest upload's is a "
                                             f"{type(want).__name__}")
        if tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
            raise ConfigError("attack.kind", f"the attack's {hook} returned for client {client_id} {key!r} as {tuple(got.shape)} {got.dtype}, "
                                             f"the honest upload's is {tuple(want.shape)} {want.dtype}")
    extra = [k for k in sent if k not in honest]
    if extra:
        raise ConfigError("attack.kind", f"the attack's {hook} returned for client {client_id} entries the honest upload has not: {', '.join(map(repr, extra[:3]))}")


def as_mapping(sent: object, hook: str, client_id: int) -> Mapping[str, Any]:
    """``sent`` when it is a mapping of entries (a forged model); else a ConfigError on ``attack.kind``."""
    if not isinstance(sent, Mapping):
        raise ConfigError("attack.kind", f"the attack's {hook} returned for client {client_id} a {type(sent).__name__}, not a model (a name -> tensor mapping)")
    return sent


def as_tensor(sent: object, hook: str, client_id: int) -> Any:
    """``sent`` when it is a tensor (forged rows); else a ConfigError on ``attack.kind``."""
    import torch

    if not isinstance(sent, torch.Tensor):
        raise ConfigError("attack.kind", f"the attack's {hook} returned for client {client_id} a {type(sent).__name__}, not a tensor of rows")
    return sent
