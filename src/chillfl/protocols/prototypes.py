"""The prototype-sharing protocol (``[prototypes]``): FedProto, FedHKD and any :class:`~chillfl.prototypes.spec.PrototypeSpec`.

Clients share per-class knowledge about their representations instead of (or,
when the method's ``shares_model`` says so, besides) their models. One round,
as the round loop runs it::

    configure:      per client: KnowledgeDownlink(global class means and mask, the method's
                    global rows and parameters, the global model if models are shared, lr, T, seed)
    client update:  start from the global model (shared) or the client's own, as the
                    method puts the knowledge into it (hooks.start: FedGH's global head);
                    train once with the method's loss (hooks.loss), at the
                    downlink's T or (FedChill) the client's own, kept in its state;
                    release its class rows on its private data (hooks.release);
                    evaluate by the head and by the nearest prototype   -> KnowledgeUplink
    server update:  the global knowledge (hooks.update, by default hooks.combine); the
                    aggregator's average of the models when they are shared; evaluate;
                    the method's own numbers (hooks.round_metrics, as agg_*)

The method is found by :func:`chillfl.settings.prototypes.method_spec`; this
module calls only its hooks. The shared maths is :mod:`chillfl.prototypes.maths`;
the built-ins' options and choices are in docs/baselines.md.

Metrics: ``local_acc`` is each client's model by its head on its own split
(``local_val_acc`` on its own validation split, with ``eval.validation > 0``);
``local_proto_acc`` the same model by the nearest prototype (global means where
the class has one, else the client's own mean), in the space the prototypes live
in (``hooks.space``: the representation, or the logits). ``global_acc``: the global
model on the test set when models are shared; otherwise the mean over the
clients seen so far of their own models on the test set (FedChill's "client
generalisation to the global test set"), each model as the method would start the
client's next round from it (hooks.start: unchanged for FedProto and FedHKD), with
``global_proto_acc`` likewise by nearest prototype.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import nn

from chillfl.aggregation.base import Aggregator, ClientResult, Params
from chillfl.aggregation.client_states import ClientParams
from chillfl.aggregation.registry import refuse_unused_options, tolerates_bad_clients
from chillfl.capabilities import FORWARD, Cost
from chillfl.config import RunConfig
from chillfl.engine.protocol import ClientJob, ClientProgram, ClientReply, ClientTask
from chillfl.engine.record import Json, RoundRecord
from chillfl.training.objective import Wire
from chillfl.errors import ConfigError
from chillfl.options import short_repr
from chillfl.models.assign import arch_section
from chillfl.models.parts import NoHeadError, head_has_bias, head_inputs, head_name, head_size, refuse_nonlinear_head
from chillfl.aggregation.uploads import finite_uploads, round_left_out
from chillfl.protocols.book import ClientLoss, ServerBook
from chillfl.protocols.common import (
    Evaluation, check_aggregated, check_client_state, check_finite_rows, local_validation, mean_or_none, measured_mean, rows_all_finite,
    policy_accuracy, state_bytes,
)
from chillfl.protocols.parts import ClientModels, Experiment, build_client_models
from chillfl.prototypes.maths import nearest_prototype
from chillfl.prototypes.spec import ClassRows, Head, Knowledge, PrototypeHooks, PrototypeSpec, check_knowledge
from chillfl.settings.prototypes import SECTION, PrototypeSettings, built_in_names
from chillfl.plugins import building
from chillfl.temperature.base import TemperatureHalf, TemperaturePolicy
from chillfl.training.linear_factors import factored_linears
from chillfl.seeds import derive_seed
from chillfl.training.local import LocalOutcome, LocalSpec, evaluate

# ---------------------------------------------------------------- messages


@dataclass
class KnowledgeDownlink:
    """Server -> client: the global knowledge (class means, mask, the method's rows), the model if shared, lr, T, seed."""

    knowledge: Knowledge
    model: Params | None
    lr: float
    temperature: float
    seed: int

    def nbytes(self) -> dict[str, int]:
        k = self.knowledge
        known = int(k.mask.sum())
        out = {"knowledge": known * (k.width() * k.protos.element_size() + 4) + state_bytes(k.params)}  # rows of the known classes + their class ids; params whole
        if self.model is not None:
            out["params"] = state_bytes(self.model)
        return out


@dataclass
class KnowledgeUplink:
    """Client -> server: the client's class rows (means, counts, the method's rows), the model if shared, the round's numbers."""

    rows: ClassRows
    model: Params | None
    num_samples: int
    num_steps: int
    train_loss: float
    proto_acc: float | None = None
    """A simulation metric (accuracy by nearest prototype on the client's split), not on the wire."""

    def nbytes(self) -> dict[str, int]:
        r = self.rows
        known = int((r.counts > 0).sum())
        out = {"knowledge": known * (r.width() * r.means.element_size() + 8)}  # rows + class id + count
        if self.model is not None:
            out["params"] = state_bytes(self.model)
        return out


# ---------------------------------------------------------------- client side


@dataclass
class KnowledgeState:
    """A client's own state between rounds: its model (``share_model = false``) and its temperature entries (FedChill's ``fedchill.*``)."""

    model: Params | None = None
    own: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)


