"""``chillfl analyze cka``: layer-wise linear CKA against a reference model (FLex&Chill Sec. 4.6, Figs. 12-13, Table 6).

Features are taken on ``--samples`` inputs of the global test set (the same
inputs for every model of a run) with forward hooks on named modules. When the
test set is larger, the inputs are a uniform random subset seeded from the
run's seed (:func:`chillfl.analysis.grad_norms.sample_subset`, as grad-norms
does): the first N rows of a test set ordered by client or device (e.g.
``synthetic``) were a few classes only. The JSON records ``n`` (used),
``available`` and ``random_subset`` per run.

* layers: by default every ``nn.Conv1d/2d/3d`` and ``nn.Linear`` module, in
  registration order (for the paper's 2-layer CNN: conv1, conv2, fc1, fc2 =
  its "Layers 1-4"), each module's *output* flattened to [n, features];
  ``--layers a,b`` names other modules (any ``named_modules()`` name);
* ``representation``: the input of the classifier head (the last
  ``nn.Linear``, :mod:`chillfl.models.parts`), the penultimate features the
  paper's Fig. 13 compares.

Outputs ``cka.json`` and ``cka.png``:

* Table 6 / Fig. 12: for each RUN_DIR, CKA per layer between its saved global
  model and the reference model.
* With ``--clients``, Fig. 13: one round is replayed
  (:mod:`chillfl.analysis.replay`) and each participating client's model is
  compared per layer with the reference, and the ``representation`` CKA
  matrix of [INIT, AGG, REF, client models] is written.

The reference (``--reference``) is another run's saved global model (the
paper: a model trained on i.i.d. data at T = 1); without it, each run's own
initial model is the reference: its seeded round-0 model, rebuilt from the
run's ``config.toml`` and seed (bitwise the model round 1 started from), so
the row says how far training moved each layer. (The run's own saved model
as default compared it with itself: every layer read 1.0.) A run whose model
came from Python cannot be rebuilt, with or without ``--reference``.
Reference and run must share the model architecture. That, ``--layers`` and the
personal-model refusal below are checked for every run before the first is
computed (:func:`check_models`), each refusal naming its run. A run of a method whose
clients each keep a model of their own (capability ``personal_model``) is
refused: its global model is not what its clients use (``local_only``'s is
never trained: CKA 1.0 against its initial model at every layer).

Checked (2026-12) against: FLex&Chill Sec. 4.6, Eq. 6 (linear CKA; centred by
default, ``--uncentered`` for Eq. 6 as printed), Fig. 12 / Table 6 (layers
1-4 of the 2-layer CNN vs an i.i.d. T = 1 reference), Fig. 13 (INIT, AGG,
REF and client models at the penultimate layer), and Kornblith et al. (2019).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from chillfl.analysis.replay import check_fits
from chillfl.analysis.replay import Params, build_run, check_finished, check_out, check_runs, load_model_state, load_run, out_folder, refuse_personal_models, replay_round, run_label, write_json
from chillfl.analysis.counting import Counted
from chillfl.analysis.grad_norms import sample_subset
from chillfl.analysis.output import add_out
from chillfl.config import RunConfig
from chillfl.data import load_dataset
from chillfl.experiment import build_initial_model, check_rebuildable
from chillfl.extras import need
from chillfl.errors import ConfigError
from chillfl.options import comma_items
from chillfl.seeds import derive_seed
from chillfl.metrics.cka import linear_cka
from chillfl.models.parts import NoHeadError, head_name
from chillfl.training.local import split_state

REPRESENTATION = "representation"
INITIAL = "initial"
"""``cka.json``'s ``reference`` without ``--reference``: each run's own seeded initial (round-0) model."""
LAYER_TYPES = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)


def default_layers(model: nn.Module) -> list[str]:
    """Every conv and linear module, in registration order, with ``representation`` just before the head (when there is one)."""
    names = [n for n, m in model.named_modules() if isinstance(m, LAYER_TYPES)]
    try:
        head = head_name(model)
    except NoHeadError:
        return names
    names.insert(names.index(head) if head in names else len(names), REPRESENTATION)  # the head's input, just before the head's output
    return names


def check_layers(model: nn.Module, layers: Sequence[str], run_dir: str | Path | None = None) -> list[str]:
    """``layers`` if each is a module of ``model`` (or ``representation``); else one line naming ``run_dir``'s model
    (among several runs of different architectures, which run lacks the module)."""
    known = dict(model.named_modules())
    bad = [n for n in layers if n != REPRESENTATION and (n not in known or n == "")]
    if bad:
        whose = f"{run_dir}: " if run_dir is not None else ""
        raise ConfigError("--layers", f"{whose}unknown module(s) {bad}; choose from {[n for n in known if n]} or {REPRESENTATION!r}")
    return list(layers)


def check_models(run_dirs: Sequence[str | Path], reference: str | None, layers: Sequence[str] | None) -> None:
    """Refuse, before the first run is computed, a run of a personal-model method, a run whose saved model differs in
    architecture from ``reference``'s and a ``--layers`` module some run's model lacks, each in one line naming the run.
    Why: each was refused in that run's turn, after the runs before it had been computed (minutes at scale), and
    without saying which run of several it was. Cheap: the saved models are read, not evaluated, and a dataset is
    read once for all the runs on it (:func:`model_template`)."""
    ref = load_model_state(reference, "cpu", "--reference") if reference else None
    inputs: dict[str, tuple[tuple[int, ...], int]] = {}
    for run_dir in run_dirs:
        config = load_run(run_dir)
        refuse_personal_models(config, run_dir)
        saved = load_model_state(run_dir)  # a finished run without a global model is refused here too
        if ref is not None:
            _check_same_shapes(saved, ref, run_dir)
        if layers:
            check_layers(model_template(config, inputs), layers, run_dir)


def model_template(config: RunConfig, inputs: dict[str, tuple[tuple[int, ...], int]] | None = None) -> nn.Module:
    """The run's model as its own build (:func:`build_run`) makes it, for its module names, without the rest of the run.

    Built on its dataset's input shape and classes as read from the data (a size declared without them is an estimate),
    which ``inputs`` keeps per ``[dataset]`` table: the runs of one analysis mostly share a dataset, read then once.
    What fails here is refused as the run's own build would refuse it in its turn."""
    check_rebuildable(config)  # a model or data passed from Python
    name, options = RunConfig.component(config.dataset)
    key = json.dumps([name, options, str(config.data_dir)], sort_keys=True, default=repr)
    inputs = {} if inputs is None else inputs
    if key not in inputs:
        dataset = load_dataset(name, options, data_dir=config.data_dir)
        inputs[key] = (tuple(dataset.input_shape), dataset.num_classes)
    shape, classes = inputs[key]
    return build_initial_model(config, shape, classes)[0]


