"""Issue 26's GPU speed targets, met or missed, from ``benchmarks/run.py`` result files.

    python benchmarks/gpu_targets.py RESULT.json [RESULT.json ...]

Each file is one ``run.py`` report (``--out``); later files' workloads replace
earlier ones'. Targets (measured with ``--device cuda``, BlazeFL in the same run):

* workload 1: chillfl ``auto`` (fp32) and ``auto+tf32`` <= 0.30 s/round,
  ``auto+bf16`` <= 0.15 s/round, and >= 25x BlazeFL's best mode; the same
  for every other ``auto`` mode measured (``+gemm``: ``batched_conv = "gemm"``;
  ``+graphs``: ``cuda_graphs = true``; neither the default), each on a row of its own;
* workload 3: chillfl's best executor <= 0.5x the plain PyTorch loop;
* workloads 2 and 4: chillfl ``auto`` >= 10x BlazeFL's best mode;
* workload 2: launch -> end of round 1 (``run_experiment``, 1 round) <= 2.5 s.

s/round is the median over the measured rounds. A missing measurement is
"not measured", never met. Nothing here is imported by the package.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def s_per_round(modes: dict[str, Any], name: str) -> float | None:
    entry = modes.get(name, {})
    return entry.get("s_per_round_median") if entry.get("status") == "ok" else None


def best_of(modes: dict[str, Any], prefix: str) -> tuple[str, float] | None:
    found = [(name, t) for name in modes if name.startswith(prefix) and (t := s_per_round(modes, name)) is not None]
    return min(found, key=lambda pair: pair[1]) if found else None


def targets(workloads: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(target, measured, threshold, verdict) rows; verdict: met / MISSED / not measured."""
    rows: list[tuple[str, str, str, str]] = []

    def row(target: str, value: float | None, limit: float, at_most: bool, unit: str, detail: str = "") -> None:
        if value is None:
            rows.append((target, "-", f"{'<=' if at_most else '>='} {limit:g}{unit}", "not measured"))
            return
        ok = value <= limit if at_most else value >= limit
        rows.append((target, f"{value:.3f}{unit}{detail}", f"{'<=' if at_most else '>='} {limit:g}{unit}", "met" if ok else "MISSED"))

    w1 = workloads.get("1", {}).get("modes", {})
    blaze1 = best_of(w1, "blazefl[")
    headline = ["chillfl[auto]", "chillfl[auto+tf32]", "chillfl[auto+gemm]", "chillfl[auto+tf32+gemm]", "chillfl[auto+graphs]",
                "chillfl[auto+bf16]", "chillfl[auto+bf16+gemm]", "chillfl[auto+bf16+graphs]"]
    listed = headline + [m for m in w1 if m.startswith("chillfl[auto") and m not in headline]  # a headline mode not run: "not measured"
    for mode, limit in ((m, 0.15 if "bf16" in m else 0.30) for m in listed):
        t = s_per_round(w1, mode)
        row(f"W1 {mode} s/round", t, limit, True, " s")
        speedup = blaze1[1] / t if blaze1 and t else None
        row(f"W1 {mode} vs BlazeFL best", speedup, 25, False, "x", f" ({blaze1[0]})" if blaze1 else "")
    w3 = workloads.get("3", {}).get("modes", {})
    chill3, bound3 = best_of(w3, "chillfl["), s_per_round(w3, "compute_bound")
    row("W3 chillfl best / plain loop", chill3[1] / bound3 if chill3 and bound3 else None, 0.5, True, "x", f" ({chill3[0]})" if chill3 else "")
    for key in ("2", "4"):
        modes = workloads.get(key, {}).get("modes", {})
        blaze, t = best_of(modes, "blazefl["), s_per_round(modes, "chillfl[auto]")
        row(f"W{key} chillfl[auto] vs BlazeFL best", blaze[1] / t if blaze and t else None, 10, False, "x", f" ({blaze[0]})" if blaze else "")
    start = workloads.get("2", {}).get("chillfl_startup_run_experiment", {}).get("chillfl[auto]", {})
    row("W2 launch -> end of round 1", start.get("median_s") if start.get("status") == "ok" else None, 2.5, True, " s")
    return rows


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    workloads: dict[str, Any] = {}
    machine: dict[str, Any] = {}
    for path in argv:
        try:
            report = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            print(f"gpu_targets.py: {path}: {exc}", file=sys.stderr)
            continue
        workloads.update(report.get("workloads", {}))
        machine = report.get("machine", machine)
    print(f"issue 26 targets on {machine.get('gpu', 'no GPU named')} (torch {machine.get('torch', '?')})")
    print(f"{'target':<40}{'measured':>28}{'threshold':>14}  verdict")
    for target, measured, limit, verdict in targets(workloads):
        print(f"{target:<40}{measured:>28}{limit:>14}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
