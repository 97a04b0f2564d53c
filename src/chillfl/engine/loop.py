"""The round loop of the parameter-sharing protocol (FedAvg family).

Read top to bottom, one round is::

    sampled  = sample_clients(seed, round)                # sorted client ids
    jobs     = [downlink(global, cid) for cid in sampled] # + temperature, lr, seed
    outcomes = executor.run(jobs)                         # local training
    report   = local evaluation + temperature policy update
    global   = aggregator.aggregate(global, results)      # in client-id order
    metrics  = evaluate(global)                           # every `eval.every` rounds

Every random choice draws from a stream derived from (seed, purpose, round,
client), so a run is a pure function of its config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import torch

from chillfl.aggregation.base import ClientResult
from chillfl.engine.executors import ClientJob, Executor
from chillfl.engine.ledger import CommunicationLedger, tensor_bytes
from chillfl.engine.setup import Experiment
from chillfl.temperature.base import ConstantTemperature
from chillfl.training.local import derive_seed, evaluate


def sample_clients(seed: int, round: int, num_clients: int, k: int) -> list[int]:
    """k distinct client ids for this round, sorted; independent of every other random stream."""
    rng = np.random.default_rng(derive_seed(seed, "sample", round))
    if k >= num_clients:
        return list(range(num_clients))
    return sorted(int(c) for c in rng.choice(num_clients, size=k, replace=False))


def make_executor(exp: Experiment) -> Executor:
    """The executor named by ``config.executor`` (imported lazily: the process pool is heavy)."""
    from chillfl.engine.parallel import make_parallel_executor

    return make_parallel_executor(exp.config.executor, exp)


@dataclass
class RoundLog:
    """Per-client values kept across rounds (latest local accuracy for eval.clients = 'all')."""

    latest_local_acc: dict[int, float] = field(default_factory=dict)
    latest_local_loss: dict[int, float] = field(default_factory=dict)


def payload_bytes(payload: Any) -> int:
    """Bytes of the tensors in a message (a tensor, or dicts/lists of them); other values are free."""
    if isinstance(payload, torch.Tensor):
        return tensor_bytes(payload)
    if isinstance(payload, dict):
        return sum(payload_bytes(v) for v in payload.values())
    if isinstance(payload, (list, tuple)):
        return sum(payload_bytes(v) for v in payload)
    return 0


def _mean(values: list[float]) -> float | None:
    vals = [v for v in values if not math.isnan(v)]
    return float(np.mean(vals)) if vals else None


def run_rounds(exp: Experiment, executor: Executor | None = None) -> Iterator[dict[str, Any]]:
    """Yield one metrics record per round (a plain JSON-serialisable dict)."""
    cfg = exp.config
    data, model = exp.data, exp.model
    executor = executor or make_executor(exp)
    state = {k: v.clone() for k, v in exp.initial_state.items()}
    log = RoundLog()
    x_test, y_test = data.test()
    k = cfg.federation.sample_size()
    eval_local = cfg.eval.clients != "none"
    ledger = CommunicationLedger()
    begin_round = getattr(exp.aggregator, "begin_round", None)
    per_client_temperature = not isinstance(exp.policy, ConstantTemperature)
    try:
        for rnd in range(cfg.federation.rounds):
            sampled = sample_clients(cfg.seed, rnd, data.num_clients, k)
            if begin_round is not None:
                begin_round(rnd, sampled)
            lr = cfg.client.lr_at(rnd)
            jobs = []
            for cid in sampled:
                down = exp.aggregator.downlink(cid, rnd, state)
                start = state if down.params is None else {**state, **down.params}
                ledger.record(rnd, "down", "params", payload_bytes(start), cid)
                ledger.record(rnd, "down", "control", payload_bytes({k: v for k, v in down.context.items() if k != "global_params"}), cid)
                x, y = data.client_train(cid)
                jobs.append(
                    ClientJob(cid, start, x, y, lr, exp.policy.temperature(cid, rnd), down.context, derive_seed(cfg.seed, "train", cid, rnd))
                )
            outcomes = executor.run(jobs)

            results = []
            for job, out in zip(jobs, outcomes):
                local_acc = None
                if eval_local:
                    xe, ye = data.client_eval(job.client_id)
                    local_acc, local_loss = evaluate(model, out.params, xe, ye, cfg.eval.batch_size)
                    log.latest_local_acc[job.client_id] = local_acc
                    log.latest_local_loss[job.client_id] = local_loss
                exp.policy.observe(job.client_id, rnd, local_acc)
                extras: dict[str, Any] = {}
                reporter = getattr(exp.aggregator, "client_report", None)
                if reporter is not None:
                    extras = reporter(model, job, out)
                results.append(ClientResult(job.client_id, out.params, len(job.y), out.num_steps, job.lr, job.temperature, out.mean_loss, extras))
                ledger.record(rnd, "up", "params", payload_bytes(out.params), job.client_id)
                ledger.record(rnd, "up", "control", payload_bytes(extras), job.client_id)
            state = exp.aggregator.aggregate(state, results, rnd)

            weights = np.array([r.num_samples for r in results], dtype=np.float64)
            record: dict[str, Any] = {
                "round": rnd + 1,
                "lr": lr,
                "clients": sampled,
                "train_loss": float(np.dot(weights, [r.train_loss for r in results]) / weights.sum()),
                "temperature_mean": float(np.mean([r.temperature for r in results])),
            }
            record["client_train_loss"] = {str(r.client_id): r.train_loss for r in results}
            sent = ledger.round_totals(rnd)
            record["bytes_up"], record["bytes_down"] = sent["up"], sent["down"]
            record["bytes_cumulative"] = ledger.cumulative()["total"]
            if per_client_temperature:  # only the round's clients: O(sampled), not O(registered)
                record["temperatures"] = {str(r.client_id): float(r.temperature) for r in results}
            if eval_local:
                ids = sampled if cfg.eval.clients == "sampled" else sorted(log.latest_local_acc)
                record["local_acc"] = _mean([log.latest_local_acc[c] for c in ids])
                record["local_loss"] = _mean([log.latest_local_loss[c] for c in ids])
                record["local_clients"] = len(ids)
            if (rnd + 1) % cfg.eval.every == 0 or rnd + 1 == cfg.federation.rounds:
                acc, loss = evaluate(model, state, x_test, y_test, cfg.eval.batch_size)
                record["global_acc"], record["global_loss"] = acc, loss
                if cfg.eval.clients == "all":
                    per_client = [evaluate(model, state, *data.client_eval(c), cfg.eval.batch_size)[0] for c in range(data.num_clients)]
                    record["global_client_acc"] = _mean(per_client)
            record.update({f"agg_{k}": v for k, v in exp.aggregator.round_metrics().items()})
            yield record
    finally:
        executor.close()

