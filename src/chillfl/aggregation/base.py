"""What clients send back, and the server-side aggregation contract.

A round of the parameter-sharing protocol is::

    for each sampled client:  downlink = aggregator.downlink(cid, round)   # extra context, optional start params
                              result   = train(global or downlink.params, objective(ctx))
    global = aggregator.aggregate(global, results, round)                   # results sorted by client id

Aggregators own the *server's* state (SCAFFOLD's control c, FedOpt moments,
PA3Fed's FGN(t-1)) as plain attributes, so that nothing hides in module
globals, exposed through ``state_dict()`` / ``load_state_dict()`` for
checkpoints: nested dicts with string keys, lists, tensors and plain scalars,
restored so that a resumed run is bitwise the one that never stopped.

A client's own state (SCAFFOLD's c_i, FedBN's BN entries, MOON's previous
model, PA3Fed's previous score) is never the aggregator's: the aggregator's
:class:`ClientHalf` reads and returns it around the client's training, and
the runtime keeps it with the client (:class:`ClientState`).
"""

from __future__ import annotations

import logging
import os
import typing
from abc import abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Collection, Generator, Literal, Mapping, Protocol, Sequence, runtime_checkable

import torch
from torch import nn

from chillfl.engine.record import Json
from chillfl.errors import ConfigError
from chillfl.options import coerce
from chillfl.once import warn_once
from chillfl.state_keys import check_state_keys  # re-exported: methods and plugins import it from here
from chillfl.training.objective import Context, LossTerm, Wire
from chillfl.training.optim import Carried

if TYPE_CHECKING:  # annotations only: the aggregators stay importable without the training loop
    from chillfl.training.local import LocalOutcome, LocalSpec
    from chillfl.training.terms import Term

log = logging.getLogger(__name__)

Params = dict[str, torch.Tensor]
"""A model's state as a flat name -> tensor dict (parameters and buffers)."""


Report = dict[str, Wire]
"""What a client half reports after training (PA3Fed's ``score``/``grad_norm``/``alpha``, SCAFFOLD's ``control_delta``)."""

ClientState = dict[str, torch.Tensor]
"""A client's own tensors between its participations (SCAFFOLD's c_i, FedBN's BN entries, MOON's previous model, ...).

Each method's client half owns the keys under its prefix (``scaffold.``, ``fedbn.``, ``moon.``, ``pa3fed.``), so
halves compose (PA3Fed over SCAFFOLD) without clashing. It is plain tensors so that every runtime can keep it
the same way: chillfl's server-side store and checkpoint, or a Flower node's ``Context.state``."""


@dataclass
class ClientResult:
    """Uplink of one client after local training.

    ``params`` is the client's full state after training (parameters and
    buffers, detached). ``report`` is what its method's client half reported,
    e.g. ``grad_norm`` (PA3Fed FGN) or ``score`` (PA3Fed Eq. 8).
    """

    client_id: int
    params: Params
    num_samples: int
    num_steps: int
    lr: float
    temperature: float
    train_loss: float
    report: Report = field(default_factory=dict)


@dataclass
class Downlink:
    """Per-client message from the server besides the global model.

    ``params``: start from these instead of the global model (FedMut's mutated
    models); keys absent from it come from the global model.
    ``context``: values the local objective's terms read (e.g. ``mu``,
    ``control`` for SCAFFOLD's correction).
    ``local``: the context entries the client holds already, so they cost no
    bytes on the wire: the model it was sent (FedProx's and MOON's anchor) and
    its own previous model (MOON's, on the client in the paper).
    ``held``: entries of the start model the client holds already and its
    client half puts in place of the sent ones (a head it keeps), so they
    cost no bytes on the wire either, unless an ``[objective]`` anchor
    (``proximal_mu``, ``ntd``) reads the server's values of them: then they
    are priced (parameters only under ``proximal_mu``, which reads no buffers).
    """

    params: Params | None = None
    context: dict[str, Wire] = field(default_factory=dict)
    local: tuple[str, ...] = ()
    held: tuple[str, ...] = ()


@dataclass(frozen=True)
class Trained:
    """One client's finished local training, as its method's client half sees it."""

    client_id: int
    x: torch.Tensor
    y: torch.Tensor
    start: Params
    """The model the client started from (after :meth:`ClientHalf.prepare`)."""
    sent: Context
    """The context as the server sent it (before :meth:`ClientHalf.prepare`)."""
    context: Context
    """The context the client trained with."""
    lr: float
    temperature: float
    params: Params
    """The state after training."""
    num_steps: int


class ClientHalf(Protocol):
    """The part of a method that runs on the client, around its local training.

    It travels to the clients (worker processes, Ray actors, Flower nodes), so it
    carries options only, never server state. The client's own state between
    participations comes in as ``state`` and goes out as the returned state: the
    runtime keeps it (chillfl's store, a Flower node's ``Context.state``), the
    half never does.
    """

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        """The start model and the objective's context the client trains with, completed from its own ``state``."""
        ...

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        """The client's next own state (its entries only) and its report to the server; ``model`` is the template."""
        ...


@dataclass(frozen=True)
class Local:
    """A client's local training as a :class:`Personalising` half starts it (after :meth:`ClientHalf.prepare`)."""

    client_id: int
    x: torch.Tensor
    y: torch.Tensor
    start: Params
    context: Context
    lr: float
    """The round's learning rate."""
    state: ClientState
    """The client's own state as it came in (its personal model, APFL's alpha, ...)."""
    seed: int
    """The client's seed this round (derive further streams from it, e.g. pFedMe's batch order)."""
    spec: LocalSpec
    """The run's own objective and optimiser (its batch size and epochs, e.g. for pFedMe's outer steps)."""


@dataclass(frozen=True)
class Train:
    """One local training a :class:`Personalising` half asks for: a job of the one training path, batched by every executor."""

    start: Params
    context: Context
    objective: int | None = None
    """Index into the half's :meth:`Personalising.objectives` (None: the run's own objective and optimiser)."""
    lr: float | None = None
    """None: the round's learning rate."""
    rows: torch.Tensor | None = None
    """Indices of the client's training samples this training sees (pFedMe's one batch); None: all of them."""
    carry: Carried | None = None
    """The optimiser state this training starts from and returns (:attr:`~chillfl.engine.protocol.ClientJob.carry`:
    Local-only's ``keep_optimizer_state``); None: the zero state."""


@dataclass(frozen=True)
class Personal:
    """What a :class:`Personalising` half's trainings end with."""

    params: Params
    """The model sent to the server (what :meth:`ClientHalf.finish` sees as ``trained.params``)."""
    num_steps: int
    train_loss: float
    personal: Params | None = None
    """The client's own model, which its local accuracy measures; None: ``params``."""
    state: ClientState = field(default_factory=dict)
    """The half's own entries these trainings leave (Ditto's v_i under its prefix): kept with what ``finish`` returns."""
    report: Report = field(default_factory=dict)
    """What these trainings report to the server besides ``finish``'s report (FedFomo's weights of the models it was sent)."""


