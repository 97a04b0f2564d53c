"""Workload 1's two convolutions, op by op, in each form and setting a vmapped step could run them.

    python benchmarks/conv_kernels.py --device cuda [--clients 100] [--batch 50] [--repeats 5] [--out OUTDIR]

Why: on the H200 (2026-11-30) CUDA graphs cut workload 1's launches tenfold but its round only from 1.05 s to
1.00 s, and TF32 or bf16 changed it little: the kernels themselves are slow. Under ``vmap`` each client's
``conv2d`` becomes one grouped convolution with the clients folded into the channels (groups = clients), and
cuDNN ran it as one small kernel per client. This script times those convolutions alone, in isolation from the
rest of the step, for every way worth weighing:

* ``grouped``: what vmap makes, ``conv2d(x [N, B*C_in, H, W], w [B*C_out, C_in, k, k], groups=B)``: in NCHW
  (rows ``grouped-*-nchw``) as ``batched_conv = "grouped"`` runs it, channels-last (``grouped-*-nhwc``) as
  ``batched_conv = "nhwc"`` does;
* ``loop``: one plain convolution per client (groups = 1) on one stream, as ``batched_conv = "loop"`` runs them
  (channels-last);
* ``streams``: the same, the clients spread round-robin over ``--streams`` CUDA streams (CUDA only);
* ``gemm``: the windows gathered NHWC (one ``index_select``; their gradient a gather and a sum) and one batched
  matrix product over all clients, as ``batched_conv = "gemm"`` runs them (chillfl.training.conv_gemm; until
  2026-12-04 ``unfold``, whose CUDA kernel ATen launches once per sample: 5,007 kernels a forward here);

each in fp32 (cuDNN's TF32 default as torch ships it) and bf16, NCHW and channels-last, with PyTorch's
deterministic algorithms (chillfl's ``deterministic = true``) or without them and with ``cudnn.benchmark``.
Per op (forward; the backward's input gradient, conv2 only, as in training; the weight gradient) it prints the
milliseconds (the minimum of ``--repeats``, after two warm-up calls), the TFLOP/s, and on CUDA the kernels
one call launches (torch.profiler). The per-layer sums are what one vmapped step of ``--clients`` clients spends
in its convolutions; workload 1's whole step took about 20 ms on the H200 (1.0 s a round, 50 vmapped steps).

Nothing here is imported by the package, and no test asserts a time. On the CPU it runs the same code (without
``streams``) on tiny sizes, to check the script.
"""

from __future__ import annotations

import bisect
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

from chillfl.training.conv_gemm import window_index, window_sources

from bench_cli import OneLineParser  # the script's folder is on sys.path: run as a script, or by the tests

KERNEL = 5
LAYERS = {"conv1": (3, 32, 32), "conv2": (32, 64, 14)}
"""McMahan's CNN on 3x32x32 without padding (chillfl's ``mcmahan_cnn`` in workload 1): (C_in, C_out, input H = W)."""
MARK = "conv_kernels:"
"""The profiler label of each timed call, for :func:`kernels_per_call`."""


@dataclass(frozen=True)
class Setting:
    """One way of running the convolutions: the form, the dtype, the layout and cuDNN's algorithm choice."""

    form: str  # grouped | loop | streams | gemm
    dtype: str  # fp32 | bf16
    channels_last: bool = False
    deterministic: bool = True
    benchmark: bool = False

    @property
    def name(self) -> str:
        layout = "nhwc" if self.channels_last else "nchw"
        algo = "det" if self.deterministic else "nondet"
        return f"{self.form}-{self.dtype}-{layout}-{algo}" + ("+bench" if self.benchmark else "")


