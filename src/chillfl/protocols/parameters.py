"""The parameter-sharing protocol (FedAvg family): models travel, the aggregator combines them.

One round, as the round loop runs it::

    configure:      aggregator.begin_round; per client: ParamDownlink(global or mutated start,
                    lr, T from the temperature policy, objective context, seed) and the client's own state
    client update:  the temperature policy's client half (FedChill) picks T from the client's state;
                    the method's client half completes start and context from the client's state;
                    train once (the one local step); evaluate on the client's own split; the halves
                    return the client's next state (FedChill: Algorithm 1's decay step) and the
                    method's report (PA3Fed's score, SCAFFOLD's Delta c_i)
                                                                -> ParamUplink, next state, T trained at
    server update:  ledger both messages (the uplink priced as sent: the entries the aggregator
                    reads, its ``aggregated_keys``, and the report; the downlink without the entries
                    a returning client holds, :meth:`ParameterSharing.held`); temperature policy observes
                    local accuracy; aggregate in client-id order; evaluate the global model every
                    ``eval.every`` rounds
    not reporting:  where the aggregator trains every client (:class:`~chillfl.aggregation.base.TrainsEveryClient`),
                    the round loop configures and trains the clients with rows that do not report as well
                    (``configure_unreported``); their replies keep their states and local accuracy and price
                    their downlinks (``receive_unreported``), their uploads never reach ``server_update``

A client's own state (SCAFFOLD's c_i, FedBN's BN entries, MOON's previous
model, PA3Fed's previous score, FedChill's T and accuracy history) travels
in :attr:`ClientTask.state` and comes back in :attr:`ClientReply.state`, as
the soft-label protocol's does: chillfl's
runtime keeps it in :class:`ParamStore` (and in checkpoints), a Flower node in
its ``Context.state``. Neither the aggregator nor the temperature policy holds it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from itertools import count
from typing import Any, Callable, Collection, Generator, Mapping, Sequence

import torch
from torch import nn

from chillfl.aggregation.base import (
    AggregatesNobody,
    Aggregator,
    ClientHalf,
    ClientResult,
    ClientState,
    Halves,
    Local,
    Params,
    Personal,
    Personalising,
    Report,
    Trained,
    Wire,
    aggregated_keys,
    kept_entries,
    lacking_entries,
    measured_after_average,
    moved_entries,
    same_value,
    start_watched,
    trains_every_client,
    client_params_state,
    first_state,
    half_parts,
    load_client_params,
    client_base,
    client_maker,
    personal_model,
    personal_template,
)
from chillfl.aggregation.client_states import ClientParams
from chillfl.aggregation.registry import tolerates_bad_clients
from chillfl.engine.protocol import ClientJob, ClientProgram, ClientReply, ClientTask
from chillfl.engine.record import Json, RoundRecord
from chillfl.errors import LOSS_HINT, ConfigError
from chillfl.aggregation.uploads import finite_uploads, round_left_out
from chillfl.protocols.book import ClientLoss, ServerBook
from chillfl.protocols.common import (
    Evaluation, check_aggregated, check_client_state, check_round_metrics, check_downlink, check_pair, check_report, local_evaluation, local_validation, policy_accuracy,
    state_bytes,
)
from chillfl.protocols.parts import Experiment
from chillfl.training.terms import anchor_reads_buffers
from chillfl.temperature.base import TemperatureHalf, TemperaturePolicy
from chillfl.seeds import derive_seed
from chillfl.training.local import LocalOutcome, LocalSpec
from chillfl.training.terms import context_fields, objective_context

@dataclass
class ParamDownlink:
    """Server -> client: the start model, the round's lr and temperature, the objective's context, the seed."""

    start: Params
    lr: float
    temperature: float
    context: dict[str, Wire] = field(default_factory=dict)
    seed: int = 0
    local: tuple[str, ...] = ()
    """Context entries the client holds already (the aggregator's :attr:`Downlink.local`): they cost no bytes."""
    held: tuple[str, ...] = ()
    """Entries of ``start`` the client holds already (:meth:`ParameterSharing.held`): they cost no bytes."""
    anchor_unsent: int = 0
    """Bytes of the ``[objective]`` anchor's entries (the server's model, in ``context`` under the anchor keys, which
    are ``local``) that ``start`` does not carry, because the aggregator sends this client values of its own there
    (``Downlink.params``, :func:`anchor_unsent`): the anchor reads the server's, which were not sent, so they are priced
    (once, however many anchor keys read them). A count, not the tensors: the anchor carries them already."""

    def nbytes(self) -> dict[str, int]:
        control = {k: v for k, v in self.context.items() if k not in self.local}
        sent = {k: v for k, v in self.start.items() if k not in self.held} if self.held else self.start
        return {"params": state_bytes(sent), "control": state_bytes(control) + self.anchor_unsent}


@dataclass
class ParamUplink:
    """Client -> server: the trained state, its sample and step counts, its training loss, a method report."""

    params: Params
    num_samples: int
    num_steps: int
    train_loss: float
    report: Report = field(default_factory=dict)
    moved_start: tuple[str, ...] = ()
    """The entries of the start the client trained from that its half's ``prepare`` changed from the one it was sent
    (:func:`~chillfl.aggregation.base.moved_entries`), compared only where the run reads updates from starts
    (:attr:`ParameterClient.watch_start`); empty otherwise. A run check, not part of the method's protocol: not priced."""

    def nbytes(self) -> dict[str, int]:
        return {"params": state_bytes(self.params), "control": state_bytes(self.report)}

    def as_sent(self, unread: Collection[str]) -> ParamUplink:
        """This uplink as a client sends it to a server that never reads the model entries ``unread``: without them.

        ``unread`` are the global model's entries that the aggregator does not compute from the uploads
        (outside its :func:`~chillfl.aggregation.base.aggregated_keys`: FedPer's head under ``global_head = "keep"``,
        FedBN's BN entries under ``keep``, FedBABU's frozen head). The client keeps them, so they cost no bytes;
        the report (SCAFFOLD's control variate, PA3Fed's score) and every other entry are priced as they are.
        """
        if not unread:
            return self
        return replace(self, params={k: v for k, v in self.params.items() if k not in unread})


@dataclass(frozen=True)
class ParameterClient:
    """The client side: pure, picklable (model template, eval batch size, the method's client half).

    A :class:`~chillfl.aggregation.base.Personalising` half (``trainer``) runs
    the client's trainings itself (its ``objectives`` made once from the run's
    spec) and names the personal model its local accuracy measures.
    """

    model: nn.Module
    eval_batch_size: int
    half: ClientHalf | None = None
    temperature: TemperatureHalf | None = None
    """The temperature policy's client half (FedChill): its entries share the client's state table."""
    trainer: Personalising | None = None
    spec: LocalSpec | None = None
    """The run's own objective (the executors' spec), which the trainer's objectives derive from."""
    objectives: tuple[LocalSpec, ...] = ()
    objective_keys: tuple[tuple[str, str, str], ...] = ()
    """Each context key ``[objective]``'s terms send, with the field that added the term and its name
    (:func:`~chillfl.training.terms.context_fields`): the half's ``prepare`` may not add, replace or drop one."""
    method_field: str = "algorithm.name"
    """The config field of the aggregator whose client half this is (``aggregator`` for one passed from Python): its
    slips are refused on it, as a term's on :attr:`~chillfl.training.local.LocalSpec.method_field`."""
    watch_start: bool = False
    """Report the start entries ``prepare`` moved (:attr:`ParamUplink.moved_start`): an ``[attack]`` or a ``[privacy]``
    clip reads updates from the starts the server knows, and the method reports none it chose
    (:func:`~chillfl.aggregation.base.start_watched`). Off, nothing is compared."""
    policy_field: str = "temperature.policy"
    """The config field of the temperature policy (``policy`` for one passed from Python): a bad T, or a client-half
    state that is no tensor table, is refused on it (:attr:`~chillfl.training.local.LocalSpec.policy_field`)."""

    def update(self, task: ClientTask[ParamDownlink, ClientState]) -> ClientProgram:
        d, data = task.downlink, task.data
        state: ClientState = task.state or first_state(self.half, task.client_id, d.start)  # {} unless the half starts one
        t = d.temperature if self.temperature is None else self.temperature.temperature(state, d.temperature, data.y)
        start, context = d.start, d.context
        if self.half is not None:  # given a copy, so that an edit in place is seen (and the sent context stays as sent)
            start, context = check_pair(self.half.prepare(state, d.start, dict(d.context)), f"{type(self.half).__name__}.prepare()", "(start, context)", self.method_field)
            self.refuse_rewritten(d.context, context)
        moved = moved_entries(d.start, start) if self.watch_start and start is not d.start else ()
        if self.trainer is None:
            out: LocalOutcome = yield ClientJob(task.client_id, start, data.x, data.y, d.lr, t, context, d.seed, work=task.work, stamp=data.stamp,
                                                policy_field=self.policy_field)
            done, nonfinite = Personal(out.params, out.num_steps, out.mean_loss), None
        else:
            assert self.spec is not None, "a personalising half needs the run's spec"
            done, nonfinite = yield from self._trainings(task, t, Local(task.client_id, data.x, data.y, start, context, d.lr, state, d.seed, self.spec))
        template = personal_template(self.half, self.model) if done.personal is not None else self.model
        acc, loss = local_evaluation(template, done.params if done.personal is None else done.personal, data, self.eval_batch_size)
        check_client_state(done.state, f"{type(self.trainer).__name__}.train()'s Personal.state", self.method_field)
        check_report(done.report, f"{type(self.trainer).__name__}.train()'s Personal", self.method_field)
        new_state: ClientState = dict(done.state)
        report: Report = dict(done.report)
        if self.half is not None:
            trained = Trained(task.client_id, data.x, data.y, start, d.context, context, d.lr, t, done.params, done.num_steps)
            finish = f"{type(self.half).__name__}.finish()"
            own, said = check_pair(self.half.finish(self.model, state, trained), finish, "(state, report)", self.method_field)
            check_client_state(own, finish, self.method_field)
            check_report(said, finish, self.method_field)
            new_state.update(own)
            report.update(said)
        personal = done.params if done.personal is None else done.personal
        val_acc = local_validation(template, personal, data, self.eval_batch_size)
        if self.temperature is not None:
            kept = self.temperature.finish(state, t, policy_accuracy(acc, val_acc))
            check_client_state(kept, f"{type(self.temperature).__name__}.finish()", self.policy_field)
            new_state.update(kept)
        uplink = ParamUplink(done.params, len(data.y), done.num_steps, done.train_loss, report, moved)
        forgot = bool(state) and not new_state  # it had a state and its half keeps none now: the next state is empty, not the last one
        return ClientReply(task.client_id, uplink, new_state if new_state or forgot else None, acc, loss, None if self.temperature is None else t,
                           local_val_acc=val_acc, nonfinite=nonfinite)

    def refuse_rewritten(self, sent: Mapping[str, Wire], context: Mapping[str, Wire]) -> None:
        """A context key of an ``[objective]`` term that the client half's ``prepare`` added, replaced or dropped (by
        identity, as :class:`~chillfl.aggregation.base.Halves` tells its parts' keys apart) is refused on the term's field.

        Why: the server refuses a downlink sending such a key (:meth:`ParameterSharing.refuse_overridden`), but a half
        completing the context on the client (``{**context, "mu": 5.0}``) replaced the term's value silently, for the
        term and every other reader alike."""
        for key, where, name in self.objective_keys:
            had, has = key in sent, key in context
            if had == has and (not had or context[key] is sent[key]):
                continue
            did = "drops" if had and not has else "replaces" if had else "adds"
            raise ConfigError(where, f"term {name!r} sends context key {key!r}, which {half_name(self.half)}.prepare() {did} on the client, "
                                     "and the term would read the half's value; set one of the two (or a term reading another key)")

    def _trainings(self, task: ClientTask[ParamDownlink, ClientState], t: float, local: Local) -> Generator[ClientJob, LocalOutcome, tuple[Personal, str | None]]:
        """The personalising half's :class:`Train` requests as jobs: the first with the round's seed, the others with seeds derived from it.
        With the :class:`Personal` it returns the first further training whose loss was non-finite (its reply's ``nonfinite``):
        the first one's is the uplink's training loss, checked as it arrives; a further one (Ditto's v_k) was checked nowhere."""
        assert self.trainer is not None
        d = task.downlink
        program = self.trainer.train(local)
        outcome: LocalOutcome | None = None
        nonfinite: str | None = None
        for i in count():
            try:
                step = next(program) if outcome is None else program.send(outcome)
            except StopIteration as stop:
                if not isinstance(stop.value, Personal):
                    raise ConfigError(self.method_field, f"{type(self.trainer).__name__}.train() returned {type(stop.value).__name__}, "
                                                           "not a Personal (chillfl.extend): return Personal(params, num_steps, mean_loss, ...)") from None
                return stop.value, nonfinite
            if step.objective is not None and not 0 <= step.objective < len(self.objectives):
                raise ConfigError(self.method_field, f"{type(self.trainer).__name__}.train() asked Train(objective={step.objective}), but its "
                                                       f"objectives() returned {len(self.objectives)}: objective i is the i-th of them")
            x, y = (local.x, local.y) if step.rows is None else (local.x[step.rows], local.y[step.rows])
            stamp = task.data.stamp if task.data.stamp is None or step.rows is None else task.data.stamp[step.rows]
            spec = None if step.objective is None else self.objectives[step.objective]
            seed = d.seed if i == 0 else derive_seed(d.seed, "personal", i)
            lr = d.lr if step.lr is None else step.lr
            outcome = yield ClientJob(task.client_id, step.start, x, y, lr, t, step.context, seed, spec, work=task.work, stamp=stamp, carry=step.carry,
                                policy_field=self.policy_field)
            if i and nonfinite is None and not math.isfinite(outcome.mean_loss):
                nonfinite = f"the loss of {type(self.trainer).__name__}'s training {i + 1} is {outcome.mean_loss} ({LOSS_HINT})"
        raise AssertionError("unreachable")


def half_name(half: ClientHalf | None) -> str:
    """How a refusal names ``half``: its class, or its parts' joined by ``+``, in brackets (:class:`~chillfl.aggregation.base.Halves`)."""
    if isinstance(half, Halves):
        return "(" + " + ".join(type(part).__name__ for part in half.parts) + ")"
    return type(half).__name__


class ParamStore:
    """The clients' own states under chillfl's runtime: flat on the CPU (:class:`ClientParams`), in checkpoints.

    It grows with the clients that have state, never with the clients
    registered; methods without a client half store nothing.
    """

    on_disk = False

    def __init__(self) -> None:
        self.states = ClientParams()

    def load(self, cid: int) -> ClientState | None:
        return self.states.get(cid)

    def save(self, cid: int, state: ClientState | None) -> None:
        """Keep ``state`` as the client's whole next state; an empty one (its half kept nothing this time) forgets the last
        one, as a Flower node's table is replaced; None (a client that never had a state) stores nothing."""
        if state:
            self.states[cid] = state
        elif state is not None and cid in self.states:
            del self.states[cid]

    def ids(self) -> list[int]:
        return list(self.states)

    def state_dict(self) -> dict[str, Any]:
        return client_params_state(self.states)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.states = ClientParams.of(load_client_params(state))

    def close(self) -> None:
        self.states.clear()


def anchor_unsent(state: Params, params: Params | None, reads: Collection[str] | None = None) -> Params:
    """The entries of ``state`` (the ``[objective]`` anchor) that a client's start does not carry: those the aggregator
    sends it values of its own of (``Downlink.params``: FedMut's mutated model, CFL's and IFCA-like cluster models,
    pFedSim's personalised one, FedExP's iterate, CCVR's and FedPAC's heads), unless the value sent is the server's;
    of those, only the ones the anchor's terms read (``reads``; None: every entry, :attr:`ParameterSharing.anchor_reads`).

    Why: the anchor is the server's model the round started from, whatever start the aggregator sent (FedMut's anchor
    is the unmutated model, docs/pa3fed.md), so FedProx's ``mu/2 ||w - w^t||^2`` keeps the method's own start as it is;
    the anchor was marked held (free) as "the global model was sent", while for these entries it was not: a client
    reading them must be sent them, so :meth:`ParamDownlink.nbytes` prices them (:attr:`ParamDownlink.anchor_unsent`)."""
    if not params:
        return {}
    return {k: state[k] for k, v in params.items() if k in state and (reads is None or k in reads) and not same_value(v, state[k])}


class ParameterSharing:
    """The server side: global state, aggregator, temperature policy, ledger, local-accuracy log."""

    def __init__(
        self,
        *,
        seed: int,
        lr_at: Callable[[int], float],
        initial_state: Params,
        aggregator: Aggregator,
        policy: TemperaturePolicy,
        anchor_buffers: bool = True,
        evaluation: Evaluation,
        client: ParameterClient,
        eval_clients: str,
        objective_context: Mapping[str, float] | None = None,
        anchors: tuple[str, ...] = (),
        objective_fields: Mapping[str, tuple[str, str]] | None = None,
        tolerant: bool = False,
    ) -> None:
        self.seed = seed
        self.lr_at = lr_at
        self.state = {k: v.clone() for k, v in initial_state.items()}
        self.aggregator = aggregator
        self.policy = policy
        self.evaluation = evaluation
        self.client = client
        self.eval_clients = eval_clients
        self.objective_context = dict(objective_context or {})
        """``[objective]``'s terms' numbers (``proximal_mu`` as ``mu``), added to every client's context."""
        self.anchors = anchors
        """The context keys under which ``[objective]``'s terms read the round's start model (``global_params``)."""
        self.objective_fields = dict(objective_fields or {})
        """Each key ``[objective]``'s terms send, with the field that added the term and its name: a downlink sending it too is refused."""
        self.book = ServerBook(policy, evaluation, eval_clients)
        self.tolerant = tolerant
        """A non-finite upload is left out of the round, not the end of the run (:func:`finite_uploads`)."""
        self.store: ParamStore = ParamStore()
        self.seen: set[int] = set()
        """The clients sent a model before: they hold every entry the server has not changed since."""
        self.moved: set[str] = set()
        """Entries outside the aggregator's ``aggregated_keys`` that an ``aggregate`` changed all the same: always sent."""
        self.finished: set[int] = set()
        """The clients whose reply came back: they hold their own values of the entries their half keeps (:func:`kept_entries`)."""
        self.kept = kept_entries(client.half)
        self.after_average = measured_after_average(client.half)
        """Local accuracy is measured here after each ``aggregate`` (:class:`~chillfl.aggregation.base.MeasuredAfterAverage`)."""
        self.unreported: list[int] = []
        """The round's clients that trained without reporting (:meth:`receive_unreported`): its ``local_acc`` measures them
        with the reporting ones, under ``eval.clients = "sampled"`` too, the round's trained clients."""
        self.anchor_reads = None if anchor_buffers else frozenset(n for n, _ in client.model.named_parameters())
        """The entries ``[objective]``'s anchor terms read (:attr:`~chillfl.training.terms.TermSpec.anchor_buffers`): the
        model's parameters when none reads buffers (the proximal term), else (None) every entry."""

    def configure(self, round: int, sampled: Sequence[int]) -> list[ClientTask[ParamDownlink, ClientState]]:
        self.aggregator.begin_round(round, sampled)
        self.unreported = []
        return self._tasks(round, sampled)

    def trains_unreported(self) -> bool:
        """Whether the clients that do not report train too (:class:`~chillfl.engine.protocol.TrainsUnreported`): the
        aggregator, or a base it wraps, says so (:class:`~chillfl.aggregation.base.TrainsEveryClient`)."""
        return trains_every_client(self.aggregator)

    def configure_unreported(self, round: int, clients: Sequence[int]) -> list[ClientTask[ParamDownlink, ClientState]]:
        """The downlinks of the round's clients that do not report, made as the reporting ones' are (after ``configure``,
        whose ``begin_round`` announced the reporting ones alone): priced, with their own states."""
        return self._tasks(round, clients)

    def receive_unreported(self, round: int, tasks: Sequence[ClientTask[ParamDownlink, ClientState]], replies: Sequence[ClientReply[ParamUplink, ClientState]]) -> None:
        """The replies of the clients that trained without reporting: their next states kept and their downlinks priced
        (the ledger's ``bytes_down``), their local accuracy logged for the round's ``local_acc`` (:attr:`unreported`);
        their uploads are never sent, so neither priced nor read."""
        for task, reply in zip(tasks, replies):
            self.store.save(task.client_id, reply.state)
            self.finished.add(task.client_id)
            self.book.receive(round, task, reply, reply.uplink.train_loss, None)
        self.unreported = [t.client_id for t in tasks]

    def _tasks(self, round: int, sampled: Sequence[int]) -> list[ClientTask[ParamDownlink, ClientState]]:
        lr = self.lr_at(round)
        tasks: list[ClientTask[ParamDownlink, ClientState]] = []
        unchanged = self.unchanged()
        for cid in sampled:
            down = check_downlink(self.aggregator.downlink(cid, round, self.state), self.aggregator)
            start = self.state if down.params is None else {**self.state, **down.params}
            context, local = down.context, down.local
            self.refuse_overridden(context)
            unsent = 0
            if self.objective_context or self.anchors:  # [objective] terms: the anchor is the model the round started from (sent already)
                context = {**context, **self.objective_context, **{key: self.state for key in self.anchors}}
                local = (*local, *self.anchors)
                if self.anchors:  # except where the aggregator sent this client values of its own: priced
                    unsent = state_bytes(anchor_unsent(self.state, down.params, self.anchor_reads))
            held = self.held(cid, unchanged, down.params)
            held = (*held, *(k for k in down.held if k in start and not self.anchor_sent(k, down.params)))  # and what the aggregator says it holds
            if cid in self.finished and self.kept:  # and what its half puts its own values in place of
                held = (*held, *(k for k in start if k in self.kept and k not in held and not self.anchor_sent(k, down.params)))
            message = ParamDownlink(start, lr, self.policy.temperature(cid, round), context, derive_seed(self.seed, "train", cid, round), local, held, unsent)
            tasks.append(ClientTask(cid, round, message, self.evaluation.client_data(cid), self.store.load(cid)))
        self.seen.update(sampled)
        return tasks

    def refuse_overridden(self, context: Mapping[str, Wire]) -> None:
        """A key that both the aggregator's downlink and an ``[objective]`` term send: the term's value would replace the
        method's in every reader (the method's own term read the objective's mu), so it is refused on the term's field.
        An anchor sent as the very model the round starts from is the same value, and passes."""
        for key, (where, name) in self.objective_fields.items():
            if key in context and not (key in self.anchors and context[key] is self.state):
                raise ConfigError(where, f"term {name!r} sends context key {key!r}, which {type(self.aggregator).__name__}.downlink() sends too, "
                                         "and the term's value would replace the method's for every reader; set one of the two "
                                         "(or a term reading another key)")

    def unchanged(self) -> tuple[str, ...]:
        """The entries the server has not changed since the run began: outside ``aggregated_keys``, never :attr:`moved`."""
        read = set(aggregated_keys(self.aggregator, self.state))
        return tuple(k for k in self.state if k not in read and k not in self.moved)

    def held(self, client_id: int, unchanged: tuple[str, ...], params: Params | None) -> tuple[str, ...]:
        """The start's entries that ``client_id`` holds already, so its downlink does not price them.

        Why: an entry outside the aggregator's ``aggregated_keys`` (FedBABU's frozen head, FedPer's head under
        ``global_head = "keep"``, every entry of Local-only) keeps the value it had when the client first received
        it, so after its first round a client is sent only what the server computes from the uploads. A client's
        first downlink is priced whole, and so is every entry an ``aggregate`` has changed (:attr:`moved`) or that
        the aggregator sends this client on its own (``Downlink.params``). The aggregator's ``Downlink.held``
        (entries its client half replaces with the client's own) are added to these in :meth:`configure`, unless an
        ``[objective]`` term anchors on the round's start model and reads the server's values of those entries, which
        the start carries: then they are priced (FedFomo, FedPer, LG-FedAvg with ``proximal_mu``; :meth:`anchor_sent`).
        """
        if client_id not in self.seen:
            return ()
        return tuple(k for k in unchanged if k not in (params or {}))

    def anchor_sent(self, key: str, params: Params | None) -> bool:
        """Whether ``key``, an entry the client's half puts its own value in place of, is sent all the same: an
        ``[objective]`` anchor reads the server's value of it (:attr:`anchor_reads`), and the start carries that value.

        Why: the anchor is the server's model, which the client holds only where it was sent. Where the aggregator sends
        a value of its own instead (pFedSim's held head is the client's last upload), :func:`anchor_unsent` prices the
        server's: the start's value stays held, else the client would pay for its own head twice. An entry the anchor
        does not read (a buffer under the proximal term) stays held too.
        """
        if not self.anchors or (self.anchor_reads is not None and key not in self.anchor_reads):
            return False
        return params is None or key not in params or same_value(params[key], self.state[key])

    def server_update(
        self, round: int, tasks: Sequence[ClientTask[ParamDownlink, ClientState]], replies: Sequence[ClientReply[ParamUplink, ClientState]]
    ) -> RoundRecord:
        read = set(aggregated_keys(self.aggregator, self.state))
        unread = frozenset(k for k in self.state if k not in read)  # entries the server never reads: the uplink does not price them
        results = []
        for task, reply in zip(tasks, replies):
            up = reply.uplink
            self.store.save(task.client_id, reply.state)
            self.finished.add(task.client_id)
            self.book.receive(round, task, reply, up.train_loss, up.as_sent(unread))
            self.refuse_moved_start(task.client_id, up.moved_start, read)
            d = task.downlink
            temperature = d.temperature if reply.temperature is None else reply.temperature  # a client half (FedChill) picks its own
            results.append(ClientResult(task.client_id, up.params, up.num_samples, up.num_steps, d.lr, temperature, up.train_loss, up.report))
        usable, left_out = finite_uploads(round, results, self.tolerant)
        before, self.state = self.state, self.aggregator.aggregate(self.state, usable, round)
        left_out = round_left_out(left_out, self.aggregator, round)  # and those the aggregator left out (an attack's forged ones)
        check_aggregated(before, self.state, self.aggregator)
        measured = sorted([t.client_id for t in tasks] + self.unreported)  # the clients that trained this round
        if self.after_average and self.eval_clients != "none":
            self.measure_after_average(measured)
        self.moved.update(k for k in unread if k not in self.moved and not torch.equal(before[k], self.state[k]))
        self.book.check_state(round, self.state)

        # no results: a round nobody reported, released by the aggregator (releases_empty_rounds): ServerBook.round_record's empty-round rule
        trained = [ClientLoss(r.client_id, r.train_loss, r.num_samples, r.temperature) for r in results]
        record = self.book.round_record(round, [t.client_id for t in tasks], self.lr_at(round), trained, measured=measured)
        record.method = dict(check_round_metrics(self.aggregator.round_metrics(), self.aggregator, self.client.method_field))
        if left_out:  # non-finite uploads a rule built to withstand bad clients did not see (finite_uploads, round_left_out)
            record.metrics["uploads_left_out"] = left_out
        self.unreported = []
        record.metrics.update(self.book.evaluate(round, self.state))
        return record

    def refuse_moved_start(self, client_id: int, moved: Sequence[str], read: Collection[str]) -> None:
        """A client whose half's ``prepare`` trained from a start other than the one it was sent, on an entry the server
        reads from the uploads (its ``aggregated_keys``, less those the half declares it keeps, :func:`kept_entries`), is
        refused on the method's field before anything reads its update.

        Why: an ``[attack]`` forges from, and a ``[privacy]`` clip bounds, the update w_i - start_i with the start the
        server knows (the downlink's, or a :class:`~chillfl.aggregation.base.ChoosesStart` method's report); taken from
        the wrong one, every attacked or clipped upload was silently another. The clients report it only where this
        matters (:attr:`ParameterClient.watch_start`). Kept entries are exempt: a forging attack on a method that
        averages them is refused before the run (:func:`chillfl.attacks.build.check_uploads`), and a clip rightly reads
        them from the sent values, which its released average is taken from."""
        wrong = [k for k in moved if k in read and k not in self.kept]
        if wrong:
            raise ConfigError(self.client.method_field, f"{half_name(self.client.half)}.prepare() gave client {client_id} a start other than the one it "
                                                        f"was sent (entry {wrong[0]!r}), and the run's [attack] or [privacy] clip reads each client's update "
                                                        "from the start the server sent: declare the chosen start on the aggregator (client_start, "
                                                        "ChoosesStart in chillfl.extend) or return the sent start from prepare")

    def releases_empty_rounds(self) -> bool:
        """Whether the aggregator releases a round nobody reported (:class:`~chillfl.engine.protocol.ReleasesEmptyRounds`,
        :class:`~chillfl.aggregation.base.AggregatesNobody`): then :meth:`server_update` runs on no replies."""
        return isinstance(self.aggregator, AggregatesNobody) and self.aggregator.aggregates_nobody()

    def skipped_round(self, round: int) -> dict[str, Json]:
        """A skipped round (:class:`~chillfl.engine.protocol.ObservesSkippedRounds`): the run's last one evaluates the global model (:meth:`ServerBook.last`)."""
        return self.book.evaluate(round, self.state) if self.book.last(round) else {}

    def measure_after_average(self, sampled: Sequence[int]) -> None:
        """Local accuracy, loss (and validation accuracy) of the clients ``local_acc`` reports, on the model just averaged.

        Each is :func:`personal_model` of the client's stored state on the new global model (as
        :meth:`client_states` builds it), evaluated on the client's own split here on the server, and replaces the
        client's own measure in the log: the round's clients under ``eval.clients = "sampled"``, every client that has
        reported under ``"all"`` (their kept parts with this round's shared ones, as the authors' codes test every
        client). Why on the server: the client measured before the average, and only the server has the new model
        before the next round; the states it reads are the ones it already keeps (so a Flower run, whose states stay
        on the nodes, refuses the option at start-up).
        """
        ids = list(sampled) if self.eval_clients == "sampled" else sorted(self.book.log.acc)
        bs = self.client.eval_batch_size
        for cid in ids:
            state = self.store.load(cid)
            if state is None and cid in self.finished:  # it reported, and its half kept nothing this time (the store drops an empty state)
                state = {}
            if state is None:
                raise RuntimeError(f"client {cid}'s state is not on the server: its local accuracy after the average cannot be measured")
            model = personal_model(self.client.half, state, client_base(self.aggregator, cid, self.state))
            if model is None:
                raise RuntimeError("measured after the average, but the client half keeps no personal model")
            data = self.evaluation.client_data(cid)
            template = personal_template(self.client.half, self.client.model)
            acc, loss = local_evaluation(template, model, data, bs)
            self.book.log.record(cid, acc, loss, local_validation(template, model, data, bs))

    def global_state(self) -> Params:
        return self.state

    def client_states(self) -> Mapping[int, Params]:
        """Every client's own model where the method keeps one (:class:`~chillfl.aggregation.base.HoldsPersonalModel`), else none;
        built on the model the server makes for that client where it makes one (:func:`~chillfl.aggregation.base.client_base`),
        and then for every client that took part, even one that keeps no state (full pFedHN)."""
        out: dict[int, Params] = {}
        makes = client_maker(self.aggregator) is not None  # the server makes each client's model (pFedHN's h(v_i; phi)), a wrapper's base included
        for cid in sorted(set(self.store.ids()) | (self.finished if makes else set())):
            state = self.store.load(cid)
            if state is None and makes:  # a client that took part and keeps nothing: its model is the one the server makes
                state = {}
            model = None if state is None else personal_model(self.client.half, state, client_base(self.aggregator, cid, self.state))
            if model is None:
                return {}
            out[cid] = model
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "global": dict(self.state),
            "aggregator": self.aggregator.state_dict(),
            "clients": self.store.state_dict(),
            "seen": sorted(self.seen),
            "moved": sorted(self.moved),
            "finished": sorted(self.finished),
            **self.book.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.state = {k: v.to(self.evaluation.device) for k, v in state["global"].items()}
        self.aggregator.load_state_dict(state["aggregator"])
        self.store.load_state_dict(state["clients"])
        self.seen = {int(c) for c in state.get("seen", ())}  # a checkpoint before 2026-11-29 has none: first downlinks priced whole again
        self.moved = {str(k) for k in state.get("moved", ())}
        self.finished = {int(c) for c in state.get("finished", ())}  # an older checkpoint: kept entries priced until each client replies again
        for cid in sorted(self.finished):  # each holds its own value of every entry its half keeps: else it would restart from the global one
            lacking = lacking_entries(self.client.half, self.store.load(cid) or {})
            if lacking:
                raise ValueError(f"client {cid} finished a round, so its state holds its own {sorted(lacking)[0]} (its method keeps that entry), but it has none")
        self.book.load_state_dict(state)

    def close(self) -> None:
        self.store.close()


def build_parameter_sharing(exp: Experiment, evaluation: Evaluation) -> ParameterSharing:
    """Parameter sharing (FedAvg family): the run's aggregator, its client reporter, ``[objective]``'s proximal term."""
    assert exp.aggregator is not None, "parameter sharing averages models: build_experiment builds its aggregator"
    half = exp.aggregator.client_half()  # the aggregator's client half: it travels, the aggregator does not
    # the part that runs the client's trainings (Ditto, FedRep, APFL, pFedMe), alone or combined with others (Halves: at most one)
    trainer: Personalising | None = None
    for part in half_parts(half):
        if isinstance(part, Personalising):
            trainer = part
            break
    objectives = () if trainer is None else trainer.objectives(exp.spec)
    numbers, anchors = objective_context(exp.config.objective)  # what [objective]'s terms read from the run
    fields = context_fields(exp.config.objective)
    return ParameterSharing(
        seed=exp.config.seed,
        lr_at=exp.config.lr_at,
        initial_state=exp.initial_state,
        aggregator=exp.aggregator,
        policy=exp.policy,
        anchor_buffers=anchor_reads_buffers(exp.config.objective),
        evaluation=evaluation,
        client=ParameterClient(
            exp.model, exp.config.eval.batch_size, half, exp.policy.client_half(exp.data.num_classes),
            trainer=trainer, spec=exp.spec if trainer else None, objectives=objectives,
            objective_keys=tuple((key, where, name) for key, (where, name) in fields.items()),
            method_field=exp.spec.method_field or "algorithm.name", policy_field=exp.spec.policy_field, watch_start=start_watched(exp.aggregator),
        ),
        eval_clients=exp.config.eval.clients,
        tolerant=tolerates_bad_clients(exp.config.algorithm, exp.aggregator),
        objective_context=numbers,
        anchors=anchors,
        objective_fields=fields,
    )
