"""Host time of a round on the code path a GPU runs, measured on the CPU (issue 39).

    python benchmarks/host_time.py [--workload 2] [--rounds 10] [--graphs] [--profile 25] [--json OUT.json]

Why: a GPU round of workload 2 or 4 is bound by the host, not by arithmetic
(H200, 2026-11-26: 0.110 s a round of 5 vmapped steps of a small MLP). What
the host does in a round besides queueing the step's kernels -- sampling,
per-client tasks and messages, byte accounting, stacking the chunk, the
server's sum -- can be timed without a GPU:

* the workload's clients, with 4 input features instead of 3x32x32 (random
  data made here, nothing on disk), so the arithmetic is negligible;
* the vectorised executor's accelerator policy (resident chunks), the code a
  GPU runs;
* with ``--graphs``, ``cuda_graphs = true`` with the tape recorder (the CPU
  stand-in for CUDA graphs): a replayed step runs its recorded ops, none of
  the step's Python, as a CUDA graph replay would.

Prints seconds per round (median and minimum after two warm-up rounds) and,
with ``--profile N``, the N chillfl functions with the most time of their own
(cProfile, a separate pass). This is not a GPU measurement: the host's speed
and torch's CPU dispatch differ from a GPU machine's. Compare commits on one
machine. Nothing here is imported by the ``chillfl`` package.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Iterator

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import chillfl._torch  # noqa: E402,F401  (chillfl before torch, as `chillfl run` imports them)
import numpy as np  # noqa: E402

from mode_chillfl import federated_data, overrides  # noqa: E402
from workloads import make_arrays, workload  # noqa: E402
from bench_cli import OneLineParser  # noqa: E402

FEATURES = (1, 2, 2)
"""The stand-in for a 3x32x32 image: 4 features, so the MLP's arithmetic costs next to nothing."""


@contextlib.contextmanager
def accelerator_policy(recorder: Any) -> Iterator[None]:
    """The vectorised executor's resident chunks (the code a GPU runs), steps recorded by ``recorder`` if not None; undone after."""
    from chillfl.executors.vectorized import VectorizedExecutor

    resident, init = VectorizedExecutor.resident, VectorizedExecutor.__init__

    def with_tape(self: VectorizedExecutor, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.step_recorder = lambda _device: recorder

    VectorizedExecutor.resident = lambda self, device: True  # type: ignore[method-assign]
    if recorder is not None:
        VectorizedExecutor.__init__ = with_tape  # type: ignore[method-assign]
    try:
        yield
    finally:
        VectorizedExecutor.resident, VectorizedExecutor.__init__ = resident, init  # type: ignore[method-assign]


def experiment(key: str, rounds: int, graphs: bool, seed: int = 0) -> Any:
    """Workload ``key``'s experiment (4 features a sample), ``cuda_graphs`` on if ``graphs``, on the vectorised executor."""
    from chillfl.config import load_config
    from chillfl.experiment import build_experiment

    w = workload(key)
    if w.model != "mlp" or w.public_size:
        raise ValueError(f"workload {key} is not a plain MLP workload; choose 2 or 4")
    data = federated_data(w, make_arrays(w.num_samples, seed, FEATURES), seed)
    cfg = load_config(None, overrides(w, "vectorized" + ("+graphs" if graphs else ""), rounds, seed, "cpu"))
    return build_experiment(cfg, data=data)


def measure(key: str, rounds: int, graphs: bool, profile: int = 0) -> dict[str, Any]:
    """Seconds per round after 2 warm-up rounds; with ``profile`` a second pass under cProfile, its top chillfl functions."""
    from chillfl.executors.step_graphs import TapeRecorder
    from chillfl.runner import device_settings, intra_op_threads, rounds_for

    def timed(prof: cProfile.Profile | None) -> tuple[list[float], Any]:
        recorder = TapeRecorder() if graphs else None
        times = []
        with accelerator_policy(recorder):
            exp = experiment(key, rounds + 2, graphs)
            gen = iter(rounds_for(exp)(exp))
            with intra_op_threads(exp.config.threads), device_settings(exp.config, exp.device):
                next(gen), next(gen)
                for _ in range(rounds):
                    t = time.perf_counter()
                    if prof is not None:
                        prof.enable()
                    next(gen)
                    if prof is not None:
                        prof.disable()
                    times.append(time.perf_counter() - t)
                for _ in gen:  # the generator's last evaluation
                    pass
        return times, recorder

    times, recorder = timed(None)
    out: dict[str, Any] = {"workload": key, "graphs": graphs, "rounds": rounds, "features": int(np.prod(FEATURES)),
                           "median_s": statistics.median(times), "min_s": min(times), "per_round_s": times}
    if recorder is not None:
        out["captures"], out["replays"] = recorder.captures, recorder.replays
    if profile:
        prof = cProfile.Profile()
        timed(prof)
        stats = pstats.Stats(prof, stream=io.StringIO())
        own = [(fn, row[2]) for fn, row in stats.stats.items() if "chillfl" in fn[0]]  # type: ignore[attr-defined]
        own.sort(key=lambda p: -p[1])
        out["top_functions"] = [{"function": f"{Path(f[0]).name}:{f[1]}({f[2]})", "own_ms_per_round": 1e3 * s / rounds} for f, s in own[:profile]]
    return out


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="host_time.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="2", choices=["2", "4"])
    p.add_argument("--rounds", type=int, default=10, help="timed rounds (after 2 warm-up rounds)")
    p.add_argument("--graphs", action="store_true", help="steps recorded once and replayed (tape recorder), as cuda_graphs = true")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="also list the N chillfl functions with the most own time")
    p.add_argument("--json", type=Path, help="write the result here too")
    args = p.parse_args(argv)
    if args.rounds < 1:
        print("host_time.py: --rounds must be >= 1", file=sys.stderr)
        return 2
    out = measure(args.workload, args.rounds, args.graphs, args.profile)
    graphs = f", steps replayed ({out['captures']} captures, {out['replays']} replays)" if args.graphs else ", eager steps"
    print(f"workload {args.workload}, {out['features']} features{graphs}: {1e3 * out['median_s']:.1f} ms a round "
          f"(median of {args.rounds}; min {1e3 * out['min_s']:.1f} ms)")
    for row in out.get("top_functions", []):
        print(f"  {row['own_ms_per_round']:7.2f} ms  {row['function']}")
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
