"""The soft-label round protocol (DS-FL / SCARLET family), SCARLET Algorithms 1 and 2.

Every client keeps its own model across rounds; models never travel. Read top
to bottom, round t (1-based, as in Algorithm 1) is::

    sampled = sample_clients(seed, t)                    # sorted client ids
    I^t     = sorted seeded draw of |P^t| public indices
    I_req^t = cache.request(t, I^t)                      # = I^t without a cache
    for k in sampled (client-id order; each state loaded, used, stored back):
        receive   I_req^t; and, if t > 1, round t-1's downlink (+ a catch-up
                  delta if k missed rounds) -> rebuild zhat^{t-1} over P^{t-1}
                  and check it equals the server's, row for row
        distil    KL(target || softmax(f(x))) on P^{t-1}, E_dist epochs, eta_dist   (Eq. 3)
        train     on private data, the ONE local step (train_client), at the
                  temperature policy's T
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
  ``max_clients_in_memory`` clients) keeps each client's model, cache and
  selector mask in one ``torch.save`` file under a temporary directory
  (``state_dir`` or the system temp dir), removed when the run ends; only the
  client being processed is in memory. Memory and disk give bit-identical runs.
* The aggregator built by ``[algorithm]`` is ignored; objective terms that
  need a global model (FedProx, SCAFFOLD, ...) are rejected.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from chillfl.distillation.cache import CacheOutOfSyncError, ClientCache, CacheSyncDelta, ServerCache, SoftLabelDownlink
from chillfl.distillation.era import entropy
from chillfl.distillation.methods import Aggregate, DistillationSetup, SoftLabelMethod, make_method, parse_distillation, public_inputs
from chillfl.engine.ledger import CommunicationLedger, index_bytes, signal_bytes
from chillfl.engine.loop import sample_clients
from chillfl.engine.setup import Experiment
from chillfl.errors import ConfigError
from chillfl.training.local import LocalSpec, derive_seed, evaluate, split_state, train_client

Params = dict[str, torch.Tensor]


# ---------------------------------------------------------------- objective and prediction


def soft_target_kl(logits: torch.Tensor, targets: torch.Tensor, temperature: Any = 1.0) -> torch.Tensor:
    """KL(targets || softmax(logits / T)) averaged over the batch: phi_dist of Eq. (3).

    A base loss with the signature of ``temperature_cross_entropy``, so the
    one functional training step (:func:`train_client`) distils too; targets
    with zeros are fine (0 log 0 = 0). Its gradient w.r.t. the logits (T = 1)
    is (softmax(z) - target) / batch.
    """
    return F.kl_div(F.log_softmax(logits / temperature, dim=-1), targets, reduction="batchmean")


def weighted_kl(weight: float) -> Any:
    """``weight * soft_target_kl`` (COMET's lambda); weight 1 returns the plain loss."""
    if weight == 1.0:
        return soft_target_kl

    def loss(logits: torch.Tensor, targets: torch.Tensor, temperature: Any = 1.0) -> torch.Tensor:
        return weight * soft_target_kl(logits, targets, temperature)

    return loss


@torch.no_grad()
def predict_proba(model: nn.Module, state: Params, x: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    """sigma(x; w): softmax outputs at T = 1, eval mode, ``[n, C]`` float32."""
    if len(x) == 0:
        return torch.zeros((0, 0))
    model.eval()
    params, buffers = split_state(model, state)
    out = [torch.softmax(functional_call(model, (params, buffers), (x[i : i + batch_size],)), dim=-1) for i in range(0, len(x), batch_size)]
    return torch.cat(out).to(torch.float32)


def draw_public_subset(seed: int, round: int, num_public: int, size: int) -> torch.Tensor:
    """I^t: ``size`` distinct public indices, sorted, from a stream of (seed, round) only."""
    rng = np.random.default_rng(derive_seed(seed, "public-subset", round))
    return torch.from_numpy(np.sort(rng.choice(num_public, size=size, replace=False)).astype(np.int64))


# ---------------------------------------------------------------- per-client state


@dataclass
class ClientState:
    """Everything a client keeps between rounds: its model, its cache C_k, its selector mask."""

    model: Params
    cache: ClientCache | None = None
    in_distribution: torch.Tensor | None = None

    def to_payload(self) -> dict[str, Any]:
        """Plain tensors/ints only, so ``torch.load(weights_only=True)`` reads it back."""
        out: dict[str, Any] = {"model": self.model}
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
    def from_payload(cls, cid: int, payload: dict[str, Any]) -> "ClientState":
        cache = None
        if "cache_indices" in payload:
            cache = ClientCache(cid)
            synced = int(payload["cache_synced"])
            if synced >= 0:  # restore through the public catch-up API
                cache.apply_sync(
                    CacheSyncDelta(cid, synced, payload["cache_indices"], payload["cache_values"], torch.zeros(0, dtype=torch.long))
                )
        return cls(payload["model"], cache, payload.get("in_distribution"))


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

    def close(self) -> None:
        self._states.clear()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


# ---------------------------------------------------------------- the protocol


@dataclass
class Broadcast:
    """Round t's downlink, kept by the server until the next round's clients receive it."""

    round: int
    indices: torch.Tensor  # I^t actually used (cached + kept fresh), in draw order
    downlink: SoftLabelDownlink  # gamma^t, fresh rows, I^t
    rows: torch.Tensor  # zhat^t as every client must rebuild it, [n, D]


@dataclass
class _Context:
    exp: Experiment
    setup: DistillationSetup
    method: SoftLabelMethod
    x_public: torch.Tensor
    client_spec: LocalSpec
    distill_spec: LocalSpec
    server_spec: LocalSpec
    server_lr: float
    on_disk: bool


def _prepare(exp: Experiment) -> _Context:
    """Parse and check everything before the first round (errors name the field)."""
    cfg = exp.config
    setup = parse_distillation(cfg.distillation)
    if exp.spec.terms:
        raise ConfigError(
            "algorithm.name",
            f"{cfg.algorithm.get('name')!r} adds objective terms that need a global model; the soft-label protocol supports fedavg only",
        )
    c = setup.common
    x_public = public_inputs(setup, exp.data, cfg.seed, cfg.data_dir) if setup.spec.collaborative else torch.zeros((0,))
    method = make_method(setup, exp.data.num_classes, cfg.seed)
    spec = exp.spec
    distill_spec = LocalSpec(
        epochs=c.distill_epochs,
        batch_size=c.distill_batch_size or cfg.client.batch_size,
        momentum=spec.momentum,
        weight_decay=spec.weight_decay,
        base_loss=weighted_kl(method.distill_weight),
    )
    server_spec = LocalSpec(
        epochs=c.server_epochs or cfg.client.epochs,
        batch_size=c.server_batch_size or c.distill_batch_size or cfg.client.batch_size,
        momentum=spec.momentum,
        weight_decay=spec.weight_decay,
        base_loss=soft_target_kl,
    )
    on_disk = c.client_store == "disk" or (c.client_store == "auto" and exp.data.num_clients > c.max_clients_in_memory)
    return _Context(exp, setup, method, x_public, spec, distill_spec, server_spec, c.server_lr or c.distill_lr, on_disk)


def run_distillation_rounds(exp: Experiment) -> Iterator[dict[str, Any]]:
    """Yield one metrics record per round of the soft-label protocol (options are checked on call)."""
    return _rounds(_prepare(exp))


def _mean(values: list[float]) -> float | None:
    vals = [v for v in values if not math.isnan(v)]
    return float(np.mean(vals)) if vals else None


def _rounds(ctx: _Context) -> Iterator[dict[str, Any]]:  # noqa: C901 - the loop is meant to be read top to bottom
    exp, setup, method = ctx.exp, ctx.setup, ctx.method
    cfg, data, model = exp.config, exp.data, exp.model
    common = setup.common
    collaborative = setup.spec.collaborative
    x_public = ctx.x_public
    universe = max(len(x_public), 1)
    enc = common.index_encoding
    x_test, y_test = data.test()
    k = cfg.federation.sample_size()
    eval_local = cfg.eval.clients != "none"
    ledger = CommunicationLedger()
    store = ClientStore(ctx.on_disk, common.state_dir)
    server_state = {n: v.clone() for n, v in exp.initial_state.items()}
    use_cache = setup.uses_cache
    cache = ServerCache(setup.cache_duration, common.cache_on_expire) if use_cache else None
    twin = ServerCache(setup.cache_duration, common.cache_on_expire) if use_cache and method.separate_server_rows else None
    latest_acc: dict[int, float] = {}
    latest_loss: dict[int, float] = {}
    prev: Broadcast | None = None
    try:
        for rnd in range(cfg.federation.rounds):
            t = rnd + 1
            sampled = sample_clients(cfg.seed, rnd, data.num_clients, k)
            lr = cfg.client.lr_at(rnd)
            if collaborative:
                drawn = draw_public_subset(cfg.seed, rnd, len(x_public), common.subset_size)
                requested = cache.request(t, drawn) if cache is not None else drawn
            uplinks = []
            train_losses, distill_losses, weights, temps = [], [], [], []
            verified = 0
            for cid in sampled:
                state = store.load(cid)
                if state is None:
                    state = ClientState({n: v.clone() for n, v in exp.initial_state.items()}, ClientCache(cid) if use_cache else None)
                x, y = data.client_train(cid)
                if collaborative:
                    method.prepare_client(cid, state, x, x_public)
                    ledger.record(rnd, "down", "indices", index_bytes(requested.numel(), universe, enc), cid)
                    if prev is not None:
                        rows = _receive(ctx, ledger, rnd, cid, state, prev, cache)
                        verified += int(cache is not None)
                        if rows.shape[0] > 0:
                            x_prev = x_public[prev.indices]
                            target = method.client_target(cid, rows, lambda: predict_proba(model, state.model, x_prev, cfg.eval.batch_size))
                            gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "distill", cid, rnd))
                            out = train_client(
                                model, state.model, x_prev, target.to(torch.float32),
                                spec=ctx.distill_spec, lr=common.distill_lr, temperature=1.0, context={}, generator=gen,
                            )
                            state.model = out.params
                            distill_losses.append(out.mean_loss)
                temperature = exp.policy.temperature(cid, rnd)
                gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "train", cid, rnd))
                out = train_client(model, state.model, x, y, spec=ctx.client_spec, lr=lr, temperature=temperature, context={}, generator=gen)
                state.model = out.params
                train_losses.append(out.mean_loss)
                weights.append(len(y))
                temps.append(float(temperature))
                local_acc = None
                if eval_local:
                    xe, ye = data.client_eval(cid)
                    local_acc, local_loss = evaluate(model, state.model, xe, ye, cfg.eval.batch_size)
                    latest_acc[cid], latest_loss[cid] = local_acc, local_loss
                exp.policy.observe(cid, rnd, local_acc)
                if collaborative and requested.numel() > 0:
                    probs = predict_proba(model, state.model, x_public[requested], cfg.eval.batch_size)
                    up = method.upload(cid, t, requested, probs, state)
                    for kind, nbytes in method.uplink_bytes(up).items():
                        ledger.record(rnd, "up", kind, nbytes, cid)
                    uplinks.append(up)
                store.save(cid, state)

            record: dict[str, Any] = {"round": t, "lr": lr, "clients": sampled}
            w = np.asarray(weights, dtype=np.float64)
            record["train_loss"] = float(np.dot(w, train_losses) / w.sum()) if w.sum() > 0 else float(np.mean(train_losses))
            record["temperature_mean"] = float(np.mean(temps))
            if distill_losses:
                record["distill_loss"] = float(np.mean(distill_losses))
            if collaborative:
                prev, server_metrics = _server_round(ctx, t, drawn, requested, uplinks, cache, twin, server_state)
                server_state = server_metrics.pop("_state")
                record.update(server_metrics)
                if cache is not None:
                    record["sync_verified"] = verified
            sent = ledger.round_totals(rnd)
            record["bytes_up"], record["bytes_down"] = sent["up"], sent["down"]
            record["bytes_cumulative"] = ledger.cumulative()["total"]
            record["bytes_detail"] = {key: v for key, v in sent.items() if "." in key}
            snapshot = exp.policy.snapshot()
            if snapshot:
                record["temperatures"] = {str(c): float(v) for c, v in sorted(snapshot.items())}
            if eval_local:
                ids = sampled if cfg.eval.clients == "sampled" else sorted(latest_acc)
                record["local_acc"] = _mean([latest_acc[c] for c in ids])
                record["local_loss"] = _mean([latest_loss[c] for c in ids])
                record["local_clients"] = len(ids)
            if collaborative and ((t % cfg.eval.every == 0) or t == cfg.federation.rounds):
                acc, loss = evaluate(model, server_state, x_test, y_test, cfg.eval.batch_size)
                record["global_acc"], record["global_loss"] = acc, loss
                record["server_acc"], record["server_loss"] = acc, loss
                if cfg.eval.clients == "all":
                    per_client = [evaluate(model, server_state, *data.client_eval(c), cfg.eval.batch_size)[0] for c in range(data.num_clients)]
                    record["global_client_acc"] = _mean(per_client)
            record.update(method.round_metrics())
            yield record
    finally:
        store.close()