@torch.no_grad()
def layer_features(model: nn.Module, state: Mapping[str, torch.Tensor], x: torch.Tensor, layers: Sequence[str]) -> dict[str, torch.Tensor]:
    """Each named module's output (``representation``: the head's input) on ``x``, flattened to [n, features]."""
    check_fits(model, state)  # before the hooks (a refusal left them on the model): a state of other shapes was broadcast into wrong features
    model.eval()
    captured: dict[str, torch.Tensor] = {}
    handles = []
    modules = dict(model.named_modules())
    for name in layers:
        if name == REPRESENTATION:
            handles.append(modules[head_name(model)].register_forward_pre_hook(lambda _m, inp: captured.__setitem__(REPRESENTATION, inp[0])))
        else:
            handles.append(modules[name].register_forward_hook(lambda _m, _i, out, name=name: captured.__setitem__(name, out)))
    try:
        params, buffers = split_state(model, state)
        functional_call(model, (params, buffers), (x,))
    finally:
        for h in handles:
            h.remove()
    missing = [n for n in layers if n not in captured]
    if missing:
        raise ConfigError("--layers", f"module(s) {missing} did not run in the model's forward")
    return {n: captured[n].reshape(len(x), -1).detach() for n in layers}


def cka_per_layer(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor], center: bool = True) -> dict[str, float]:
    return {name: linear_cka(a[name], b[name], center=center) for name in a}