LocalProgram = Generator[Train, "LocalOutcome", Personal]
"""A personalising half's local training: yields :class:`Train` requests, receives their outcomes, returns :class:`Personal`."""


@runtime_checkable
class Personalising(Protocol):
    """A client half that runs its own local trainings and keeps a personal model (Ditto, FedRep, APFL, pFedMe).

    Every training is a :class:`Train` request that the parameter-sharing
    client turns into a :class:`~chillfl.engine.protocol.ClientJob` and yields,
    so that each executor trains it as it trains any job (the vectorised one
    batches the same request of every client). Objectives other than the
    run's are made once per run by :meth:`objectives` from the run's spec
    (more terms, other epochs, frozen keys, a paired model), so that the
    executors see one spec object per objective and group by it.
    """

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        """The further objectives the trainings name by index, derived from the run's ``spec``."""
        ...

    def train(self, local: Local) -> LocalProgram:
        """The client's trainings this round, ending with the uploaded model and its personal one."""
        ...


@dataclass(frozen=True)
class PlannedStage:
    """One training a :class:`Personalising` half runs each round besides the run's own, as it declares it for the check
    before the run (:class:`PlansStages`): which of its :meth:`~Personalising.objectives` it trains (its epochs and
    schedule are that spec's), which of its options sets its length, and its rows and lr where not the run's."""

    objective: int
    """Index into the half's :meth:`~Personalising.objectives` (the spec that carries the stage's epochs)."""
    option: str
    """The method's option that sets the stage's length (``head_epochs``): the refusal names it, under the method's table."""
    lr: float | None = None
    """The stage's own lr, the same every round (FedPAC's ``head_lr``); None: the round's lr (the run's schedule over rounds)."""
    rows: int | None = None
    """The rows one training of the stage sees at most (pFedMe's one batch); None: the client's training rows."""


@runtime_checkable
class PlansStages(Protocol):
    """A :class:`Personalising` half that declares the trainings it runs besides the run's own (FedRep's head, Ditto's
    personal model, a fine-tuning), so that the check before the run counts their steps too.

    Why: a schedule over local steps (``client.lr_schedule_over = "steps"``) runs over each training's own planned steps,
    and a stage with more epochs takes it further down; found only when the stage first trains, a run was refused in
    round 1 or, with an lr decayed over rounds, hours later (a checkpointed run then leaves a ``.partial`` folder). A
    half that declares nothing is still refused when the stage trains (:func:`~chillfl.training.local.check_step_floor`)."""

    def planned_stages(self, spec: LocalSpec) -> tuple[PlannedStage, ...]:
        """The stages a round runs from the run's ``spec`` (as :meth:`~Personalising.objectives` is given it); a stage run
        several times a round (pFedMe's inner problem, once a batch) restarts its schedule each time, so counts once."""
        ...


@runtime_checkable
class SkipsOwnTraining(Protocol):
    """A :class:`PlansStages` half whose declared stages may be all its trainings: it may never run the run's own training
    (``client.epochs`` over the client's rows at the round's lr), as pFedMe's half runs only its inner problems.

    Why: the check before the run counted that training for every method, so a schedule over local steps that its
    ``client.epochs`` count took below float32's smallest normal lr refused pFedMe over a training it never runs, while
    its inner problem (a declared stage) stayed within it. Asked of a :class:`PlansStages` half only: the stages it
    declares are then what the check counts; a half that declares none is still counted as running the run's training."""

    def runs_own_training(self) -> bool:
        """Whether the client's trainings include the run's own one (False: only the declared stages)."""
        ...


@runtime_checkable
class HoldsPersonalModel(Protocol):
    """A client half whose state holds the client's own model: FedBN's, FedPer's and FedRep's local entries, Ditto's v_i, APFL's v_i and alpha_i.

    ``checkpoint.client_models`` saves these models. pFedMe keeps none: its theta_i is
    made anew from each round's global model, so it has no model between rounds. Full pFedHN's half keeps no state
    but has a model all the same: the one its server makes for the client (:class:`MakesClientModels`), h(v_i; phi).
    """

    def personal_model(self, state: ClientState, global_model: Params) -> Params:
        """The client's model from its state, completed by the current global model where the method shares a part."""
        ...


@runtime_checkable
class AggregatesNobody(Protocol):
    """An aggregator whose ``aggregate`` is defined for a round in which no client reported (``results`` empty) and
    gives a new global model all the same: DP-FedAvg's server noise released alone (McMahan et al. 2018, Algorithm 1),
    :class:`~chillfl.privacy.aggregate.PrivateAggregation`. Why a capability: every other aggregator's mean over no
    client is undefined, so the round loop skips such a round unless the protocol's aggregator says it releases one.
    """

    def aggregates_nobody(self) -> bool:
        """Whether ``aggregate(global_params, [], round)`` releases this round's model (False: the round is skipped)."""
        ...


@runtime_checkable
class TrainsEveryClient(Protocol):
    """An aggregator whose method trains every client with training rows each round, from the round's global model,
    while only the round's reporting clients' uploads reach its ``aggregate`` (pFedMe's Algorithm 1 with
    ``train = "all"``: w^t is sent to all N clients, all N train, the sampled S are averaged).

    Why a capability: the round loop configures and trains the clients it aggregates, and a method whose personalised
    accuracy is that of every client freshly trained each round needs the others trained too. Where it says so, the
    parameter-sharing protocol asks the loop to train the clients that do not report as well
    (:class:`~chillfl.engine.protocol.TrainsUnreported`): their downlinks are priced (``bytes_down``), their states
    kept, their local accuracy measured, and their uploads dropped unpriced before ``server_update``, so that no
    ``aggregate``, ``[privacy]`` or ``[attack]`` layer sees them. The availability draw (dropout, stragglers) concerns
    the reporting clients only: a client that does not report trains all its steps.
    """

    def trains_every_client(self) -> bool:
        """Whether every client with training rows trains each round (False: only the reporting ones, as any method's)."""
        ...


def trains_every_client(aggregator: object) -> bool:
    """Whether ``aggregator``, or the first level down its :class:`AroundAggregator` chain that answers
    (:class:`TrainsEveryClient`), trains every client each round. Why the chain: a ``[privacy]`` or ``[attack]`` wrapper
    acts on the uploads that reach ``aggregate`` and leaves who trains to its base."""
    while aggregator is not None:
        if isinstance(aggregator, TrainsEveryClient):
            return aggregator.trains_every_client()
        aggregator = aggregator.base if isinstance(aggregator, AroundAggregator) else None
    return False


