"""Where start-up goes: launch -> end of round 1 of a benchmark workload, phase by phase, plus cProfile's top.

    python benchmarks/profile_startup.py --workload 2 --device cuda --out OUTDIR

The phases are stamped from the interpreter's start (``time.time()`` against the
process's start time from ``/proc``): importing torch, initialising CUDA,
importing chillfl, building the data, ``run_experiment`` for 1 round (the
benchmark's start-up measure, ``mode_chillfl.py --api run_experiment``).
``run_experiment`` also runs under cProfile; its top functions by cumulative
time go to ``OUTDIR/startup-w<key>.txt``. Nothing here is imported by the package.
"""

from __future__ import annotations

import os
import sys
import time


def process_start() -> float:
    """This process's start time (seconds since the epoch), from /proc; now if unreadable."""
    try:
        ticks = int(open(f"/proc/{os.getpid()}/stat").read().rsplit(")", 1)[1].split()[19])
        uptime = float(open("/proc/uptime").read().split()[0])
        return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time()


T0 = process_start()
STAMPS: list[tuple[str, float]] = [("interpreter started", T0)]


def stamp(what: str) -> None:
    STAMPS.append((what, time.time()))


import cProfile  # noqa: E402
import io  # noqa: E402
import pstats  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_cli import OneLineParser  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="profile_startup.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="2", choices=["1", "2", "3", "4"])
    p.add_argument("--variant", default="auto")
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "chillfl-bench-data")  # workloads.default_data_dir()
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    stamp("arguments parsed")
    import chillfl._torch  # noqa: F401  (as mode_chillfl.py: chillfl's torch import, GC paused)
    import torch

    stamp("torch imported")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("profile_startup.py: --device cuda: torch sees no CUDA GPU", file=sys.stderr)
            return 2
        torch.cuda.init()
        torch.zeros(1, device="cuda")
        stamp("CUDA context made")
    from chillfl.config import load_config
    from chillfl.runner import run_experiment
    from mode_chillfl import federated_data, overrides
    from workloads import data_dir, data_problem, load_data, workload, write_data

    stamp("chillfl imported")
    w = workload(args.workload, args.scale)
    if why := data_problem(args.data_dir, args.seed, [w.num_samples]):
        print(f"profile_startup.py: {why}", file=sys.stderr)
        return 2
    folder = data_dir(args.data_dir, w.num_samples, args.seed)
    write_data(folder, w.num_samples, args.seed)  # once per machine; not part of a measured start-up
    stamp("benchmark data present")
    data = federated_data(w, load_data(folder, mmap=True), args.seed)
    cfg = load_config(None, overrides(w, args.variant, 1, args.seed, args.device))
    stamp("config and FederatedData built")
    prof = cProfile.Profile()
    prof.enable()
    run_experiment(cfg, write=False, progress=False, data=data)
    prof.disable()
    stamp("run_experiment (1 round) returned")
    lines = [f"workload {args.workload}, chillfl[{args.variant}], device {args.device}, torch {torch.__version__}"]
    previous = T0
    for what, t in STAMPS:
        lines.append(f"{t - T0:8.3f} s  (+{t - previous:6.3f})  {what}")
        previous = t
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(args.top)
    lines += ["", "run_experiment under cProfile, top by cumulative time:", text.getvalue()]
    args.out.mkdir(parents=True, exist_ok=True)
    out = "\n".join(lines)
    (args.out / f"startup-w{args.workload}.txt").write_text(out + "\n")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
