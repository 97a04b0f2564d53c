"""Does ``torch.compile`` make the vmapped client step faster? (issue 39: "torch.compile of the step as an option, if it measures faster")

    python benchmarks/compile_step.py --device cpu [--workload 1|2] [--clients 8] [--steps 30] [--out OUTDIR]
    python benchmarks/compile_step.py --device cpu --workload 1 --per-client   # one client's unvmapped step, channels-last

The step the vectorised executor runs, written out plainly: ``vmap(grad(...))``
of the cross-entropy over ``functional_call`` of a chillfl model (workload 1's
McMahan CNN on 3x32x32 at batch 50, or workload 2's 3072-64-10 MLP at batch
10), then one ``torch._foreach_add_`` SGD update of every client's stacked
weights. It is timed eagerly and under ``torch.compile`` (inductor, the default
mode) from the same start, the two taking turns step by step, and the two results compared after ``--steps``
steps: milliseconds a step (median of the timed steps, after the warm-up), the
compile time (the first compiled call), the largest difference of any weight
and whether the two are bitwise equal. Nothing here is imported by the package;
no test asserts a time.

``--per-client`` times instead one client's step unvmapped, as the CPU executor
trains large convolutions (workload 1's CNN) client by client: the model's
channels-last weights, ``torch.autograd.grad`` of the loss, the same update.

This is the bare step; the option ``compile = true`` (chillfl.executors.compiled)
compiles the executor's own step, and ``benchmarks/run.py``'s ``+compile`` modes
time it in whole rounds. On the CPU the bare step gains and the executor's
round loses (docs/gpu.md says why); on a GPU the launch overhead it would
remove is what ``cuda_graphs = true`` already removes, and the two combine.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from bench_cli import OneLineParser  # the script's folder is on sys.path: run as a script, or by the tests

Step = Callable[[dict[str, torch.Tensor], torch.Tensor, torch.Tensor], None]

SHAPES = {"1": ("mcmahan_cnn", 50), "2": ("mlp", 10)}
"""Workload -> (model, batch size), as benchmarks/workloads.py has them."""


def vmapped_sgd_step(model: torch.nn.Module, lr: float) -> Step:
    """One SGD step of every client at once, in place on the stacked weights (the executor's maths, plainly)."""
    from torch.func import functional_call, grad, vmap

    def loss(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(functional_call(model, params, (x,)), y)

    grads = vmap(grad(loss))

    def step(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> None:
        g = grads(params, x, y)
        torch._foreach_add_(list(params.values()), [g[k] for k in params], alpha=-lr)

    return step


def per_client_sgd_step(model: torch.nn.Module, lr: float) -> Step:
    """One client's SGD step, unvmapped, in place (the CPU executor's client-by-client maths, plainly)."""
    from torch.func import functional_call

    def loss(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(functional_call(model, params, (x,)), y)

    def step(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> None:
        leaves = {k: v.requires_grad_(True) for k, v in params.items()}
        g = torch.autograd.grad(loss(leaves, x, y), list(leaves.values()))
        with torch.no_grad():
            torch._foreach_add_(list(params.values()), list(g), alpha=-lr)

    return step


def timed(steps: dict[str, Step], params: dict[str, dict[str, torch.Tensor]], batches: list[tuple[torch.Tensor, torch.Tensor]], sync: Callable[[], None]) -> dict[str, list[float]]:
    """Seconds of each mode's call on each batch, the modes taking turns batch by batch (a noisy machine slows both alike)."""
    times: dict[str, list[float]] = {label: [] for label in steps}
    for x, y in batches:
        for label, step in steps.items():
            sync()
            t = time.perf_counter()
            step(params[label], x, y)
            sync()
            times[label].append(time.perf_counter() - t)
    return times


def measure(device: str, workload: str, clients: int, steps: int, seed: int = 0, per_client: bool = False) -> dict[str, Any]:
    from chillfl.models.registry import build_model

    name, batch = SHAPES[workload]
    model = build_model(name, (3, 32, 32), 10, seed=seed).to(device)
    g = torch.Generator().manual_seed(seed)
    if per_client:  # one client, channels-last where the executor would use it (4-d weights and inputs)
        layout = torch.channels_last
        start = {k: (v.detach().clone(memory_format=layout) if v.dim() == 4 else v.detach().clone()) for k, v in model.named_parameters()}
        batches = [(torch.randn(batch, 3, 32, 32, generator=g).to(device, memory_format=layout), torch.randint(0, 10, (batch,), generator=g).to(device)) for _ in range(steps)]
        make: Callable[[torch.nn.Module, float], Step] = per_client_sgd_step
    else:
        start = {k: v.detach().unsqueeze(0).repeat(clients, *([1] * v.dim())).contiguous() for k, v in model.named_parameters()}
        batches = [(torch.randn(clients, batch, 3, 32, 32, generator=g).to(device), torch.randint(0, 10, (clients, batch), generator=g).to(device)) for _ in range(steps)]
        make = vmapped_sgd_step
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    steps_of = {"eager": make(model, 0.1), "compiled": torch.compile(make(model, 0.1))}
    results = {label: {k: v.clone() for k, v in start.items()} for label in steps_of}
    row: dict[str, Any] = {"workload": workload, "model": name, "batch": batch, "clients": 1 if per_client else clients, "per_client": per_client, "steps": steps}
    for label, times in timed(steps_of, results, batches, sync).items():
        row[f"{label}_first_s"] = times[0]  # the compiled mode's first call compiles
        row[f"{label}_ms_per_step"] = 1e3 * statistics.median(times[1 + (len(times) - 1) // 3 :])  # the later two thirds: warm
    row["max_abs_diff"] = max(float((results["eager"][k] - results["compiled"][k]).detach().abs().max()) for k in start)
    row["bitwise_equal"] = all(torch.equal(results["eager"][k], results["compiled"][k]) for k in start)
    row["speed_up"] = row["eager_ms_per_step"] / row["compiled_ms_per_step"]
    return row


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="compile_step.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--workload", choices=sorted(SHAPES), action="append", help="1 (CNN) or 2 (MLP); repeat for both (default: both)")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--steps", type=int, default=30, help="steps timed per mode (the first is the compile)")
    p.add_argument("--per-client", action="store_true", help="one client's unvmapped step (the CPU executor's path for large convolutions)")
    p.add_argument("--out", type=Path, default=None, help="folder for compile-step.json")
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("compile_step.py: --device cuda: torch sees no CUDA GPU", file=sys.stderr)
        return 2
    if args.steps < 4:
        print("compile_step.py: --steps must be at least 4", file=sys.stderr)
        return 2
    rows = []
    for workload in args.workload or sorted(SHAPES):
        rows.append(row := measure(args.device, workload, args.clients, args.steps, per_client=args.per_client))
        print(
            f"workload {workload} ({row['model']}, {'one client unvmapped' if args.per_client else f'{args.clients} clients'}, batch {row['batch']}): eager {row['eager_ms_per_step']:.2f} ms/step,"
            f" compiled {row['compiled_ms_per_step']:.2f} ms/step ({row['speed_up']:.2f}x; compile {row['compiled_first_s']:.1f} s),"
            f" max |diff| {row['max_abs_diff']:.2e}, bitwise equal: {row['bitwise_equal']}",
            flush=True,
        )
    name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    report = {"device": name, "torch": torch.__version__, "threads": torch.get_num_threads(), "rows": rows}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "compile-step.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
