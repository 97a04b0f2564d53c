"""``chillfl analyze calibration``: reliability diagram, ECE, NLL and Brier of saved global models.

Reads each run's ``model.safetensors`` and evaluates it on the global test
set (definitions in :mod:`chillfl.metrics.calibration`). ``--temperature``
reads the logits at T (probabilities softmax(z / T)); the default T = 1 is
how the model is used and how the per-round ``global_ece`` is measured.
FLex&Chill App. (Figs. 22-24) instead tests at the training temperature:
pass ``--temperature`` equal to it to reproduce that choice.

Checked (2026-12) against: FLex&Chill App. Figs. 22-24 (reliability
diagrams, confidence histograms, ECE per training temperature; the paper
tests at the training T, our default is T = 1, documented in
docs/analysis.md) and Guo et al. (2017) for ECE's equal-width bins.
``--bins`` above a run's number of test samples is refused
(:func:`check_bins`); ``chillfl report`` reads the run's own bins and is
not checked here.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from chillfl.analysis.replay import (build_evaluation, check_out, check_runs, load_model_state, out_folder, predict, read_summary, refuse_personal_runs, run_label,
                                    write_json)
from chillfl.analysis.counting import Counted
from chillfl.analysis.output import add_out
from chillfl.analysis.layout import grid_shape
from chillfl.extras import need
from chillfl.errors import ConfigError
from chillfl.metrics.calibration import BINNINGS, DEFAULT_BINS, brier_score, negative_log_likelihood, reliability
from chillfl.numeric import is_whole


def calibration_of(logits: torch.Tensor, y: torch.Tensor, *, temperature: float = 1.0, bins: int = DEFAULT_BINS, binning: str = "width") -> dict[str, Any]:
    """Every calibration number and the reliability-diagram bins of ``logits`` against ``y``."""
    probs = torch.softmax(logits.double() / temperature, dim=1)
    rel = reliability(probs, y, bins, binning)
    return {
        "n": int(len(y)),
        "temperature": temperature,
        "bins": bins,
        "binning": binning,
        "accuracy": float((probs.argmax(1) == y).double().mean()),
        "mean_confidence": float(probs.max(1).values.mean()),
        "ece": rel.ece(),
        "mce": rel.mce(),
        "nll": negative_log_likelihood(logits, y, temperature),
        "brier": brier_score(probs, y),
        "reliability": {"edges": rel.edges, "count": rel.count, "confidence": rel.confidence, "accuracy": rel.accuracy},
    }


def analyze(run_dirs: Sequence[str], *, temperature: float = 1.0, bins: int = DEFAULT_BINS, binning: str = "width", progress: bool = False) -> dict[str, Any]:
    """Every run's calibration numbers; ``progress``: a ``[k/N] RUN`` line on stderr as each is done."""
    out: dict[str, Any] = {"analysis": "calibration", "runs": {}}
    counted = Counted(len(run_dirs), "calibration", on=progress)
    for run_dir in run_dirs:
        exp = build_evaluation(run_dir)  # the model and data: the method (maybe a plugin's) plays no part
        x, y = exp.data.test()
        logits = predict(exp.model, load_model_state(run_dir, exp.device), x.to(exp.device), exp.config.eval.batch_size)
        label = run_label(run_dir, run_dirs)
        out["runs"][label] = {"run_dir": str(run_dir), **calibration_of(logits.cpu(), y.cpu(), temperature=temperature, bins=bins, binning=binning)}
        counted.finished(label)
    return out


def check_bins(result: dict[str, Any], bins: int) -> None:
    """Refuse more bins than a run's test samples (ConfigError on ``--bins``). Why: with at most one sample a bin, ECE
    becomes the mean |correct - confidence| and grows with the bin count (0.47 at 1000 equal-mass bins against 0.28 at
    15, on 359 samples), and it was reported without a word."""
    for label, run in result["runs"].items():
        _check_bins_of(label, run["n"], bins)