@runtime_checkable
class MakesClientModels(Protocol):
    """An aggregator that makes part of each client's model itself, from what it holds for that client (pFedHN's
    hypernetwork generates theta_i = h(v_i; phi)): the model a client's :class:`HoldsPersonalModel` completes is then
    the global model with these entries, not the global model alone, as each client is sent it.
    """

    def client_model(self, client_id: int, global_params: Params) -> Params:
        """The entries the server makes for ``client_id`` now, on the devices and in the dtypes of ``global_params``."""
        ...


@runtime_checkable
class StartsOwnState(Protocol):
    """A client half whose client holds its own state before its first participation (FML's local model, initialised
    independently of the global one as its authors do, rather than copied from the model the client is first sent).

    The parameter-sharing client asks it for the state of a client that has none yet, in place of the empty state, so
    the first training starts from it and :meth:`HoldsPersonalModel.personal_model` of it is the model that would be
    trained. It must be a pure function of the client's id and what the half carries (the run's seed), never of a
    global generator, so that every executor, process and resumed run see the same state.
    """

    def first_state(self, client_id: int, start: Params) -> ClientState:
        """The client's own entries before its first participation (empty: none); ``start`` is the model it is first sent
        (its entries' devices and dtypes)."""
        ...


def half_parts(half: ClientHalf | None) -> tuple[ClientHalf | None, ...]:
    """The halves ``half`` combines (:class:`Halves`: PA3Fed's over its base's), or ``half`` alone: what each capability
    is asked of, so that a capability of the base's half holds under PA3Fed as without it."""
    return half.parts if isinstance(half, Halves) else (half,)


def first_state(half: ClientHalf | None, client_id: int, start: Params) -> ClientState:
    """The own state a client of ``half`` holds before its first participation: its parts' :class:`StartsOwnState`
    entries (empty when none starts any)."""
    state: ClientState = {}
    for part in half_parts(half):
        if isinstance(part, StartsOwnState):
            state.update(part.first_state(client_id, start))
    return state


@runtime_checkable
class KeepsEntries(Protocol):
    """A client half that, once it has finished a round, puts its own values of some entries in place of the sent ones.

    FedBN's BN entries, FedPer's and FedRep's head, LG-FedAvg's representation (:class:`~chillfl.aggregation.fedbn.KeepLocal`):
    a returning client never reads the server's values of them, so its downlink does not carry them
    (the parameter-sharing protocol prices them at no bytes, as :class:`Downlink`'s ``held``).
    """

    def kept_entries(self) -> frozenset[str]:
        """The entries this half replaces with the client's own after the client's first finished round."""
        ...


def kept_entries(half: ClientHalf | None) -> frozenset[str]:
    """What ``half``'s parts keep for a returning client (:class:`KeepsEntries`); empty when none declares any."""
    kept: frozenset[str] = frozenset()
    for part in half_parts(half):
        if isinstance(part, KeepsEntries):
            kept |= part.kept_entries()
    return kept


@runtime_checkable
class NamesKeepOption(Protocol):
    """A :class:`KeepsEntries` half whose method has an option that leaves the kept entries out of the server's average
    (FedBN's ``global_bn = "keep"``, FedPer's and FedRep's ``global_head``, LG-FedAvg's ``global_body``).

    Why: a forging attack is refused on a method that averages entries its returning clients train from their own
    values (:func:`chillfl.attacks.build.check_uploads`); the refusal names this option, which the core cannot know.
    """

    def keep_option(self) -> tuple[str, str] | None:
        """(option, value): the string option of the method's own table, and its value, that keeps the kept entries
        out of the average (``("global_bn", "keep")``); None: the method has none."""
        ...


def keep_option(half: ClientHalf | None) -> tuple[str, str] | None:
    """The first option ``half``'s parts name that keeps their kept entries out of the average (:class:`NamesKeepOption`); None when none names one."""
    for part in half_parts(half):
        if isinstance(part, NamesKeepOption):
            option = part.keep_option()
            if option is not None:
                return option
    return None


@runtime_checkable
class HoldsKeptEntries(Protocol):
    """A :class:`KeepsEntries` half that says which of its kept entries a client's state holds (FedBN's, FedPer's,
    LG-FedAvg's ``KeepLocal``: those under its prefix).

    Why: a client that has finished a round holds its own value of every kept entry; a resumed run checks that it does
    (:func:`lacking_entries`), where a checkpoint lacking one (edited, or torn by hand) resumed silently, the client
    starting again from the global model's value of that entry.
    """

    def held_entries(self, state: ClientState) -> frozenset[str]:
        """The kept entries ``state`` holds a value of."""
        ...


def lacking_entries(half: ClientHalf | None, state: ClientState) -> frozenset[str]:
    """The kept entries (:class:`KeepsEntries`) of ``half``'s parts that ``state`` holds no value of, as each part that
    says where it keeps them (:class:`HoldsKeptEntries`) reads it; empty for the parts that do not say."""
    lacking: frozenset[str] = frozenset()
    for part in half_parts(half):
        if isinstance(part, KeepsEntries) and isinstance(part, HoldsKeptEntries):
            lacking |= part.kept_entries() - part.held_entries(state)
    return lacking


@runtime_checkable
class MeasuredAfterAverage(Protocol):
    """A client half whose local accuracy may be taken after the server's average rather than after the client's training.

    With ``after_average`` true, the parameter-sharing server measures, right after each round's ``aggregate``, every
    client whose ``local_acc`` it reports: :meth:`HoldsPersonalModel.personal_model` of the client's state completed by
    the *new* global model (FedPer's and FedRep's own head on the averaged body, LG-FedAvg's own representation under
    the averaged head), on that client's own split, the number those methods' authors report. The client's own
    measure (its model at the end of its training) still reaches the temperature policy; the log takes the server's.
    """

    after_average: bool


def measured_after_average(half: ClientHalf | None) -> bool:
    """Whether a part of ``half`` asks for its local accuracy after the server's average (:class:`MeasuredAfterAverage`)."""
    return any(isinstance(part, MeasuredAfterAverage) and part.after_average for part in half_parts(half))


@runtime_checkable
class OwnArchitecture(Protocol):
    """A client half whose client's own model is not the run's architecture, so its :attr:`Personal.personal` and its
    :meth:`HoldsPersonalModel.personal_model` name the entries of another module (FedCP's: the model whose head splits
    each feature vector between a personal and a global head by a policy network's output, a map no state of the run's
    model computes). Why a capability: local accuracy evaluates a client's own model with a template, and the run's own
    cannot run these entries.
    """

    def personal_template(self) -> nn.Module:
        """The stateless template the client's own model runs in (its entries are :meth:`HoldsPersonalModel.personal_model`'s)."""
        ...


def personal_template(half: ClientHalf | None, model: nn.Module) -> nn.Module:
    """The template a client's own model is evaluated with: the first of ``half``'s parts that brings one
    (:class:`OwnArchitecture`), else ``model``, the run's."""
    for part in half_parts(half):
        if isinstance(part, OwnArchitecture):
            return part.personal_template()
    return model


