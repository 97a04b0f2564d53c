"""Speed and memory benchmark: chillfl's executors vs. a plain PyTorch loop, BlazeFL and Flower.

    python benchmarks/run.py [--workload 1|2|3|4|all] [--repeats 3] [--rounds 3] [--scale 1.0] [--quick]
                             [--device cpu|cuda] [--peak-gflops G]

Every mode of every workload runs ``--repeats`` times, each time in a fresh
subprocess started in its own session, on the same seeded synthetic data
(see ``workloads.py``). The repeats are interleaved (repeat 1 of every mode,
then repeat 2, ...) so that load from other users of the machine spreads over
all modes. Per process the runner records:

* seconds per round: the worker stamps the wall clock before round 1 and after
  each round; round 1 is a warm-up (lazy init, pool or actor start) and is
  left out when a run has more than one round; min and median are taken over
  the remaining rounds of all repeats;
* start-up: seconds from launching the process to the end of its first round;
* peak memory: the larger of (a) the highest sum of RSS over the process tree
  (every process in the worker's session or descended from it, polled every
  0.2 s) and (b) the kernel's max RSS of the worker (``os.wait4``);

and the ratios of both to the compute bound, and the FLOP rate: the round's
FLOPs (``workloads.round_flops``: ``torch.utils.flop_counter`` on one step of
the model, times the round's samples) over the median s/round, as a fraction
of ``--peak-gflops`` when given. Workloads 2 and 4 also time chillfl's
``run_experiment`` from process launch to the end of a 1-round run. Results go
to ``benchmarks/results/<timestamp>.json`` (``--out``), the table as Markdown next
to it (``<timestamp>.md``), and the table is printed.

``--device cuda`` runs every mode on the GPU (chillfl's ``device``, BlazeFL's
``device``, Flower's Ray actors with GPU fractions); without a GPU it exits 2.

Ratios, FLOP rates and start-up times are filled in after every measured
mode, so that a run stopped part-way (``timeout`` in gpu-check.sh) still
reports them for what it measured; ``--no-bound`` leaves the compute bound out (no ``x bound`` ratios).

Op counts (issue 39; ``--no-ops`` skips them, ``--ops-modes`` names the only
chillfl modes counted): every chillfl mode runs once
more in a process of its own (``mode_chillfl.py``'s ``api = "ops"``) that
counts the aten ops dispatched in its second round (``op_count.py``) over the
round's client SGD steps, and on CUDA the kernel launches of its third round.
Start-up (workloads 2 and 4): ``python -c "import torch"`` is timed from
launch to the import's end (stamped inside) right before each start-up run, and each chillfl mode's
start-up is also reported minus it: the median over the repeats of (run -
the bare import just before it), which cancels load that changes slowly; a
negative one is load that changed between the two, marked "unreliable (load)"
(JSON: ``minus_import_torch``), which ``gpu_targets.py`` reads as not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_cli import OneLineParser  # noqa: E402
from peers import ensure_peers  # noqa: E402
from workloads import WORKLOADS, Workload, data_dir, data_problem, default_data_dir, round_flops, unmakeable, workload, write_data  # noqa: E402

CHILLFL_EXECUTORS = (
    "auto", "sequential", "vectorized", "processes", "auto+tf32", "auto+bf16", "auto+bf16+channels_last", "auto+gemm", "auto+tf32+gemm", "auto+bf16+gemm",
    "auto+graphs", "auto+tf32+graphs", "auto+bf16+graphs", "auto+gemm+graphs", "auto+tf32+gemm+graphs", "auto+bf16+gemm+graphs",
    "auto+compile", "auto+graphs+compile", "auto+bf16+graphs+compile", "auto+graphs+nondet", "auto+bf16+graphs+nondet",
    "auto+nhwc+graphs", "auto+tf32+nhwc+graphs", "auto+bf16+nhwc+graphs", "auto+loop+graphs", "auto+tf32+loop+graphs", "auto+bf16+loop+graphs",
    "auto+tf32+grouped+graphs", "auto+bf16+grouped+graphs",
)
CUDA_ONLY = ("processes",)  # chillfl trains ``processes`` on the CPU: refused on a GPU
CPU_REFUSED = ("auto+tf32", "auto+bf16+channels_last", "auto+gemm", "auto+tf32+gemm", "auto+bf16+gemm",
               "auto+graphs", "auto+tf32+graphs", "auto+bf16+graphs", "auto+gemm+graphs", "auto+tf32+gemm+graphs", "auto+bf16+gemm+graphs",
               "auto+graphs+compile", "auto+bf16+graphs+compile", "auto+graphs+nondet", "auto+bf16+graphs+nondet",
               "auto+nhwc+graphs", "auto+tf32+nhwc+graphs", "auto+bf16+nhwc+graphs", "auto+loop+graphs", "auto+tf32+loop+graphs",
               "auto+bf16+loop+graphs", "auto+tf32+grouped+graphs", "auto+bf16+grouped+graphs")
"""TF32 is a GPU mode; the CPU's ``auto`` already picks channels-last, and trains large convolutions one client at a
time (``batched_conv`` changes only vmapped steps; it was slower on the CPU: chillfl.training.conv_gemm); ``cuda_graphs``
records steps on CUDA devices only (chillfl.executors.step_graphs); ``deterministic`` changes CUDA's algorithms only."""
BLAZEFL_TRAINERS = ("serial", "threads", "processes")
POLL_S = 0.2
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Mode:
    """One way of running a workload: a worker script, a variant and which python runs it."""

    name: str
    script: str
    variant: str = ""
    peer: str | None = None  # "blazefl" / "flwr": run with the peer venv's python
    api: str = "loop"