def analyze(run_dirs: Sequence[str], reference: str | None, *, samples: int = 500, layers: Sequence[str] | None = None,
            clients: bool = False, start: str = "final", center: bool = True, progress: bool = False) -> dict[str, Any]:
    """The CKA tables for every run (see module docstring); ``progress``: a ``[k/N] RUN`` line on stderr as each is done."""
    out: dict[str, Any] = {"analysis": "cka", "reference": reference or INITIAL, "samples": samples, "centered": center, "runs": {}}
    if reference:  # its global model is the reference: one its clients do not use is no reference for theirs
        check_finished(reference, "--reference")
        refuse_personal_models(load_run(reference, "--reference"), reference, "--reference")
    check_models(run_dirs, reference, layers)  # every run, before the first is computed
    counted = Counted(len(run_dirs), "cka", on=progress)
    for run_dir in run_dirs:
        exp = build_run(run_dir)
        refuse_personal_models(exp.config, run_dir)  # checked above too: here for a folder changed since
        names = check_layers(exp.model, layers, run_dir) if layers else default_layers(exp.model)
        x_all, y_all = exp.data.test()
        x = sample_subset(x_all, y_all, samples, derive_seed(exp.config.seed, "cka"))[0].to(exp.device)
        own = load_model_state(run_dir, exp.device)
        ref_state = load_model_state(reference, exp.device, "--reference") if reference else {k: v.to(exp.device) for k, v in exp.initial_state.items()}
        _check_same_shapes(own, ref_state, run_dir)
        feats = {"REF": layer_features(exp.model, ref_state, x, names), "GLOBAL": layer_features(exp.model, own, x, names)}
        run: dict[str, Any] = {"run_dir": str(run_dir), "layers": names, "n": int(len(x)), "available": int(len(y_all)),
                               "random_subset": len(x) < len(y_all), "global_vs_reference": cka_per_layer(feats["GLOBAL"], feats["REF"], center)}
        if clients:
            replay = replay_round(run_dir, start, exp)  # type: ignore[arg-type]
            feats["INIT"] = layer_features(exp.model, replay.start, x, names)
            feats["AGG"] = layer_features(exp.model, replay.aggregated, x, names)
            for cid, state in sorted(replay.clients.items()):
                feats[f"client {cid}"] = layer_features(exp.model, state, x, names)
            run["round"] = replay.round
            run["start"] = start
            run["clients_vs_reference"] = {k.split()[1]: cka_per_layer(v, feats["REF"], center) for k, v in feats.items() if k.startswith("client ")}
            layer = REPRESENTATION if REPRESENTATION in names else names[-1]
            order = ["INIT", "AGG", "REF", *[k for k in feats if k.startswith("client ")]]
            run["matrix"] = {"layer": layer, "models": order,
                             "cka": [[linear_cka(feats[a][layer], feats[b][layer], center=center) for b in order] for a in order]}
        label = run_label(run_dir, run_dirs)
        out["runs"][label] = run
        counted.finished(label)
    return out


def _check_same_shapes(a: Params, b: Params, run_dir: str | Path) -> None:
    """``a`` (``run_dir``'s model) and ``b`` (the reference) hold the same tensors in the same shapes; the first mismatch
    in name order (a file's tensor order is its writer's)."""
    diff = [k for k in sorted(a) if k not in b or a[k].shape != b[k].shape]
    if diff or set(b) - set(a):
        raise ConfigError("--reference", f"the reference model's architecture differs from {run_dir}'s (first mismatch: {(diff or sorted(set(b) - set(a)))[0]!r})")