def check_saved_bins(run_dirs: Sequence[str], bins: int) -> None:
    """:func:`check_bins` before any run is computed, on each run's test-set size as its ``summary.json`` saved it (the
    final calibration's ``n``: the same test set). Why: the refusal came after every run had been computed (minutes over
    many runs). A run without it (no test set, an older folder) is checked once computed, by :func:`check_bins`."""
    for run_dir in run_dirs:
        n = _saved_test_size(run_dir)
        if n is not None:
            _check_bins_of(run_label(run_dir, run_dirs), n, bins)


def _saved_test_size(run_dir: str) -> int | None:
    """The ``n`` of the final calibration in the run's ``summary.json``; None where it has none or cannot be read
    (calibration itself does not need the file)."""
    try:
        saved = read_summary(run_dir)
    except (OSError, ValueError):  # unreadable or not JSON
        return None
    calibration = saved.get("calibration") if isinstance(saved, dict) else None
    n = calibration.get("n") if isinstance(calibration, dict) else None
    return n if is_whole(n) else None


def _check_bins_of(label: str, n: int, bins: int) -> None:
    """Refuse ``bins`` above the ``n`` test samples of the run ``label`` (see :func:`check_bins`)."""
    if bins > n:
        raise ConfigError("--bins", f"{bins} bins for {label}'s {n} test samples: with more bins than samples ECE "
                                    f"grows with the bin count, not with miscalibration; use at most {n}")


def _num(value: float | None) -> float:
    """A saved number, with JSON's null (a non-finite value) read back as NaN."""
    return math.nan if value is None else float(value)


SHARE_LABEL = "share of samples per bin (%, same axis)"
"""The key's entry of the green line: the share of the run's test samples in each bin."""

LEGEND_INCHES = 0.5
"""Figure height added for the key under the panels (two rows of 7 pt entries in a one-panel figure)."""


def plot_reliability(result: dict[str, Any], path: Path) -> None:
    """Reliability diagram (:func:`reliability_figure`) written to ``path``."""
    from chillfl.plots.figure import save_figure

    save_figure(reliability_figure(result), path, dpi=110)  # atomic, never through a link planted at path