def settings(device: str) -> list[Setting]:
    """What the check measures on ``device``: every form at chillfl's defaults, then the layouts and algorithm choices
    (bf16 only where the device has bf16 kernels)."""
    cuda = device.startswith("cuda")
    out = [Setting("grouped", "fp32"), Setting("grouped", "bf16")]
    out += [Setting("grouped", "fp32", channels_last=True), Setting("grouped", "bf16", channels_last=True)]
    if cuda:  # the algorithm choice: only cuDNN has one to make
        out += [Setting("grouped", "fp32", deterministic=False, benchmark=True), Setting("grouped", "bf16", True, False, True)]
    # loop in both layouts: batched_conv = "loop" runs each client's convolution channels-last, fp32 (TF32) and bf16
    out += [Setting("loop", "fp32"), Setting("loop", "fp32", channels_last=True), Setting("loop", "bf16", channels_last=True)]
    if cuda:
        out += [Setting("streams", "fp32"), Setting("streams", "bf16", channels_last=True)]
    out += [Setting("gemm", "fp32"), Setting("gemm", "bf16")]
    from chillfl.training.local import bf16_supported

    return out if bf16_supported(torch.device(device)) else [s for s in out if s.dtype != "bf16"]  # as conv_layouts.py


def conv_flops(clients: int, batch: int, cin: int, cout: int, hw: int) -> float:
    """Multiply-adds x 2 of one convolution's forward over all clients (each gradient costs the same)."""
    out = hw - KERNEL + 1
    return 2.0 * clients * batch * cout * out * out * cin * KERNEL * KERNEL


class Layer:
    """One layer's tensors for ``clients`` clients: the inputs, weights and output gradients each form needs."""

    def __init__(self, s: Setting, clients: int, batch: int, cin: int, cout: int, hw: int, device: str, seed: int = 0) -> None:
        g = torch.Generator(device=device).manual_seed(seed)  # drawn where they are used: 100 clients' tensors are GBs
        dtype = torch.bfloat16 if s.dtype == "bf16" else torch.float32
        fmt = torch.channels_last if s.channels_last else torch.contiguous_format
        out = hw - KERNEL + 1
        self.clients, self.cin, self.cout = clients, cin, cout

        def make(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=g, device=device).to(dtype)

        # stacked (gemm): x [B, N, C_in, H, W], w [B, C_out, C_in, k, k], grad_out [B, N, C_out, H', W']
        self.xs, self.ws, self.gys = make(clients, batch, cin, hw, hw), make(clients, cout, cin, KERNEL, KERNEL), make(clients, batch, cout, out, out)
        # per client (loop, streams), in the setting's layout
        self.x, self.w, self.gy = ([t.contiguous(memory_format=fmt) for t in stacked] for stacked in (self.xs, self.ws, self.gys))
        # grouped: the clients folded into the channels, client by client, as vmap's convolution batching rule does
        self.xg = self.xs.transpose(0, 1).reshape(batch, clients * cin, hw, hw).contiguous(memory_format=fmt)
        self.wg = self.ws.reshape(clients * cout, cin, KERNEL, KERNEL).contiguous(memory_format=fmt)
        self.gyg = self.gys.transpose(0, 1).reshape(batch, clients * cout, out, out).contiguous(memory_format=fmt)


def _backward(gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, groups: int, mask: list[bool]) -> Any:
    return torch.ops.aten.convolution_backward(gy, x, w, [w.shape[0]], [1, 1], [0, 0], [1, 1], False, [0, 0], groups, mask)