def features_and_logits(model: nn.Module, state: Mapping[str, torch.Tensor], x: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(representation, logits) of ``state`` on ``x``, eval mode, in batches: :func:`~chillfl.models.parts.head_inputs`, one loop
    for every reader of the head's inputs."""
    return head_inputs(model, head_name(model, warn=False), state, x, batch_size)  # the run's check (check_prototype_sharing) warned


class HeadTap:
    """The head's inputs and the logits of each batch an evaluation's ``observe`` sees, kept while entered.

    Why: the nearest-prototype accuracy reads the same (representation, logits) of the same rows as :func:`evaluate`'s
    forward pass computes; a second pass over the test set for each client model doubled the evaluation's cost. The
    head's input of a batch is the last one the head saw before ``observe`` is called with that batch's logits (forwards
    of other rows, such as a validation split's, are never observed and so not kept)."""

    def __init__(self, model: nn.Module) -> None:
        self.name = head_name(model, warn=False)  # the run's check (check_prototype_sharing) warned
        self.head = model.get_submodule(self.name)
        self.last: torch.Tensor | None = None
        self.feats: list[torch.Tensor] = []
        self.logits: list[torch.Tensor] = []
        self.handle: torch.utils.hooks.RemovableHandle | None = None

    def __enter__(self) -> HeadTap:
        self.handle = self.head.register_forward_pre_hook(self._grab)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.handle is not None:
            self.handle.remove()

    def _grab(self, _module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        self.last = inputs[0]

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        """One evaluated batch (an ``observe`` hook of :func:`evaluate`)."""
        if self.last is None:
            raise NoHeadError(f"the forward did not call its classifier head {self.name!r}")
        self.feats.append(self.last.reshape(len(self.last), -1))
        self.logits.append(logits)
        self.last = None

    def accuracy(self, y: torch.Tensor, protos: torch.Tensor, mask: torch.Tensor, represent: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> float:
        """Accuracy of the nearest-prototype rule on the observed rows (labels ``y``), in the space ``represent`` picks of
        (representation, logits) (the method's :meth:`~chillfl.prototypes.spec.PrototypeHooks.represent`); NaN when there
        are no samples or no prototypes."""
        if len(y) == 0 or not bool(mask.any()):
            return float("nan")
        feats, logits = torch.cat(self.feats), torch.cat(self.logits)
        return float((nearest_prototype(represent(feats, logits), protos, mask) == y).to(torch.float64).mean())


def evaluate_with_prototypes(
    model: nn.Module, state: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, protos: torch.Tensor, mask: torch.Tensor, batch_size: int,
    represent: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> tuple[float, float, float]:
    """(accuracy, loss) as :func:`evaluate` gives them, and the nearest-prototype accuracy (:meth:`HeadTap.accuracy`), of
    ``state`` on (x, y) from one forward pass."""
    with HeadTap(model) as tap:
        acc, loss = evaluate(model, state, x, y, batch_size, observe=tap)
    return acc, loss, tap.accuracy(y, protos, mask, represent)


@dataclass(frozen=True)
class KnowledgeClient:
    """The client update (pure): per-architecture templates and specs, each client's architecture."""

    models: tuple[nn.Module, ...]
    specs: tuple[LocalSpec, ...]
    initial_states: tuple[Params, ...]
    arch_of: tuple[int, ...]
    num_classes: int
    hooks: PrototypeHooks[Any]
    """The method's hooks (options only: they travel with this object)."""
    share_model: bool
    eval_batch_size: int
    temperature: TemperatureHalf | None = None
    """The temperature policy's client half (FedChill): T from the client's own state, updated after training."""
    heads: tuple[Head, ...] = ()
    """Per architecture, the names of its last layer's parameters (for ``hooks.start``)."""

    def update(self, task: ClientTask[KnowledgeDownlink, KnowledgeState]) -> ClientProgram:
        cid, d, data = task.client_id, task.downlink, task.data
        arch = self.arch_of[cid]
        model = self.models[arch]
        mine = task.state or KnowledgeState()
        if d.model is not None:
            start: Mapping[str, torch.Tensor] = d.model
        else:
            start = mine.model if mine.model is not None else self.initial_states[arch]
        start = self.hooks.start(start, d.knowledge, self.heads[arch])
        context: dict[str, Wire] = d.knowledge.context()
        t = d.temperature if self.temperature is None else self.temperature.temperature(mine.own, d.temperature, data.y)
        out: LocalOutcome = yield ClientJob(cid, start, data.x, data.y, d.lr, t, context, d.seed, spec=self.specs[arch], work=task.work, stamp=data.stamp)
        feats, logits = features_and_logits(model, out.params, data.x, self.eval_batch_size)
        rows = self.hooks.release(cid, task.round, feats, logits, data.y)
        if not isinstance(rows, ClassRows):  # a plugin's slip: one line, not an AttributeError from the client's evaluation
            raise ConfigError("prototypes.method", f"{type(self.hooks).__name__}.release() returned a {type(rows).__name__}, not a chillfl.extend.ClassRows")
        if rows.means.shape != d.knowledge.protos.shape:  # a plugin's slip: one line, not a RuntimeError in torch.where or the server
            raise ConfigError("prototypes.method", f"{type(self.hooks).__name__}.release() returned means of shape {tuple(rows.means.shape)}; "
                                                   f"they must be {list(d.knowledge.protos.shape)} (a row per class, a column per prototype entry)")
        acc: float | None = None
        loss: float | None = None
        p_acc: float | None = None
        if data.x_eval is not None and data.y_eval is not None:  # local_evaluation's test; the proto accuracy from its forward pass
            own, known = rows.counts > 0, d.knowledge.mask
            protos = torch.where(known.unsqueeze(1), d.knowledge.protos.to(rows.means.dtype), rows.means)
            acc, loss, p_acc = evaluate_with_prototypes(model, out.params, data.x_eval, data.y_eval, protos, known | own, self.eval_batch_size, self.hooks.represent)
        shared = out.params if self.share_model else None
        up = KnowledgeUplink(rows, shared, len(data.y), out.num_steps, out.mean_loss, p_acc)
        val_acc = local_validation(model, out.params, data, self.eval_batch_size)
        entries = {} if self.temperature is None else self.temperature.finish(mine.own, t, policy_accuracy(acc, val_acc))
        check_client_state(entries, f"{type(self.temperature).__name__}.finish()", self.specs[arch].policy_field)
        state = KnowledgeState(None if self.share_model else out.params, entries)
        kept = state if state.model is not None or state.own else None
        return ClientReply(cid, up, kept, acc, loss, None if self.temperature is None else t, local_val_acc=val_acc)


# ---------------------------------------------------------------- server side


def trained_at(task: ClientTask[KnowledgeDownlink, KnowledgeState], reply: ClientReply[KnowledgeUplink, KnowledgeState]) -> float:
    """The temperature the client trained at: its own (FedChill's client half) or the downlink's."""
    return task.downlink.temperature if reply.temperature is None else reply.temperature


def held_rows_finite(releases: Sequence[ClassRows]) -> bool:
    """Whether every row of a class its client holds (count > 0) is finite in every release, or may not be: the rows of
    classes not held zeroed in place (no sync, as ``rows[known]`` made one a block), then :func:`rows_all_finite`'s one
    reduction and host sync for the round. False also where a block cannot be masked so (a shape or device apart from
    its counts'): the exact look client by client (:func:`check_finite_rows`) decides, as it did before."""
    blocks: list[torch.Tensor] = []
    for release in releases:
        known = release.counts > 0
        for rows in (release.means, *release.extra.values()):
            if not rows.is_floating_point():
                continue
            if known.dim() != 1 or rows.dim() == 0 or rows.shape[0] != known.shape[0] or rows.device != known.device:
                return False
            blocks.append(rows.masked_fill(~known.reshape(-1, *([1] * (rows.dim() - 1))), 0))
    return rows_all_finite(blocks)


class PrototypeSharing:
    """The server side: global knowledge, the global model (when models are shared), every client's own model (when not)."""

    def __init__(
        self,
        *,
        hooks: PrototypeHooks[Any],
        seed: int,
        lr_at: Callable[[int], float],
        client: KnowledgeClient,
        global_state: Params | None,
        initial_head: Params,
        aggregator: Aggregator | None,
        policy: TemperaturePolicy,
        evaluation: Evaluation,
        eval_clients: str,
        proto_dim: int,
        tolerant: bool = False,
    ) -> None:
        self.hooks = hooks
        self.seed = seed
        self.lr_at = lr_at
        self.client = client
        self.state = global_state
        self.aggregator = aggregator
        self.tolerant = tolerant
        """A non-finite model upload is left out of the round, not the end of the run (:func:`finite_uploads`)."""
        self.policy = policy
        self.evaluation = evaluation
        self.eval_clients = eval_clients
        c = client.num_classes
        device = evaluation.device
        extra = {name: rows.to(device) for name, rows in hooks.initial().items()}  # every class unknown yet
        params = {name: t.to(device) for name, t in hooks.initial_params(initial_head).items()}
        self.knowledge = Knowledge(torch.zeros((c, proto_dim), device=device), torch.zeros(c, dtype=torch.bool, device=device), extra, params)
        self.clients = ClientParams()  # models of clients that keep their own (share_model = false), flat on the CPU
        self.own = ClientParams()  # the clients' temperature entries (FedChill), kept for them as their models are
        self.book = ServerBook(policy, evaluation, eval_clients)
        self.proto_acc: dict[int, float] = {}

    def configure(self, round: int, sampled: Sequence[int]) -> list[ClientTask[KnowledgeDownlink, KnowledgeState]]:
        if self.aggregator is not None:
            self.aggregator.begin_round(round, sampled)
        lr, k = self.lr_at(round), self.knowledge.sent()  # the server's own state (Knowledge.server) stays here
        tasks: list[ClientTask[KnowledgeDownlink, KnowledgeState]] = []
        for cid in sampled:
            down = KnowledgeDownlink(k, self.state, lr, self.policy.temperature(cid, round), derive_seed(self.seed, "train", cid, round))
            model, own = self.clients.get(cid), self.own.get(cid)
            state = KnowledgeState(model, own or {}) if model is not None or own else None
            tasks.append(ClientTask(cid, round, down, self.evaluation.client_data(cid), state))
        return tasks

    def server_update(
        self, round: int, tasks: Sequence[ClientTask[KnowledgeDownlink, KnowledgeState]], replies: Sequence[ClientReply[KnowledgeUplink, KnowledgeState]]
    ) -> RoundRecord:
        results, releases = [], []
        left_out: list[int] = []
        clean = held_rows_finite([r.uplink.rows for r in replies])  # one host sync for the round
        for task, reply in zip(tasks, replies):
            cid, up = task.client_id, reply.uplink
            self.book.receive(round, task, reply, up.train_loss, up)
            if up.proto_acc is not None:
                self.proto_acc[cid] = up.proto_acc
            if reply.state is not None and reply.state.model is not None:
                self.clients[cid] = reply.state.model
            if reply.state is not None and reply.state.own:
                self.own[cid] = reply.state.own
            known = up.rows.counts > 0  # a class the client does not hold releases no row
            for name, rows in (("class prototypes", up.rows.means), *((f"class rows {key!r}", t) for key, t in up.rows.extra.items())):
                if not clean:  # some client's held rows may not be finite: the first bad one, named (in reply order)
                    check_finite_rows(round, cid, rows[known], name, torch.nonzero(known).flatten().tolist())  # before the knowledge every client reads
            releases.append(up.rows)
            if up.model is not None:
                d = task.downlink
                results.append(ClientResult(cid, up.model, up.num_samples, up.num_steps, d.lr, trained_at(task, reply), up.train_loss, {}))
        knowledge = check_knowledge(self.hooks.update(self.knowledge, releases, round), self.knowledge)
        server = {f"server.{name}": t for name, t in knowledge.server.items()}
        self.book.check_state(round, {"prototypes": knowledge.protos, **knowledge.params, **server}, "global knowledge")
        self.knowledge = knowledge
        if self.aggregator is not None and self.state is not None:
            usable, left_out = finite_uploads(round, results, self.tolerant)
            before, self.state = self.state, self.aggregator.aggregate(self.state, usable, round)
            left_out = round_left_out(left_out, self.aggregator, round)  # and those the aggregator left out (an attack's forged ones)
            check_aggregated(before, self.state, self.aggregator)
            self.book.check_state(round, self.state)

        trained = [ClientLoss(t.client_id, r.uplink.train_loss, r.uplink.num_samples, trained_at(t, r)) for t, r in zip(tasks, replies)]
        record = self.book.round_record(round, [t.client_id for t in tasks], self.lr_at(round), trained)
        record.method = self.hooks.round_metrics(knowledge, releases, round)
        record.metrics["known_classes"] = int(knowledge.mask.sum())
        if left_out:  # non-finite model uploads a rule built to withstand bad clients did not see (finite_uploads, round_left_out)
            record.metrics["uploads_left_out"] = left_out
        if self.eval_clients != "none":
            record.metrics["local_proto_acc"] = self.local_proto_acc(record.clients)
        if self.book.due(round):  # without a global model: the mean over the clients' own models
            record.metrics.update(self._global_metrics())
        return record

    def local_proto_acc(self, sampled: Sequence[int]) -> float | None:
        """The mean nearest-prototype accuracy of the round's clients (or every client measured so far), as ``local_acc``
        averages: a client whose own evaluation split is empty measured nothing and is left out; any other NaN shows."""
        ids = sampled if self.eval_clients == "sampled" else sorted(self.proto_acc)
        empty = self.evaluation.empty_eval
        return measured_mean([self.proto_acc[c] for c in ids if c in self.proto_acc and c not in empty])

    def skipped_round(self, round: int) -> dict[str, Json]:
        """A skipped round (:class:`~chillfl.engine.protocol.ObservesSkippedRounds`): the run's last one evaluates (:meth:`ServerBook.last`)."""
        return self._global_metrics() if self.book.last(round) else {}

    def evaluate_now(self) -> dict[str, Json]:
        """What an evaluated round records for the present state (:class:`~chillfl.engine.protocol.EvaluatesNow`): a run
        stopped at a round ``eval.every`` skips has no global model to evaluate without sharing models."""
        return self._global_metrics()

    def _global_metrics(self) -> dict[str, Json]:
        ev, k = self.evaluation, self.knowledge
        bs = ev.config.eval.batch_size
        if self.state is not None:
            with HeadTap(ev.model) as tap:  # the test set's forward pass, read once for both
                out = ev.metrics(self.state, observe=tap)
            out["global_proto_acc"] = tap.accuracy(ev.y_test, k.protos, k.mask, self.hooks.represent)
            return out
        accs, losses, paccs = [], [], []
        for cid, own in sorted(self.clients.items()):
            arch = self.client.arch_of[cid]
            model = self.client.models[arch]
            state = self.hooks.start(own, k, self.client.heads[arch])  # the model its next round would start from
            acc, loss, pacc = evaluate_with_prototypes(model, state, ev.x_test, ev.y_test, k.protos, k.mask, bs, self.hooks.represent)
            accs.append(acc)
            losses.append(loss)
            paccs.append(pacc)
        # on the global test set nothing is empty: a NaN is a client model whose logits are not finite, and shows (a diverged
        # model must not vanish from the mean); proto accuracy is NaN for every client alike while no class is known
        return {"global_acc": measured_mean(accs), "global_loss": measured_mean(losses), "global_proto_acc": mean_or_none(paccs)}

    def global_state(self) -> Params | None:
        return self.state

    def client_states(self) -> Mapping[int, Params]:
        return dict(self.clients)

    def state_dict(self) -> dict[str, Any]:
        return {
            "global": None if self.state is None else dict(self.state),
            "knowledge": self.knowledge.state_dict(),
            "clients": {str(c): dict(s) for c, s in self.clients.items()},
            "own": {str(c): dict(s) for c, s in self.own.items()},
            "proto_acc": {str(c): v for c, v in self.proto_acc.items()},
            "aggregator": None if self.aggregator is None else self.aggregator.state_dict(),
            **self.book.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        dev = self.evaluation.device
        self.state = None if state["global"] is None else {k: v.to(dev) for k, v in state["global"].items()}
        self.knowledge = Knowledge.from_state(state["knowledge"]).to(dev)
        self.clients = ClientParams.of({int(c): {n: v.to(dev) for n, v in s.items()} for c, s in state["clients"].items()})
        self.own = ClientParams.of({int(c): dict(s) for c, s in state.get("own", {}).items()})  # older checkpoints: none
        self.proto_acc = {int(c): float(v) for c, v in state["proto_acc"].items()}
        if self.aggregator is not None:
            self.aggregator.load_state_dict(state["aggregator"])
        self.book.load_state_dict(state)

    def close(self) -> None:
        return None



# ---------------------------------------------------------------- building it from the run's parts


@dataclass(frozen=True)
class PrototypeParts:
    """What the protocol is built from: the method's hooks, the client models, one training spec per architecture."""

    hooks: PrototypeHooks[Any]
    share_model: bool
    models: ClientModels
    specs: tuple[LocalSpec, ...]
    proto_dim: int
    """The prototypes' width: the representation's (``hooks.space = "features"``) or the number of classes (``"logits"``)."""
    heads: tuple[Head, ...]
    """Per architecture, the names of its last layer's parameters."""


def spec_of(settings: PrototypeSettings) -> PrototypeSpec[Any]:
    """The spec of the method ``settings`` names (looked up by the settings, which cannot import this module)."""
    spec = settings.spec
    if not isinstance(spec, PrototypeSpec):
        raise ConfigError(f"{SECTION}.method", f"{settings.method!r} must name a chillfl.extend.PrototypeSpec, got {short_repr(spec)}")
    return spec


def default_algorithm() -> str:
    """The ``[algorithm]`` a config gets when it names none: the one this protocol averages shared models with."""
    return str(RunConfig().algorithm["name"])


def prototype_parts(exp: Experiment, *, warn: bool = True) -> PrototypeParts:
    """The method's hooks, client models and per-architecture training specs; ConfigError on any misfit.

    Each architecture's head is looked up once; ``warn``: that lookup warns about a model that declares none (the
    check, which every built experiment passes; the protocol's build, after it, does not warn again).
    """
    cfg = exp.config
    settings = _settings(cfg)
    spec = spec_of(settings)
    algorithm, default = cfg.algorithm.get("name"), default_algorithm()
    if exp.spec.method_field == "aggregator":  # passed from Python: its config record says "custom", which the user never wrote
        raise ConfigError("aggregator", f"[prototypes] trains with its method's own objective and averages models with its own {default}; pass no aggregator")
    if algorithm != default or exp.spec.terms:
        raise ConfigError("algorithm.name", f"[prototypes] trains with its method's own objective and averages models with {default}; got {algorithm!r}")
    shares = bool(spec.shares_model(settings.options))
    if not shares:
        refuse_unused_options(cfg.algorithm, default, f"[prototypes] method {settings.method!r} shares no models")
    if spec.check is not None:
        spec.check(settings.options, cfg)
    with building(settings.method, f"{SECTION}.method", settings.method in built_in_names(), " (called as build(options, num_classes, seed))"):
        hooks = spec.build(settings.options, exp.data.num_classes, cfg.seed)
    cm = build_client_models(exp)
    specs, dims, heads = [], [], []
    for i, model in enumerate(cm.models):
        try:
            head = head_name(model, warn=warn)
        except NoHeadError as exc:
            raise ConfigError("model.name" if i == 0 else str(cm.plan.field), f"{exc}: [prototypes] needs a representation") from None
        refuse_nonlinear_head(model, spec.capabilities.linear_head, settings.method, arch_section(cm.plan, i), head=head)
        dims.append(head_size(model, head).features)
        bias = f"{head}.bias" if head_has_bias(model, head) else None
        heads.append(Head(f"{head}.weight", bias, frozen=not all(p.requires_grad for p in model.get_submodule(head).parameters())))
        loss = hooks.loss(heads[-1])
        if not callable(loss):  # a plugin's slip: one line now, not a TypeError at the first training step
            raise ConfigError(f"{SECTION}.method", f"{type(hooks).__name__}.loss() returned a {type(loss).__name__}, not a loss (see chillfl.extend.PrototypeLoss)")
        specs.append(dataclasses.replace(exp.spec, base_loss=loss, terms=(), term_fields=(), model=factored_linears(model),
                                         method_field=f"{SECTION}.method"))  # its loss is the method's: a refusal of it names the method's field
    if hooks.space == "features" and len(set(dims)) > 1:  # prototypes among the logits have C entries whatever the body
        labels = ", ".join(f"{cm.plan.label(i)}: {d}" for i, d in enumerate(dims))
        raise ConfigError(str(cm.plan.field), f"[prototypes] needs one representation width (the classifier head's input) for all architectures, got {labels}")
    proto_dim = dims[0] if hooks.space == "features" else exp.data.num_classes
    return PrototypeParts(hooks, shares, cm, tuple(specs), proto_dim, tuple(heads))


def check_prototype_sharing(exp: Experiment) -> None:
    """Its per-architecture checks and the method's own ``check``, before anything is written (warning once about a model without a declared head)."""
    prototype_parts(exp, warn=True)


def _settings(config: RunConfig) -> PrototypeSettings:
    """``[prototypes]`` as the config parsed it (this protocol runs only when the table is set)."""
    settings = config.prototype_settings
    assert settings is not None, "the prototype protocol runs only when [prototypes] is set"
    return settings


def prototype_cost(config: RunConfig) -> Cost:
    """A round's work besides the local training, for time estimates: each client's forward over its rows for its
    prototypes; and on each round that evaluates, the passes :meth:`PrototypeSharing._global_metrics` runs over the test
    rows (the test set less ``eval.validation``'s share): with a global model, its pass alone (the estimate's own); without,
    one pass of each model kept so far by a client, with N (1 - (1 - m/N)^t) clients expected to have trained by round t.
    The accuracy by nearest prototype reads the representations of that same pass (:class:`HeadTap`): no pass of its own."""
    if share_models(config):
        return Cost(epochs=FORWARD)
    fed = config.federation
    evaluated = config.eval.evaluated_rounds(fed.rounds)
    models = sum(fed.expected_participants(t) for t in evaluated) / len(evaluated)
    return Cost(epochs=FORWARD, test_passes=models * (1.0 - config.eval.validation) - 1.0)  # no global model: its pass does not run


def share_models(config: RunConfig) -> bool:
    """Whether this run's clients send models too (the method's ``shares_model``): then they must share one architecture."""
    return _settings(config).share_model


def build_prototype_sharing(exp: Experiment, evaluation: Evaluation) -> PrototypeSharing:
    """The method ``[prototypes]`` names, on this protocol: one training spec per architecture, with the method's objective."""
    cfg = exp.config
    parts = prototype_parts(exp, warn=False)  # build_experiment ran check_prototype_sharing on exp, which warned
    cm = parts.models
    client = KnowledgeClient(
        cm.models, parts.specs, cm.states, cm.plan.arch_of, exp.data.num_classes, parts.hooks, parts.share_model, cfg.eval.batch_size,
        exp.policy.client_half(exp.data.num_classes), parts.heads,
    )
    first = parts.heads[0]  # the default architecture's: where a method's own head parameters start
    initial_head = {"weight": cm.states[0][first.weight], **({"bias": cm.states[0][first.bias]} if first.bias is not None else {})}
    return PrototypeSharing(
        hooks=parts.hooks,
        seed=cfg.seed,
        lr_at=cfg.lr_at,
        client=client,
        global_state=exp.initial_state if parts.share_model else None,
        initial_head=initial_head,
        aggregator=exp.aggregator if parts.share_model else None,
        policy=exp.policy,
        evaluation=evaluation,
        eval_clients=cfg.eval.clients,
        proto_dim=parts.proto_dim,
        tolerant=parts.share_model and exp.aggregator is not None and tolerates_bad_clients(cfg.algorithm, exp.aggregator),
    )
