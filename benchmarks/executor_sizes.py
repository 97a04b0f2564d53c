"""One local round per executor for models of several sizes: the evidence behind ``auto``.

32 clients of 64-157 random samples, batch 16, 1 epoch, one intra-op thread;
min of 3 timed rounds after a warm-up. Prints seconds and the speed-up over
the sequential executor. ``python benchmarks/executor_sizes.py`` (about 1 min).
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import torch
from bench_cli import OneLineParser  # the script's folder is on sys.path: run as a script, or by the tests
from torch import nn

from chillfl.executors.processes import ProcessExecutor
from chillfl.executors.sequential import ClientJob, SequentialExecutor
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.training.local import LocalSpec, model_state


def mlp(inputs: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(inputs, 64), nn.ReLU(), nn.Linear(64, 10))


def cnn(c: int, hw: int, w: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(c, w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * w * (hw // 4) ** 2, 10),
    )


def mcmahan() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(1600, 512), nn.ReLU(), nn.Linear(512, 10),
    )


MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "mlp-5k (8x8)": (lambda: mlp(64), (1, 8, 8)),
    "cnn-6k (8x8)": (lambda: cnn(1, 8, 16), (1, 8, 8)),
    "mlp-197k (3x32x32)": (lambda: mlp(3072), (3, 32, 32)),
    "cnn-mcmahan-878k": (mcmahan, (3, 32, 32)),
}


def best_of_three(run: Callable[[], object]) -> float:
    """The fastest of three timed calls after a warm-up one."""
    run()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> None:
    # no options, but -h answers (and anything else is refused in one line) instead of starting the minute-long run
    OneLineParser(prog="executor_sizes.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    torch.set_num_threads(1)
    for name, (make, shape) in MODELS.items():
        torch.manual_seed(0)
        model = make()
        start = model_state(model)
        g = torch.Generator().manual_seed(1)
        sizes = torch.randint(64, 158, (32,), generator=g).tolist()
        jobs = [ClientJob(c, start, torch.randn(n, *shape, generator=g), torch.randint(0, 10, (n,), generator=g), 0.05, 1.0, {}, c)
                for c, n in enumerate(sizes)]
        spec = LocalSpec(epochs=1, batch_size=16)
        executors = {
            "sequential": SequentialExecutor(model, spec),
            "vectorized-1": VectorizedExecutor(model, spec),
            "vectorized-2": VectorizedExecutor(model, spec, workers=2),
            "processes-2": ProcessExecutor(model, spec, workers=2),
        }
        seconds = {}
        for key, ex in executors.items():
            seconds[key] = best_of_three(lambda: ex.run(jobs))  # noqa: B023 - called before the loop moves on
            ex.close()
        params = sum(v.numel() for v in start.values())
        print(f"{name:22s} {params:8d} params  " + "  ".join(f"{k} {v:.3f}s ({seconds['sequential'] / v:.2f}x)" for k, v in seconds.items()), flush=True)


if __name__ == "__main__":
    main()
