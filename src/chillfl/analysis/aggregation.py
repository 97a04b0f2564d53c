"""What server aggregation does to the models: FLex&Chill Fig. 9 (accuracy change) and Fig. 10 (entropy).

Both replay one round of a run (:mod:`chillfl.analysis.replay`).

``aggregation-accuracy`` (Fig. 9). After aggregation every client evaluates,
on its own split (``eval.client_split``), the model it held before and the
aggregated model: ``delta_c = acc(aggregated) - acc(before_c)``. Before is
the client's freshly trained local model for a participating client, and the
round's start model (the global model it last received) for a
non-participating one. Reported per client and as the mean per group.

``aggregation-entropy`` (Fig. 10). The mean Shannon entropy (nats) of the
predicted distribution softmax(z) (T = 1) on the global test set: "before"
is the mean over the participating clients' local models, "after" is the
aggregated model; the start model's entropy is reported too (``start_entropy``:
``start`` is the replay's start, "final" or "initial", as in
``aggregation-accuracy.json``).

Both refuse a run of a method whose clients each keep a model of their own
(capability ``personal_model``, :func:`chillfl.analysis.replay.refuse_personal_models`):
the aggregate is not the model such a client goes on with.

Checked (2026-12) against: FLex&Chill Sec. 4.4 / Fig. 9 (each client's
accuracy with the pre- and post-aggregation model, participating clients'
pre-update model being their fresh local model) and Sec. 4.5 / Fig. 10
(average entropy before and after aggregation). The paper does not state
the entropy's temperature or data; T = 1 on the global test set, the
unweighted mean over participating clients (docs/analysis.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from chillfl.analysis.counting import Counted
from chillfl.analysis.output import add_out
from chillfl.analysis.layout import RUNS_PER_ROW, rows_of
from chillfl.extras import need
from chillfl.analysis.replay import Replay, accuracy, check_out, check_runs, entropy, out_folder, predict, replay_round, run_label, write_json


def accuracy_change(replay: Replay) -> dict[str, Any]:
    """Fig. 9's per-client accuracy before/after aggregation, and the group means."""
    exp = replay.exp
    bs = exp.config.eval.batch_size
    rows = []
    for cid in range(exp.data.num_clients):
        x, y = exp.data.client_eval(cid)
        if len(y) == 0:
            continue
        x, y = x.to(exp.device), y.to(exp.device)
        participating = cid in replay.clients
        before = accuracy(predict(exp.model, replay.clients[cid] if participating else replay.start, x, bs), y)
        after = accuracy(predict(exp.model, replay.aggregated, x, bs), y)
        rows.append({"client": cid, "participating": participating, "before": before, "after": after, "delta": after - before})

    def mean(group: bool) -> float | None:
        vals = [r["delta"] for r in rows if r["participating"] == group]
        return float(np.mean(vals)) if vals else None

    return {"round": replay.round, "clients": rows, "mean_delta_participating": mean(True), "mean_delta_non_participating": mean(False)}


def entropy_change(replay: Replay) -> dict[str, Any]:
    """Fig. 10's mean prediction entropy on the test set before (client models) and after aggregation."""
    exp = replay.exp
    x, _ = exp.data.test()
    x = x.to(exp.device)
    bs = exp.config.eval.batch_size
    per_client = {str(c): float(entropy(predict(exp.model, s, x, bs)).mean()) for c, s in sorted(replay.clients.items())}
    return {
        "round": replay.round,
        "before": float(np.mean(list(per_client.values()))),
        "after": float(entropy(predict(exp.model, replay.aggregated, x, bs)).mean()),
        "start_entropy": float(entropy(predict(exp.model, replay.start, x, bs)).mean()),  # "start" is the replay's mode
        "per_client_before": per_client,
        "max_entropy": float(np.log(exp.data.num_classes)),
    }


def analyze(run_dirs: Sequence[str], start: str, which: str, progress: bool = False) -> dict[str, Any]:
    """``which`` = "accuracy" or "entropy" for every run; keyed by run label. ``progress``: a ``[k/N] RUN`` line on stderr as each is done."""
    fn = accuracy_change if which == "accuracy" else entropy_change
    runs = {}
    counted = Counted(len(run_dirs), f"aggregation-{which}", on=progress)
    for run_dir in run_dirs:
        replay = replay_round(run_dir, start)  # type: ignore[arg-type]
        label = run_label(run_dir, run_dirs)
        runs[label] = {"run_dir": str(run_dir), "start": start, **fn(replay)}
        counted.finished(label)
    return {"analysis": f"aggregation-{which}", "runs": runs}


TICK_INCHES = 1.3
"""The width a run's x label is wrapped to (each run has about 1.4 inches): rotated long labels, a comparison run's
every option, ran into each other and squashed the panel above them."""


def tick_label(label: str) -> str:
    """A run's x label, wrapped to :data:`TICK_INCHES` at its separators, never inside a number where another place will do (:func:`~chillfl.plots.figure.wrapped`)."""
    from chillfl.plots.figure import wrapped

    return wrapped(label, TICK_INCHES, 8, break_words=False)


def row_height(result: dict[str, Any]) -> float:
    """Inches a row of runs takes: 4, and 0.15 more for each line past two of the longest wrapped label, which would
    otherwise be taken from the panel (its y label then ran past the panel's top)."""
    lines = max((tick_label(label).count("\n") + 1 for label in result["runs"]), default=1)
    return 4.0 + 0.15 * max(0, lines - 2)


