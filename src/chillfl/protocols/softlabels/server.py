"""The server side of the soft-label protocol: public draws, the cache (gamma^t), aggregation, the server model, client states."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from chillfl.config import RunConfig
from chillfl.engine.ledger import index_bytes, signal_bytes
from chillfl.engine.protocol import ClientReply, ClientTask
from chillfl.engine.record import Json, RoundRecord
from chillfl.protocols.book import ClientLoss, ServerBook
from chillfl.protocols.common import Evaluation, check_finite_rows, check_round_metrics, rows_all_finite
from chillfl.protocols.parts import ClientModels, Experiment
from chillfl.errors import ConfigError
from chillfl.numeric import row_sum_tolerance
from chillfl.seeds import derive_seed
from chillfl.settings.distillation import SECTION, DistillationSetup
from chillfl.temperature.base import TemperaturePolicy
from chillfl.training.local import LocalSpec, train_client
from chillfl.training.schedule import StageSteps

from .cache import CacheOutOfSyncError, ServerCache
from .client import ClientArchs, PublicPretraining, SoftLabelClient, rows_digest
from .labels import entropy, predict_proba
from .messages import CacheSyncDelta, SoftLabelDownlink, SoftLabelReport, SoftLabelRoundDownlink
from .method import Aggregate, Pretraining, SoftLabelMethod, SoftLabelSpec, check_aggregate, spec_of
from .public import draw_public_subset, one_sample_failure, public_inputs, public_labels
from .state import ClientState
from .store import ClientStore

Params = dict[str, torch.Tensor]


@dataclass
class Broadcast:
    """Round t's downlink, kept by the server until the next round's clients receive it."""

    round: int
    indices: torch.Tensor  # I^t actually used (cached + kept fresh), in draw order
    downlink: SoftLabelDownlink  # gamma^t, fresh rows, I^t
    rows: torch.Tensor  # zhat^t as every client must rebuild it, [n, D]

    def state_dict(self) -> dict[str, Any]:
        d = self.downlink
        return {
            "round": self.round, "indices": self.indices, "rows": self.rows,
            "down": {"round": d.round, "indices": d.indices, "signals": d.signals, "soft_labels": d.soft_labels, "bits": d.bits},
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "Broadcast":
        """Back on the host, where a downlink lives (it is a message), whatever device the checkpoint was read onto."""
        d = state["down"]
        down = SoftLabelDownlink(round=int(d["round"]), indices=d["indices"].cpu(), signals=d["signals"].cpu(), soft_labels=d["soft_labels"].cpu(), bits=d["bits"])
        return cls(int(state["round"]), state["indices"].cpu(), down, state["rows"].cpu())


FIRST_DISTILLING_ROUND = 2
"""The first round (1-based) whose clients distil: they distil the previous round's soft-labels
(:attr:`SoftLabelRoundDownlink.previous`, None in round 1)."""


@dataclass
class _Specs:
    client: LocalSpec
    distill: LocalSpec
    server: LocalSpec
    server_lr: float
    on_disk: bool


def _specs(exp: Experiment, setup: DistillationSetup, method: SoftLabelMethod[Any]) -> _Specs:
    cfg, spec, c = exp.config, exp.spec, setup.common
    # a zero-weighted distillation loss (COMET at lambda = 0): no phase (0 epochs; the client skips it), since its steps
    # would still apply the client optimiser's weight decay and momentum, and lambda = 0 must be local training alone
    epochs = 0 if method.distill_weight == 0 and _weighted_default_loss(method) else c.distill_epochs
    distill = spec.phase(epochs, c.distill_batch_size or cfg.client.batch_size, method.distill_loss())
    server = spec.phase(
        c.server_epochs or cfg.client.epochs, c.server_batch_size or c.distill_batch_size or cfg.client.batch_size, method.server_loss(),
    )
    if c.augment_public:  # SCARLET's code: the public pool through the train transform, in every distillation batch
        if spec.augment is None:
            raise ConfigError(f"{SECTION}.augment_public", "augments the public inputs with [dataset.augment]'s crop and flip, "
                                                           "and it sets neither: set crop_padding or flip, or leave augment_public false")
        distill, server = dataclasses.replace(distill, augment=spec.augment), dataclasses.replace(server, augment=spec.augment)
    on_disk = c.client_store == "disk" or (c.client_store == "auto" and exp.data.num_clients > c.max_clients_in_memory)
    return _Specs(spec, distill, server, c.server_lr or c.distill_lr, on_disk)


def check_distill_lr_floor(config: RunConfig, setup: DistillationSetup, distill: LocalSpec) -> None:
    """Refuse, before any training, the clients' distillation whose local steps the schedule over steps takes below
    float32's smallest normal lr: ``distill_epochs`` (0 for a zero-weighted loss: no phase) over at most the
    ``subset_size`` public rows a round sends, at ``distill_lr``, with the run's optimiser (:meth:`LocalSpec.phase`).

    Why: found when a client first distilled (round 2), the run was refused after round 1 with its ``.partial`` folder;
    here, where the phase's epochs are known (a zero-weighted loss has none), it is refused as the protocol is built.
    Counted from :data:`FIRST_DISTILLING_ROUND` on: a one-round run never runs the phase, and was refused over it."""
    c = setup.common
    config.client.check_stage_lr_floor(config.federation.rounds, StageSteps(
        distill.epochs, f"{SECTION}.distill_epochs", distill.batch_size, distill.optim, c.subset_size, f"the {c.subset_size} public rows a round sends",
        c.distill_lr), "client", first=FIRST_DISTILLING_ROUND)


def _weighted_default_loss(method: SoftLabelMethod[Any]) -> bool:
    """Whether the clients' loss is the default one, :attr:`~SoftLabelMethod.distill_weight` times KL: only then is a weight
    of 0 a zero loss. A method's own ``distill_loss`` may not read the weight (a plugin's plain KL distilled at 0 before)."""
    return type(method).distill_loss is SoftLabelMethod.distill_loss


def mean_entropy(targets: torch.Tensor) -> float | None:
    """Mean entropy (nats) of the server model's target rows; None when there are none or some row is not a probability
    vector (a negative entry, or a sum off 1 by more than :func:`~chillfl.numeric.row_sum_tolerance` of its dtype).

    Why None: CFD's quantised rows are not renormalised by default, and an all-zero row (nothing above 1-bit's 0.5) has
    "entropy" 0, which reads as a confident target where the server learns nothing from it."""
    if targets.numel() == 0:
        return None
    rows = targets.to(torch.float64)
    tolerance = row_sum_tolerance(targets.dtype, targets.shape[-1])
    if bool((rows < 0).any()) or bool(((rows.sum(dim=-1) - 1.0).abs() > tolerance).any()):
        return None
    return float(entropy(targets).mean())


class SoftLabelProtocol:
    """The server side: public draws, the cache (gamma^t), aggregation, the server model, client states."""

    def __init__(
        self, exp: Experiment, setup: DistillationSetup, evaluation: Evaluation, client_models: ClientModels | None = None,
        spec: SoftLabelSpec[Any] | None = None,
    ) -> None:
        """``setup``: the parsed ``[distillation]`` table (parsed once, with the config); ``spec``: its method's
        (None: looked up from ``setup``).

        ``client_models``: heterogeneous clients, None: every client trains ``exp.model``.
        """
        spec = spec if spec is not None else spec_of(setup)
        cfg = exp.config
        self.config, self.setup, self.model = cfg, setup, exp.model
        self.policy: TemperaturePolicy = exp.policy
        self.evaluation = evaluation
        device = evaluation.device
        c = setup.common
        self.collaborative = spec.collaborative
        self.x_public = public_inputs(setup, exp.data, cfg.seed, cfg.data_dir).to(device) if self.collaborative else torch.zeros((0,))
        self.method = spec.build(setup.options, exp.data.num_classes, cfg.seed, c.index_encoding, max(c.public_size, 1))
        self.specs = _specs(exp, setup, self.method)
        if self.collaborative:  # before any training (the server's phase was counted with the config: check_server_lr_floor)
            check_distill_lr_floor(cfg, setup, self.specs.distill)
        self.universe = max(len(self.x_public), 1)
        self.book = ServerBook(exp.policy, evaluation, cfg.eval.clients)
        self.store = ClientStore(self.specs.on_disk, c.state_dir)
        self.server_state: Params = {n: v.clone() for n, v in exp.initial_state.items()}
        use_cache = setup.uses_cache
        self.cache = ServerCache(setup.cache_duration, c.cache_on_expire, c.cache_request) if use_cache else None
        server_rows = self.method.separate_server_rows or self.method.downlink_from_server
        self.twin = ServerCache(setup.cache_duration, c.cache_on_expire, c.cache_request) if use_cache and server_rows else None
        self.prev: Broadcast | None = None
        self._draw: tuple[torch.Tensor, torch.Tensor] = (torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
        self._one_row: dict[tuple[bool, bool], str | None] = {}  # one_row_failure's answers, each asked once
        archs = self._archs(client_models) if client_models is not None and client_models.plan.heterogeneous else None
        pretraining = self._pretraining(exp, setup, spec.pretraining(setup.options), client_models if archs is not None else None)
        self.client = SoftLabelClient(
            exp.model, spec.client_half(setup.options, exp.data.num_classes, cfg.seed), self.method.uses_logits, self.x_public, self.server_state, self.specs.distill, c.distill_lr,
            cfg.eval.batch_size, self.collaborative, use_cache, archs, pretraining, exp.policy.client_half(exp.data.num_classes),
        )

    def _archs(self, cm: ClientModels) -> ClientArchs:
        """Per-architecture specs: architecture 0 keeps the run's own (the executor's template), the others name their model."""
        train: list[LocalSpec | None] = [None]
        distill = [self.specs.distill]
        for model in cm.models[1:]:
            train.append(dataclasses.replace(self.specs.client, model=model))
            distill.append(dataclasses.replace(self.specs.distill, model=model))
        return ClientArchs(cm.models, cm.states, tuple(train), tuple(distill), cm.plan.arch_of)

    def _pretraining(self, exp: Experiment, setup: DistillationSetup, asked: Pretraining | None, cm: ClientModels | None) -> PublicPretraining | None:
        """The method's pretraining on the labelled public set (None: it asks for none, or there is no public set)."""
        if asked is None or not asked.epochs or not self.collaborative:
            return None
        cfg = exp.config
        y = public_labels(setup, exp.data, cfg.seed, cfg.data_dir, asked.field).to(self.x_public.device)
        base = exp.spec.phase(asked.epochs, cfg.client.batch_size)
        specs = [base] + ([dataclasses.replace(base, model=m) for m in cm.models[1:]] if cm is not None else [])
        lr = asked.lr or cfg.client.lr
        return PublicPretraining(self.x_public, y, tuple(specs), lr, cfg.seed)

    # ------------------------------------------------------------ one round

    def configure(self, rnd: int, sampled: Sequence[int]) -> list[ClientTask[SoftLabelRoundDownlink, ClientState]]:
        cfg, t, enc = self.config, rnd + 1, self.setup.common.index_encoding
        requested = torch.zeros(0, dtype=torch.long)
        if self.collaborative:
            drawn = draw_public_subset(cfg.seed, rnd, len(self.x_public), self.setup.common.subset_size)
            requested = self.cache.request(t, drawn) if self.cache is not None else drawn
            self._draw = (drawn, requested)
        lr = cfg.lr_at(rnd)
        tasks = []
        for cid in sampled:
            sizes: dict[str, int] = {}
            down = SoftLabelRoundDownlink(
                t, requested, lr, self.policy.temperature(cid, rnd),
                derive_seed(cfg.seed, "train", cid, rnd), derive_seed(cfg.seed, "distill", cid, rnd), sizes=sizes,
            )
            if self.collaborative:
                sizes["indices"] = index_bytes(requested.numel(), self.universe, enc)
                if self.prev is not None:
                    prev = self.prev.downlink
                    down.previous, down.previous_indices, down.hint = prev, self.prev.indices, self.method.target_hint(cid)
                    sizes["indices"] += index_bytes(prev.indices.numel(), self.universe, enc)
                    sizes["soft_labels"] = self.method.downlink_soft_bytes(prev.soft_labels)
                    if self.cache is not None:
                        down.sync = self.cache.sync(cid, self.prev.round)
                        sizes["sync"] = self._sync_bytes(down.sync)
                        sizes["cache_signals"] = signal_bytes(prev.signals.numel())
            tasks.append(ClientTask(cid, rnd, down, self.evaluation.client_data(cid), self.store.load(cid)))
        return tasks

    def _sync_bytes(self, delta: CacheSyncDelta) -> int:
        """A catch-up delta's bytes: its indices, and its stored rows priced by the method as the downlink prices the
        same rows (:meth:`SoftLabelMethod.downlink_soft_bytes`: CFD's b_down bits), not as float32."""
        if delta.num_entries == 0:
            return 0
        rows = self.method.downlink_soft_bytes(delta.store_soft_labels) if delta.store_indices.numel() else 0
        return index_bytes(delta.num_entries, self.universe, self.setup.common.index_encoding) + rows

    def server_update(
        self, rnd: int, tasks: Sequence[ClientTask[SoftLabelRoundDownlink, ClientState]], replies: Sequence[ClientReply[SoftLabelReport, ClientState]]
    ) -> RoundRecord:
        cfg, t = self.config, rnd + 1
        expected = rows_digest(self.prev.rows) if self.prev is not None and self.cache is not None else None
        uplinks, distill_losses, trained = [], [], []
        verified = 0
        clean = rows_all_finite(r.uplink.soft.soft_labels for r in replies if r.uplink.soft is not None)  # one host sync for the round
        for task, reply in zip(tasks, replies):
            cid, report = task.client_id, reply.uplink
            self.book.receive(rnd, task, reply, report.train_loss, None)  # the method prices the uplink (below)
            self.book.check_loss(rnd, cid, "distillation loss", report.distill_loss)
            if expected is not None:
                if report.rebuilt_digest != expected:
                    raise CacheOutOfSyncError(f"client {cid}: rebuilt soft-labels of round {t - 1} differ from the server's")
                verified += 1
            if report.soft is not None:
                if not clean:  # some client's rows may not be finite: the first bad one, named (in reply order, as each arrives)
                    check_finite_rows(rnd, cid, report.soft.soft_labels)  # before the consensus every client distils from
                for kind, nbytes in self.method.uplink_bytes(report.soft).items():
                    self.book.ledger.record(rnd, "up", kind, nbytes, cid)
                uplinks.append(report.soft)
            assert reply.state is not None
            self.store.save(cid, reply.state)
            temperature = float(task.downlink.temperature if reply.temperature is None else reply.temperature)  # a temperature client half picks its own
            trained.append(ClientLoss(cid, report.train_loss, report.num_samples, temperature))
            if report.distill_loss is not None:
                distill_losses.append(report.distill_loss)

        record = self.book.round_record(rnd, [task.client_id for task in tasks], cfg.lr_at(rnd), trained, detail=True)
        m = record.metrics
        if distill_losses:
            m["distill_loss"] = float(np.mean(distill_losses))
        if self.collaborative:
            self.prev, server_metrics = self._server_round(t, uplinks)
            m.update(server_metrics)
            if self.cache is not None:
                m["sync_verified"] = verified
        if self.book.due(rnd):
            m.update(self._evaluate(rnd))
        m.update(check_round_metrics(self.method.round_metrics(), self.method, "distillation.method"))
        return record

    def _evaluate(self, rnd: int) -> dict[str, Json]:
        """The server model's metrics on the test set (none without one: a method that shares nothing)."""
        if not self.collaborative:
            return {}
        return self._aliased(self.book.evaluate(rnd, self.server_state))

    def evaluate_now(self) -> dict[str, Json]:
        """The server model's metrics as an evaluated round records them, ``server_acc``/``server_loss`` included
        (:class:`~chillfl.engine.protocol.EvaluatesNow`): a run stopped at a round ``eval.every`` skips ends with them
        measured there, not with an earlier round's aliases beside the stop round's ``global_acc``. Nothing where the
        method shares nothing (no server model), as its rounds record."""
        return self._aliased(self.evaluation.metrics(self.server_state)) if self.collaborative else {}

    @staticmethod
    def _aliased(metrics: dict[str, Json]) -> dict[str, Json]:
        """``metrics`` with the server model's names for its accuracy and loss beside the global ones (none where the round did not evaluate)."""
        return {**metrics, "server_acc": metrics["global_acc"], "server_loss": metrics["global_loss"]} if metrics else {}

    def skipped_round(self, rnd: int) -> dict[str, Json]:
        """A skipped round (:class:`~chillfl.engine.protocol.ObservesSkippedRounds`): the run's last one evaluates the server model (:meth:`ServerBook.last`)."""
        return self._evaluate(rnd) if self.book.last(rnd) else {}

    def _server_round(self, t: int, uplinks: list[Any]) -> tuple[Broadcast, dict[str, Json]]:
        """Aggregate, update the cache (gamma^t), train the server model on P^t with zhat^t."""
        method, (drawn, requested) = self.method, self._draw
        if uplinks:
            agg = check_aggregate(method.aggregate(t, requested, uplinks), len(requested), method.row_width(), self.evaluation.data.num_classes)
        else:  # nothing requested (all of P^t validly cached)
            empty = torch.zeros(0, dtype=torch.bool)
            agg = Aggregate(empty, torch.zeros((0, method.row_width())), torch.zeros((0, self.evaluation.data.num_classes)))
        fresh_kept = requested[agg.keep] if requested.numel() else torch.zeros(0, dtype=torch.long)
        kept = set(fresh_kept.tolist())
        fresh_all = set(requested.tolist())
        used = torch.tensor([i for i in drawn.tolist() if i not in fresh_all or i in kept], dtype=torch.long)
        if used.numel() == 1 and self.one_row_failure() is not None:  # a filter left one row: none of it is used (public_used 0)
            agg = Aggregate(torch.zeros_like(agg.keep), agg.rows[:0], agg.server_rows[:0], agg.metrics)
            fresh_kept, used = fresh_kept[:0], used[:0]
        targets: torch.Tensor | None = None
        if method.downlink_from_server:  # CFD: the server distils first; the fresh rows that go down are its own predictions
            targets = self._server_targets(t, used, agg.server_rows, None)
            self._train_server(t, used, targets)
            fresh = method.server_downlink(self._server_predictions(fresh_kept)).to(torch.float32)
        else:
            fresh = agg.rows.to(torch.float32)
        cached_age: float | None = None
        num_cached = 0
        if self.cache is not None:
            upd = self.cache.update(t, used, fresh)
            rows_full, downlink, cached_age, num_cached = upd.soft_labels, upd.downlink, upd.cached_age, upd.num_cached
        else:
            rows_full = fresh
            downlink = SoftLabelDownlink(round=t, indices=used, signals=torch.zeros(0, dtype=torch.uint8), soft_labels=rows_full)
        if targets is None:
            targets = self._server_targets(t, used, agg.server_rows, rows_full)
            self._train_server(t, used, targets)
        metrics: dict[str, Json] = {
            "public_drawn": int(drawn.numel()),
            "public_requested": int(requested.numel()),
            "public_used": int(used.numel()),
            "soft_label_entropy": None if method.uses_logits else mean_entropy(targets),
        }
        if self.cache is not None:
            # the share of P^t served from the cache: not 1 - |I_req^t| / |P^t|, as "authors" requests its edge rows and serves
            # them cached; written as 1 - (not served) / |P^t| so that under "valid" it is the same float as that was
            metrics["cache_hit_ratio"] = 1.0 - (drawn.numel() - num_cached) / max(drawn.numel(), 1)
            metrics["cache_size"] = len(self.cache)
            metrics["cache_age_mean"] = cached_age
        metrics.update({f"agg_{key}": v for key, v in agg.metrics.items()})
        return Broadcast(t, used, downlink, rows_full), metrics

    def one_row_failure(self, server: bool = True, clients: bool = True) -> str | None:
        """Why a model that trains on P^t cannot train on one row (the server's, given ``server``; a client
        architecture's, given ``clients``), None when all of those can.

        Why: a filter (Selective-FD's) may keep one row of P^t. The server model distils on it and every client on the
        same row sent down, and a batch-norm model raises on a one-sample batch mid-run ("Expected more than 1 value per
        channel"); that round then uses no row, as when the filter keeps none. The sides apart: a batch size of one on
        the server's side only (``server_batch_size``) must not be refused for a client architecture's batch norm."""
        key = (server, clients)
        if key not in self._one_row:
            # the clients train the server's architecture unless they have their own (the first of those is the server's)
            archs = tuple(self.client.archs.models) if self.client.archs is not None else (self.model,)
            models = ((self.model,) if server else ()) + (archs if clients else ())
            x = self.evaluation.data.dataset.x_train
            self._one_row[key] = next((why for why in (one_sample_failure(m, x) for m in models) if why is not None), None)
        return self._one_row[key]

    def _server_targets(self, t: int, used: torch.Tensor, server_rows: torch.Tensor, rows_full: torch.Tensor | None) -> torch.Tensor:
        """The server model's targets on ``used``: its own rows through the twin cache, else the rows that go down (``rows_full``,
        cached ones included) or, without a cache, the aggregate's ``server_rows``."""
        if self.twin is not None:
            return self.twin.update(t, used, server_rows.to(torch.float32)).soft_labels
        if self.cache is not None and rows_full is not None:
            return rows_full
        return server_rows.to(torch.float32)

    def _train_server(self, t: int, used: torch.Tensor, targets: torch.Tensor) -> None:
        """The server model's distillation on P^t (the ``used`` indices) towards ``targets``, one row per index.

        The training pairs inputs and targets by position over ``len(targets)``: a target block short of
        ``used`` (the fresh rows without the cached ones) would train on misaligned pairs, so it is refused."""
        if targets.shape[0] != used.numel():
            raise ValueError(f"round {t}: {targets.shape[0]} server targets for {used.numel()} public indices (cached rows missing?)")
        if used.numel() == 0:
            return
        gen = torch.Generator().manual_seed(derive_seed(self.config.seed, "server", t))
        out = train_client(
            self.model, self.server_state, self.x_public[used], targets.to(self.x_public.device),
            spec=self.specs.server, lr=self.specs.server_lr, temperature=1.0, context={}, generator=gen,
            trainer="the server model's training", round=t - 1,  # t: the 1-based round
        )
        self.server_state = out.params
        self.book.check_state(t - 1, self.server_state, "server model")

    def _server_predictions(self, indices: torch.Tensor) -> torch.Tensor:
        """The server model's softmax outputs ``[n, C]`` on the public ``indices`` (eval mode), on the host: a downlink is a message."""
        if indices.numel() == 0:
            return torch.zeros((0, self.evaluation.data.num_classes))
        return predict_proba(self.model, self.server_state, self.x_public[indices], self.config.eval.batch_size).cpu()

    # ------------------------------------------------------------ outputs and state

    def global_state(self) -> Params | None:
        return self.server_state if self.collaborative else None

    def client_states(self) -> dict[int, Params]:
        out = {}
        for cid in self.store.ids():
            state = self.store.load(cid)
            if state is not None:
                out[cid] = state.model
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "server": dict(self.server_state),
            "prev": None if self.prev is None else self.prev.state_dict(),
            "cache": None if self.cache is None else self.cache.state_dict(),
            "twin": None if self.twin is None else self.twin.state_dict(),
            "method": self.method.state_dict(),
            **self.book.state_dict(),
            "clients": self.store.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.server_state = dict(state["server"])
        self.prev = None if state["prev"] is None else Broadcast.from_state(state["prev"])
        for part, key in ((self.cache, "cache"), (self.twin, "twin")):
            if part is not None:
                part.load_state_dict(state[key])
        self.method.load_state_dict(state["method"])
        self.book.load_state_dict(state)
        self.store.load_state_dict(state["clients"])

    def close(self) -> None:
        self.store.close()
