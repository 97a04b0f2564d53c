"""Where one round's time goes: torch.profiler on chillfl's round of a benchmark workload.

    python benchmarks/profile_round.py --workload 1 --device cuda --out OUTDIR [--scale 1.0] [--variant auto]

Builds the workload exactly as ``mode_chillfl.py`` does (same data, config and
round generator), runs one warm-up round, then profiles ``--rounds`` rounds and
writes ``OUTDIR/profile-w<key>-<variant>.txt`` (and ``.json``):

* wall time per round against the device's busy time (the sum of kernel and
  memcpy/memset durations; kernels on several streams could overlap, chillfl
  uses one), so ``busy / wall`` says how far the round is from launch- or
  host-bound;
* kernel launches per round (device kernel events), host launch calls (a
  CUDA graph replay, ``cuda_graphs``, counting as one) and host-device copies;
* the top kernels by total device time (e.g. grouped convolutions that vmap
  makes of the clients' convolutions), and the top host-side ops.

On the CPU (``--device cpu``, a smoke test) the same numbers come from CPU
events only. Nothing here is imported by the package.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from mode_chillfl import federated_data, overrides  # noqa: E402
from workloads import data_dir, data_problem, default_data_dir, load_data, round_flops, workload, write_data  # noqa: E402
from bench_cli import OneLineParser  # noqa: E402


def device_time_us(event: Any) -> float:
    """An aggregated event's self time on the device (torch renamed ``cuda`` to ``device`` in 2.4)."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(event, name, None)
        if value is not None:
            return float(value)
    return 0.0


def on_device(event: Any) -> bool:
    kind = getattr(event, "device_type", None)
    return kind is not None and "CUDA" in str(kind)