def all_modes(device: str = "cpu") -> list[Mode]:
    """Every mode; on a GPU without chillfl's ``processes`` executor (it trains on the CPU; chillfl refuses it there)."""
    modes = [Mode("compute_bound", "mode_compute.py")]
    modes += [Mode(f"chillfl[{e}]", "mode_chillfl.py", e) for e in CHILLFL_EXECUTORS if e not in (CUDA_ONLY if device != "cpu" else CPU_REFUSED)]
    modes += [Mode(f"blazefl[{t}]", "mode_blazefl.py", t, "blazefl") for t in BLAZEFL_TRAINERS]
    modes.append(Mode("flower[simulation]", "mode_flower.py", "ray", "flwr"))
    return modes


# ---------------------------------------------------------------- one measured process


def _proc_table() -> dict[int, tuple[int, int, int]]:
    """pid -> (ppid, session id, rss bytes) for every readable process."""
    out: dict[int, tuple[int, int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is the state; then ppid, pgrp, session, ... ; rss (pages) is field 24 of stat = index 21 here
        out[int(entry)] = (int(fields[1]), int(fields[3]), int(fields[21]) * PAGE)
    return out


def _tree(root: int, table: dict[int, tuple[int, int, int]]) -> list[int]:
    """Processes in ``root``'s session (it is a session leader) or descended from it."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found = {pid for pid, (_, sid, _) in table.items() if sid == root}
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid in table:
            found.add(pid)
        stack.extend(c for c in children.get(pid, []) if c not in found)
    return sorted(found)


@dataclass
class Measured:
    rc: int
    wall_s: float
    peak_tree_mb: float
    maxrss_mb: float
    clock: dict[str, Any] = field(default_factory=dict)
    t_launch: float = 0.0
    log: str = ""

    @property
    def peak_mb(self) -> float:
        return max(self.peak_tree_mb, self.maxrss_mb)


def measure(cmd: list[str], env: dict[str, str], clock_path: Path, log_path: Path, timeout: float) -> Measured:
    """Run ``cmd`` in a new session; poll its process tree's RSS; reap it with wait4 for its max RSS."""
    if STOP.is_set():
        raise Stopped
    clock_path.unlink(missing_ok=True)
    with log_path.open("w") as log:
        t_launch = time.time()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=HERE.parent)
    peak, status, usage = 0, None, None
    try:
        while True:
            if STOP.is_set():  # SIGTERM (even one that came while the process was starting): it goes, then we stop
                raise Stopped
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            table = _proc_table()
            peak = max(peak, sum(table[p][2] for p in _tree(proc.pid, table) if p in table))
            if time.time() - t_launch > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(POLL_S)
    except BaseException:  # run.py itself is stopped (Stopped, Ctrl-C): the measured process goes with it
        os.killpg(proc.pid, signal.SIGKILL)
        os.wait4(proc.pid, 0)
        _stop_leftovers(proc.pid)
        raise
    wall = time.time() - t_launch
    proc.returncode = os.waitstatus_to_exitcode(status)
    _stop_leftovers(proc.pid)
    clock = json.loads(clock_path.read_text()) if clock_path.exists() else {}
    if wall > timeout and "error" not in clock:
        clock["error"] = f"not available: timed out after {timeout:.0f} s"
    return Measured(proc.returncode, wall, peak / 2**20, usage.ru_maxrss / 1024, clock, t_launch, log_path.read_text(errors="replace")[-4000:])


def _stop_leftovers(session: int) -> None:
    """Terminate processes the worker left in its session (e.g. Ray daemons); they are ours."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        table = _proc_table()
        left = [p for p, (_, sid, _) in table.items() if sid == session]
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(1.0)


# ---------------------------------------------------------------- results


def round_times(clock: dict[str, Any]) -> list[float]:
    ends = clock.get("round_end", [])
    if not ends or "t_loop_start" not in clock:
        return []
    stamps = [clock["t_loop_start"], *ends]
    return [b - a for a, b in zip(stamps[:-1], stamps[1:])]


def steady_times(clock: dict[str, Any]) -> list[float]:
    """The rounds that count: all but the warm-up round 1 when a run has more than one (the table's, the JSON's and the
    progress line's s/round are all over these; the progress line once counted round 1 too)."""
    times = round_times(clock)
    return times[1:] if len(times) > 1 else times


def failure(m: Measured) -> str | None:
    """Why a run gives no timing, or None if it is usable."""
    if "error" in m.clock:
        return str(m.clock["error"])
    if m.rc != 0 or not m.clock.get("round_end"):
        lines = [ln for ln in m.log.splitlines() if ln.strip()]
        return f"not available: exit {m.rc}: {lines[-1][:300] if lines else 'no output'}"
    return None


def summarize(runs: list[Measured]) -> dict[str, Any]:
    steady: list[float] = []
    for m in runs:
        steady += steady_times(m.clock)
    first = [m.clock["round_end"][0] - m.t_launch for m in runs]
    return {
        "s_per_round_min": min(steady),
        "s_per_round_median": statistics.median(steady),
        "round_samples": len(steady),
        "first_round_end_s_min": min(first),
        "first_round_end_s_median": statistics.median(first),
        "peak_mb": max(m.peak_mb for m in runs),
        "peak_tree_mb": max(m.peak_tree_mb for m in runs),
        "maxrss_mb": max(m.maxrss_mb for m in runs),
        "num_parameters": runs[0].clock.get("num_parameters"),
        "runs": [{"rc": m.rc, "wall_s": round(m.wall_s, 3), "round_times": [round(t, 4) for t in round_times(m.clock)],
                  "first_round_end_s": round(m.clock["round_end"][0] - m.t_launch, 3), "peak_mb": round(m.peak_mb, 1)} for m in runs],
    }


def mode_precision(name: str) -> str:
    """The precision a mode computes in: ``+bf16`` / ``+tf32`` modes theirs, every other mode fp32."""
    return "bf16" if "+bf16" in name else "tf32" if "+tf32" in name else "fp32"


def add_flop_rates(results: dict[str, dict[str, Any]], flops: float, peak_gflops: float | None, peaks: dict[str, float] | None = None) -> None:
    """GFLOP/s of every measured mode at its median and best s/round, and the fraction of the peak of its precision.

    ``peaks``: precision -> peak GFLOP/s (``--peak-gflops-tf32`` / ``-bf16``); ``peak_gflops`` is the fp32 one and the
    fallback for a precision without its own.
    """
    for name, entry in results.items():
        if "s_per_round_median" in entry:
            entry["gflops_median"] = flops / entry["s_per_round_median"] / 1e9
            entry["gflops_best"] = flops / entry["s_per_round_min"] / 1e9
            precision = mode_precision(name)
            peak = (peaks or {}).get(precision) or peak_gflops
            if peak:
                entry["peak_fraction_median"] = entry["gflops_median"] / peak
                entry["peak_precision"] = precision if (peaks or {}).get(precision) else "fp32"


def add_ratios(results: dict[str, dict[str, Any]]) -> None:
    bound = results.get("compute_bound", {})
    if "s_per_round_median" not in bound:
        return
    for entry in results.values():
        if "s_per_round_median" in entry:
            entry["time_ratio_median"] = entry["s_per_round_median"] / bound["s_per_round_median"]
            entry["time_ratio_min"] = entry["s_per_round_min"] / bound["s_per_round_min"]
            entry["memory_ratio"] = entry["peak_mb"] / bound["peak_mb"]


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()}
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in lscpu.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "Flags"):
                value = value.strip()
                # the vector extensions torch's CPU kernels pick from (before: only whether avx2 was there, also on AVX-512 machines)
                vector = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in value.split()]
                info[key.strip()] = (" ".join(vector) or "no avx2") if key.strip() == "Flags" else value
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, cwd=HERE, timeout=10)
        # said only when a tracked file differs from the commit (before, every result said so, clean or not)
        info["chillfl_commit"] = rev.stdout.strip() + (" (+ uncommitted changes)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["gpu_memory_gb"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    except (ImportError, RuntimeError):
        pass
    info["memory_gb"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    return info


# ---------------------------------------------------------------- the benchmark


def run_workload(
    w: Workload, modes: list[Mode], peers: dict[str, dict[str, Any]], args: argparse.Namespace, work: Path, sink: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The workload's report entry, filled into ``sink`` as it goes (what a stopped run has measured stays there)."""
    modes = [m for m in modes if w.peers or not m.peer]  # the peers have no soft-label protocol (workload 3)
    folder = data_dir(args.data_dir, w.num_samples, args.seed)
    write_data(folder, w.num_samples, args.seed)
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]  # e.g. a checkout's src/ (gpu-check.sh --smoke)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *inherited]), "PYTHONUNBUFFERED": "1"}
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    results: dict[str, dict[str, Any]] = {}
    runs: dict[str, list[Measured]] = {m.name: [] for m in modes}
    dead: dict[str, str] = {}
    for mode in modes:
        if mode.peer and not peers.get(mode.peer, {}).get("ok"):
            dead[mode.name] = f"not available: {mode.peer} {peers.get(mode.peer, {}).get('detail', 'not installed')}"

    def launch(mode: Mode, rounds: int, rep: int) -> Measured:
        spec = {"workload": w.to_dict(), "data": str(folder), "rounds": rounds, "seed": args.seed, "variant": mode.variant,
                "api": mode.api, "device": args.device, "clock": str(work / f"clock-{w.key}-{mode.name}-{mode.api}-{rep}.json")}
        spec_path = work / f"spec-{w.key}-{mode.name}-{mode.api}-{rep}.json"
        spec_path.write_text(json.dumps(spec))
        python = peers[mode.peer]["python"] if mode.peer else sys.executable
        log = work / f"log-{w.key}-{mode.name}-{mode.api}-{rep}.txt"
        return measure([python, str(HERE / mode.script), str(spec_path)], env, Path(spec["clock"]), log, args.timeout)

    flops = round_flops(w)

    def rates() -> None:  # after every result, so that a run stopped part-way has its ratios and FLOP rates
        add_ratios(results)
        add_flop_rates(results, flops, args.peak_gflops, {"tf32": args.peak_gflops_tf32, "bf16": args.peak_gflops_bf16})

    entry = sink if sink is not None else {}
    # filled as modes finish (a stopped run keeps them)
    entry.update(workload=w.to_dict(), rounds_per_run=args.rounds_for[w.key], modes=results, flops_per_round=flops)
    for rep in range(args.repeats):
        for mode in modes:
            if mode.name in dead:
                continue
            print(f"  workload {w.key} repeat {rep + 1}/{args.repeats}: {mode.name} ...", end="", flush=True)
            m = launch(mode, args.rounds_for[w.key], rep)
            why = failure(m)
            if why:
                dead[mode.name] = why
                results[mode.name] = {"status": why}
                print(f" {why}")
                continue
            runs[mode.name].append(m)
            results[mode.name] = {"status": "ok", **summarize(runs[mode.name])}
            rates()
            print(f" {statistics.median(steady_times(m.clock)):.3f} s/round, {m.peak_mb:.0f} MB")
    for mode in modes:
        if mode.name not in results:  # never launched: its peer is missing (not setdefault: its default is evaluated for every mode)
            results[mode.name] = {"status": dead[mode.name]}
    if not args.no_ops:  # aten ops (and CUDA launches) per client step, once per chillfl mode, in its own process
        for mode in modes:
            if mode.script != "mode_chillfl.py" or mode.name in dead or not counted(mode.name, args.ops_modes):
                continue
            m = launch(Mode(mode.name, mode.script, mode.variant, None, "ops"), 3 if args.device == "cuda" else 2, 0)
            results[mode.name]["ops"] = op_counts(m)
            print(f"  ops per client step, {mode.name}: {_ops_text(results[mode.name]['ops'])}")
    startup: dict[str, Any] = {}
    bare: list[float] = []
    entry.update(chillfl_startup_run_experiment=startup, import_torch_s=None)  # filled as each mode's start-up is timed

    def bare_import() -> None:
        entry["import_torch_s"] = {"median_s": statistics.median(bare), "min_s": min(bare), "runs": bare} if bare else None

    if w.key in ("2", "4"):  # chillfl.run_experiment, 1 round, from process launch to its return
        for mode in modes:
            if not mode.script == "mode_chillfl.py" or mode.name in dead:
                continue
            cold = Mode(mode.name, mode.script, mode.variant, None, "run_experiment")
            times, pairs = [], []
            for rep in range(args.repeats):
                bare.append(time_import_torch(env, args.timeout))  # right before each run: the same load as the run
                m = launch(cold, 1, rep)
                why = failure(m)
                if why:
                    startup[mode.name] = {"status": why}
                    break
                times.append(m.clock["round_end"][0] - m.t_launch)
                pairs.append(times[-1] - bare[-1])
            else:
                startup[mode.name] = {"status": "ok", "min_s": min(times), "median_s": statistics.median(times), "runs": times,
                                      "median_minus_import_torch_s": statistics.median(pairs), "minus_import_torch_runs": pairs}
                if statistics.median(pairs) < 0:  # a run cannot start faster than its own torch import: the load changed
                    startup[mode.name]["minus_import_torch"] = UNRELIABLE
            bare_import()
            print(f"  {startup_line(mode.name, startup[mode.name], entry['import_torch_s'])}")
        if bare:
            print(f"  python -c 'import torch': median {statistics.median(bare):.2f} s over {len(bare)}")
    return entry


UNRELIABLE = "unreliable (load)"
"""A start-up's paired difference (run minus the bare ``import torch`` before it) below zero: load that changed between
the two, not a start-up faster than importing torch (-7.49 s was once printed unmarked, and read as a met target)."""


def startup_line(name: str, s: dict[str, Any], bare: dict[str, Any] | None) -> str:
    """One mode's start-up as the table and the progress line print it (the progress line once printed the dict)."""
    text = f"min {s['min_s']:.2f} s, median {s['median_s']:.2f} s" if s["status"] == "ok" else s["status"]
    if "median_minus_import_torch_s" in s and bare:
        text += f"; minus the bare import torch (median {bare['median_s']:.2f} s), paired median: {s['median_minus_import_torch_s']:.2f} s"
        if s.get("minus_import_torch") == UNRELIABLE or s["median_minus_import_torch_s"] < 0:
            text += f" {UNRELIABLE}"
    return f"{name}: launch -> run_experiment (1 round) returned: {text}"


def counted(name: str, ops_modes: str) -> bool:
    """Whether mode ``name`` gets its op count: ``--ops-modes`` empty (every chillfl mode) or ``name`` is one listed.

    Exact names, not substrings: ``chillfl[auto]`` must not also count ``chillfl[auto+bf16]`` (each count is a process
    of 10-25 s on an H200, which a GPU check's budget cannot spend on every mode)."""
    wanted = {s.strip() for s in ops_modes.split(",") if s.strip()}
    return not wanted or name in wanted


def time_import_torch(env: dict[str, str], timeout: float) -> float:
    """Seconds from launching ``python -c "import torch"`` to the import's end, stamped inside the process as chillfl's
    round end is (the interpreter's exit, which tears torch down, is not counted on either side)."""
    t = time.time()
    out = subprocess.run([sys.executable, "-c", "import torch, time; print(time.time())"], env=env, cwd=HERE.parent, timeout=timeout,
                         check=True, capture_output=True, text=True)
    return float(out.stdout.split()[-1]) - t


def op_counts(m: Measured) -> dict[str, Any]:
    """The ops entry of a mode (``mode_chillfl.py``'s ``api = "ops"``), or why it has none."""
    why = failure(m)
    if why:
        return {"status": why.replace("not available", "not counted", 1)}
    keys = ("ops_per_round", "compute_ops_per_round", "host_reads_per_round", "client_steps_per_round", "ops_per_client_step", "top_ops",
            "cuda_launches_per_round", "cuda_launches_per_client_step", "cuda_launch_calls")
    out = {"status": "ok", **{k: m.clock[k] for k in keys if k in m.clock}}
    if "cuda_launches_per_round" not in out:
        out["cuda_launches"] = "not run (CPU)"
    return out


def _ops_text(ops: dict[str, Any] | None) -> str:
    """'94.0 (+12 launches)' or the reason there is none."""
    if not ops:
        return ""
    if ops["status"] != "ok":
        return ops["status"]
    text = f"{ops['ops_per_client_step']:.1f}"
    return text + (f" ({ops['cuda_launches_per_client_step']:.1f} launches)" if "cuda_launches_per_client_step" in ops else "")


def fmt_table(report: dict[str, Any]) -> str:
    lines = []
    for entry in report["workloads"].values():
        if "workload" not in entry:  # stopped before its first mode
            continue
        w = entry["workload"]
        lines.append(f"\nworkload {w['key']}: {w['title']}: {w['num_clients']} clients x {w['samples_per_client']} samples, "
                     f"{w['clients_per_round']} per round, {w['epochs']} epoch(s), batch {w['batch_size']} "
                     f"({w['steps_per_round']} SGD steps/round), {entry['rounds_per_run']} rounds per run")
        lines.append(f"{entry.get('flops_per_round', 0) / 1e9:.2f} GFLOP per round (torch.utils.flop_counter)")
        lines.append(f"{'mode':<24}{'s/round min':>12}{'median':>9}{'x bound':>9}{'peak MB':>9}{'x bound':>9}{START_COLUMN:>30}{'GFLOP/s':>9}"
                     f"{'% peak':>8}  {PEAK_COLUMN:<5} {OPS_COLUMN}")
        for name, r in entry["modes"].items():
            if r["status"] != "ok":
                lines.append(f"{name:<24}{r['status']}")
                continue
            lines.append(f"{name:<24}{r['s_per_round_min']:>12.3f}{r['s_per_round_median']:>9.3f}{_number(r.get('time_ratio_median')):>9}"
                         f"{r['peak_mb']:>9.0f}{_number(r.get('memory_ratio')):>9}{r['first_round_end_s_median']:>30.2f}"
                         f"{_number(r.get('gflops_median')):>9}{_percent(r.get('peak_fraction_median')):>8}  {r.get('peak_precision', ''):<5} {_ops_text(r.get('ops'))}")
        for name, s in entry.get("chillfl_startup_run_experiment", {}).items():
            lines.append(f"  {startup_line(name, s, entry.get('import_torch_s'))}")
    return "\n".join(lines)


def _percent(fraction: float | None) -> str:
    return "" if fraction is None else f"{100 * fraction:.1f}"


def _number(value: float | None) -> str:
    """A ratio or rate to 2 decimals, or ``-`` where there is none (``--no-bound``: no "x bound"; it printed ``nan``)."""
    return "-" if value is None else f"{value:.2f}"


START_COLUMN = "launch -> end of round 1 (s)"
OPS_COLUMN = "aten ops / client step"
"""The start-up and op-count columns' one name, in the printed table and the .md (they once had two each)."""
PEAK_COLUMN = "peak"
"""The column after "% of peak": the precision whose peak (``--peak-gflops``, ``-tf32``, ``-bf16``) the percentage is of;
the .md table once had none, so an ``auto+bf16`` row's percentage was of an unnamed peak."""


def markdown_table(report: dict[str, Any]) -> str:
    """The README's results table for one report."""
    rows = [f"| workload | mode | s/round min | s/round median | x bound | peak MB | x bound | {START_COLUMN} | GFLOP/s | % of peak | {PEAK_COLUMN} "
            f"| {OPS_COLUMN} |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, entry in report["workloads"].items():
        for name, r in entry.get("modes", {}).items():
            if r["status"] != "ok":
                rows.append(f"| {key} | {name} | {r['status']} | | | | | | | | | |")
                continue
            rows.append(f"| {key} | {name} | {r['s_per_round_min']:.3f} | {r['s_per_round_median']:.3f} | {_number(r.get('time_ratio_median'))} "
                        f"| {r['peak_mb']:.0f} | {_number(r.get('memory_ratio'))} | {r['first_round_end_s_median']:.1f} "
                        f"| {_number(r.get('gflops_median'))} | {_percent(r.get('peak_fraction_median'))} | {r.get('peak_precision', '')} "
                        f"| {_ops_text(r.get('ops'))} |")
    starts = [(key, name, s, entry.get("import_torch_s")) for key, entry in report["workloads"].items()
              for name, s in entry.get("chillfl_startup_run_experiment", {}).items() if s.get("status") == "ok"]
    if starts:
        rows += ["", "| workload | mode | launch -> end of round 1, median (s) | bare `import torch`, median (s) | difference, paired median (s) |",
                 "|---|---|---|---|---|"]
        for key, name, s, bare in starts:
            unreliable = f" {UNRELIABLE}" if s.get("minus_import_torch") == UNRELIABLE or s.get("median_minus_import_torch_s", 0) < 0 else ""
            rows.append(f"| {key} | {name} | {s['median_s']:.2f} | {bare['median_s']:.2f} | {s['median_minus_import_torch_s']:.2f}{unreliable} |" if bare else
                        f"| {key} | {name} | {s['median_s']:.2f} | | |")
    return "\n".join(rows)


def modes_help() -> str:
    """``--help``'s list of the modes each device runs (README: "``--help`` lists the modes each device runs")."""
    return "\n\n".join(f"modes with --device {device}:\n  " + ", ".join(m.name for m in all_modes(device)) for device in ("cpu", "cuda"))


THREADS_REACH = ("OMP_NUM_THREADS / MKL_NUM_THREADS reach the compute bound, BlazeFL and Flower (torch's intra-op threads there); "
                 "chillfl's modes set their own (config threads = 1 on each of auto's worker threads)")
"""What ``--threads`` (or an inherited ``OMP_NUM_THREADS``) changes: chillfl calls ``torch.set_num_threads(cfg.threads)``,
which overrides the variable; the peers and the plain loop leave torch at the variable's value."""


def threads_setting(threads: int | None, environ: Mapping[str, str]) -> str:
    """The workers' OMP_NUM_THREADS as the JSON and the header record it: ``--threads``, else what this process inherited
    (the workers inherit it too; it was once recorded as "default" even when set)."""
    if threads:
        return f"OMP_NUM_THREADS={threads} (--threads)"
    inherited = environ.get("OMP_NUM_THREADS")
    return f"OMP_NUM_THREADS={inherited} (inherited)" if inherited else "default (OMP_NUM_THREADS unset: torch's own)"


def load_warning(loads: list[float], cpus: int | None, threads: int | None) -> str | None:
    """The one-line warning when the 1-minute load average exceeded the CPUs at the start or end of the run, else None.

    On a busy machine torch's intra-op threads (the compute bound's and the peers', 2 on 2 cores unless ``--threads``)
    wait for each other while chillfl's modes run 1 thread each: the plain loop once took 24x longer with 2 threads than
    with 1 at load ~7, so every "x bound" and "chillfl / peer" ratio of such a run is unreliable."""
    if not cpus or max(loads) <= cpus:
        return None
    advice = "rerun on an idle machine" + ("" if threads else ", or with --threads 1")
    return (f"load average {max(loads):.1f} above the {cpus} CPUs: the 'x bound' and peer ratios are unreliable "
            f"(the bound and the peers use torch's intra-op threads, chillfl 1 a worker); {advice}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="run.py", description=__doc__.split("\n\n")[0], epilog=modes_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", choices=[*WORKLOADS, "all"], default="all")
    p.add_argument("--repeats", type=int, default=3, help="fresh processes per mode (>= 3 for min/median)")
    p.add_argument("--rounds", type=int, default=3, help="rounds per process; round 1 is a warm-up and not counted when > 1")
    p.add_argument("--scale", type=float, default=None, help="workload 1 only: fraction of its 100 clients (each keeps 500 samples; default 1)")
    p.add_argument("--quick", action="store_true", help="--scale 0.02 and 2 rounds on workload 1; workloads 2-4 at full size, with every peer "
                   "(not re-timed since workloads 3 and 4 were added); not with --scale")
    p.add_argument("--modes", default="", help="comma-separated substrings of mode names to run, in that order (default: all; "
                   "each must match a mode, listed below)")
    p.add_argument("--no-peers", action="store_true", help="skip BlazeFL and Flower")
    p.add_argument("--no-install", action="store_true", help="use the peer venv as it is, install nothing")
    p.add_argument("--no-ops", action="store_true", help="skip counting each chillfl mode's aten ops per client step (one more process per mode)")
    p.add_argument("--ops-modes", default="", help="comma-separated chillfl mode names (exact) whose ops are counted (default: every chillfl mode)")
    p.add_argument("--no-bound", action="store_true", help="skip the compute bound (the plain loop): no 'x bound' ratios, one process less a repeat")
    p.add_argument("--timeout", type=float, default=900, help="seconds before a single run is killed")
    p.add_argument("--threads", type=int, default=None,
                   help="N >= 1: OMP_NUM_THREADS and MKL_NUM_THREADS for every worker, which sets the intra-op threads of the compute "
                   "bound, BlazeFL and Flower only: chillfl's modes set their own (config threads = 1). Default: the variables "
                   "this shell passes on (the JSON's \"threads\" records them)")
    p.add_argument("--seed", type=int, default=0, help=">= 0")
    p.add_argument("--data-dir", type=Path, default=default_data_dir(),
                   help="where the synthetic data are written once and kept (default $TMPDIR/chillfl-bench-data; about 600 MB)")
    p.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/<timestamp>.json)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where every mode trains (cuda: chillfl, BlazeFL and Flower on the GPU)")
    p.add_argument("--peak-gflops", type=float, default=None, help="the machine's peak GFLOP/s, for the fraction of peak (see README)")
    p.add_argument("--peak-gflops-tf32", type=float, default=None, help="peak GFLOP/s of TF32 (tensor cores, dense), for +tf32 modes")
    p.add_argument("--peak-gflops-bf16", type=float, default=None, help="peak GFLOP/s of bf16 (tensor cores, dense), for +bf16 modes")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.rounds < 1 or (args.scale is not None and not 0 < args.scale <= 1):
        p.error("--repeats and --rounds must be >= 1, --scale in (0, 1]")
    if args.timeout <= 0:
        p.error(f"--timeout must be > 0 seconds (got {args.timeout:g})")
    if args.threads is not None and args.threads < 1:
        p.error(f"--threads must be >= 1 (got {args.threads}); leave it out for the inherited OMP_NUM_THREADS")
    if args.quick and args.scale is not None:
        p.error("--quick sets --scale 0.02: give one of them, not both")
    if args.scale is not None and args.workload not in ("1", "all"):  # it was ignored without a word
        p.error(f"--scale: workload 1 only (its number of clients); --workload {args.workload} has a fixed size")
    if missing := unmatched(all_modes(args.device), args.modes):
        p.error(f"--modes: {missing[0]!r} matches no mode with --device {args.device}; its modes: {', '.join(m.name for m in all_modes(args.device))}")
    if any(v is not None and v <= 0 for v in (args.peak_gflops, args.peak_gflops_tf32, args.peak_gflops_bf16)):
        p.error("--peak-gflops(-tf32, -bf16) must be > 0")
    args.scale = 0.02 if args.quick else 1.0 if args.scale is None else args.scale
    keys = list(WORKLOADS) if args.workload == "all" else [args.workload]
    if why := data_problem(args.data_dir, args.seed, [workload(key, args.scale).num_samples for key in keys]):
        p.error(why)
    args.rounds_for = {key: args.rounds for key in WORKLOADS}
    args.rounds_for["1"] = 2 if args.quick else args.rounds
    return args


def peers_without_cuda(peers: dict[str, dict[str, Any]]) -> None:
    """Mark peers whose venv's torch cannot see the GPU as not available (their CPU wheel would run on the CPU)."""
    for entry in peers.values():
        if entry.get("ok"):
            probe = subprocess.run([entry["python"], "-c", "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"],
                                   capture_output=True, timeout=300)
            if probe.returncode != 0:
                entry.update(ok=False, detail="its venv's torch sees no CUDA GPU (install a CUDA build of torch into benchmarks/.venv-peers)")


def select_modes(modes: list[Mode], names: str) -> list[Mode]:
    """The modes whose names contain one of the comma-separated ``names``, in the order named (the compute bound always,
    first): what matters most is measured before a timeout (gpu-check.sh)."""
    wanted = [s.strip() for s in names.split(",") if s.strip()]
    chosen = [m for m in modes if m.name == "compute_bound" or any(s in m.name for s in wanted)]
    return sorted(chosen, key=lambda m: -1 if m.name == "compute_bound" else next(i for i, s in enumerate(wanted) if s in m.name))


def unmatched(modes: list[Mode], names: str) -> list[str]:
    """The comma-separated ``names`` that are a substring of no mode's name (a typo once ran the bound alone and exited 0)."""
    return [s for s in (s.strip() for s in names.split(",")) if s and not any(s in m.name for m in modes)]


def out_problem(out: Path) -> str | None:
    """Why the report cannot be written to ``out`` (and its table to ``out.md``), or None: checked before anything is
    measured, since a bad ``--out`` was found only after the whole benchmark had run, and it was lost."""
    if out.suffix == ".md":
        return f"{out} ends in .md: the table is written next to the JSON as <out>.md"
    for path in (out, out.with_suffix(".md")):
        if path.is_dir():
            return f"{path} is a folder"
        if path.exists() and not os.access(path, os.W_OK):
            return f"{path} is not writable"
    return unmakeable(out.parent)  # the folders that do not exist yet are made; the first one that does must take them


def modes_for(args: argparse.Namespace) -> list[Mode]:
    """The modes the command line asks for, in the order they run (``--no-peers``, ``--modes``, ``--no-bound``)."""
    modes = [m for m in all_modes(args.device) if not (args.no_peers and m.peer)]
    if args.modes:
        modes = select_modes(modes, args.modes)
    return [m for m in modes if not (args.no_bound and m.name == "compute_bound")]


class Stopped(Exception):
    """SIGTERM arrived: stop measuring, write what was measured."""


INTERRUPTED = 130
"""run.py's exit status after Ctrl-C, once what was measured is written (the shell's 128 + SIGINT)."""


STOP = threading.Event()
"""Set by SIGTERM. The handler only sets it: :func:`measure` checks it before starting a process and while polling
one, so that no measured process is ever left running (an exception raised by the handler itself could land between
``Popen`` returning and the code that kills it on the way out)."""


def _stopped(signum: int, frame: Any) -> None:
    STOP.set()


def measured_note(report: dict[str, Any]) -> str:
    """What a stopped run measured, for its ``stopped`` line. The repeats go round the modes (repeat 1 of every mode,
    then repeat 2), so a run stopped after its first repeat lists every mode, each over fewer repeats than
    ``--repeats``: "the modes not listed were not measured" alone read as every listed mode measured in full."""
    asked = report["repeats"]
    short = []
    for key, entry in report["workloads"].items():
        for name, r in entry.get("modes", {}).items():
            done = len(r["runs"]) if r["status"] == "ok" and "runs" in r else asked  # no "runs": nothing to say of its repeats
            if done < asked:
                short.append(f"workload {key} {name} ({done} of {asked})")
    if not short:
        return "the modes not listed were not measured"
    return (f"the modes not listed were not measured, and these finished fewer repeats than --repeats {asked} (their numbers are "
            f"over those): {', '.join(short)}")


def cuda_missing() -> str | None:
    """Why ``--device cuda`` cannot run here (None: torch sees a GPU)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    return None if torch.cuda.is_available() else f"torch {torch.__version__} sees no CUDA GPU on this machine"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and (why := cuda_missing()):
        print(f"run.py: --device cuda: {why}", file=sys.stderr)
        return 2
    started = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or HERE / "results" / f"{stamp}.json"
    if why := out_problem(out):
        print(f"run.py: --out: {why}", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    threads = threads_setting(args.threads, os.environ)
    print(f"workers' threads: {threads}; {THREADS_REACH}", flush=True)
    modes = modes_for(args)
    peers: dict[str, dict[str, Any]] = {}
    if any(m.peer for m in modes):
        print("peer environment (benchmarks/.venv-peers) ...", flush=True)
        t0 = time.time()
        try:
            peers = ensure_peers(HERE / ".venv-peers", install=not args.no_install)
        except KeyboardInterrupt:  # before the try below: a traceback, where Ctrl-C later is one line and 130
            print("\nrun.py: stopped by Ctrl-C while setting up the peers (benchmarks/.venv-peers may be half-made: the next run "
                  "goes on with it, and if it then reports a missing module or pip, remove the folder): nothing was measured or written",
                  file=sys.stderr)
            return INTERRUPTED
        if args.device == "cuda":
            peers_without_cuda(peers)
        for name, entry in peers.items():
            print(f"  {name}: {'ok ' if entry['ok'] else ''}{entry['detail']}")
        print(f"  ({time.time() - t0:.0f} s)")
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        "load_average_start": os.getloadavg(),
        "scale_workload_1": args.scale,
        "threads": threads,
        "threads_reach": THREADS_REACH,
        "device": args.device,
        "peak_gflops": args.peak_gflops,
        "repeats": args.repeats,
        "peers": peers,
        "workloads": {},
    }
    if warning := load_warning([report["load_average_start"][0]], report["machine"].get("cpus"), args.threads):
        print(f"warning: {warning}", flush=True)
    keys = list(WORKLOADS) if args.workload == "all" else [args.workload]
    status = 0
    previous = signal.signal(signal.SIGTERM, _stopped)  # `timeout` (gpu-check.sh) ends us with SIGTERM: keep what was measured
    try:
        with tempfile.TemporaryDirectory(prefix="chillfl-bench-") as tmp:
            for key in keys:
                if STOP.is_set():
                    raise Stopped
                w = workload(key, args.scale)
                print(f"workload {key}: {w.title}", flush=True)
                report["workloads"][key] = {}
                run_workload(w, modes, peers, args, Path(tmp), sink=report["workloads"][key])
    except (Stopped, KeyboardInterrupt) as exc:  # Ctrl-C as SIGTERM: a full workload 1 takes hours, and Ctrl-C once lost them all
        status = INTERRUPTED if isinstance(exc, KeyboardInterrupt) else 0
        by = "Ctrl-C" if status else "SIGTERM"
        report["stopped"] = f"stopped by {by} after {time.time() - started:.0f} s: {measured_note(report)}"
        print(f"\nrun.py: {report['stopped']}", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)
    report["load_average_end"] = os.getloadavg()
    report["load_warning"] = load_warning([report["load_average_start"][0], report["load_average_end"][0]], report["machine"].get("cpus"),
                                          args.threads)
    report["total_s"] = round(time.time() - started, 1)
    print(fmt_table(report))  # before the files: what was measured is on the screen even if writing them fails
    print(f"\n{report['machine'].get('Model name', '?')}, {report['machine'].get('CPU(s)', '?')} CPUs; "
          f"load average {report['load_average_start'][0]:.2f} -> {report['load_average_end'][0]:.2f}; total {report['total_s']:.0f} s; "
          f"workers' threads: {threads}")
    if report["load_warning"]:
        print(f"warning: {report['load_warning']}")
    try:
        out.write_text(json.dumps(report, indent=2))
        out.with_suffix(".md").write_text(markdown_table(report) + "\n")
    except OSError as exc:  # e.g. the folder went away during the run: the table above is what is left
        print(f"run.py: --out: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    print(f"results: {out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
