"""Workload 2 with many registered clients: seconds (wall and CPU) per round, build time, peak memory.

    python benchmarks/many_clients.py --clients 1000            # workload 2
    python benchmarks/many_clients.py --clients 100000          # workload 4: the same sample size, 100x the clients
    python benchmarks/many_clients.py --clients 100000 --lists  # per-client index arrays instead of ClientRows

The pool is ``run.py``'s memory-mapped synthetic data (50,000 CIFAR-shaped rows,
written once under ``--data-dir``). Client ``c`` owns rows
``[(50 c) mod 50,000, ... + 50)`` (``ClientRows.tiled``): with 1,000 clients
that is workload 2's partition exactly, with 100,000 clients ``c`` and
``c + 1000`` share their rows (the 61 GB of distinct rows 100,000 x 50 CIFAR
samples would take are not the point: the per-round cost of many *registered*
clients is). Run each size in its own process, a few times, interleaved:
only ratios within one sitting mean anything on a shared machine.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bench_cli import OneLineParser
from mode_chillfl import overrides
from workloads import NUM_CLASSES, data_dir, data_problem, default_data_dir, load_data, workload, write_data


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="many_clients.py", description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100_000, help=">= 1")
    parser.add_argument("--rounds", type=int, default=6, help=">= 2 (round 1 is a warm-up)")
    parser.add_argument("--executor", default="auto")
    parser.add_argument("--lists", action="store_true", help="one index array per client (the older form)")
    parser.add_argument("--data-dir", type=Path, default=default_data_dir(), help="run.py's data folder (default $TMPDIR/chillfl-bench-data)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.clients < 1 or args.rounds < 2:
        parser.error(f"--clients must be >= 1 and --rounds >= 2 (got {args.clients} and {args.rounds})")
    if why := data_problem(args.data_dir, args.seed, [workload("2").num_samples]):
        parser.error(why)

    from chillfl.config import load_config
    from chillfl.data.client_rows import ClientRows
    from chillfl.data.datasets import ArrayDataset
    from chillfl.data.federated import FederatedData
    from chillfl.errors import ConfigError
    from chillfl.experiment import build_experiment
    from chillfl.runner import intra_op_threads, rounds_for

    w = workload("2")
    settings = overrides(w, args.executor, args.rounds, args.seed)
    settings["federation.num_clients"] = args.clients
    try:  # before the data are written: a bad --executor is one line, and nothing is left half-done
        cfg = load_config(None, settings)
    except ConfigError as exc:
        print(f"many_clients.py: {exc}", file=sys.stderr)
        return 2
    folder = data_dir(args.data_dir, w.num_samples, args.seed)
    write_data(folder, w.num_samples, args.seed)
    arrays = load_data(folder, mmap=True)
    t = torch.from_numpy
    dataset = ArrayDataset("synthetic_cifar", t(arrays["x"]), t(arrays["y"]), t(arrays["x_test"]), t(arrays["y_test"]), NUM_CLASSES)
    n, pool = w.samples_per_client, len(arrays["y"])

    start = time.perf_counter()
    rows = ClientRows.tiled(args.clients, n, pool)
    train = [rows[c] for c in range(args.clients)] if args.lists else rows
    evals = [np.zeros(0, dtype=np.int64) for _ in range(args.clients)] if args.lists else ClientRows.empty(args.clients)
    data = FederatedData(dataset, train, evals, None, np.zeros(0, dtype=np.int64), seed=args.seed)
    with intra_op_threads(cfg.threads):
        exp = build_experiment(cfg, data=data)
        built = time.perf_counter() - start
        wall, cpu = [time.perf_counter()], [time.process_time()]
        for _ in rounds_for(exp)(exp):
            wall.append(time.perf_counter())
            cpu.append(time.process_time())
    dw, dc = np.diff(wall)[1:], np.diff(cpu)[1:]  # round 1 is a warm-up
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    form = "lists" if args.lists else "ClientRows"
    print(
        f"{args.clients} clients ({form}): build {built:.2f} s; rounds 2..{args.rounds}: "
        f"wall median {np.median(dw):.3f} s (min {dw.min():.3f}), CPU median {np.median(dc):.3f} s; peak RSS {peak:.0f} MB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
