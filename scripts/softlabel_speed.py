"""Seconds per round of a SCARLET-style soft-label round, for one executor (issue 12, workload 3).

    nice python scripts/softlabel_speed.py --executor sequential --rounds 3 --repeats 3

100 clients (all sampled) x 50 private CIFAR-shaped samples, public set 10,000,
1,000 public rows drawn per round, SCARLET with the cache (D = 50, beta = 1),
one distillation epoch (batch 100), one private epoch (batch 10), local
accuracy on a 20-sample split per client, an MLP 3072-64-10 (``--model cnn``:
McMahan's CIFAR CNN). Synthetic data: x ~ N(0, 1), labels uniform, from a
fixed seed. Uses only chillfl's public config API, so the same script times
an older checkout (run it with that checkout's python).

Prints one JSON line: every repeat's s/round of rounds 2.. (round 1 has no
distillation and no upload cache, so it is reported apart), their min and
median. Nothing is written.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from chillfl.config import load_config
from chillfl.data.datasets import ArrayDataset
from chillfl.data.federated import FederatedData
from chillfl.experiment import build_experiment
from chillfl.runner import intra_op_threads, rounds_for

CLIENTS, PRIVATE, PUBLIC, SUBSET, EVAL, CLASSES = 100, 50, 10_000, 1_000, 20, 10


def synthetic_data(seed: int = 0) -> FederatedData:
    rng = np.random.default_rng(seed)
    n_train = CLIENTS * PRIVATE + PUBLIC
    n_test = CLIENTS * EVAL
    t = torch.from_numpy
    ds = ArrayDataset(
        "synthetic_cifar",
        t(rng.standard_normal((n_train, 3, 32, 32), dtype=np.float32)),
        t(rng.integers(0, CLASSES, n_train)),
        t(rng.standard_normal((n_test, 3, 32, 32), dtype=np.float32)),
        t(rng.integers(0, CLASSES, n_test)),
        CLASSES,
    )
    return FederatedData(
        dataset=ds,
        train_indices=[np.arange(c * PRIVATE, (c + 1) * PRIVATE, dtype=np.int64) for c in range(CLIENTS)],
        eval_indices=[np.arange(c * EVAL, (c + 1) * EVAL, dtype=np.int64) for c in range(CLIENTS)],
        noise=None,
        public_indices=np.arange(CLIENTS * PRIVATE, n_train, dtype=np.int64),
        seed=seed,
    )


def overrides(executor: str, rounds: int, model: str, threads: int) -> dict[str, object]:
    return {
        "seed": 0,
        "threads": threads,
        "executor": executor,
        "model": {"name": "mcmahan_cnn"} if model == "cnn" else {"name": "mlp", "hidden": [64]},
        "federation.num_clients": CLIENTS,
        "federation.rounds": rounds,
        "client.epochs": 1,
        "client.batch_size": 10,
        "client.lr": 0.05,
        "eval.clients": "sampled",
        "eval.every": 1000,
        "distillation.method": "scarlet",
        "distillation.beta": 1.0,
        "distillation.cache_duration": 50,
        "distillation.public_size": PUBLIC,
        "distillation.subset_size": SUBSET,
        "distillation.distill_epochs": 1,
        "distillation.distill_batch_size": 100,
        "distillation.server_epochs": 1,
    }


def one_run(executor: str, rounds: int, model: str, threads: int, data: FederatedData) -> tuple[float, list[float], dict[str, object]]:
    cfg = load_config(None, overrides(executor, rounds, model, threads))
    with intra_op_threads(cfg.threads):
        exp = build_experiment(cfg, data=data)
        times, last = [], {}
        start = time.perf_counter()
        for record in rounds_for(exp)(exp):
            now = time.perf_counter()
            times.append(now - start)
            start, last = now, record
    return times[0], times[1:], last


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--executor", default="sequential")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    data = synthetic_data()
    firsts, per_round, metrics = [], [], {}
    for _ in range(args.repeats):
        first, rest, last = one_run(args.executor, args.rounds, args.model, args.threads, data)
        firsts.append(first)
        per_round.append(statistics.mean(rest))
        metrics = {k: last.get(k) for k in ("train_loss", "distill_loss", "local_acc", "global_acc", "cache_hit_ratio")}
    print(json.dumps({
        "executor": args.executor, "model": args.model, "threads": args.threads, "rounds": args.rounds,
        "s_per_round": [round(v, 3) for v in per_round], "min": round(min(per_round), 3), "median": round(statistics.median(per_round), 3),
        "round1_min": round(min(firsts), 3), "last_round": metrics,
    }))


if __name__ == "__main__":
    main()
