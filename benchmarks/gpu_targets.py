"""Issue 39's GPU speed targets (after issue 26's), met or missed, from ``benchmarks/run.py`` result files.

    python benchmarks/gpu_targets.py [--any-device] RESULT.json [RESULT.json ...]

Each file is one ``run.py`` report (``--out``); later files' workloads replace
earlier ones'. Targets (measured with ``--device cuda``, BlazeFL in the same run):

* workload 1: every chillfl ``auto`` mode measured (fp32, ``+tf32``; ``+gemm``:
  ``batched_conv = "gemm"``; ``+graphs``: ``cuda_graphs = true``; neither the
  default) <= 0.30 s/round, its ``+bf16`` modes <= 0.15 s/round, each >= 25x
  BlazeFL's best mode, each on rows of its own; and, where ``run.py`` counted
  them (its ``ops`` entry on CUDA), <= 7,565 kernel launches a round (a tenth
  of the 75,647 measured before issue 39; a CUDA-graph replay counts as one).
  A ``+nondet`` mode (``deterministic = false``) is listed with its verdict
  marked "diagnostic": it is not the bitwise-reproducible default the targets
  are for, only what determinism costs;
* workload 3: chillfl's best executor <= 0.5x the plain PyTorch loop;
* workloads 2 and 4: every chillfl mode measured >= 10x BlazeFL's best mode;
* workload 2: launch -> end of round 1 (``run_experiment``, 1 round) minus the
  bare ``import torch`` of the same machine <= 1.0 s (the raw time is shown too;
  a negative difference is load, "unreliable (load)": not measured);
* workload 1's accuracy: each mode's test-accuracy curve equals fp32's within
  the tolerance of ``w1_curves.py`` (its ``curves-w1.json``, given among the
  files; without it, "not measured").

s/round is the median over the measured rounds. A missing measurement is
"not measured", never met. A ``--device cpu`` report is not judged (its
targets are a GPU's; ``--any-device`` judges it anyway, as gpu-check.sh's
``--smoke`` does to check the table); a file that cannot be read, or no GPU report at all,
makes the exit status 1 (the table still lists what was judged). Nothing here
is imported by the package.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench_cli import OneLineParser  # the script's folder is on sys.path: run as a script, or by the tests


def s_per_round(modes: dict[str, Any], name: str) -> float | None:
    entry = modes.get(name, {})
    return entry.get("s_per_round_median") if entry.get("status") == "ok" else None


def best_of(modes: dict[str, Any], prefix: str) -> tuple[str, float] | None:
    found = [(name, t) for name in modes if name.startswith(prefix) and (t := s_per_round(modes, name)) is not None]
    return min(found, key=lambda pair: pair[1]) if found else None


def targets(workloads: dict[str, Any], curves: dict[str, Any] | None = None) -> list[tuple[str, str, str, str]]:
    """(target, measured, threshold, verdict) rows; verdict: met / MISSED / not measured. ``curves``: ``w1_curves.py``'s report."""
    rows: list[tuple[str, str, str, str]] = []

    def row(target: str, value: float | None, limit: float, at_most: bool, unit: str, detail: str = "") -> None:
        if value is None:
            rows.append((target, "-", f"{'<=' if at_most else '>='} {limit:g}{unit}", "not measured"))
            return
        ok = value <= limit if at_most else value >= limit
        shown = f"{value:,}" if isinstance(value, int) else f"{value:.3f}"  # counts (launches) as counts
        verdict = "met" if ok else "MISSED"
        if "+nondet" in target:  # deterministic = false: what determinism costs, never the target itself
            verdict += " (diagnostic: not deterministic)"
        rows.append((target, f"{shown}{unit}{detail}", f"{'<=' if at_most else '>='} {limit:g}{unit}", verdict))

    w1 = workloads.get("1", {}).get("modes", {})
    blaze1 = best_of(w1, "blazefl[")
    headline = ["chillfl[auto]", "chillfl[auto+graphs]", "chillfl[auto+tf32+graphs]", "chillfl[auto+bf16]", "chillfl[auto+bf16+graphs]"]
    listed = headline + [m for m in w1 if m.startswith("chillfl[auto") and m not in headline]  # a headline mode not run: "not measured"
    for mode, limit in ((m, 0.15 if "bf16" in m else 0.30) for m in listed):
        t = s_per_round(w1, mode)
        row(f"W1 {mode} s/round", t, limit, True, " s")
        speedup = blaze1[1] / t if blaze1 and t else None
        row(f"W1 {mode} vs BlazeFL best", speedup, 25, False, "x", f" ({blaze1[0]})" if blaze1 else "")
        launches = w1.get(mode, {}).get("ops", {}).get("cuda_launches_per_round")
        if launches is not None:
            row(f"W1 {mode} launches/round", launches, LAUNCHES_W1, True, "")
    w3 = workloads.get("3", {}).get("modes", {})
    chill3, bound3 = best_of(w3, "chillfl["), s_per_round(w3, "compute_bound")
    row("W3 chillfl best / plain loop", chill3[1] / bound3 if chill3 and bound3 else None, 0.5, True, "x", f" ({chill3[0]})" if chill3 else "")
    for key in ("2", "4"):
        modes = workloads.get(key, {}).get("modes", {})
        blaze = best_of(modes, "blazefl[")
        for mode in ["chillfl[auto]"] + [m for m in modes if m.startswith("chillfl[auto+")]:
            t = s_per_round(modes, mode)
            row(f"W{key} {mode} vs BlazeFL best", blaze[1] / t if blaze and t else None, 10, False, "x", f" ({blaze[0]})" if blaze else "")
    start = workloads.get("2", {}).get("chillfl_startup_run_experiment", {}).get("chillfl[auto]", {})
    ok = start.get("status") == "ok"
    minus = start.get("median_minus_import_torch_s") if ok else None
    if minus is not None and (minus < 0 or start.get("minus_import_torch") == UNRELIABLE):  # load, not a start-up: never met
        rows.append(("W2 launch -> end of round 1 - import torch", f"{minus:.3f} s {UNRELIABLE} (raw {start['median_s']:.2f} s)", "<= 1 s",
                     "not measured"))
    else:
        row("W2 launch -> end of round 1 - import torch", minus, 1.0, True, " s", f" (raw {start['median_s']:.2f} s)" if ok else "")
    compared = {m: v for m, v in (curves or {}).get("modes", {}).items() if m != (curves or {}).get("reference")}
    if not compared:
        rows.append(("W1 accuracy curve vs fp32", "-", "w1_curves.py", "not measured"))
    for mode, entry in compared.items():
        c = entry.get("against_reference")
        target = f"W1 chillfl[{mode}] accuracy curve vs fp32"
        if c is None:
            rows.append((target, "-", "w1_curves.py", "not measured"))
        else:
            rows.append((target, f"gap {c['worst_gap']:.3f} (round {c['worst_round']})", f"<= {c['worst_tolerance']:.3f}",
                         "met" if c["met"] else "MISSED"))
    return rows