def reliability_figure(result: dict[str, Any]) -> Any:
    """Reliability diagram: accuracy per confidence bin against the diagonal, one panel per run, with each bin's share of
    the samples drawn over that bin (a matplotlib Figure)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from chillfl.plots.figure import literal, percent_axis

    runs = result["runs"]
    rows, cols = grid_shape(len(runs))  # at most MAX_COLUMNS panels a row: 27 runs in one row were ~10,700 px wide
    fig = Figure(figsize=(3.6 * cols + 0.4, 4.0 * rows + 0.4 + LEGEND_INCHES), layout="constrained")
    FigureCanvasAgg(fig)
    key: tuple[list[Any], list[str]] = ([], [])  # the first panel's entries, the key to every panel
    for i, (label, run) in enumerate(runs.items()):
        ax = fig.add_subplot(rows, cols, i + 1)
        rel = run["reliability"]
        count = np.array(rel["count"])
        # a saved summary.json writes a non-finite number as null (a model whose logits overflow): NaN here, its bin left out
        confidence, accuracy = np.array(rel["confidence"], dtype=float), np.array(rel["accuracy"], dtype=float)
        filled = (count > 0) & np.isfinite(confidence) & np.isfinite(accuracy)
        if run["binning"] == "width":
            edges = np.array(rel["edges"], dtype=float)
            left, width = edges[:-1], np.diff(edges)
        else:  # equal-mass bins: draw at the mean confidence
            left, width = confidence - 0.02, np.full(len(count), 0.04)
        ax.bar(left[filled], accuracy[filled], width=width[filled], align="edge", edgecolor="black", lw=0.5, label="accuracy")
        ax.bar(left[filled], (confidence - accuracy)[filled], bottom=accuracy[filled],
               width=width[filled], align="edge", fill=False, hatch="//", edgecolor="tab:red", lw=0.5, label="gap to confidence")
        ax.plot([0, 1], [0, 1], color="grey", ls="--", lw=1, label="perfect calibration")
        share = ax.twinx()
        # each bin's share over that bin, as its bar: a step between the bins' mean confidences (where="mid") was a vertical
        # bracket at 15 bins, nothing at all with every sample in one bin, and a share drawn across empty bins
        fraction = count / max(count.sum(), 1)
        shares: Any
        if run["binning"] == "width":  # over the bins' edges, an empty bin at 0
            shares = share.stairs(fraction, np.array(rel["edges"], dtype=float), color="tab:green", lw=1, alpha=0.7, label=SHARE_LABEL)
        else:  # over each bin's bar
            shares = share.hlines(fraction[filled], left[filled], (left + width)[filled], color="tab:green", lw=1, alpha=0.7, label=SHARE_LABEL)
        share.set_ylim(0, 1)
        share.set_yticks([])
        ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence", ylabel="accuracy" if i % cols == 0 else None)
        percent_axis(ax, "x")  # in percent, as the run and comparison figures give accuracy
        percent_axis(ax, "y")
        ax.set_title(f"{literal(label)}\nECE {_num(run['ece']):.3f}  NLL {_num(run['nll']):.3f}  Brier {_num(run['brier']):.3f}", fontsize=8)
        if i == 0:  # one key for every panel, under them: in the first panel's corner it covered its bars
            handles, labels = ax.get_legend_handles_labels()
            key = (list(handles) + [shares], list(labels) + [str(shares.get_label())])
    fig.legend(*key, fontsize=7, loc="outside lower center", ncols=min(4, max(1, cols * 2)))
    fig.suptitle(f"reliability ({result['runs'][next(iter(runs))]['bins']} {run['binning']} bins, T = {run['temperature']:g})", fontsize=9)
    return fig


def cmd_calibration(args: argparse.Namespace) -> int:
    need("matplotlib", "analysis", "plots")  # the output includes a figure: say so before any work
    if not (math.isfinite(args.temperature) and args.temperature > 0):
        raise ConfigError("--temperature", f"must be finite and > 0, got {args.temperature}")
    if not 1 <= args.bins <= 1000:
        raise ConfigError("--bins", f"must be in [1, 1000], got {args.bins}")
    check_runs(args.run_dirs)  # before any run is computed: the options, the folders, the output
    # a local_only run's global model is never trained: not what its clients use. Here, not in analyze(): the report's
    # reliability diagram of such a run is the report's to decide
    refuse_personal_runs(args.run_dirs)
    check_saved_bins(args.run_dirs, args.bins)
    check_out(args.run_dirs, args.out)
    result = analyze(args.run_dirs, temperature=args.temperature, bins=args.bins, binning=args.binning, progress=not args.quiet)
    check_bins(result, args.bins)
    folder = out_folder(args.run_dirs, args.out)
    plot_reliability(result, folder / "reliability.png")
    write_json(folder / "calibration.json", result)  # last: the result is there only when the figure is
    for label, run in result["runs"].items():
        print(f"{label}: accuracy {run['accuracy']:.4f} ECE {run['ece']:.4f} NLL {run['nll']:.4f} Brier {run['brier']:.4f}")
    print(f"results: {folder / 'calibration.json'}, {folder / 'reliability.png'}")
    return 0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("calibration", help="reliability diagram, ECE, NLL and Brier of saved global models",
                              description="Calibration of each run's saved global model on the global test set: writes calibration.json (every number and "
                                          "the reliability bins, per run) and reliability.png (a reliability diagram per run) into -o "
                                          "(default: <first RUN_DIR>/analysis/), and prints a line per run.")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="finished run folder(s)")
    p.add_argument("--bins", type=int, default=DEFAULT_BINS, help=f"confidence bins (default {DEFAULT_BINS})")
    p.add_argument("--binning", default="width", choices=BINNINGS, help="equal-width bins (default) or equal-mass bins")
    p.add_argument("--temperature", type=float, default=1.0, help="read the logits at T (default 1)")
    add_out(p, "output folder (default: <first RUN_DIR>/analysis)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr ([k/N] RUN as each run is done)")
    p.set_defaults(func=cmd_calibration)
