"""``chillfl analyze grad-norms``: the distribution of input-gradient norms (FLex&Chill Sec. 3.3, Fig. 2).

For each sample i of the chosen split, with the run's saved global model in
eval mode, the norm of the loss gradient with respect to the *input*::

    g_i = || d CE(z(x_i) / T, y_i) / d x_i ||_2

split by whether the model's prediction on x_i is correct (Fig. 2 top) or
not (bottom). Eq. 2 says the logit gradient is (p - y) / T, so low training
temperatures shift this distribution to larger norms.

Choices: T defaults to the run's own training temperature (its fixed
``[temperature]`` value; 1 for the ``none`` policy; FedChill's per-client
temperatures have no single value, so such runs need ``--temperature``).
The paper uses the 50K training samples; ``--split train`` (default) takes
the union of the clients' training data, ``--split test`` the global test
set; ``--samples`` caps the count with a uniform random subset, seeded from
the run's seed (:func:`sample_subset`), so the same command gives the same
numbers. (The first N in client order were the first clients' classes only
under label skew.) The JSON records the samples used and whether they are a
subset. In eval mode the samples do not
interact (batch norm uses its running statistics), so one backward pass of
the summed loss gives every per-sample gradient.

Checked (2026-12) against: FLex&Chill Sec. 3.3 and Fig. 2 (norm of the
input-layer gradient of the training loss at the training temperature, one
value per sample, correct and incorrect predictions apart) and Eq. 2 (the
1/T factor), with a hand-checked 1/T scaling in tests.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch.func import functional_call

from chillfl.analysis.replay import (build_run, check_fits, check_out, check_runs, load_model_state, out_folder, refuse_personal_runs, run_label,
                                    write_json)
from chillfl.analysis.counting import Counted
from chillfl.analysis.output import add_out
from chillfl.extras import need
from chillfl.errors import ConfigError
from chillfl.experiment import Experiment
from chillfl.seeds import derive_seed
from chillfl.temperature.registry import trains_at
from chillfl.training.local import split_state


def training_temperature(exp: Experiment) -> float:
    """The run's single training temperature (ConfigError naming ``--temperature`` when it has none)."""
    value = trains_at(exp.config.temperature, exp.policy)  # what the policy declares (a plugin's constant one too), not its class
    if value is not None:
        return value
    raise ConfigError("--temperature", f"the run's temperature policy {exp.config.temperature.get('policy')!r} has no single temperature; give --temperature")