def holds_personal_model(half: ClientHalf | None) -> bool:
    """Whether one of ``half``'s parts keeps the client's own model (what ``checkpoint.client_models`` saves)."""
    return any(isinstance(part, HoldsPersonalModel) for part in half_parts(half))


def client_maker(aggregator: object) -> MakesClientModels | None:
    """What makes part of each client's model (:class:`MakesClientModels`): ``aggregator``, or the first base down its
    :class:`AroundAggregator` chain that does (None: none does).

    Why the chain: a wrapper (a plugin's server EMA, an attack, ``[privacy]``) that leaves the base's client models as
    they are defines no ``client_model``, and asking the outer aggregator alone lost the base's (FedCAC's and pFedHN's
    client models, FedCP's CPN). A wrapper whose ``aggregate`` changes the model in a way the base's ``client_model``
    cannot follow says so by defining ``client_model`` itself: the first level that defines one answers."""
    while aggregator is not None:
        if isinstance(aggregator, MakesClientModels):
            return aggregator
        aggregator = aggregator.base if isinstance(aggregator, AroundAggregator) else None
    return None


def client_base(aggregator: Aggregator, client_id: int, global_model: Params) -> Params:
    """What ``client_id``'s own model is built on: the global model, with the entries ``aggregator`` (or a base it wraps,
    :func:`client_maker`) makes for that client in place of the global ones (:class:`MakesClientModels`)."""
    maker = client_maker(aggregator)
    if maker is not None:
        return {**global_model, **maker.client_model(client_id, global_model)}
    return global_model


def personal_model(half: ClientHalf | None, state: ClientState, global_model: Params) -> Params | None:
    """The client's own model, from the first of ``half``'s parts that holds one (None: the method keeps none)."""
    for part in half_parts(half):
        if isinstance(part, HoldsPersonalModel):
            return part.personal_model(state, global_model)
    return None


class Stateless:
    """A :class:`ClientHalf` base for methods that only report: ``prepare`` changes nothing, ``finish`` keeps no state."""

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}


@dataclass(frozen=True)
class Halves:
    """Several client halves run in order (PA3Fed's over its base's): each sees the others' context and owns its own keys.

    Owning is checked, not assumed: a context, state or report key that two parts set would leave only the later
    part's value, so the other part's reader (its term, its server) would read a number it never wrote; that is
    refused, naming both halves and the key. At most one part may run the client's trainings (:class:`Personalising`):
    the parameter-sharing client runs that part's (:func:`half_parts`) around all parts' ``prepare`` and ``finish``.
    """

    parts: tuple[ClientHalf, ...]

    def __post_init__(self) -> None:
        trainers = [type(part).__name__ for part in self.parts if isinstance(part, Personalising)]
        if len(trainers) > 1:  # one client runs one program of trainings: a second would be dropped, or run twice
            raise ConfigError(HALVES_FIELD, f"client halves {trainers[0]} and {trainers[1]} both run the client's own trainings "
                                     "(objectives and train), and a client runs one half's; combine at most one of them")

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        out = dict(context)
        owners: dict[str, str] = {}
        for part in self.parts:
            start, given = part.prepare(state, start, dict(out))  # a copy: a part editing it in place leaves ``out`` as it was
            # a key this part added, replaced or took away: identity, since a part that passes a value on passes it as it came
            written = {k for k in given if k not in out or given[k] is not out[k]} | {k for k in out if k not in given}
            _claim(owners, written, type(part).__name__, "context")
            out = dict(given)
        return start, out

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        new_state: ClientState = {}
        report: Report = {}
        states: dict[str, str] = {}
        reports: dict[str, str] = {}
        for part in self.parts:
            s, r = part.finish(model, state, trained)
            _claim(states, s, type(part).__name__, "state")
            _claim(reports, r, type(part).__name__, "report")
            new_state.update(s)
            report.update(r)
        return new_state, report


HALVES_FIELD = "algorithm.name"
"""The field a :class:`Halves` refusal names: the method whose client half combines them."""


def _claim(owners: dict[str, str], keys: Collection[str], part: str, what: str) -> None:
    """Record ``part`` as the owner of ``keys`` in ``owners``; a key another part owns already is refused."""
    for key in sorted(keys):
        if key in owners:
            raise ConfigError(HALVES_FIELD, f"client halves {owners[key]} and {part} both set {what} key {key!r}, and a combined half "
                                     "keeps one value per key: give one of them another key")
        owners[key] = part


def combine(*halves: ClientHalf | None) -> ClientHalf | None:
    """The halves that exist, as one (None when there is none); refused when more than one of them personalises."""
    # flat: a combined half among them gives its parts, so every capability and trainer is found one level down (half_parts)
    present = tuple(part for h in halves if h is not None for part in half_parts(h) if part is not None)
    if not present:
        return None
    return present[0] if len(present) == 1 else Halves(present)


def own_entries(state: Mapping[str, torch.Tensor], prefix: str) -> Params:
    """The entries of ``state`` under ``prefix``, with the prefix taken off (empty: the client has none yet)."""
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


class OnPart:
    """A parameter term of the run's objective (``[objective] proximal_mu``) applied to one part of a composite model: the
    entries under ``prefix``, prefix taken off (APFL's shared w, FML's meme), so the term sees the model it was written for."""

    def __init__(self, term: LossTerm, prefix: str) -> None:
        self.term = term
        self.prefix = prefix
        self.reads = term.reads

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context) -> torch.Tensor:
        return self.term(own_entries(dict(params), self.prefix), context)


def with_prefix(params: Mapping[str, torch.Tensor], prefix: str) -> ClientState:
    """Inverse of :func:`own_entries`."""
    return {prefix + k: v for k, v in params.items()}


class Aggregator(Protocol):
    """Server-side rule turning client results into the next global model.

    One that computes only part of it from the uploads (FedPer's base, not its head) says which part
    with :class:`AggregatesPart`, which :class:`AggregatorBase` implements as every entry.
    """

    def client_half(self) -> ClientHalf | None:
        """The part that runs on each client around its training (None: the aggregator needs none)."""
        ...

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        """Per-client extras sent with the global model (default: none)."""
        ...

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        """Return the next global state; ``results`` come sorted by client id."""
        ...

    def round_metrics(self) -> Mapping[str, Json]:
        """Metrics of the last aggregation (e.g. FGN, CLP flag) for metrics.jsonl."""
        ...

    def begin_round(self, round: int, client_ids: Sequence[int]) -> None:
        """Announce the round's sampled clients before any downlink (FedMut balances its signs on it)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything ``aggregate``/``downlink`` carry between rounds (``{}`` when stateless)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` into an aggregator built with the same arguments."""
        ...


