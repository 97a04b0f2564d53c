"""The soft-label round protocol (DS-FL / SCARLET family), SCARLET Algorithms 1 and 2.

Every client keeps its own model across rounds; models never travel. It runs
in the one round loop (:func:`chillfl.engine.loop.run_rounds`) under every
executor: the server side (:class:`SoftLabelProtocol`) builds each client's
typed downlink, and the client side (:class:`SoftLabelClient`) is a pure client
update that yields its distillation and training jobs. Read top to bottom,
round t (1-based, as in Algorithm 1) is::

    sampled = sample_clients(seed, t)                    # sorted client ids
    I^t     = sorted seeded draw of |P^t| public indices
    I_req^t = cache.request(t, I^t)                      # = I^t without a cache
    for k in sampled (client update, any executor; its state travels with its task):
        receive   I_req^t; and, if t > 1, round t-1's downlink (+ a catch-up
                  delta if k missed rounds) -> rebuild zhat^{t-1} over P^{t-1};
                  the server checks (by digest) it equals its own, row for row
        distil    KL(target || softmax(f(x))) on P^{t-1}, E_dist epochs, eta_dist   (Eq. 3)
        train     on private data, the ONE local step (train_client), at the
                  temperature policy's T (FedChill: the client's own, from its state,
                  decayed after its local evaluation)
        upload    softmax outputs on I_req^t (method: quantised, selected, ...)
    server: aggregate (ERA Eq. 2, Enhanced ERA Eq. 4, ...), update the cache
            (gamma^t), train the server model on P^t with zhat^t, evaluate it

Metrics per round: ``global_acc``/``global_loss`` (alias ``server_acc``/
``server_loss``) are the SERVER model on the global test set; ``local_acc`` is
each client's own model after its private training, on its own split (drawn
from the test set with its class proportions, SCARLET Fig. 6), averaged;
``bytes_up``/``bytes_down``/``bytes_cumulative`` count every message in both
directions (the one-time public-set download excluded, SCARLET Sec. IV-A);
``bytes_detail`` splits the round's bytes by ``direction.kind``.

Choices
-------
* **Who receives what.** Clients not sampled in round t receive nothing in t.
  A sampled client receives I_req^t and round t-1's downlink (gamma^{t-1},
  zhat_req^{t-1}, I^{t-1}). With the cache, a client that missed rounds first
  gets the catch-up delta of :meth:`ServerCache.sync` (kind ``sync``); with
  full participation it is always empty (0 bytes). Without the cache there is
  nothing to catch up: the downlink carries every soft-label the client needs.
* **Distillation** is :func:`train_client` with a soft-target KL base loss
  (``batchmean``; shuffled minibatches of ``distill_batch_size``, plain SGD
  step as configured in ``[client]``, no lr decay). The same call trains the
  server model on P^t (``server_epochs``, default E = client epochs, as in
  Algorithm 1). Clients start from the same initial model as the server.
* **Uploads** are softmax outputs at T = 1 of the client's model in eval mode
  right after its private training (Algorithm 1).
* **Individual** trains the sampled clients on private data only; it has no
  server model, so ``global_acc`` is absent and every byte count is 0.
* **Client state store**: ``client_store = "disk"`` (or ``"auto"`` above
  ``max_clients_in_memory`` clients) keeps each client's model, cache,
  selector mask and FedChill entries in one ``torch.save`` file under a temporary directory
  (``state_dir`` or the system temp dir), removed when the run ends; only the
  round's clients are in memory. Memory and disk give bit-identical runs.
* **Bytes.** The downlink counts its own bytes when the server builds it
  (the method prices its soft-labels: CFD's bits, COMET's per-cluster rows);
  the uplink is priced by the method on arrival (CFD's delta coder is the
  server's copy of what each client last sent). The cache check digest is a
  simulation check, not a message, and costs nothing.
* No aggregator is built: ``[algorithm]`` must be ``fedavg`` (its default), and objective terms that
  need a global model (FedProx, SCAFFOLD, ...) are rejected.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence, TypedDict, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from chillfl.distillation.cache import CacheOutOfSyncError, CacheSyncDelta, ClientCache, ServerCache, SoftLabelDownlink, SoftLabelUplink
from chillfl.distillation.era import entropy
from chillfl.distillation.fedmd import mean_absolute_error
from chillfl.distillation.methods import Aggregate, SoftLabelClientHooks, SoftLabelMethod, make_method, public_inputs, public_labels
from chillfl.engine.ledger import index_bytes, signal_bytes
from chillfl.engine.predict import Output, PredictJob, Prediction, outputs
from chillfl.engine.protocol import ClientJob, ClientProgram, ClientReply, ClientTask
from chillfl.engine.record import Json, RoundRecord
from chillfl.protocols.book import ServerBook
from chillfl.protocols.common import Evaluation, local_evaluation_job
from chillfl.protocols.parts import ClientModels, Experiment, build_client_models
from chillfl.settings.distillation import DistillationSetup, FedMDOptions
from chillfl.temperature.base import TemperatureHalf, TemperaturePolicy
from chillfl.seeds import derive_seed
from chillfl.training.local import LocalOutcome, LocalSpec, train_client

Params = dict[str, torch.Tensor]


# ---------------------------------------------------------------- objective and prediction


def soft_target_kl(logits: torch.Tensor, targets: torch.Tensor, temperature: Any = 1.0) -> torch.Tensor:
    """KL(targets || softmax(logits / T)) averaged over the batch: phi_dist of Eq. (3).

    A base loss with the signature of ``temperature_cross_entropy``, so the
    one functional training step (:func:`train_client`) distils too; targets
    with zeros are fine (0 log 0 = 0). Its gradient w.r.t. the logits (T = 1)
    is (softmax(z) - target) / batch.
    """
    log_probs = F.log_softmax(logits / temperature, dim=-1)
    # F.kl_div's own pointwise formula, written out: it has no vmap batching rule (the vectorised executor distils too)
    return (torch.xlogy(targets, targets) - targets * log_probs).sum() / logits.shape[0]


def weighted_kl(weight: float) -> Any:
    """``weight * soft_target_kl`` (COMET's lambda); weight 1 returns the plain loss."""
    if weight == 1.0:
        return soft_target_kl

    def loss(logits: torch.Tensor, targets: torch.Tensor, temperature: Any = 1.0) -> torch.Tensor:
        return weight * soft_target_kl(logits, targets, temperature)

    return loss


def predict_proba(model: nn.Module, state: Params, x: torch.Tensor, batch_size: int = 1024, *, logits: bool = False) -> torch.Tensor:
    """sigma(x; w): softmax outputs at T = 1 (``logits``: the raw logits), eval mode, ``[n, C]`` float32.

    The reference prediction (:func:`chillfl.engine.predict.outputs`); a client update yields a
    :class:`~chillfl.engine.predict.PredictJob` instead, so that executors can batch it.
    """
    return outputs(model, state, x, batch_size, logits=logits)


def draw_public_subset(seed: int, round: int, num_public: int, size: int) -> torch.Tensor:
    """I^t: ``size`` distinct public indices, sorted, from a stream of (seed, round) only."""
    rng = np.random.default_rng(derive_seed(seed, "public-subset", round))
    return torch.from_numpy(np.sort(rng.choice(num_public, size=size, replace=False)).astype(np.int64))


# ---------------------------------------------------------------- per-client state


class _Model(TypedDict):
    model: Params


class ClientPayload(_Model, total=False):
    """A :class:`ClientState` as plain tensors and ints: the disk store's, the checkpoint's and the Flower node's format.

    Only ``model`` is always there; ``own`` when the temperature policy keeps entries, the three
    ``cache_*`` keys when the client keeps a SCARLET cache (``cache_synced`` -1: never synced),
    ``in_distribution`` when a selector masks the public set.
    """

    own: dict[str, torch.Tensor]
    cache_indices: torch.Tensor
    cache_values: torch.Tensor
    cache_synced: int
    in_distribution: torch.Tensor


@dataclass
class ClientState:
    """Everything a client keeps between rounds: its model, its cache C_k, its selector mask, its temperature."""

    model: Params
    cache: ClientCache | None = None
    in_distribution: torch.Tensor | None = None
    own: dict[str, torch.Tensor] = field(default_factory=dict)
    """The temperature policy's client half's entries (FedChill's ``fedchill.*``; empty: none)."""

    def to_payload(self) -> ClientPayload:
        """Plain tensors/ints only, so ``torch.load(weights_only=True)`` reads it back."""
        out: ClientPayload = {"model": self.model}
        if self.own:
            out["own"] = dict(self.own)
        if self.cache is not None:
            entries = self.cache.entries()
            keys = sorted(entries)
            out["cache_indices"] = torch.tensor(keys, dtype=torch.long)
            out["cache_values"] = torch.stack([entries[i] for i in keys]) if keys else torch.zeros((0, 0))
            out["cache_synced"] = -1 if self.cache.synced_round is None else int(self.cache.synced_round)
        if self.in_distribution is not None:
            out["in_distribution"] = self.in_distribution
        return out

    @classmethod
    def from_payload(cls, cid: int, payload: ClientPayload) -> "ClientState":
        cache = None
        if "cache_indices" in payload:
            cache = ClientCache(cid)
            synced = int(payload["cache_synced"])
            if synced >= 0:  # restore through the public catch-up API
                cache.apply_sync(
                    CacheSyncDelta(cid, synced, payload["cache_indices"], payload["cache_values"], torch.zeros(0, dtype=torch.long))
                )
        return cls(payload["model"], cache, payload.get("in_distribution"), dict(payload.get("own", {})))


class ClientStore:
    """Per-client states between rounds: a dict, or one file per client (bounded memory)."""

    def __init__(self, on_disk: bool, state_dir: str | None = None) -> None:
        self.on_disk = on_disk
        self._states: dict[int, ClientState] = {}
        self.root: Path | None = None
        if on_disk:
            if state_dir is not None:
                Path(state_dir).mkdir(parents=True, exist_ok=True)
            self.root = Path(tempfile.mkdtemp(prefix="chillfl-clients-", dir=state_dir))

    def _path(self, cid: int) -> Path:
        assert self.root is not None
        return self.root / f"client-{cid}.pt"

    def load(self, cid: int) -> ClientState | None:
        if not self.on_disk:
            return self._states.get(cid)
        path = self._path(cid)
        if not path.exists():
            return None
        return ClientState.from_payload(cid, torch.load(path, weights_only=True))

    def save(self, cid: int, state: ClientState) -> None:
        if self.on_disk:
            torch.save(state.to_payload(), self._path(cid))
        else:
            self._states[cid] = state

    def ids(self) -> list[int]:
        """Client ids with a stored state, sorted."""
        if not self.on_disk:
            return sorted(self._states)
        assert self.root is not None
        return sorted(int(f.stem.removeprefix("client-")) for f in self.root.glob("client-*.pt"))

    def state_dict(self) -> dict[str, Any]:
        """Every stored client's state as plain tensors and ints (loaded one at a time from disk)."""
        out = {}
        for cid in self.ids():
            state = self.load(cid)
            assert state is not None
            out[str(cid)] = state.to_payload()
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for key, payload in state.items():
            self.save(int(key), ClientState.from_payload(int(key), cast(ClientPayload, dict(payload))))  # our own checkpoint's format

    def close(self) -> None:
        self._states.clear()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


# ---------------------------------------------------------------- messages


@dataclass
class SoftLabelRoundDownlink:
    """Server -> client k at round t: I_req^t, round t-1's downlink (+ catch-up delta), lr, T and seeds.

    ``sizes`` are the message's bytes by kind, priced by the server's method
    when it builds the message (see the module's Choices).
    """

    round: int
    requested: torch.Tensor
    lr: float
    temperature: float
    train_seed: int
    distill_seed: int
    previous: SoftLabelDownlink | None = None
    previous_indices: torch.Tensor | None = None
    sync: CacheSyncDelta | None = None
    hint: int | None = None
    sizes: dict[str, int] | None = None

    def nbytes(self) -> dict[str, int]:
        return dict(self.sizes or {})


@dataclass
class SoftLabelReport:
    """Client k -> server at round t: its soft-labels (None: nothing requested or no collaboration) and its round's numbers."""

    soft: SoftLabelUplink | None
    train_loss: float
    num_samples: int
    distill_loss: float | None = None
    rebuilt_digest: str | None = None


def rows_digest(rows: torch.Tensor) -> str:
    """A digest of soft-label rows, bit for bit (the cache check compares client and server copies)."""
    data = rows.detach().to("cpu", torch.float32).contiguous()
    return hashlib.sha256(f"{tuple(data.shape)}".encode() + data.numpy().tobytes()).hexdigest()


# ---------------------------------------------------------------- client side


@dataclass(frozen=True)
class ClientArchs:
    """Per-architecture parts of heterogeneous clients (index 0: the run's ``[model]``, the executor's template)."""

    models: tuple[nn.Module, ...]
    states: tuple[Params, ...]
    train: tuple[LocalSpec | None, ...]
    distill: tuple[LocalSpec, ...]
    arch_of: tuple[int, ...]


@dataclass(frozen=True)
class TransferPhase:
    """FedMD's transfer learning: the labelled public set, one spec per architecture, lr, the run seed."""

    x: torch.Tensor
    y: torch.Tensor
    specs: tuple[LocalSpec, ...]
    lr: float
    seed: int


@dataclass(frozen=True)
class SoftLabelClient:
    """The client update of Algorithm 1 (pure: its state comes with the task and goes back in the reply)."""

    model: nn.Module
    hooks: SoftLabelClientHooks
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
    transfer: TransferPhase | None = None
    """FedMD's transfer learning on the labelled public set, at a client's first participation."""
    temperature: TemperatureHalf | None = None
    """The temperature policy's client half (FedChill): T from the client's own state, updated after training."""
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
        if task.state is None and self.transfer is not None:  # FedMD: supervised training on the public set first
            tr = self.transfer
            out0: LocalOutcome = yield ClientJob(cid, state.model, tr.x, tr.y, tr.lr, 1.0, {}, derive_seed(tr.seed, "transfer", cid), tr.specs[arch])
            state.model = out0.params
        distill_loss, digest = None, None
        if self.collaborative:
            self.hooks.prepare_client(cid, state, data.x, self.x_public)
            if d.previous is not None:
                rows = d.previous.soft_labels
                if state.cache is not None:
                    assert d.sync is not None
                    state.cache.apply_sync(d.sync)
                    rows = state.cache.rebuild(d.previous)
                    digest = rows_digest(rows)
                if rows.shape[0] > 0:
                    assert d.previous_indices is not None
                    x_prev = self.public_rows(d.previous_indices)
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
        out = yield ClientJob(cid, state.model, data.x, data.y, d.lr, t, {}, d.train_seed, spec=train_spec, work=task.work)  # a straggler stops early
        state.model = out.params
        acc, loss = None, None
        evaluation = local_evaluation_job(cid, template, state.model, data, self.eval_batch_size)
        if evaluation is not None:
            measured: Prediction = yield evaluation
            acc, loss = measured.acc, measured.loss
        if self.temperature is not None:
            state.own = self.temperature.finish(state.own, t, acc)
        soft = None
        if self.collaborative and d.requested.numel() > 0:
            kind: Output = "logits" if self.uses_logits else "proba"
            uploaded: Prediction = yield PredictJob(cid, template, state.model, self.public_rows(d.requested), kind, batch_size=self.eval_batch_size)
            assert uploaded.values is not None
            soft = self.hooks.upload(cid, d.round, d.requested, uploaded.values.cpu(), state)  # the uplink is a message: host-side
        report = SoftLabelReport(soft, out.mean_loss, len(data.y), distill_loss, digest)
        return ClientReply(cid, report, state, acc, loss, None if self.temperature is None else t)


# ---------------------------------------------------------------- server side


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


@dataclass
class _Specs:
    client: LocalSpec
    distill: LocalSpec
    server: LocalSpec
    server_lr: float
    on_disk: bool


def _specs(exp: Experiment, setup: DistillationSetup, method: SoftLabelMethod) -> _Specs:
    cfg, spec, c = exp.config, exp.spec, setup.common
    distill = spec.phase(
        c.distill_epochs, c.distill_batch_size or cfg.client.batch_size,
        mean_absolute_error if method.uses_logits else weighted_kl(method.distill_weight),
    )
    server = spec.phase(
        c.server_epochs or cfg.client.epochs, c.server_batch_size or c.distill_batch_size or cfg.client.batch_size,
        mean_absolute_error if method.uses_logits else soft_target_kl,
    )
    on_disk = c.client_store == "disk" or (c.client_store == "auto" and exp.data.num_clients > c.max_clients_in_memory)
    return _Specs(spec, distill, server, c.server_lr or c.distill_lr, on_disk)


class SoftLabelProtocol:
    """The server side: public draws, the cache (gamma^t), aggregation, the server model, client states."""

    def __init__(self, exp: Experiment, setup: DistillationSetup, evaluation: Evaluation, client_models: ClientModels | None = None) -> None:
        """``setup``: the parsed ``[distillation]`` table (parsed once, by :func:`build_soft_label_sharing`).

        ``client_models``: heterogeneous clients, None: every client trains ``exp.model``.
        """
        cfg = exp.config
        self.config, self.setup, self.model = cfg, setup, exp.model
        self.policy: TemperaturePolicy = exp.policy
        self.evaluation = evaluation
        device = evaluation.device
        c = setup.common
        self.collaborative = setup.spec.collaborative
        self.x_public = public_inputs(setup, exp.data, cfg.seed, cfg.data_dir).to(device) if self.collaborative else torch.zeros((0,))
        self.method = make_method(setup, exp.data.num_classes, cfg.seed)
        self.specs = _specs(exp, setup, self.method)
        self.universe = max(len(self.x_public), 1)
        self.book = ServerBook(exp.policy, evaluation, cfg.eval.clients)
        self.store = ClientStore(self.specs.on_disk, c.state_dir)
        self.server_state: Params = {n: v.clone() for n, v in exp.initial_state.items()}
        use_cache = setup.uses_cache
        self.cache = ServerCache(setup.cache_duration, c.cache_on_expire) if use_cache else None
        self.twin = ServerCache(setup.cache_duration, c.cache_on_expire) if use_cache and self.method.separate_server_rows else None
        self.prev: Broadcast | None = None
        self._draw: tuple[torch.Tensor, torch.Tensor] = (torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
        archs = self._archs(client_models) if client_models is not None and client_models.plan.heterogeneous else None
        transfer = self._transfer(exp, setup, client_models if archs is not None else None)
        self.client = SoftLabelClient(
            exp.model, self.method.client_half(), self.method.uses_logits, self.x_public, self.server_state, self.specs.distill, c.distill_lr,
            cfg.eval.batch_size, self.collaborative, use_cache, archs, transfer, exp.policy.client_half(exp.data.num_classes),
        )

    def _archs(self, cm: ClientModels) -> ClientArchs:
        """Per-architecture specs: architecture 0 keeps the run's own (the executor's template), the others name their model."""
        train: list[LocalSpec | None] = [None]
        distill = [self.specs.distill]
        for model in cm.models[1:]:
            train.append(dataclasses.replace(self.specs.client, model=model))
            distill.append(dataclasses.replace(self.specs.distill, model=model))
        return ClientArchs(cm.models, cm.states, tuple(train), tuple(distill), cm.plan.arch_of)

    def _transfer(self, exp: Experiment, setup: DistillationSetup, cm: ClientModels | None) -> TransferPhase | None:
        options = setup.options
        if not isinstance(options, FedMDOptions) or not options.transfer_epochs or not self.collaborative:
            return None
        epochs = options.transfer_epochs
        cfg = exp.config
        y = public_labels(setup, exp.data, cfg.seed, cfg.data_dir).to(self.x_public.device)
        base = exp.spec.phase(epochs, cfg.client.batch_size)
        specs = [base] + ([dataclasses.replace(base, model=m) for m in cm.models[1:]] if cm is not None else [])
        lr = options.transfer_lr or cfg.client.lr
        return TransferPhase(self.x_public, y, tuple(specs), lr, cfg.seed)

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
                        sizes["sync"] = down.sync.nbytes(enc, self.universe)
                        sizes["cache_signals"] = signal_bytes(prev.signals.numel())
            tasks.append(ClientTask(cid, rnd, down, self.evaluation.client_data(cid), self.store.load(cid)))
        return tasks

    def server_update(
        self, rnd: int, tasks: Sequence[ClientTask[SoftLabelRoundDownlink, ClientState]], replies: Sequence[ClientReply[SoftLabelReport, ClientState]]
    ) -> RoundRecord:
        cfg, t = self.config, rnd + 1
        expected = rows_digest(self.prev.rows) if self.prev is not None and self.cache is not None else None
        uplinks, train_losses, distill_losses, weights, temps = [], [], [], [], []
        verified = 0
        for task, reply in zip(tasks, replies):
            cid, report = task.client_id, reply.uplink
            self.book.receive(rnd, task, reply, report.train_loss, None)  # the method prices the uplink (below)
            self.book.check_loss(rnd, cid, "distillation loss", report.distill_loss)
            if expected is not None:
                if report.rebuilt_digest != expected:
                    raise CacheOutOfSyncError(f"client {cid}: rebuilt soft-labels of round {t - 1} differ from the server's")
                verified += 1
            if report.soft is not None:
                for kind, nbytes in self.method.uplink_bytes(report.soft).items():
                    self.book.ledger.record(rnd, "up", kind, nbytes, cid)
                uplinks.append(report.soft)
            assert reply.state is not None
            self.store.save(cid, reply.state)
            train_losses.append(report.train_loss)
            weights.append(report.num_samples)
            temps.append(float(task.downlink.temperature if reply.temperature is None else reply.temperature))  # a client half (FedChill) picks its own
            if report.distill_loss is not None:
                distill_losses.append(report.distill_loss)

        w = np.asarray(weights, dtype=np.float64)
        record = RoundRecord(
            round=t,
            clients=[task.client_id for task in tasks],
            lr=cfg.lr_at(rnd),
            train_loss=float(np.dot(w, train_losses) / w.sum()) if w.sum() > 0 else float(np.mean(train_losses)),
            temperature_mean=float(np.mean(temps)),
        )
        m = record.metrics
        if distill_losses:
            m["distill_loss"] = float(np.mean(distill_losses))
        if self.collaborative:
            self.prev, server_metrics = self._server_round(t, uplinks)
            m.update(server_metrics)
            if self.cache is not None:
                m["sync_verified"] = verified
        m.update(self.book.traffic(rnd, detail=True))
        m.update(self.book.temperatures({task.client_id: temp for task, temp in zip(tasks, temps)}))
        m.update(self.book.local(record.clients))
        if self.collaborative and self.book.due(rnd):
            metrics = self.book.evaluate(rnd, self.server_state)
            m.update(metrics)
            m["server_acc"], m["server_loss"] = metrics["global_acc"], metrics["global_loss"]
        m.update(self.method.round_metrics())
        return record

    def _server_round(self, t: int, uplinks: list[Any]) -> tuple[Broadcast, dict[str, Json]]:
        """Aggregate, update the cache (gamma^t), train the server model on P^t with zhat^t."""
        cfg, method, (drawn, requested) = self.config, self.method, self._draw
        if uplinks:
            agg = method.aggregate(t, requested, uplinks)
        else:  # nothing requested (all of P^t validly cached)
            empty = torch.zeros(0, dtype=torch.bool)
            agg = Aggregate(empty, torch.zeros((0, method.row_width())), torch.zeros((0, self.evaluation.data.num_classes)))
        kept = set(requested[agg.keep].tolist()) if requested.numel() else set()
        fresh_all = set(requested.tolist())
        used = torch.tensor([i for i in drawn.tolist() if i not in fresh_all or i in kept], dtype=torch.long)
        if self.cache is not None:
            upd = self.cache.update(t, used, agg.rows.to(torch.float32))
            rows_full, downlink, cached_age = upd.soft_labels, upd.downlink, upd.cached_age
            targets = self.twin.update(t, used, agg.server_rows.to(torch.float32)).soft_labels if self.twin is not None else rows_full
        else:
            rows_full = agg.rows.to(torch.float32)
            downlink = SoftLabelDownlink(round=t, indices=used, signals=torch.zeros(0, dtype=torch.uint8), soft_labels=rows_full)
            targets = agg.server_rows.to(torch.float32)
        if used.numel() > 0:
            gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "server", t))
            out = train_client(
                self.model, self.server_state, self.x_public[used], targets.to(self.x_public.device),
                spec=self.specs.server, lr=self.specs.server_lr, temperature=1.0, context={}, generator=gen,
            )
            self.server_state = out.params
            self.book.check_state(t - 1, self.server_state, "server model")
        metrics: dict[str, Json] = {
            "public_drawn": int(drawn.numel()),
            "public_requested": int(requested.numel()),
            "public_used": int(used.numel()),
            "soft_label_entropy": float(entropy(targets).mean()) if targets.numel() and not method.uses_logits else None,
        }
        if self.cache is not None:
            metrics["cache_hit_ratio"] = 1.0 - requested.numel() / max(drawn.numel(), 1)
            metrics["cache_size"] = len(self.cache)
            metrics["cache_age_mean"] = cached_age
        metrics.update({f"agg_{key}": v for key, v in agg.metrics.items()})
        return Broadcast(t, used, downlink, rows_full), metrics

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


# ---------------------------------------------------------------- building it from the run's parts


def transfer_learning(model: nn.Module, state: Params, transfer: TransferPhase) -> Params:
    """FedMD's transfer learning of the server model on the labelled public set, once, before round 1."""
    gen = torch.Generator().manual_seed(derive_seed(transfer.seed, "transfer", "server"))
    out = train_client(model, state, transfer.x, transfer.y, spec=transfer.specs[0], lr=transfer.lr, temperature=1.0, context={}, generator=gen)
    return out.params


def build_soft_label_sharing(exp: Experiment, evaluation: Evaluation) -> SoftLabelProtocol:
    """Soft-label sharing (``[distillation]``): its options parsed, heterogeneous clients built, FedMD's server transfer done."""
    setup = exp.config.distillation_setup
    assert setup is not None, "the soft-label protocol runs only when [distillation] names a method"
    hetero = build_client_models(exp) if "assign" in exp.config.model or "groups" in exp.config.model else None
    protocol = SoftLabelProtocol(exp, setup, evaluation, hetero)
    if protocol.client.transfer is not None:
        protocol.server_state = transfer_learning(protocol.model, protocol.server_state, protocol.client.transfer)
    return protocol