def _receive(
    ctx: _Context, ledger: CommunicationLedger, rnd: int, cid: int, state: ClientState, prev: Broadcast, cache: ServerCache | None
) -> torch.Tensor:
    """Client ``cid`` receives round t-1's downlink (after a catch-up delta) and rebuilds zhat^{t-1}.

    With the cache, the rebuilt rows must equal the server's bit for bit; a
    mismatch raises :class:`CacheOutOfSyncError` (SCARLET's synchronisation
    guarantee, checked in every run).
    """
    enc = ctx.setup.common.index_encoding
    universe = max(len(ctx.x_public), 1)
    down = prev.downlink
    ledger.record(rnd, "down", "indices", index_bytes(down.indices.numel(), universe, enc), cid)
    ledger.record(rnd, "down", "soft_labels", ctx.method.downlink_soft_bytes(down.soft_labels), cid)
    if cache is None:
        return down.soft_labels
    assert state.cache is not None
    delta = cache.sync(cid, prev.round)
    ledger.record(rnd, "down", "sync", delta.nbytes(enc, universe), cid)
    ledger.record(rnd, "down", "cache_signals", signal_bytes(down.signals.numel()), cid)
    state.cache.apply_sync(delta)
    rows = state.cache.rebuild(down)
    if rows.shape != prev.rows.shape or not torch.equal(rows, prev.rows):
        raise CacheOutOfSyncError(f"client {cid}: rebuilt soft-labels of round {prev.round} differ from the server's")
    return rows


