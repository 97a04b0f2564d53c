"""The seam between the one round loop and a protocol (parameter sharing, soft-label sharing, ...).

A protocol has a *server* side, which lives in the driver process and keeps
every piece of run state, and a *client* side, which is a pure function::

    update(task) -> program       # a generator: yields ClientJobs/PredictJobs, returns a ClientReply

run by whichever executor the config names. The client update yields every
local training it needs (distillation on the public set, training on private
data, ...) as a :class:`ClientJob` and receives its
:class:`~chillfl.training.local.LocalOutcome`; it yields every model output it
needs (predictions to upload, its own predictions, its local accuracy) as a
:class:`~chillfl.engine.predict.PredictJob` and receives a
:class:`~chillfl.engine.predict.Prediction`. An executor therefore decides
only *how* training and prediction run (one client after another, many
clients in one vmapped step, in worker processes), never *what* a client
does: the same generator runs under every executor, and :func:`drive`
advances many of them in lockstep so that the vectorised executor can batch
their training and their predictions.

Purity: a client update reads only its task (the typed downlink, the client's
own state and data, seeds derived from the run seed) and the client side's
immutable parts (model template, objective specs, public inputs). Everything
it produces travels back in the typed :class:`ClientReply`.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable, Generator, Generic, Iterator, Mapping, Protocol, Sequence, TypeVar, cast, runtime_checkable

import torch

from chillfl.errors import ConfigError
from chillfl.engine.predict import PredictJob, Prediction, Predictor, predict_each
from chillfl.engine.record import Json, RoundRecord
from chillfl.training.local import LocalOutcome, LocalSpec, check_rows
from chillfl.training.optim import Carried
from chillfl.data.stamp import RowStamp
from chillfl.training.objective import Context

D = TypeVar("D")
U = TypeVar("U")
S = TypeVar("S")
C = TypeVar("C")


@dataclass
class ClientJob:
    """One local training run of one client: from ``start`` on (x, y), seeded.

    ``spec`` is the objective and optimiser (None: the executor's own, the
    run's private-training spec); the soft-label protocol's distillation jobs
    carry theirs.
    """

    client_id: int
    start: Mapping[str, torch.Tensor]
    x: torch.Tensor
    y: torch.Tensor
    lr: float
    temperature: float
    context: Context
    seed: int
    spec: LocalSpec | None = None
    work: float = 1.0
    """Share of the local steps this client completes (a straggler: < 1; at least one step)."""
    stamp: RowStamp | None = None
    """The rows of ``x`` a data-poisoning attack marks (:mod:`chillfl.data.stamp`): an augmented step crops and flips
    them without the pattern and stamps it after; None: none (or ``x`` is no client's private data)."""
    carry: Carried | None = None
    """The optimiser state the training starts from, returned where it ends (:attr:`LocalOutcome.carry`): a method that
    keeps its clients' optimiser state between participations; None: the zero state, as every training's."""
    policy_field: str | None = None
    """The config field of the temperature policy that gave ``temperature`` (``policy`` for one passed from Python), on
    which a bad T is refused; None: the spec's (:attr:`~chillfl.training.local.LocalSpec.policy_field`), else ``temperature.policy``."""
    round: int | None = None
    """The round (0-based) of the task whose update yielded this job, set by :func:`drive_tasks`; None: a job outside a
    round's update (``run`` called directly). Why: a refusal found only when the job trains (a local step below float32's
    smallest normal lr, :func:`~chillfl.training.local.check_step_floor`) names the round, which the user's fix depends on."""

    def __post_init__(self) -> None:
        # T comes from the temperature policy, a plugin's code too (its server half or its client half): a T <= 0
        # would train on flipped logits and a nan one diverge, with nothing saying why; every policy's T passes here.
        t = _number(self.temperature)  # a str or None was a TypeError traceback (float("0.5") passed, then failed in the loss)
        if t is None or not (math.isfinite(t) and t > 0):
            said = self.temperature if t is None else t
            field = self.policy_field or (self.spec.policy_field if self.spec is not None else "temperature.policy")
            raise ConfigError(field, f"the policy gave client {self.client_id} the temperature {said!r}; a temperature must be a finite number > 0")
        check_rows(self.x, self.y, self.stamp)  # every executor's jobs, the vectorised chunks' too


def _number(value: object) -> float | None:
    """``value`` as a float when it is a number (a 0-d tensor too); None for a str, a bool or what float() refuses."""
    if isinstance(value, (str, bytes, bool)):
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, RuntimeError):
        return None


@dataclass
class ClientData:
    """A client's private tensors: its training data and, when evaluated, its own split."""

    x: torch.Tensor
    y: torch.Tensor
    x_eval: torch.Tensor | None = None
    y_eval: torch.Tensor | None = None
    x_val: torch.Tensor | None = None
    y_val: torch.Tensor | None = None
    """Its own validation split (``local_val_acc``, what the ``local_*`` tuning rules read); None: not measured."""
    stamp: RowStamp | None = None
    """The rows of ``x`` a data-poisoning attack marks, for the training jobs on ``x`` (:attr:`ClientJob.stamp`); None: none."""


@dataclass
class ClientTask(Generic[D, S]):
    """Everything one client update reads: round, typed downlink, the client's own state and data."""

    client_id: int
    round: int
    downlink: D
    data: ClientData
    state: S | None = None
    work: float = 1.0
    """Share of its local steps the client completes this round (stragglers, set by the round loop)."""


@dataclass
class ClientReply(Generic[U, S]):
    """What one client update returns: its typed uplink and its state for the next participation."""

    client_id: int
    uplink: U
    state: S | None = None
    local_acc: float | None = None
    local_loss: float | None = None
    temperature: float | None = None
    """The temperature the client trained at when its own state chose it (FedChill's client half, under every runtime); None = the downlink's."""
    local_val_acc: float | None = None
    """Its own model's accuracy on its own validation split (:attr:`ClientData.x_val`); None: not measured."""
    nonfinite: str | None = None
    """What turned non-finite in the update besides the training loss its uplink carries (a further training's loss: Ditto's
    v_k), for the server to stop the run on as it does on that loss; None: nothing. Told, not raised in the client: a worker
    process, a Ray actor or a Flower node would report a raise as a crash, and a vectorized chunk would name another client."""


ClientProgram = Generator[ClientJob | PredictJob, Any, ClientReply[Any, Any]]
"""A client update: yields ClientJobs (sent back a LocalOutcome) and PredictJobs (sent back a Prediction)."""


class ClientSide(Protocol):
    """The client half of a protocol: immutable, picklable, sent once to every worker."""

    def update(self, task: Any) -> ClientProgram:
        """``task``: a :class:`ClientTask` of the protocol's own downlink and state types."""
        ...


class Message(Protocol):
    """A typed message: it knows how many bytes it puts on the wire, split by kind."""

    def nbytes(self) -> Mapping[str, int]:
        ...


class Executor(Protocol):
    """Who runs a round's client updates (:mod:`chillfl.executors`): the loop calls ``map``; ``run`` trains jobs only."""

    def map(self, tasks: Sequence[ClientTask[Any, Any]]) -> list[ClientReply[Any, Any]]:
        ...

    def run(self, jobs: Sequence[ClientJob]) -> list[LocalOutcome]:
        ...

    def close(self) -> None:
        ...


class ServerProtocol(Protocol):
    """The server half: builds each round's tasks and turns the replies into the next state and metrics."""

    @property
    def client(self) -> ClientSide:
        ...

    def configure(self, round: int, sampled: Sequence[int]) -> list[ClientTask[Any, Any]]:
        ...

    def server_update(self, round: int, tasks: Sequence[ClientTask[Any, Any]], replies: Sequence[ClientReply[Any, Any]]) -> RoundRecord:
        """The next server state from the round's replies (in client-id order), and the round's record."""
        ...

    def global_state(self) -> Mapping[str, torch.Tensor] | None:
        """The server model's state (None when the protocol has none)."""
        ...

    def client_states(self) -> Mapping[int, Mapping[str, torch.Tensor]]:
        """Every client's own model where the protocol keeps them (empty otherwise)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        ...

    def close(self) -> None:
        ...


class ClientStates(Protocol):
    """Where a server protocol keeps its clients' own states between participations (a runtime may swap it)."""

    def load(self, cid: int) -> Any:
        ...

    def save(self, cid: int, state: Any) -> None:
        ...

    def ids(self) -> list[int]:
        ...

    def state_dict(self) -> dict[str, Any]:
        ...

    def load_state_dict(self, state: Any) -> None:
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class KeepsClientStates(Protocol):
    """A server protocol whose clients keep state: its ``store`` holds it (Flower puts a record of nodes there instead)."""

    store: ClientStates


@runtime_checkable
class ObservesSkippedRounds(Protocol):
    """A server protocol that acts on a round the loop skipped (nobody, or too few, reported): the privacy
    accountant charges it under Poisson sampling. What it returns joins the skipped round's record."""

    def skipped_round(self, round: int) -> Mapping[str, Json]:
        ...


@runtime_checkable
class EvaluatesNow(Protocol):
    """A server protocol that measures its present state as an evaluated round's record would, where that is more than
    evaluating :meth:`ServerProtocol.global_state` (prototype sharing without a shared model: the mean over the clients'
    own models). Why: a run a hook stops at a round ``eval.every`` skips ends there, and its summary holds that round's
    evaluation as a last round's (``final_global_acc``); only the protocol knows what its rounds measure."""

    def evaluate_now(self) -> Mapping[str, Json]:
        """The metrics an evaluated round would record for the present state (``global_acc``, ``global_loss``, ...)."""
        ...


@runtime_checkable
class MeasuresNow(Protocol):
    """A server protocol around another (:class:`AroundProtocol`) that adds measures of its own to every record it
    returns (an attack's success on its probe), taken of the present state again on request. Why: a run a hook stops
    ends at its stop round, whose summary takes that round's evaluation (:class:`EvaluatesNow`); a measure of the
    wrapper's from an earlier round (a skipped stop round records none) beside it would describe another model. Chained
    as ``skipped_round`` is: a wrapper returns its inner protocol's measures (where it has this) beside its own."""

    def measure_now(self) -> Mapping[str, Json]:
        """The wrapper's measures of the present state as a round's record holds them; a measure that cannot be taken
        now is None (not measured), never an older value."""
        ...


@runtime_checkable
class ReleasesEmptyRounds(Protocol):
    """A server protocol whose ``server_update`` is defined for a round in which nobody reported (no task, no reply)
    and moves its state all the same: parameter sharing whose aggregator releases such a round
    (:class:`~chillfl.aggregation.base.AggregatesNobody`: DP-FedAvg's server noise alone, McMahan et al. 2018's
    Algorithm 1). Where it says so, the round loop runs ``server_update(round, [], [])`` on a round whose first draw has
    nobody reporting, instead of retrying or skipping it (a round with some, but fewer than ``min_clients``,
    reporting clients is still retried or skipped)."""

    def releases_empty_rounds(self) -> bool:
        """Whether a round nobody reported is released through ``server_update`` (False: skipped, as any other protocol's)."""
        ...


@runtime_checkable
class TrainsUnreported(Protocol):
    """A server protocol whose method trains, each round, the clients that do not report as well as those that do,
    aggregating the reporting ones only (parameter sharing whose aggregator says so,
    :class:`~chillfl.aggregation.base.TrainsEveryClient`).

    Where :meth:`trains_unreported` is true, the round loop configures every client with training rows that is not
    among the round's reporting ones (:meth:`configure_unreported`, after ``configure``), trains them with the reporting
    ones in one executor call, hands their replies to :meth:`receive_unreported`, and only then calls ``server_update``
    with the reporting clients' tasks and replies alone: a wrapper (the privacy accountant, an attack's record) sees what
    reaches the server, as in any round. Such a client is outside the availability draw (it is trained whole: dropout
    and stragglers concern reporting), and a round the loop skips trains nobody."""

    def trains_unreported(self) -> bool:
        """Whether the clients that do not report train this run (False: the loop trains the reporting ones only)."""
        ...

    def configure_unreported(self, round: int, clients: Sequence[int]) -> list[ClientTask[Any, Any]]:
        """The tasks of ``clients`` (sorted, none reporting), priced and sent as the reporting ones' are."""
        ...

    def receive_unreported(self, round: int, tasks: Sequence[ClientTask[Any, Any]], replies: Sequence[ClientReply[Any, Any]]) -> None:
        """Their replies, before the round's ``server_update``: their states kept and local accuracy logged; their uploads never read."""
        ...


Trainer = Callable[[LocalSpec | None, Sequence[ClientJob]], list[LocalOutcome]]
"""Runs jobs that share one objective spec (None: the executor's own); one outcome per job, in order."""


@dataclass
class _Running:
    program: ClientProgram
    job: ClientJob | PredictJob | None = None
    reply: ClientReply[Any, Any] | None = None


def _advance(run: _Running, outcome: LocalOutcome | Prediction | None) -> None:
    try:
        run.job = next(run.program) if outcome is None else run.program.send(outcome)
    except StopIteration as stop:
        run.job, run.reply = None, stop.value


def drive(programs: Sequence[ClientProgram], train: Trainer, predict: Predictor = predict_each) -> list[ClientReply[Any, Any]]:
    """Run client programs to completion, batching the jobs they yield at the same stage.

    At each stage every unfinished program has yielded one job. Training jobs
    are grouped by objective spec and each group goes to ``train(spec, jobs)``
    as one batch; prediction jobs are grouped by template and output kind and
    each group goes to ``predict(jobs)`` (default: one after another). Groups
    run in first-seen order. A job's outcome depends only on the job, so the
    replies are the same however jobs are grouped.
    """
    runs = [_Running(p) for p in programs]
    for run in runs:
        _advance(run, None)
    while True:
        waiting = [r for r in runs if r.job is not None]
        if not waiting:
            break
        groups: dict[tuple[Any, ...], list[_Running]] = {}
        for r in waiting:
            job = r.job
            assert job is not None
            key = ("predict", id(job.model), job.output) if isinstance(job, PredictJob) else ("train", id(job.spec))
            groups.setdefault(key, []).append(r)
        for members in groups.values():
            jobs = [m.job for m in members]
            if isinstance(jobs[0], PredictJob):
                results: Sequence[LocalOutcome | Prediction] = predict([j for j in jobs if isinstance(j, PredictJob)])
            else:
                train_jobs = [j for j in jobs if isinstance(j, ClientJob)]
                results = train(train_jobs[0].spec, train_jobs)
            for m, out in zip(members, results):
                _advance(m, out)
    return [r.reply for r in runs if r.reply is not None]


def drive_tasks(client: ClientSide, tasks: Sequence[ClientTask[Any, Any]], train: Trainer, predict: Predictor = predict_each) -> list[ClientReply[Any, Any]]:
    """:func:`drive` over the client updates of ``tasks``, each training job told its task's round (:attr:`ClientJob.round`).

    Why here: every executor's ``map`` runs the updates through this (a process worker, a Ray actor and a Flower node
    through the sequential executor's), so a refusal raised in training names the round on all of them alike."""
    return drive([_in_round(client.update(t), t.round) for t in tasks], train, predict)


def _in_round(program: ClientProgram, round: int) -> ClientProgram:
    """``program`` with each :class:`ClientJob` it yields stamped with ``round`` (a job that names its own is left)."""
    outcome: Any = None
    while True:
        try:
            job = program.send(outcome)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        if isinstance(job, ClientJob) and job.round is None:
            job.round = round
        outcome = yield job


def protocol_layers(protocol: ServerProtocol) -> Iterator[ServerProtocol]:
    """``protocol``, then each protocol it wraps (:class:`AroundProtocol`'s ``inner``), outermost first, the innermost last."""
    while True:
        yield protocol
        if not isinstance(protocol, AroundProtocol):
            return
        protocol = protocol.inner


_ABSENT = object()


def capability(protocol: ServerProtocol, kind: Callable[..., C]) -> C | None:
    """``protocol`` as the capability ``kind`` (a runtime-checkable Protocol: :class:`TrainsUnreported`,
    :class:`ReleasesEmptyRounds`, a plugin's own) where it has each of ``kind``'s public members, itself or through the
    protocols it wraps (:func:`protocol_layers`); None where it lacks one. Ask this, never ``isinstance(protocol, kind)``.

    Why: an :class:`AroundProtocol` has its inner protocol's attributes through ``__getattr__``. ``isinstance`` against
    a Protocol saw them on Python 3.10 and 3.11 (``hasattr``) but does not from 3.12 on (``inspect.getattr_static``), so
    there every capability of a wrapped protocol (``[privacy]``, ``[attack]``) read as absent, silently: DP-FedAvg's
    empty rounds skipped instead of released, pFedMe's ``train = "all"`` run as ``"sampled"``. Here each member is looked
    up statically, layer by layer, where the wrapper's ``__getattr__`` would forward it: the same answer on every Python
    (3.11's). The object returned is ``protocol`` itself, so a wrapper's own override is the one that runs.
    ``kind`` is typed as a callable because mypy takes no Protocol class for a ``type[C]``. Its members are its public
    names (a name led by ``_``, typing's own and a dunder such as ``__call__``, is not asked for): a capability is
    declared by public methods."""
    methods = _members(cast(type, kind))
    return cast(C, protocol) if all(_provided(protocol, name, method) for name, method in methods.items()) else None


def _members(kind: type) -> dict[str, bool]:
    """A Protocol's public members (its bases' too), each with whether it is a method (False: a data member)."""
    found: dict[str, bool] = {}
    for base in kind.__mro__:
        if base in (object, Protocol, Generic):
            continue
        own = vars(base)
        for name in (*own, *own.get("__annotations__", {})):
            if not name.startswith("_"):
                found.setdefault(name, callable(own.get(name)))
    return found


def _provided(protocol: ServerProtocol, name: str, method: bool) -> bool:
    """Whether a layer of ``protocol`` has ``name`` without calling a ``__getattr__`` (a method: not None), as
    :meth:`AroundProtocol.__getattr__` forwards it: down to the first layer that has it, never past an own attribute."""
    for layer in protocol_layers(protocol):
        found = inspect.getattr_static(layer, name, _ABSENT)
        if found is not _ABSENT:
            return not (method and found is None)
        if isinstance(layer, AroundProtocol) and layer._own(name):
            return False
    return False


class AroundProtocol:
    """A server protocol around another (the privacy accountant, the attacks' records): each part is the inner one's.

    A subclass overrides the parts it changes (``server_update``, ``state_dict``, ...) and names its own
    attributes in ``OWN``; every other attribute read or set is the inner protocol's (its ``evaluation``,
    which the Flower client app reads; ``store``, which Flower swaps; ``state``, which replay sets).

    Its capabilities (:class:`TrainsUnreported`, :class:`ReleasesEmptyRounds`, ...) are asked through
    :func:`capability`, never ``isinstance``: from Python 3.12 ``isinstance`` against a Protocol does not see what
    ``__getattr__`` forwards, so a wrapped protocol's capabilities would read as absent there (and present on 3.11).
    """

    OWN: frozenset[str] = frozenset()
    """The subclass's own attributes (``inner`` and ``_client`` are always its own)."""

    def __init__(self, protocol: ServerProtocol, client: ClientSide | None = None) -> None:
        self.inner = protocol
        self._client = protocol.client if client is None else client
        """The client side the executors run: the inner protocol's, or one that changes what the clients upload."""

    def _own(self, name: str) -> bool:
        return name in ("inner", "_client") or name in type(self).OWN

    def __getattr__(self, name: str) -> Any:
        if self._own(name):  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if self._own(name):
            object.__setattr__(self, name, value)
        else:
            setattr(self.inner, name, value)

    @property
    def client(self) -> ClientSide:
        return self._client

    def configure(self, round: int, sampled: Sequence[int]) -> list[ClientTask[Any, Any]]:
        return self.inner.configure(round, sampled)

    def server_update(self, round: int, tasks: Sequence[ClientTask[Any, Any]], replies: Sequence[ClientReply[Any, Any]]) -> RoundRecord:
        return self.inner.server_update(round, tasks, replies)

    def global_state(self) -> Mapping[str, torch.Tensor] | None:
        return self.inner.global_state()

    def client_states(self) -> Mapping[int, Mapping[str, torch.Tensor]]:
        return self.inner.client_states()

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.inner.load_state_dict(state)

    def close(self) -> None:
        self.inner.close()