@runtime_checkable
class AggregatesPart(Protocol):
    """An aggregator that says which entries of the clients' uploads its next global model is computed from.

    A wrapper that changes the uploads before the server rule sees them (``[privacy]``'s DP-FedAvg, which
    clips and noises client i's update w_i - w) must act on exactly these: an entry the rule leaves out
    (FedPer's head, FedBN's BN entries under ``keep``) only inflates the clipped norm, and noise on it is thrown
    away. Every other entry of the next global model is ``global_params``' as it was, whatever the clients sent.
    :class:`AggregatorBase` declares every entry; an aggregator that implements :class:`Aggregator` by hand and
    declares nothing is read as every entry too (:func:`aggregated_keys`).
    """

    def aggregated_keys(self, global_params: Params) -> tuple[str, ...]:
        """The names in ``global_params`` whose next value ``aggregate`` computes from the clients' uploads, in its order."""
        ...


def aggregated_keys(aggregator: object, global_params: Params) -> tuple[str, ...]:
    """What ``aggregator`` declares (:class:`AggregatesPart`), or every entry of ``global_params`` when it declares nothing."""
    if isinstance(aggregator, AggregatesPart):
        return aggregator.aggregated_keys(global_params)
    return tuple(global_params)


@runtime_checkable
class LearnsParameters(Protocol):
    """An aggregator whose server rule acts on the model's parameters and averages its buffers (FedOpt's moments,
    FedAvgM's momentum, SCAFFOLD's control): a state dict does not tell the two apart, the model does.

    A method named in a config is built with the names (:class:`~chillfl.aggregation.registry.BuildContext`); an
    instance passed from Python (``chillfl.run(aggregator=FedOpt("adam"))``) without them learns them from the run's
    model when the run is built (:func:`with_run_model`), so that it treats buffers as the config's method does.
    """

    def learn_parameters(self, model: nn.Module) -> None:
        """Take ``model``'s parameter names as the entries the rule acts on, unless it was built with its own."""
        ...


def with_run_model(aggregator: Aggregator, model: nn.Module) -> Aggregator:
    """``aggregator``, told the run's ``model`` where it asks (:class:`LearnsParameters`): itself, or the first base down
    its :class:`AroundAggregator` chain that asks, so a wrapper passed from Python (``Ema(FedOpt("adam"))``) that does
    not define ``learn_parameters`` is transparent (its base's Adam stepped batch-norm statistics). A wrapper that
    defines it is told alone, and passes the model on where its base needs it too (PA3Fed does)."""
    level: object = aggregator
    while level is not None:
        if isinstance(level, LearnsParameters):
            level.learn_parameters(model)
            break
        level = level.base if isinstance(level, AroundAggregator) else None
    return aggregator


@runtime_checkable
class NeedsTerms(Protocol):
    """An aggregator whose downlink feeds local objective terms it cannot run without (SCAFFOLD's ``correction`` is read
    by :class:`~chillfl.aggregation.scaffold.LinearCorrectionTerm`; without the term the clients run FedAvg's steps).

    Why a method, not only the spec's builder: an instance passed from Python (``chillfl.run(aggregator=Scaffold(3))``)
    has no builder, so the run asks the instance, built from its own options, and adds the terms it lacks
    (:func:`with_needed_terms`); the built-ins' specs return the same list, so there is one home for it. A plugin rule
    declares its own the same way.
    """

    def needed_terms(self) -> list[Term]:
        """Fresh instances of the local terms its downlink is read by (an empty list: none)."""
        ...


def needed_terms(aggregator: object) -> list[Term]:
    """What ``aggregator`` declares (:class:`NeedsTerms`); none when it declares nothing."""
    return list(aggregator.needed_terms()) if isinstance(aggregator, NeedsTerms) else []


def same_term(a: Term, b: Term) -> bool:
    """Whether the caller's term ``a`` stands for the needed term ``b``: it reads the same context keys (its ``reads``,
    which every term declares), whatever its class, so that a run with both would count one term twice (the proximal pull,
    SCAFFOLD's correction applied twice). Why not by class: a term of the caller's own class on SCAFFOLD's ``correction``
    was how SCAFFOLD ran from Python before the aggregator added its own, and it is the caller's version of that term.
    A needed term that reads no key is stood for by its class (or a subclass) alone: reading nothing says nothing.
    The keys compare as a set: ``("global_params", "mu")`` and ``("mu", "global_params")`` read the same context."""
    return set(a.reads) == set(b.reads) and (bool(b.reads) or isinstance(a, type(b)))


def with_needed_terms(aggregator: object, terms: Sequence[Term]) -> list[Term]:
    """``terms`` (a caller's, kept first and in order), then each term ``aggregator`` needs (:class:`NeedsTerms`) that none
    of them already stands for (:func:`same_term`: reading the same context keys, of any class): a caller who passed the
    term, or their own term on its keys, gets it once; one who did not gets it at all."""
    out = list(terms)
    out += [t for t in needed_terms(aggregator) if not any(same_term(u, t) for u in terms)]
    return out


@runtime_checkable
class BuiltBySpec(Protocol):
    """An aggregator that names the algorithm spec it is built by and the options it was built from, so that an instance
    passed from Python is held to that spec's checks against the run (its ``check``: Krum's ``f`` against the clients a
    round) and to its ``tolerates`` note, as the method named in a config is. Why: the run reads the spec, not the name.
    """

    def built_by(self) -> tuple[str, Any]:
        """(the name its :class:`~chillfl.aggregation.registry.AlgorithmSpec` is registered under, or its import path;
        its parsed options, that spec's options dataclass)."""
        ...


def innermost(aggregator: object) -> object:
    """``aggregator`` without the :class:`AroundAggregator` layers a run adds around it (privacy's, an attack's)."""
    while isinstance(aggregator, AroundAggregator):
        aggregator = aggregator.base
    return aggregator


class OnParameters:
    """:class:`LearnsParameters` for a rule that keeps its parameter names in ``param_keys`` (None: not known yet).

    ``trainable_only``: the names of the parameters local training updates (a frozen weight, ``requires_grad = False``,
    never moves, so per-parameter server state on it would only be zeros), as :meth:`BuildContext.trainable_keys`;
    False: every parameter, as :meth:`BuildContext.param_keys`. Either way what the config's builder passes.
    """

    param_keys: list[str] | None = None
    """None until told (a class default too: a subclass whose ``__init__`` skips its base's then reaches the run's
    one-line refusal naming what it lacks, not an AttributeError traceback here)."""
    trainable_only = True

    def learn_parameters(self, model: nn.Module) -> None:
        if self.param_keys is None:  # names given at construction are the caller's choice
            self.param_keys = [name for name, p in model.named_parameters() if p.requires_grad or not self.trainable_only]

    def rule_keys(self, state: Params) -> list[str]:
        """The floating entries of ``state`` the rule acts on: its parameters, or, where nobody told it them (an
        aggregator used outside a run, or inside a wrapper built in Python), every floating entry, buffers included,
        said once in a warning rather than silently (a batch-norm variance stepped by momentum or Adam goes negative)."""
        if self.param_keys is None:
            name = type(self).__name__
            warn_once(log, f"{name} was built without param_keys and not told the run's model, so its server rule acts on every floating "
                           "entry of the state, buffers (batch-norm statistics) included: pass param_keys=[the model's parameter names]",
                      key=f"rule_keys:{name}")
        keys = self.param_keys if self.param_keys is not None else list(state)
        return [k for k in keys if torch.is_floating_point(state[k])]