def input_gradient_norms(model: torch.nn.Module, state: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                         temperature: float, batch_size: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """(per-sample ||d CE(z/T, y) / d x||_2, per-sample correct flag) in eval mode."""
    check_fits(model, state)  # a state of other shapes was broadcast into wrong gradients
    model.eval()
    params, buffers = split_state(model, state)
    params = {k: v.detach() for k, v in params.items()}
    norms, correct = [], []
    for i in range(0, len(y), batch_size):
        xb = x[i : i + batch_size].detach().clone().requires_grad_(True)
        yb = y[i : i + batch_size]
        with torch.enable_grad():
            logits = functional_call(model, (params, buffers), (xb,))
            loss = torch.nn.functional.cross_entropy(logits / temperature, yb, reduction="sum")
            (grad,) = torch.autograd.grad(loss, [xb])
        norms.append(grad.reshape(len(yb), -1).double().norm(dim=1).cpu())
        correct.append((logits.argmax(1) == yb).cpu())
    if not norms:
        return np.zeros(0), np.zeros(0, dtype=bool)
    return torch.cat(norms).numpy(), torch.cat(correct).numpy()


def sample_subset(x: torch.Tensor, y: torch.Tensor, samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """At most ``samples`` rows of (x, y): all of them when they fit, else a uniform random subset drawn with ``seed``
    (in their original order). Why random: the union of the clients' data is ordered client by client, so the first N
    rows were the first clients' classes alone under label skew."""
    if samples >= len(y):
        return x, y
    gen = torch.Generator().manual_seed(seed)
    keep = torch.randperm(len(y), generator=gen)[:samples].sort().values
    return x[keep], y[keep]


def _stats(values: np.ndarray) -> dict[str, Any]:
    if len(values) == 0:
        return {"n": 0}
    q = np.quantile(values, [0.05, 0.25, 0.5, 0.75, 0.95])
    return {"n": int(len(values)), "mean": float(values.mean()), "q05": q[0], "q25": q[1], "median": q[2], "q75": q[3], "q95": q[4]}


def analyze(run_dirs: Sequence[str], *, temperature: float | None = None, split: str = "train", samples: int = 5000,
            progress: bool = False) -> tuple[dict[str, Any], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Per run: summary statistics (JSON) and the raw (norms, correct) arrays for the plot."""
    out: dict[str, Any] = {"analysis": "grad-norms", "split": split, "runs": {}}
    raw = {}
    refuse_personal_runs(run_dirs)  # a local_only run's global model is never trained: not what its clients use
    counted = Counted(len(run_dirs), "grad-norms", on=progress)  # a [k/N] RUN line on stderr as each run is done
    for run_dir in run_dirs:
        exp = build_run(run_dir)
        t = temperature if temperature is not None else training_temperature(exp)
        if split == "train":
            parts = [exp.data.client_train(c) for c in range(exp.data.num_clients)]
            x, y = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        else:
            x, y = exp.data.test()
        available = len(y)
        x, y = sample_subset(x, y, samples, derive_seed(exp.config.seed, "grad-norms", split))
        x, y = x.to(exp.device), y.to(exp.device)
        norms, correct = input_gradient_norms(exp.model, load_model_state(run_dir, exp.device), x, y, t, exp.config.eval.batch_size)
        label = run_label(run_dir, run_dirs)
        raw[label] = (norms, correct)
        out["runs"][label] = {"run_dir": str(run_dir), "temperature": t, "samples": int(len(y)), "available": int(available),
                              "random_subset": len(y) < available, "correct": _stats(norms[correct]), "incorrect": _stats(norms[~correct])}
        counted.finished(label)
    return out, raw


def plot_grad_norms(raw: dict[str, tuple[np.ndarray, np.ndarray]], temps: dict[str, float], path: Path) -> None:
    """Fig. 2: histograms of log10 input-gradient norms, correct (top) and incorrect (bottom), one curve per run."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from chillfl.plots.figure import save_figure
    from chillfl.plots.styles import variant_style

    fig = Figure(figsize=(7, 6))
    FigureCanvasAgg(fig)
    every = np.concatenate([n[n > 0] for n, _ in raw.values()]) if raw else np.zeros(0)
    lo, hi = (np.log10(every.min()), np.log10(every.max())) if len(every) else (-1.0, 1.0)
    bins = np.linspace(lo, hi if hi > lo else lo + 1, 40).tolist()
    for row, (flag, title) in enumerate(((True, "correctly predicted"), (False, "incorrectly predicted"))):
        ax = fig.add_subplot(2, 1, row + 1)
        # a run's colour is its index, the same in both panels: each axes' own colour cycle gave a run after one with no
        # sample in a panel that one's colour there; a run with nothing to draw in a panel says why in its legend
        for index, (label, (norms, correct)) in enumerate(raw.items()):
            colour, style = variant_style(index)
            picked = norms[correct == flag]
            vals = picked[picked > 0]
            name = f"{label} (T={temps[label]:g})"
            if len(vals):
                ax.hist(np.log10(vals), bins=bins, histtype="step", density=True, lw=1.5, color=colour, ls=style, label=name)
            else:
                ax.plot([], [], color=colour, ls=style, label=f"{name} ({'no samples' if not len(picked) else 'all norms 0'})")
        ax.set_title(f"{title} samples", fontsize=9)
        ax.set_ylabel("density")
        ax.legend(fontsize=7)
    ax.set_xlabel("log10 ||d loss / d input||")
    fig.suptitle("input-gradient norms (FLex&Chill Fig. 2)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)  # atomic, never through a link planted at path


def cmd_grad_norms(args: argparse.Namespace) -> int:
    need("matplotlib", "analysis", "plots")  # the output includes a figure: say so before any work
    if args.temperature is not None and not (math.isfinite(args.temperature) and args.temperature > 0):
        raise ConfigError("--temperature", f"must be finite and > 0, got {args.temperature}")
    if args.samples < 1:
        raise ConfigError("--samples", f"must be >= 1, got {args.samples}")
    check_runs(args.run_dirs)  # before any run is computed: the folders and the output
    check_out(args.run_dirs, args.out)
    result, raw = analyze(args.run_dirs, temperature=args.temperature, split=args.split, samples=args.samples, progress=not args.quiet)
    folder = out_folder(args.run_dirs, args.out)
    plot_grad_norms(raw, {k: v["temperature"] for k, v in result["runs"].items()}, folder / "grad-norms.png")
    write_json(folder / "grad-norms.json", result)  # last: the result is there only when the figure is
    for label, run in result["runs"].items():
        c, w = run["correct"], run["incorrect"]
        print(f"{label} (T={run['temperature']:g}): median norm correct {c.get('median', float('nan')):.3g} (n={c['n']}), "
              f"incorrect {w.get('median', float('nan')):.3g} (n={w['n']})"
              + (f"; a seeded random {run['samples']} of {run['available']} samples" if run["random_subset"] else ""))
    print(f"results: {folder / 'grad-norms.json'}, {folder / 'grad-norms.png'}")
    return 0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("grad-norms", help="distribution of input-gradient norms, correct vs incorrect (FLex&Chill Fig. 2)",
                              description="Per-sample norms of the loss gradient w.r.t. the input for each run's saved global model: writes "
                                          "grad-norms.json (quantiles per run, correct and incorrect) and grad-norms.png (their histograms) "
                                          "into -o (default: <first RUN_DIR>/analysis/).")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="finished run folder(s)")
    p.add_argument("--temperature", type=float, help="T in CE(z/T, y) (default: each run's training temperature)")
    p.add_argument("--split", default="train", choices=("train", "test"), help="clients' training data (default) or the test set")
    p.add_argument("--samples", type=int, default=5000, help="at most this many samples, a seeded uniform random subset when the split has more (default 5000)")
    add_out(p, "output folder (default: <first RUN_DIR>/analysis)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr ([k/N] RUN as each run is done)")
    p.set_defaults(func=cmd_grad_norms)