def ops(s: Setting, layer: Layer, streams: list[Any]) -> dict[str, Callable[[], Any]]:
    """The layer's forward, input gradient and weight gradient in form ``s.form``, each a call with no arguments."""
    b = layer.clients
    if s.form == "grouped":
        return {"forward": lambda: F.conv2d(layer.xg, layer.wg, groups=b),
                "input_grad": lambda: _backward(layer.gyg, layer.xg, layer.wg, b, [True, False, False]),
                "weight_grad": lambda: _backward(layer.gyg, layer.xg, layer.wg, b, [False, True, True])}
    if s.form in ("loop", "streams"):
        def each(fn: Callable[[int], Any]) -> Callable[[], Any]:
            if s.form == "loop":
                return lambda: [fn(c) for c in range(b)]

            def spread() -> list[Any]:
                main = torch.cuda.current_stream()
                for st in streams:
                    st.wait_stream(main)
                out = []
                for c in range(b):
                    with torch.cuda.stream(streams[c % len(streams)]):
                        out.append(fn(c))
                for st in streams:
                    main.wait_stream(st)
                return out
            return spread

        return {"forward": each(lambda c: F.conv2d(layer.x[c], layer.w[c])),
                "input_grad": each(lambda c: _backward(layer.gy[c], layer.x[c], layer.w[c], 1, [True, False, False])),
                "weight_grad": each(lambda c: _backward(layer.gy[c], layer.x[c], layer.w[c], 1, [False, True, True]))}
    # gemm: cols [B, N (L + 1), K] gathered from the NHWC input and its zero pixel (L windows + the blank one), K =
    # (i, j, c); out = (cols @ W^T) without the blank rows; weight grad = gy^T @ cols; input grad = gy @ W (gy with a
    # zero row for the blank window, as autograd's backward of dropping it makes), then each pixel gathers and sums the
    # kh kw slots that read it (GatherWindows). The input arrives NHWC, as the first layer's GEMM output (pooled) hands
    # it to the second.
    n, hw = layer.xs.shape[1], layer.xs.shape[-1]
    k = layer.cin * KERNEL * KERNEL
    out = hw - KERNEL + 1
    index, _, _ = window_index(hw, hw, (KERNEL, KERNEL), (1, 1), (1, 1), (0, 0), layer.xs.device)
    sources = window_sources(hw, hw, (KERNEL, KERNEL), (1, 1), (1, 1), (0, 0), (out, out), layer.xs.device).reshape(-1)
    pixels = F.pad(layer.xs.permute(0, 1, 3, 4, 2).reshape(b, n, hw * hw, layer.cin), (0, 0, 0, 1))  # [B, N, H W + 1, C_in]
    windows = out * out + 1

    def cols() -> torch.Tensor:
        return pixels.index_select(2, index).reshape(b, n * windows, k)

    gy = layer.gys.permute(0, 1, 3, 4, 2).reshape(b, n, out * out, layer.cout)  # [B, N, L, C_out]
    gy_rows = F.pad(gy, (0, 0, 0, 1)).reshape(b, n * windows, layer.cout)  # + the blank window's zero row
    w_rows = layer.ws.permute(0, 1, 3, 4, 2).reshape(b, layer.cout, k)

    def input_grad() -> torch.Tensor:
        g = torch.bmm(gy_rows, w_rows).view(b, n, windows * KERNEL * KERNEL, layer.cin)  # [B, N, (L + 1) kh kw, C_in]
        return g.index_select(2, sources).view(b, n, hw * hw + 1, KERNEL * KERNEL, layer.cin).sum(3)

    return {"forward": lambda: torch.bmm(cols(), w_rows.transpose(1, 2)),
            "input_grad": input_grad,
            "weight_grad": lambda: torch.bmm(gy_rows.transpose(1, 2), cols())}


def _time(fn: Callable[[], Any], repeats: int, sync: Callable[[], None]) -> float:
    for _ in range(2):  # warm-up: cuDNN's algorithm choice (benchmark mode times them here), the allocator
        fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t)
    return best


def count_in_windows(windows: list[tuple[float, str]], starts: list[float]) -> dict[str, int]:
    """Kernels per call: each kernel start goes to the last call that began before it (calls were synchronised one by one)."""
    windows = sorted(windows)
    bounds = [w[0] for w in windows]
    counts = {label: 0 for _, label in windows}
    for t in starts:
        i = bisect.bisect_right(bounds, t) - 1
        if i >= 0:
            counts[windows[i][1]] += 1
    return counts