PairValues = dict[tuple[int, int], float]
"""A value per pair of clients that met (pFedSim's similarities, FedFomo's affinities): only the pairs that did, so a
federation of 10,000 clients does not hold, or checkpoint, an N x N matrix of zeros."""


def pair_values_state(values: Mapping[tuple[int, int], float]) -> dict[str, torch.Tensor]:
    """``values`` as state: the pairs, sorted, as a (P, 2) integer tensor and their values as a float64 one."""
    pairs = sorted(values)
    return {"pairs": torch.tensor(pairs, dtype=torch.int64).reshape(-1, 2), "values": torch.tensor([values[p] for p in pairs], dtype=torch.float64)}


def load_pair_values(state: Any, owner: str) -> PairValues:
    """:func:`pair_values_state` read back; a ValueError naming ``owner`` for another layout (the dense N x N matrix of
    checkpoints before 2026-12-05 included: that version resumes them)."""
    if isinstance(state, torch.Tensor):
        raise ValueError(f"{owner} is an N x N matrix, the layout of checkpoints before 2026-12-05: resume it with that version")
    table = load_params(state)
    check_state_keys(table, ("pairs", "values"), owner)
    pairs, values = table["pairs"], table["values"]
    if pairs.dim() != 2 or pairs.shape[1:] != (2,) or values.shape != pairs.shape[:1]:
        raise ValueError(f"{owner} must be (P, 2) client pairs and their P values")
    return {(int(i), int(j)): float(v) for (i, j), v in zip(pairs.tolist(), values.to(torch.float64).tolist())}  # on the host