def _server_round(
    ctx: _Context,
    t: int,
    drawn: torch.Tensor,
    requested: torch.Tensor,
    uplinks: list[Any],
    cache: ServerCache | None,
    twin: ServerCache | None,
    server_state: Params,
) -> tuple[Broadcast, dict[str, Any]]:
    """Aggregate, update the cache (gamma^t), train the server model on P^t with zhat^t."""
    exp, method = ctx.exp, ctx.method
    cfg = exp.config
    num_classes = exp.data.num_classes
    if uplinks:
        agg = method.aggregate(t, requested, uplinks)
    else:  # nothing requested (all of P^t validly cached)
        empty = torch.zeros(0, dtype=torch.bool)
        agg = Aggregate(empty, torch.zeros((0, method.row_width())), torch.zeros((0, num_classes)))
    kept = set(requested[agg.keep].tolist()) if requested.numel() else set()
    fresh_all = set(requested.tolist())
    used = torch.tensor([i for i in drawn.tolist() if i not in fresh_all or i in kept], dtype=torch.long)
    if cache is not None:
        upd = cache.update(t, used, agg.rows.to(torch.float32))
        rows_full, downlink = upd.soft_labels, upd.downlink
        targets = twin.update(t, used, agg.server_rows.to(torch.float32)).soft_labels if twin is not None else rows_full
    else:
        rows_full = agg.rows.to(torch.float32)
        downlink = SoftLabelDownlink(round=t, indices=used, signals=torch.zeros(0, dtype=torch.uint8), soft_labels=rows_full)
        targets = agg.server_rows.to(torch.float32)
    state = server_state
    if used.numel() > 0:
        gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "server", t))
        out = train_client(
            exp.model, server_state, ctx.x_public[used], targets,
            spec=ctx.server_spec, lr=ctx.server_lr, temperature=1.0, context={}, generator=gen,
        )
        state = out.params
    metrics: dict[str, Any] = {
        "_state": state,
        "public_drawn": int(drawn.numel()),
        "public_requested": int(requested.numel()),
        "public_used": int(used.numel()),
        "soft_label_entropy": float(entropy(targets).mean()) if targets.numel() else None,
    }
    if cache is not None:
        metrics["cache_hit_ratio"] = 1.0 - requested.numel() / max(drawn.numel(), 1)
        metrics["cache_size"] = len(cache)
    metrics.update({f"agg_{key}": v for key, v in agg.metrics.items()})
    return Broadcast(t, used, downlink, rows_full), metrics