UNRELIABLE = "unreliable (load)"
"""run.py's mark on a start-up minus the bare ``import torch`` below zero (reports before the mark: any negative one)."""

LAUNCHES_W1 = 7565
"""Kernel launches a round of workload 1: a tenth of the 75,647 the H200 profile counted before issue 39."""


def report_device(report: dict[str, Any]) -> str:
    """The device a ``run.py`` report measured on (reports before ``--device`` existed: a GPU's if the machine named one)."""
    return str(report.get("device") or ("cuda" if "gpu" in report.get("machine", {}) else "cpu"))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """``--help`` and one-line errors (exit 2): the hand-rolled argv once read ``--help`` as a result file."""
    p = OneLineParser(prog="gpu_targets.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--any-device", action="store_true", help="judge --device cpu reports too (gpu-check.sh --smoke)")
    p.add_argument("files", nargs="+", metavar="RESULT.json", help="run.py reports (--out) and w1_curves.py's curves-w1.json")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    any_device = args.any_device
    workloads: dict[str, Any] = {}
    machine: dict[str, Any] = {}
    curves: dict[str, Any] | None = None
    unread = 0  # a file that could not be read was once skipped with exit 0: a check would read "all judged"
    for path in args.files:
        try:
            report = json.loads(Path(path).read_text())
            if not isinstance(report, dict):
                raise ValueError("not a run.py or w1_curves.py report (no JSON object)")
        except (OSError, ValueError) as exc:
            print(f"gpu_targets.py: {path}: {exc}", file=sys.stderr)
            unread += 1
            continue
        if "reference" in report and "seeds" in report:  # w1_curves.py's report
            curves = report
            continue
        if report_device(report) != "cuda" and not any_device:  # a CPU run's s/round against the GPU thresholds would read as MISSED
            print(f"gpu_targets.py: {path}: a --device {report_device(report)} run: not judged", file=sys.stderr)
            continue
        workloads.update(report.get("workloads", {}))
        machine = report.get("machine", machine)
    if not workloads:
        kind = "run.py report" if any_device else "run.py report made with --device cuda"
        print(f"gpu_targets.py: judged no GPU run: none of the files is a {kind}", file=sys.stderr)
    if not workloads:
        print("issue 39 targets: no GPU report given")
    else:
        torch = machine.get("torch", "?")
        print(f"issue 39 targets on {machine['gpu']} (torch {torch})" if "gpu" in machine else
              f"issue 39 targets on the CPU (torch {torch}; --any-device: not a GPU's timings)")  # was "on no GPU named"
    rows = targets(workloads, curves)
    width = max(len(r[0]) for r in rows) + 2
    print(f"{'target':<{width}}{'measured':>28}{'threshold':>14}  verdict")
    for target, measured, limit, verdict in rows:
        print(f"{target:<{width}}{measured:>28}{limit:>14}  {verdict}")
    return 1 if unread or not workloads else 0


if __name__ == "__main__":
    sys.exit(main())