def summarize(prof: Any, rounds: int, wall: list[float], top: int) -> dict[str, Any]:
    """Per-round numbers and the top kernels/ops from the profiler's aggregated events."""
    events = prof.key_averages()
    kernels = [e for e in events if on_device(e)]
    busy_us = sum(device_time_us(e) for e in kernels)
    launches = sum(e.count for e in kernels if "memcpy" not in e.key.lower() and "memset" not in e.key.lower())
    copies = sum(e.count for e in kernels if "memcpy" in e.key.lower())
    host = [e for e in events if not on_device(e)]
    launch_calls = sum(e.count for e in host if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx"))
    graph_launches = sum(e.count for e in host if e.key in ("cudaGraphLaunch", "cuGraphLaunch"))
    syncs = sum(e.count for e in host if "Synchronize" in e.key)
    mean_wall = sum(wall) / len(wall)
    return {
        "rounds_profiled": rounds,
        "wall_s_per_round": wall,
        "device_busy_s_per_round": busy_us / 1e6 / rounds,
        "device_busy_fraction": (busy_us / 1e6 / rounds) / mean_wall if mean_wall else None,
        "kernel_launches_per_round": launches / rounds,
        "host_launch_calls_per_round": launch_calls / rounds,
        "graph_launches_per_round": graph_launches / rounds,
        "launches_per_round": (launch_calls + graph_launches) / rounds,  # a CUDA graph replay counts as one (issue 39's measure)
        "memcpy_per_round": copies / rounds,
        "synchronize_calls_per_round": syncs / rounds,
        "top_kernels": [
            {"name": e.key[:160], "calls_per_round": e.count / rounds, "device_ms_per_round": device_time_us(e) / 1e3 / rounds}
            for e in sorted(kernels, key=device_time_us, reverse=True)[:top]
        ],
        "top_host_ops": [
            {"name": e.key[:160], "calls_per_round": e.count / rounds, "cpu_ms_per_round": float(e.self_cpu_time_total) / 1e3 / rounds}
            for e in sorted(host, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
        ],
    }


def report_text(key: str, variant: str, flops: float, s: dict[str, Any]) -> str:
    wall = sum(s["wall_s_per_round"]) / len(s["wall_s_per_round"])
    lines = [
        f"workload {key}, chillfl[{variant}], {s['rounds_profiled']} profiled round(s) after 1 warm-up",
        f"wall s/round: {', '.join(f'{t:.3f}' for t in s['wall_s_per_round'])} (profiler on: slower than unprofiled)",
        f"device busy s/round: {s['device_busy_s_per_round']:.3f} = {100 * (s['device_busy_fraction'] or 0):.1f} % of wall",
        f"round FLOPs {flops / 1e9:.1f} GFLOP -> {flops / wall / 1e12:.2f} TFLOP/s at wall, "
        f"{(flops / s['device_busy_s_per_round'] / 1e12) if s['device_busy_s_per_round'] else float('nan'):.2f} TFLOP/s over busy time",
        f"kernel launches/round: {s['kernel_launches_per_round']:.0f} (host launch calls {s['host_launch_calls_per_round']:.0f}, "
        f"graph launches {s['graph_launches_per_round']:.0f}: {s['launches_per_round']:.0f} launches a replay counting as one), "
        f"memcpy/round: {s['memcpy_per_round']:.0f}, synchronize calls/round: {s['synchronize_calls_per_round']:.0f}",
        "",
        f"{'top kernels (device ms/round)':<110}{'ms':>10}{'calls':>9}",
    ]
    lines += [f"{k['name'][:108]:<110}{k['device_ms_per_round']:>10.2f}{k['calls_per_round']:>9.0f}" for k in s["top_kernels"]]
    lines += ["", f"{'top host ops (self CPU ms/round)':<110}{'ms':>10}{'calls':>9}"]
    lines += [f"{k['name'][:108]:<110}{k['cpu_ms_per_round']:>10.2f}{k['calls_per_round']:>9.0f}" for k in s["top_host_ops"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="profile_round.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="1", choices=["1", "2", "3", "4"])
    p.add_argument("--variant", default="auto", help="executor[+precision], as benchmarks/run.py's chillfl modes")
    p.add_argument("--scale", type=float, default=1.0, help="workload 1: fraction of its 100 clients")
    p.add_argument("--rounds", type=int, default=1, help="profiled rounds (after one warm-up round)")
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", type=Path, default=default_data_dir())
    p.add_argument("--out", type=Path, required=True, help="folder for profile-w<key>-<variant>.txt/.json")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("profile_round.py: --device cuda: torch sees no CUDA GPU", file=sys.stderr)
        return 2

    from chillfl.config import load_config
    from chillfl.experiment import build_experiment
    from chillfl.runner import device_settings, intra_op_threads, rounds_for

    w = workload(args.workload, args.scale)
    if why := data_problem(args.data_dir, args.seed, [w.num_samples]):
        print(f"profile_round.py: {why}", file=sys.stderr)
        return 2
    folder = data_dir(args.data_dir, w.num_samples, args.seed)
    write_data(folder, w.num_samples, args.seed)
    data = federated_data(w, load_data(folder, mmap=True), args.seed)
    total = 1 + args.rounds
    cfg = load_config(None, overrides(w, args.variant, total, args.seed, args.device))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    wall: list[float] = []
    with intra_op_threads(cfg.threads):
        exp = build_experiment(cfg, data=data)
        with device_settings(cfg, exp.device):
            rounds = iter(rounds_for(exp)(exp))
            t0 = time.perf_counter()
            next(rounds)  # warm-up: lazy initialisation, the executor's probe, cuDNN's algorithm choice
            sync()
            print(f"warm-up round: {time.perf_counter() - t0:.3f} s", flush=True)
            with profile(activities=activities) as prof:
                for _ in range(args.rounds):
                    t = time.perf_counter()
                    next(rounds)
                    sync()
                    wall.append(time.perf_counter() - t)
            for _ in rounds:  # the generator's last evaluation
                pass
    s = summarize(prof, args.rounds, wall, args.top)
    s.update(workload=args.workload, variant=args.variant, scale=args.scale, device=args.device, flops_per_round=round_flops(w),
             gpu=torch.cuda.get_device_name(0) if args.device == "cuda" else None, torch=torch.__version__)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"profile-w{args.workload}-{args.variant.replace('+', '-')}"
    text = report_text(args.workload, args.variant, s["flops_per_round"], s)
    stem.with_suffix(".txt").write_text(text + "\n")
    stem.with_suffix(".json").write_text(json.dumps(s, indent=2))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
