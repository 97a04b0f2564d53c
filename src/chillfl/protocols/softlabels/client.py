"""The client side of the soft-label protocol: one pure client update per round (Algorithm 1), under every executor."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from chillfl.engine.predict import Output, PredictJob, Prediction
from chillfl.engine.protocol import ClientJob, ClientProgram, ClientReply, ClientTask
from chillfl.errors import ConfigError
from chillfl.protocols.common import check_client_state, local_evaluation_job, local_validation_job, policy_accuracy
from chillfl.seeds import derive_seed
from chillfl.temperature.base import TemperatureHalf
from chillfl.training.local import LocalOutcome, LocalSpec

from .cache import CacheOutOfSyncError, ClientCache
from .labels import predict_proba
from .messages import SoftLabelReport, SoftLabelRoundDownlink, SoftLabelUplink
from .method import SoftLabelClientHalf
from .state import ClientState

Params = dict[str, torch.Tensor]


def rows_digest(rows: torch.Tensor) -> str:
    """A digest of soft-label rows, bit for bit (the cache check compares client and server copies)."""
    data = rows.detach().to("cpu", torch.float32).contiguous()
    return hashlib.sha256(f"{tuple(data.shape)}".encode() + data.numpy().tobytes()).hexdigest()


@dataclass(frozen=True)
class ClientArchs:
    """Per-architecture parts of heterogeneous clients (index 0: the run's ``[model]``, the executor's template)."""

    models: tuple[nn.Module, ...]
    states: tuple[Params, ...]
    train: tuple[LocalSpec | None, ...]
    distill: tuple[LocalSpec, ...]
    arch_of: tuple[int, ...]


@dataclass(frozen=True)
class PublicPretraining:
    """Supervised training on the labelled public set, one spec per architecture, lr, the run seed (a method's :class:`~.method.Pretraining`)."""

    x: torch.Tensor
    y: torch.Tensor
    specs: tuple[LocalSpec, ...]
    lr: float
    seed: int


class RowRelease(Protocol):
    """What a client releases of its soft-label rows (``[privacy]``: each row clipped and noised, :mod:`chillfl.privacy.softlabels`)."""

    def release(self, rows: torch.Tensor, client_id: int, round: int) -> torch.Tensor:
        ...


@dataclass(frozen=True)
class SoftLabelClient:
    """The client update of Algorithm 1 (pure: its state comes with the task and goes back in the reply)."""

    model: nn.Module
    hooks: SoftLabelClientHalf[Any, Any]
    """The method's client half (no server state travels with it)."""
    uses_logits: bool
    x_public: torch.Tensor
    initial_state: Params
    distill_spec: LocalSpec
    distill_lr: float
    eval_batch_size: int
    collaborative: bool
    use_cache: bool
    archs: ClientArchs | None = None
    """Heterogeneous clients: per-architecture templates, states and specs (None: everyone trains ``model``)."""
    pretraining: PublicPretraining | None = None
    """The method's pretraining on the labelled public set, at a client's first participation."""
    temperature: TemperatureHalf | None = None
    """The temperature policy's client half (a per-client T): T from the client's own state, updated after training."""
    privacy: RowRelease | None = None
    """``[privacy]``: the rows go through it before the method's upload hook (None: released as predicted)."""
    _public_memo: dict[bytes, torch.Tensor] = field(default_factory=dict, init=False, repr=False, compare=False)

    def public_rows(self, indices: torch.Tensor) -> torch.Tensor:
        """``x_public[indices]``, gathered once per index set and shared by every client that asks.

        A round's clients all read the same rows (I^{t-1} to distil, I_req^t
        to upload): one copy instead of one per client, and one tensor the
        batched predictor broadcasts. Keyed by the indices' values, so equal
        index sets share rows under every executor; the last two sets are kept.
        Gathering is exact, so results do not depend on the memo.
        """
        key = indices.detach().to("cpu", torch.int64).numpy().tobytes()
        rows = self._public_memo.get(key)
        if rows is None:
            while len(self._public_memo) >= 2:
                self._public_memo.pop(next(iter(self._public_memo)))
            rows = self._public_memo[key] = self.x_public[indices]
        return rows

    def update(self, task: ClientTask[SoftLabelRoundDownlink, ClientState]) -> ClientProgram:
        cid, d, data = task.client_id, task.downlink, task.data
        arch = self.archs.arch_of[cid] if self.archs is not None else 0
        template = self.archs.models[arch] if self.archs is not None else self.model
        initial = self.archs.states[arch] if self.archs is not None else self.initial_state
        distill_spec = self.archs.distill[arch] if self.archs is not None else self.distill_spec
        train_spec = self.archs.train[arch] if self.archs is not None else None
        state = task.state or ClientState({n: v.clone() for n, v in initial.items()}, ClientCache(cid) if self.use_cache else None)
        if task.state is None and self.pretraining is not None:  # supervised training on the labelled public set first
            tr = self.pretraining
            out0: LocalOutcome = yield ClientJob(cid, state.model, tr.x, tr.y, tr.lr, 1.0, {}, derive_seed(tr.seed, "transfer", cid), tr.specs[arch])
            state.model = out0.params
        distill_loss, digest, mine = None, None, None
        if self.collaborative:
            mine = state.method = self.hooks.resume(cid, state.method, data.x, self.x_public)
            if d.previous is not None:
                rows = d.previous.soft_labels
                if state.cache is not None:
                    assert d.sync is not None
                    state.cache.apply_sync(d.sync)
                    rows = state.cache.rebuild(d.previous)
                    digest = rows_digest(rows)
                if rows.shape[0] > 0 and distill_spec.epochs > 0:  # 0 epochs: a zero-weighted loss, no phase (server.py's _specs)
                    assert d.previous_indices is not None
                    x_prev = self.public_rows(d.previous_indices)
                    if rows.shape[0] != x_prev.shape[0]:  # distillation pairs inputs and targets by position
                        raise CacheOutOfSyncError(f"client {cid}: {rows.shape[0]} soft-label rows for {x_prev.shape[0]} public indices of round {d.round - 1}")
                    rows = rows.to(x_prev.device)  # the downlink arrives on the host; the client distils on the run's device
                    own: torch.Tensor | None = None
                    if self.hooks.needs_own_predictions(d.hint):  # asked for as a job, so executors batch it
                        pred = yield PredictJob(cid, template, state.model, x_prev, "proba", batch_size=self.eval_batch_size)
                        own = pred.values
                    model = state.model

                    def own_probs() -> torch.Tensor:  # a method that did not declare it computes it here, unbatched
                        return own if own is not None else predict_proba(template, model, x_prev, self.eval_batch_size)

                    target = self.hooks.client_target(cid, rows, own_probs, hint=d.hint).to(torch.float32)
                    job = ClientJob(cid, state.model, x_prev, target, self.distill_lr, 1.0, {}, d.distill_seed, distill_spec)
                    out: LocalOutcome = yield job
                    state.model, distill_loss = out.params, out.mean_loss
        t = d.temperature if self.temperature is None else self.temperature.temperature(state.own, d.temperature, data.y)
        out = yield ClientJob(cid, state.model, data.x, data.y, d.lr, t, {}, d.train_seed, spec=train_spec, work=task.work, stamp=data.stamp,
                            policy_field=self.distill_spec.policy_field)  # a straggler stops early
        state.model = out.params
        acc, loss = None, None
        evaluation = local_evaluation_job(cid, template, state.model, data, self.eval_batch_size)
        if evaluation is not None:
            measured: Prediction = yield evaluation
            acc, loss = measured.acc, measured.loss
        val_acc: float | None = None
        validation = local_validation_job(cid, template, state.model, data, self.eval_batch_size)
        if isinstance(validation, PredictJob):  # its own validation split: what the local_* tuning rules read
            validated: Prediction = yield validation
            val_acc = validated.acc
        else:
            val_acc = validation
        if self.temperature is not None:
            state.own = self.temperature.finish(state.own, t, policy_accuracy(acc, val_acc))
            check_client_state(state.own, f"{type(self.temperature).__name__}.finish()", self.distill_spec.policy_field)  # the run's, which every phase keeps
        soft = None
        if self.collaborative and d.requested.numel() > 0:
            kind: Output = "logits" if self.uses_logits else "proba"
            uploaded: Prediction = yield PredictJob(cid, template, state.model, self.public_rows(d.requested), kind, batch_size=self.eval_batch_size)
            assert uploaded.values is not None
            values = uploaded.values.cpu() if self.privacy is None else self.privacy.release(uploaded.values.cpu(), cid, d.round)
            soft = self.hooks.upload(cid, d.round, d.requested, values, mine)  # the uplink is a message: host-side
            if not isinstance(soft, SoftLabelUplink):  # a plugin's slip: one line, not a TypeError where the uplink is priced
                raise ConfigError("distillation.method", f"{type(self.hooks).__name__}.upload() returned a {type(soft).__name__}, "
                                                         "not a chillfl.extend.SoftLabelUplink")
        report = SoftLabelReport(soft, out.mean_loss, len(data.y), distill_loss, digest)
        return ClientReply(cid, report, state, acc, loss, None if self.temperature is None else t, local_val_acc=val_acc)