def plot_accuracy_change(result: dict[str, Any], path: Path) -> None:
    """Per run: the accuracy change of each client, participating (filled) vs not (open), with group means."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from chillfl.plots.figure import legend_below, save_figure

    rows = rows_of(list(result["runs"].items()))  # at most RUNS_PER_ROW runs an axis: one row grew with the runs
    fig = Figure(figsize=(max(5.0, 1.6 * min(len(result["runs"]), RUNS_PER_ROW) + 2), row_height(result) * len(rows)))
    FigureCanvasAgg(fig)
    named: set[bool] = set()  # each group in the legend once, from the first run that has it (not only the first run)
    for row, runs in enumerate(rows):
        ax = fig.add_subplot(len(rows), 1, row + 1)
        for i, (label, run) in enumerate(runs):
            for group, offset, marker in ((True, -0.15, "o"), (False, 0.15, "s")):
                deltas = [100 * r["delta"] for r in run["clients"] if r["participating"] == group]
                if not deltas:
                    continue
                ax.scatter(np.full(len(deltas), i + offset), deltas, marker=marker, s=18, alpha=0.7,
                           facecolors="tab:red" if group else "none", edgecolors="tab:red" if group else "tab:blue",
                           label=("participating" if group else "non-participating") if group not in named else None)
                named.add(group)
                ax.hlines(np.mean(deltas), i + offset - 0.12, i + offset + 0.12, color="black", lw=2)
        if row == 0:
            ax.plot([], [], color="black", lw=2, label="mean of the group")  # the black bars were the figure's only unexplained mark
            ax.set_title("accuracy change across aggregation (FLex&Chill Fig. 9)", fontsize=10)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xticks(range(len(runs)), [tick_label(label) for label, _ in runs], fontsize=8)
        ax.set_ylabel("accuracy after - before aggregation (points)")
        if ax.get_legend_handles_labels()[1]:
            legend_below(ax)  # inside, it hid the points of whichever run stood under it
    fig.tight_layout()
    save_figure(fig, path, dpi=110)  # atomic, never through a link planted at path


def plot_entropy_change(result: dict[str, Any], path: Path) -> None:
    """Per run: mean entropy before (client models) and after aggregation."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from chillfl.plots.figure import legend_below, save_figure

    rows = rows_of(list(result["runs"].items()))  # at most RUNS_PER_ROW runs an axis: one row grew with the runs
    fig = Figure(figsize=(max(5.0, 1.4 * min(len(result["runs"]), RUNS_PER_ROW) + 2), row_height(result) * len(rows)))
    FigureCanvasAgg(fig)
    for row, runs in enumerate(rows):
        ax = fig.add_subplot(len(rows), 1, row + 1)
        idx = np.arange(len(runs))
        ax.bar(idx - 0.2, [r["before"] for _, r in runs], width=0.4, color="tab:blue", label="before aggregation (client models)")
        ax.bar(idx + 0.2, [r["after"] for _, r in runs], width=0.4, color="tab:orange", label="after aggregation")
        ax.set_xticks(idx, [tick_label(label) for label, _ in runs], fontsize=8)
        ax.set_ylabel("mean prediction entropy (nats)")
        if row == 0:
            ax.set_title("prediction entropy across aggregation (FLex&Chill Fig. 10)", fontsize=10)
            legend_below(ax)  # inside, it hid the bars of whichever run stood under it
    fig.tight_layout()
    save_figure(fig, path, dpi=110)  # atomic, never through a link planted at path


def _command(which: str) -> Any:
    def cmd(args: argparse.Namespace) -> int:
        need("matplotlib", "analysis", "plots")  # the output includes a figure: say so before any work
        check_runs(args.run_dirs)  # before any run is computed: the folders and the output
        check_out(args.run_dirs, args.out)
        result = analyze(args.run_dirs, args.start, which, progress=not args.quiet)
        folder = out_folder(args.run_dirs, args.out)
        name = f"aggregation-{which}"
        (plot_accuracy_change if which == "accuracy" else plot_entropy_change)(result, folder / f"{name}.png")
        write_json(folder / f"{name}.json", result)  # last: the result is there only when the figure is
        for label, run in result["runs"].items():
            if which == "accuracy":
                p, n = run["mean_delta_participating"], run["mean_delta_non_participating"]
                print(f"{label}: round {run['round']}: mean accuracy change participating {_pts(p)}, non-participating {_pts(n)}")
            else:
                print(f"{label}: round {run['round']}: mean entropy before {run['before']:.4f}, after {run['after']:.4f} nats")
        print(f"results: {folder / name}.json, {folder / name}.png")
        return 0

    return cmd


def _pts(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:+.2f} points"


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="finished run folder(s) (config.toml + model.safetensors)")
    add_out(p, "output folder (default: <first RUN_DIR>/analysis)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr ([k/N] RUN as each run is done)")


def add_parser(subparsers: Any) -> None:
    """Register ``aggregation-accuracy`` and ``aggregation-entropy`` under ``chillfl analyze``."""
    for which, fig, what in (("accuracy", "Fig. 9", "accuracy change of participating vs non-participating clients"),
                             ("entropy", "Fig. 10", "prediction entropy before and after aggregation")):
        p = subparsers.add_parser(f"aggregation-{which}", help=f"{what} (FLex&Chill {fig}), by replaying one round",
                                  description=f"Replay one round of each run and report the {what} (FLex&Chill {fig}): writes "
                                              f"aggregation-{which}.json (per run) and aggregation-{which}.png into -o "
                                              "(default: <first RUN_DIR>/analysis/).")
        add_common(p)
        p.add_argument("--start", default="final", choices=("final", "initial"),
                       help="replay from the saved global model (round rounds+1, default) or the initial model (round 1)")
        p.set_defaults(func=_command(which))