def params_state(params: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A name -> tensor dict as state (a shallow copy: the aggregators never update their tensors in place)."""
    return dict(params)


def same_params(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    """``a`` holds ``b``'s names with ``b``'s values (shape, dtype and every element; compared on the host). Why: a
    method whose seed a run fills (FedGen's generator, pFedHN's hypernetwork) tells its seed-0 drawing from weights a
    user wrote by value, not by the dict's identity, which an in-place write (``update``, a tensor's ``copy_``) keeps."""
    return a.keys() == b.keys() and all(
        a[k].shape == b[k].shape and a[k].dtype == b[k].dtype and torch.equal(a[k].detach().cpu(), b[k].detach().cpu()) for k in a
    )


def load_params(state: Mapping[str, Any]) -> Params:
    """Inverse of :func:`params_state`, checking that every leaf is a tensor."""
    if not isinstance(state, Mapping):
        raise ValueError(f"expected a name -> tensor table, got {type(state).__name__}")
    out: Params = {}
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"state entry {key!r} must be a tensor, got {type(value).__name__}")
        out[str(key)] = value
    return out


def client_params_state(per_client: Mapping[int, Mapping[str, torch.Tensor]]) -> dict[str, dict[str, torch.Tensor]]:
    """Per-client tensors keyed by ``str(client_id)`` (state keys must be strings), insertion order kept."""
    return {str(cid): dict(params) for cid, params in per_client.items()}


def load_client_params(state: Mapping[str, Any]) -> dict[int, Params]:
    """Inverse of :func:`client_params_state`."""
    out: dict[int, Params] = {}
    for cid, params in state.items():
        out[int(cid)] = load_params(params)
    return out


def sample_weights(results: Sequence[ClientResult]) -> torch.Tensor:
    """FedAvg weights m_i / sum m_i (float64 so the sum is exact enough)."""
    counts = torch.tensor([r.num_samples for r in results], dtype=torch.float64)
    return counts / counts.sum()


Weighting = Literal["samples", "uniform"]
"""How FedAvg-style aggregators weight clients: m_i / m (McMahan et al.; chillfl's default) or 1 / |S|
(the FLex&Chill authors' code, ``Servers/aggregator.py``: a plain mean of the client models)."""


def check_weighting(weighting: object, field: str) -> Weighting:
    """``weighting`` if it is one of :data:`Weighting`, else the config path's one-line ConfigError on ``field``.

    The one rule for every path: a config table's ``weighting`` is checked by ``parse_options`` against the same
    Literal, and an options dataclass passed from Python (``FedAvg("unifrom")``, ``FedOptOptions(weighting=...)``), which
    no table parse sees, calls this from its ``validate``; before, such a typo ran as ``samples`` without a word."""
    return typing.cast(Weighting, coerce(weighting, Weighting, field))


def client_weights(results: Sequence[ClientResult], weighting: Weighting = "samples") -> torch.Tensor:
    """The round's averaging weights: :func:`sample_weights`, or 1/|S| each for ``uniform``.

    Any other value is refused (:func:`check_weighting`), not read as ``samples``: an instance built past the options'
    checks must not run a weighting other than the one it records."""
    check_weighting(weighting, "weighting")
    if weighting == "uniform":
        return torch.full((len(results),), 1.0 / len(results), dtype=torch.float64)
    return sample_weights(results)


def report_tensor(result: ClientResult, key: str, method: str) -> torch.Tensor:
    """``result.report[key]`` as the tensor the method's client half sent; a ValueError naming ``method`` otherwise."""
    value = result.report.get(key)
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{method}: client {result.client_id}'s report lacks {key!r}")
    return value


def report_number(result: ClientResult, key: str, method: str) -> float:
    """``result.report[key]`` as a float; a ValueError naming ``method`` otherwise. The one rule for a reported number:
    a Python number or a tensor of one element (0-d included: ``loss.detach()`` is one, and a client half may send
    either). Why one helper: q-FFL and IFCA took a 1-element tensor while PA3Fed refused every tensor, for the same
    kind of value."""
    value = result.report.get(key)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    if not isinstance(value, (int, float)):
        raise ValueError(f"{method} needs report[{key!r}] to be a number or a 1-element tensor (client {result.client_id}), got {type(value).__name__}")
    return float(value)


def weighted_average(states: Sequence[Mapping[str, torch.Tensor]], weights: torch.Tensor, keys: Sequence[str] | None = None) -> Params:
    """sum_i w_i * state_i for every key; integer buffers (e.g. BN's num_batches_tracked) take the max.

    Accumulates in float64 and casts back, so the result does not depend on
    summation-order rounding more than necessary.
    """
    if not states:
        raise ValueError("weighted_average needs at least one state")
    keys = list(keys) if keys is not None else list(states[0].keys())
    out: Params = {}
    for key in keys:
        ref = states[0][key]
        if not torch.is_floating_point(ref):
            out[key] = torch.stack([s[key] for s in states]).max(dim=0).values
            continue
        acc = torch.zeros_like(ref, dtype=torch.float64)  # the clients' memory layout: contiguous reads
        _accumulate(acc, [s[key] for s in states], weights.tolist())
        out[key] = acc.to(ref.dtype, memory_format=torch.contiguous_format)
    return out


AVERAGE_BLOCK = 32768
"""Elements of the float64 accumulator summed over all clients at a time (256 KiB: it stays in cache).

Per element the sum is the same ``acc += w_i * x_i`` in client order as one pass
per client, so the result is bitwise the same; only the loop nest changes. On the
benchmark's 197k-parameter MLP, 100 clients: 13 ms instead of 21 ms per round."""


def _accumulate(acc: torch.Tensor, tensors: Sequence[torch.Tensor], weights: Sequence[float]) -> None:
    """``acc += sum_i weights[i] * tensors[i]`` in client order, in cache-sized blocks when the layouts allow.

    The blocks are shared out to one thread per core (:func:`average_threads`):
    each element is still the same sum in client order, so the result is
    bitwise the one of a single thread; the server's sum, between rounds, is
    otherwise the one step in which a vectorised or multi-process run uses one core.

    Only on the CPU: on an accelerator every block of every client is a kernel
    launch (issue 39: 3,300 a round of workload 1 in 32K-element blocks, 800 in
    whole tensors, the same bits), the device has no cache for a block to stay
    in, and threads only contend for the launch queue.
    """
    flat = _flat_views(acc, tensors) if acc.numel() > AVERAGE_BLOCK and acc.device.type == "cpu" else None
    if flat is None:
        for w, t in zip(weights, tensors):
            acc.add_(t, alpha=w)  # promotes to float64 in the kernel: one pass
        return
    total, parts = flat
    blocks = list(range(0, total.numel(), AVERAGE_BLOCK))
    threads = min(average_threads(), len(blocks))

    def add_blocks(starts: Sequence[int]) -> None:
        for lo in starts:
            block = total[lo : lo + AVERAGE_BLOCK]
            for w, t in zip(weights, parts):
                block.add_(t[lo : lo + AVERAGE_BLOCK], alpha=w)

    if threads <= 1:
        add_blocks(blocks)
        return
    share = -(-len(blocks) // threads)
    with ThreadPoolExecutor(threads, "chillfl-average") as pool:  # torch kernels release the GIL
        list(pool.map(add_blocks, [blocks[i : i + share] for i in range(0, len(blocks), share)]))


def average_threads() -> int:
    """Threads :func:`weighted_average` sums blocks on: the cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _flat_views(acc: torch.Tensor, tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]] | None:
    """1-D views of ``acc`` and ``tensors`` walking them in the same element order; None if one is not dense in acc's layout."""
    strides = acc.stride()
    order = sorted(range(acc.dim()), key=lambda d: (-strides[d], d))
    try:
        return acc.permute(order).view(-1), [t.permute(order).view(-1) for t in tensors]
    except RuntimeError:  # a tensor in another layout (or with gaps): no common flat order
        return None


class AggregatorBase:
    """The :class:`Aggregator` contract's do-nothing parts, so that a rule writes only what it does.

    No client half, no downlink extras, no round metrics, no announcement of the
    round, no state between rounds (``load_state_dict`` refuses a non-empty state,
    so a checkpoint of another rule is not half-loaded), and every entry of the
    uploads aggregated (:class:`AggregatesPart`). A subclass writes
    ``aggregate`` and overrides the rest where it has something to say. It
    declares no capabilities: those are the spec's, or a plugin class's own
    ``capabilities`` attribute (:mod:`chillfl.capabilities`).
    """

    if TYPE_CHECKING:  # for the type checker only: a subclass's aggregate is checked against this signature, and one
        # without aggregate is an abstract class to mypy. Not defined at run time, so that a class lacking it is still
        # refused in one line when a run is built ("lacks aggregate"), not by a NotImplementedError in round 1.
        @abstractmethod
        def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
            """The next global model from the round's uploads (:meth:`Aggregator.aggregate`)."""

    def client_half(self) -> ClientHalf | None:
        """No per-client part: the rule reads the clients' models and sample counts only."""
        return None

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        return Downlink()

    def round_metrics(self) -> Mapping[str, Json]:
        return {}

    def begin_round(self, round: int, client_ids: Sequence[int]) -> None:
        """No announcement needed."""
        return None

    def aggregated_keys(self, global_params: Params) -> tuple[str, ...]:
        """Every entry: the rule computes the whole next global model from the uploads (:class:`AggregatesPart`)."""
        return tuple(global_params)

    def state_dict(self) -> dict[str, Any]:
        """Nothing is carried between rounds."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, (), type(self).__name__)


@runtime_checkable
class ChoosesStart(Protocol):
    """An aggregator whose clients each choose the model they start from among several it sends, and report the choice
    (IFCA-style cluster models sent in the downlink's context): the server knows a client's start from its result,
    where :class:`SentStarts` finds no ``Downlink.params``. Asked before the round's ``aggregate`` runs."""

    def client_start(self, result: ClientResult, global_params: Params) -> Params | None:
        """The model ``result``'s client started from this round (None: ``global_params``)."""
        ...


class SentStarts:
    """The models a round's downlinks told their clients to start from, kept from :meth:`Aggregator.downlink` to that
    round's ``aggregate``, for a wrapper that reads client i's update as w_i - start_i.

    Why: a method that sends each client a model of its own (``Downlink.params``: cluster models, pFedHN's generated
    ones, FedMut's mutations) has no one global model its clients' updates start from; ``global_params`` would count
    the gap between the client's start and the global model as the client's update. Read from what the downlink
    actually sent, so no method is named. The round loop calls every downlink of a round before its ``aggregate``, in
    the driver; nothing is kept across rounds (a checkpoint holds none of it).
    """

    def __init__(self) -> None:
        self.round = -1
        self.sent: dict[int, Params] = {}

    def record(self, client_id: int, round: int, down: Downlink) -> Downlink:
        """Keep what ``down`` tells ``client_id`` to start from this round; ``down`` returned as it is."""
        if round != self.round:
            self.round, self.sent = round, {}
        if down.params is None:
            self.sent.pop(client_id, None)
        else:
            self.sent[client_id] = down.params
        return down

    def starts(self, round: int, global_params: Params, results: Sequence[ClientResult], base: object = None) -> dict[int, Params]:
        """Each client of ``results`` that started from a model of its own this round -> that model (``global_params``
        where an entry is absent, as the client completes it): the one its downlink sent, or the one ``base`` says it
        chose (:class:`ChoosesStart`); a client left out started from ``global_params``."""
        own = dict(self.sent) if round == self.round else {}
        if isinstance(base, ChoosesStart):
            for r in results:
                start = base.client_start(r, global_params)
                if start is not None:
                    own[r.client_id] = start
        made: dict[int, Params] = {}  # one start per model sent: the clients of one cluster share it (and one forged model)
        return {r.client_id: made.setdefault(id(p), {**global_params, **p}) for r in results if (p := own.get(r.client_id)) is not None}


class AroundAggregator:
    """An aggregator around another (privacy's clipped updates, an attack's forged uploads): each part is the base's.

    A subclass overrides what it changes (``aggregate``, and ``round_metrics`` / ``state_dict`` where it keeps
    something of its own); the client half, downlink, announcement of the round and aggregated keys stay the base's.
    So do the capabilities asked down the chain: the client models the base makes (:func:`client_maker`) and the run's
    model it learns its parameters from (:func:`with_run_model`), unless the subclass defines ``client_model`` or
    ``learn_parameters`` itself."""

    def __init__(self, base: Aggregator) -> None:
        self.base = base

    def client_half(self) -> ClientHalf | None:
        return self.base.client_half()

    def needed_terms(self) -> list[Term]:
        """The base's (:class:`NeedsTerms`): the base's downlink still feeds them."""
        return needed_terms(self.base)

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        return self.base.downlink(client_id, round, global_params)

    def begin_round(self, round: int, client_ids: Sequence[int]) -> None:
        self.base.begin_round(round, client_ids)

    def aggregated_keys(self, global_params: Params) -> tuple[str, ...]:
        """The base's: the wrapper changes the uploads, not which entries the base reads."""
        return aggregated_keys(self.base, global_params)

    def client_start(self, result: ClientResult, global_params: Params) -> Params | None:
        """The base's (:class:`ChoosesStart`; None where it chooses none): an attack around a ``[privacy]`` wrapper
        asks through it, as it would ask the base."""
        return self.base.client_start(result, global_params) if isinstance(self.base, ChoosesStart) else None

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        return self.base.aggregate(global_params, results, round)

    def round_metrics(self) -> Mapping[str, Json]:
        return self.base.round_metrics()

    def state_dict(self) -> dict[str, Any]:
        return self.base.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.base.load_state_dict(state)


@runtime_checkable
class ReadsUpdates(Protocol):
    """A wrapper that reads each client's update as w_i - start_i, from the start :class:`SentStarts` knows (the one its
    downlink sent, or the one a :class:`ChoosesStart` base reports): an ``[attack]``'s forging, a ``[privacy]`` clip.

    Why a capability: a client half whose ``prepare`` returns a start other than the one it was sent (a cluster model
    it picked from its context), in a method that does not report it (:class:`ChoosesStart`), makes that reading silently
    wrong; the run has its clients report such a start only where some level reads updates (:func:`start_watched`), so
    a run without one compares nothing."""

    def reads_updates(self) -> bool:
        """Whether this level reads the clients' updates from their starts."""
        ...


def start_watched(aggregator: object) -> bool:
    """Whether the clients must report a start their half's ``prepare`` moved (:attr:`ParamUplink.moved_start
    <chillfl.protocols.parameters.ParamUplink.moved_start>`): a level of ``aggregator``'s :class:`AroundAggregator` chain
    reads updates from starts (:class:`ReadsUpdates`), and the method under it reports no start of its own choosing
    (:class:`ChoosesStart`, asked of the innermost: a wrapper passes ``client_start`` on, so every wrapper is one)."""
    if isinstance(innermost(aggregator), ChoosesStart):
        return False
    level: object = aggregator
    while level is not None:
        if isinstance(level, ReadsUpdates) and level.reads_updates():
            return True
        level = level.base if isinstance(level, AroundAggregator) else None
    return False


def moved_entries(sent: Params, start: Params) -> tuple[str, ...]:
    """The entries of ``start`` that are not ``sent``'s (added, dropped, or of another value), in ``sent``'s order then
    the added ones.

    An entry passed on as it came is the very tensor (identity: free); one copied (``clone``, a ``.to`` that changes
    nothing) is compared by exact value (shape, dtype, device and every element), since an equal copy gives the same
    update w_i - start_i and must not be refused; anything else moved the start."""
    moved = [k for k, v in sent.items() if k not in start or not same_value(start[k], v)]
    return (*moved, *(k for k in start if k not in sent))


def same_value(a: object, b: object) -> bool:
    """``a`` is ``b``, or an exact copy of the tensor ``b`` (shape, dtype, device and every element): an entry a client
    was sent as it is, whether passed on or copied (a start's moved entries; the parameter protocol's unsent entries)."""
    if a is b:
        return True
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
            and a.device == b.device and bool(torch.equal(a, b)))


@dataclass(frozen=True)
class FedAvgOptions:
    """``weighting``: ``samples`` (m_i / m, McMahan et al.) or ``uniform`` (1/|S|, the FLex&Chill authors' code)."""

    weighting: Weighting = "samples"

    def validate(self, section: str) -> None:
        """A ``FedAvg(weighting)`` passed from Python is checked through this, as a config's table is by its parse."""
        check_weighting(self.weighting, f"{section}.weighting")


class FedAvg(AggregatorBase):
    """FedAvg (McMahan et al., 2017): w <- sum_i (m_i / m) w_i over sampled clients.

    ``weights`` (summing to 1) replace m_i / m when given: the hook through
    which PA3Fed passes its m_i * alpha_i coefficients. ``weighting =
    "uniform"`` averages with 1/|S| instead (the FLex&Chill authors' code).

    Methods whose server rule is this weighted mean (FedProx, MOON, Ditto, APFL,
    pFedMe, FedGen) subclass it for ``aggregate`` and ``default_weights``; a
    subclass does not inherit FedAvg's registered capabilities (they are its spec's).
    """

    weighting: Weighting = "samples"

    def __init__(self, weighting: Weighting = "samples") -> None:
        self.weighting = weighting
        if type(self) is FedAvg:
            self.options: Any = FedAvgOptions(weighting)
            """Recorded for an instance passed from Python. FedAvg's own only: a subclass's options are its own (set before
            or after this call, or on its class), and FedAvg's would overwrite or shadow them."""

    def default_weights(self, results: Sequence[ClientResult]) -> torch.Tensor:
        """m_i / m, the FedAvg coefficients (1/|S| with ``weighting = "uniform"``)."""
        return client_weights(results, self.weighting)

    def aggregate(
        self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None
    ) -> Params:
        w = self.default_weights(results) if weights is None else weights
        return weighted_average([r.params for r in results], w)