def plot_cka(result: dict[str, Any], path: Path) -> None:
    """Left: CKA per layer vs the reference, one line per run (Fig. 12 / Table 6). Right: the Fig. 13 matrix of the first run that has one."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from chillfl.plots.figure import literal, save_figure

    runs = result["runs"]
    matrix_run, with_matrix = next(((label, r) for label, r in runs.items() if "matrix" in r), ("", None))
    fig = Figure(figsize=(11 if with_matrix else 6, 4.4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 2 if with_matrix else 1, 1)
    shaded = False
    # x: the union of the runs' layer names, in first-seen order, each run at its own layers' places: at 0, 1, 2 under
    # the first run's names, an MLP's hidden.0 was drawn over a CNN's features.0
    layers = list(dict.fromkeys(name for run in runs.values() for name in run["global_vs_reference"]))
    place = {name: i for i, name in enumerate(layers)}
    for label, run in runs.items():
        xs = [place[name] for name in run["global_vs_reference"]]
        values = list(run["global_vs_reference"].values())
        undefined = sum(1 for v in values if v is None or not math.isfinite(v))  # a NaN point is not drawn: say so, not a lone dot
        shown = label + (f" ({undefined} of {len(values)} layers undefined: NaN)" if undefined else "")
        (line,) = ax.plot(xs, values, marker="o", label=literal(shown))
        if "clients_vs_reference" in run:  # in the run's colour: the fill's own colour cycle gave it another run's
            client_vals = np.array([[v[name] for name in run["global_vs_reference"]] for v in run["clients_vs_reference"].values()])
            ax.fill_between(xs, client_vals.min(0), client_vals.max(0), color=line.get_color(), alpha=0.15)
            shaded = True
    ax.set_xticks(range(len(layers)), layers, rotation=30, fontsize=7)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("layer")
    ax.set_ylabel("linear CKA vs reference")
    ax.set_title("global model vs reference per layer" + (" (shade: client models, min to max)" if shaded else ""), fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    if with_matrix:
        m = with_matrix["matrix"]
        ax2 = fig.add_subplot(1, 2, 2)
        image = ax2.imshow(np.array(m["cka"], dtype=float), vmin=0, vmax=1, cmap="viridis")
        fig.colorbar(image, ax=ax2, label="CKA")
        ax2.set_xticks(range(len(m["models"])), m["models"], rotation=60, fontsize=6)
        ax2.set_yticks(range(len(m["models"])), m["models"], fontsize=6)
        ax2.set_title(f"{literal(matrix_run)}: {m['layer']} CKA, round {with_matrix['round']} (Fig. 13)", fontsize=9)  # whose: one of the runs
    fig.tight_layout()
    save_figure(fig, path, dpi=110)  # a link planted at the name is replaced, not written through


MIN_CENTERED_INPUTS = 3
"""Centred linear CKA of two inputs is 1 whatever the models: the two centred rows are ``x`` and ``-x``, so both Gram
matrices are the same rank-one pattern. ``--samples 2`` printed 1.0000 for every layer (metcalc)."""


def cmd_cka(args: argparse.Namespace) -> int:
    need("matplotlib", "analysis", "plots")  # the output includes a figure: say so before any work
    fewest = 2 if args.uncentered else MIN_CENTERED_INPUTS
    if args.samples < fewest:
        why = "" if args.uncentered else " when centred (two centred rows are x and -x: every pair of models has CKA 1.0); --uncentered takes 2"
        raise ConfigError("--samples", f"CKA needs at least {fewest} inputs{why}, got {args.samples}")
    if args.start is not None and not args.clients:  # it was ignored: the table compares the saved models, no round is replayed
        raise ConfigError("--start", "applies with --clients only (where the replayed round starts); without it cka compares each run's saved global model")
    layers = None
    if args.layers is not None:
        layers = comma_items(args.layers, "--layers", "comma-separated module names")
        if not layers:  # '' ran the default layers without a word
            raise ConfigError("--layers", "is empty; name modules (comma-separated) or leave --layers out for the default layers")
    check_runs(args.run_dirs)  # before any run is computed: the folders and the output
    check_out(args.run_dirs, args.out)
    result = analyze(args.run_dirs, args.reference, samples=args.samples, layers=layers, clients=args.clients,
                     start=args.start or "final", center=not args.uncentered, progress=not args.quiet)
    folder = out_folder(args.run_dirs, args.out)
    plot_cka(result, folder / "cka.png")
    write_json(folder / "cka.json", result)  # last: the result is there only when the figure is
    print(f"reference: {args.reference}'s global model" if args.reference else
          "reference: each run's initial model (its seeded round-0 model, rebuilt from its config.toml; --reference RUN_DIR compares with another run)")
    for label, run in result["runs"].items():
        print(f"{label}: " + ", ".join(f"{k} {v:.4f}" for k, v in run["global_vs_reference"].items()))
    print(f"results: {folder / 'cka.json'}, {folder / 'cka.png'}")
    return 0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("cka", help="layer-wise linear CKA vs a reference model (FLex&Chill Figs. 12-13, Table 6)",
                              description="Linear CKA per layer between each run's global model (and, with --clients, "
                              "its client models from one replayed round) and a reference model: writes cka.json (the tables per run) and cka.png "
                              "(CKA per layer; with --clients, the models' CKA matrix) into -o (default: <first RUN_DIR>/analysis/).")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="finished run folder(s)")
    p.add_argument("--reference", metavar="RUN_DIR", help="the reference run (e.g. trained on i.i.d. data); default: each run's initial model (seeded, round 0)")
    p.add_argument("--samples", type=int, default=500, help="test inputs the features are computed on (default 500; a random subset "
                   "seeded from the run's seed when the test set is larger)")
    p.add_argument("--layers", help="comma-separated module names (default: every conv/linear module + representation)")
    p.add_argument("--clients", action="store_true", help="replay one round and compare the client models too (Fig. 13)")
    p.add_argument("--start", default=None, choices=("final", "initial"), help="replay start with --clients (default: final); only with --clients")
    p.add_argument("--uncentered", action="store_true", help="Eq. 6 literally, without centring the features")
    add_out(p, "output folder (default: <first RUN_DIR>/analysis)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr ([k/N] RUN as each run is done)")
    p.set_defaults(func=cmd_cka)
