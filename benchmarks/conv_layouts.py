"""One chunk of clients on the vectorised executor's GPU path: ``batched_conv = "grouped"`` against ``"gemm"``, ``"nhwc"``
and ``"loop"``.

    python benchmarks/conv_layouts.py --device cuda [--clients 50] [--samples 500] [--out OUTDIR]

Workload 1's model (the McMahan CNN on 3x32x32, batch 50, plain SGD) trains
``--clients`` clients of ``--samples`` random samples for one epoch as ONE
resident chunk (``VectorizedExecutor(accelerator=True)``: the code a GPU runs;
on the CPU the same path, forced), in fp32 and bf16, with each
``batched_conv`` (chillfl.training.conv_gemm, conv_nhwc). It prints, per setting, the
milliseconds of one vmapped step (the chunk's time over its steps, after a
warm-up chunk), per client step, and on CUDA the kernel launches a step
(torch.profiler) and the peak memory. Nothing here is imported by the package;
no test asserts a time.

On the 2-core Xeon (one thread, ``--device cpu --clients 4 --samples 100``) it
measures why the CPU keeps ``grouped``; on a GPU, whether ``gemm`` takes the
step off cuDNN's per-client grouped kernels.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from bench_cli import OneLineParser  # the script's folder is on sys.path: run as a script, or by the tests


def settings(device: str) -> list[tuple[str, str]]:
    from chillfl.training.local import bf16_supported

    precisions = ["fp32"] + (["bf16"] if bf16_supported(torch.device(device)) else [])
    return [(conv, p) for p in precisions for conv in ("grouped", "gemm", "nhwc", "loop")]


def measure(device: str, clients: int, samples: int, conv: str, precision: str, repeats: int) -> dict[str, Any]:
    from chillfl.executors.sequential import ClientJob
    from chillfl.executors.vectorized import VectorizedExecutor
    from chillfl.models.registry import build_model
    from chillfl.training.local import LocalSpec, model_state

    model = build_model("mcmahan_cnn", (3, 32, 32), 10, seed=0).to(device)
    spec = LocalSpec(epochs=1, batch_size=50, precision=precision, batched_conv=conv)
    g = torch.Generator().manual_seed(0)
    jobs = [
        ClientJob(c, model_state(model), torch.randn(samples, 3, 32, 32, generator=g).to(device), torch.randint(0, 10, (samples,), generator=g).to(device), 0.05, 1.0, {}, c) for c in range(clients)
    ]
    ex = VectorizedExecutor(model, spec, accelerator=True, free_memory=lambda _device: 1 << 62)  # one chunk of all clients
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    ex.run(jobs)  # warm-up: the probe, cuDNN's algorithm choice, the allocator
    assert ex.fallback_reason is None, ex.fallback_reason
    steps = -(-samples // spec.batch_size)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        ex.run(jobs)
        sync()
        times.append(time.perf_counter() - t)
    out: dict[str, Any] = {"batched_conv": conv, "precision": precision, "ms_per_step": 1e3 * min(times) / steps}
    out["ms_per_client_step"] = out["ms_per_step"] / clients
    if device.startswith("cuda"):
        from torch.profiler import ProfilerActivity, profile

        out["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            ex.run(jobs)
            sync()
        kernels = [e for e in prof.key_averages() if "memcpy" not in e.key.lower() and "memset" not in e.key.lower()]
        out["kernels_per_step"] = sum(e.count for e in kernels) / steps
    return out


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="conv_layouts.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--samples", type=int, default=500)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads on the CPU")
    p.add_argument("--out", type=Path, default=None, help="folder for conv-layouts.json")
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("conv_layouts.py: --device cuda: torch sees no CUDA GPU", file=sys.stderr)
        return 2
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    rows = []
    try:
        for conv, precision in settings(args.device):
            rows.append(row := measure(args.device, args.clients, args.samples, conv, precision, args.repeats))
            extra = f"  {row['kernels_per_step']:.0f} kernels/step, peak {row['peak_memory_gib']:.2f} GiB" if "kernels_per_step" in row else ""
            print(f"{conv:8s} {precision:5s} {row['ms_per_step']:9.2f} ms/step  {row['ms_per_client_step']:7.3f} ms/client step{extra}", flush=True)
    finally:
        torch.set_num_threads(threads)
    name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    report = {"device": name, "torch": torch.__version__, "clients": args.clients, "samples": args.samples, "rows": rows}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "conv-layouts.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