def kernels_per_call(calls: list[tuple[str, Callable[[], Any]]], sync: Callable[[], None]) -> dict[str, int]:
    """The CUDA kernels each call launches (memcpy and memset left out), from ONE profiler session for all of them
    (a session each would spend most of the step's time budget starting CUPTI)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for label, fn in calls:
            with record_function(f"{MARK}{label}"):
                fn()
                sync()
    events = prof.events()
    windows = [(e.time_range.start, e.name[len(MARK):]) for e in events if e.name.startswith(MARK)]
    starts = [e.time_range.start for e in events
              if "CUDA" in str(getattr(e, "device_type", "")) and not any(m in e.name.lower() for m in ("memcpy", "memset"))]
    return count_in_windows(windows, starts)



def measure(s: Setting, device: str, clients: int, batch: int, repeats: int, num_streams: int) -> list[dict[str, Any]]:
    """One row per (layer, op) for setting ``s``; the algorithm flags are set for the measurement and restored."""
    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    was = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.use_deterministic_algorithms(s.deterministic)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = s.deterministic, s.benchmark
    streams = [torch.cuda.Stream() for _ in range(num_streams)] if s.form == "streams" else []
    rows: list[dict[str, Any]] = []
    timed: list[tuple[str, Callable[[], Any]]] = []
    layers = []
    try:
        for name, (cin, cout, hw) in LAYERS.items():
            layers.append(layer := Layer(s, clients, batch, cin, cout, hw, device))
            flops = conv_flops(clients, batch, cin, cout, hw)
            for op, fn in ops(s, layer, streams).items():
                if name == "conv1" and op == "input_grad":
                    continue  # the first layer's input is the data: training never asks for its gradient
                row: dict[str, Any] = {**asdict(s), "setting": s.name, "layer": name, "op": op}
                try:
                    seconds = _time(fn, repeats, sync)
                except RuntimeError as exc:  # e.g. no deterministic kernel for this op here
                    rows.append({**row, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"})
                    continue
                rows.append({**row, "ms": 1e3 * seconds, "tflops": flops / seconds / 1e12})
                timed.append((f"{name}.{op}", fn))
        if cuda and timed:
            try:
                counts = kernels_per_call(timed, sync)
            except Exception as exc:  # noqa: BLE001 - the times stand without the counts
                print(f"  kernel count failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                counts = {}
            for row in rows:
                if f"{row['layer']}.{row['op']}" in counts:
                    row["kernels"] = counts[f"{row['layer']}.{row['op']}"]
    finally:
        del layers
        torch.use_deterministic_algorithms(was[0])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = was[1], was[2]
    return rows


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """One line a setting: each op's milliseconds (kernels), and the sum of the timed ops (one vmapped step's convolutions)."""
    lines = []
    for setting in dict.fromkeys(r["setting"] for r in rows):
        mine = [r for r in rows if r["setting"] == setting]
        parts = []
        for r in mine:
            label = f"{r['layer']}.{r['op'].replace('_grad', 'G').replace('forward', 'fwd')}"
            parts.append(f"{label} {r['error']}" if "error" in r else f"{label} {r['ms']:.2f}" + (f" ({r['kernels']})" if "kernels" in r else ""))
        total = sum(r.get("ms", float("nan")) for r in mine)
        lines.append(f"{setting:<30} sum {total:8.2f} ms | " + "  ".join(parts))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="conv_kernels.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--clients", type=int, default=100, help="clients in one vmapped step (workload 1: 100)")
    p.add_argument("--batch", type=int, default=50, help="samples a client step (workload 1: 50)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--streams", type=int, default=8, help="CUDA streams of the 'streams' form")
    p.add_argument("--only", default="", help="comma-separated substrings of setting names to run (default: all)")
    p.add_argument("--out", type=Path, default=None, help="folder for conv-kernels.json")
    args = p.parse_args(argv)
    if min(args.clients, args.batch, args.repeats, args.streams) < 1:
        p.error("--clients, --batch, --repeats and --streams must be >= 1")
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("conv_kernels.py: --device cuda: torch sees no CUDA GPU", file=sys.stderr)
        return 2
    if cuda:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS (the gemm form), as chillfl sets it
    wanted = [w for w in args.only.split(",") if w]
    chosen = [s for s in settings(args.device) if not wanted or any(w in s.name for w in wanted)]
    rows: list[dict[str, Any]] = []
    for s in chosen:
        mine = measure(s, args.device, args.clients, args.batch, args.repeats, args.streams)
        rows += mine
        print(summary(mine)[0], flush=True)
    report = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version(), "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
              "clients": args.clients, "batch": args.batch, "rows": rows}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "conv-kernels.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
