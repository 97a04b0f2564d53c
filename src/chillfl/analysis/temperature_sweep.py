"""``chillfl analyze temperature-sweep CONFIG``: FedChill Fig. 1 and the App. A.5 correlation table.

FedChill motivates per-client temperatures with a sweep (Sec. 2.1-2.2, Fig. 1):
every client is trained alone at every temperature T of a grid and evaluated
on its own validation split (here: its local validation split when
``eval.validation`` > 0, else its evaluation split, drawn from the test rows,
and the outputs say which). The client x T accuracy heat map shows that the
best T differs between clients (Fig. 1 left); plotting accuracy against the
client's heterogeneity score (Eq. 6), coloured by T, shows that skewed clients
prefer low T (Fig. 1 right). App. A.5 then correlates client characteristics
with each client's best temperature (Pearson r and two-sided p, e.g. the
heterogeneity score: r = -0.389, p = 0.267 over 10 clients).

For client n and temperature T the sweep runs the one local-training step of
the library, :func:`chillfl.training.local.train_client`, with the loss
CE(z / T, y) of Eq. 3-4 (or the config's ``client.loss``), from the seeded
initial model of the config (the model every federated run starts from), with
the config's client settings (epochs, batch size, lr, momentum, weight decay),
and evaluates the result at T = 1 on the client's own split (:func:`scoring_split`).

Outputs (one folder ``<out_dir>/<name>-temperature-sweep``, written as
``.partial`` and renamed when complete): ``heatmap.png``, ``scatter.png``,
``correlation.md``, ``correlation.json``, ``temperature_sweep.json``, ``config.toml``.

Choices
-------
* Local training only: no aggregation and no method terms (FedProx's proximal
  term etc. need a global model); the config's ``client.loss`` is kept, so the
  sweep also works for the Table 5 gradient ablations.
* Length of training: one local training of ``client.epochs`` epochs at
  ``client.lr`` (Fig. 1 does not state its budget). Lengthen it with the usual
  overrides, e.g. ``client.epochs=30``; ``fedchill/fig1-digits`` does.
* Same batch order at every temperature: client n's minibatch stream is seeded
  from (seed, "sweep", n), not from T, so the columns of a row differ only by
  the temperature.
* Which split scores a client: with ``eval.validation`` > 0 its local
  validation split (``client_validation``, rows no test metric reports);
  without one, its evaluation split (``client_eval``), which is drawn from the
  test rows its ``local_acc`` reports. The paper's "validation" is the first;
  the second picks each best T on test rows, so it is labelled as such (the
  plots' axes, ``split`` in ``temperature_sweep.json``, a printed line).
* Best temperature (A.5): the T with the highest accuracy on that split. Ties
  (likely with a 100-sample split) are resolved by ``ties``: ``"mean"``
  (default; the arithmetic mean of the tied temperatures, so neither end of
  the grid is favoured), ``"lowest"`` or ``"highest"``.
* Diverged cells: a training that diverges at some T evaluates to NaN; the
  best T and accuracy are over the finite cells (the output names the others),
  and a client without a finite value is left out of that correlation (one
  stderr line), as one NaN made every r NaN.
* Clients without training rows are skipped (one stderr line), as a run
  never trains them (``no_data``); the rows keep each client's id.
* Gain (A.5's "performance gains"): best accuracy minus the accuracy at the
  largest temperature of the grid (T = 1, the standard softmax, by default).
* Correlations use every measure of :mod:`chillfl.temperature.heterogeneity`
  on its *raw* scale (``normalisation="none"``), as A.5 reports e.g. the
  number of active classes and the dataset size themselves; Pearson r is
  invariant to the positive rescaling of the ratio score, so its row equals
  the one of the normalised Eq. 6 score.
* The heterogeneity on the plots is the score FedChill would use: Eq. 6
  normalised to [0, 1] (``ratio``, ``max``, uniform p_g), or the config's
  ``[temperature]`` measure / p_g / normalisation when its policy is ``fedchill``;
  under any other policy the defaults, said in a note (printed, under the
  heat map and the scatter plot, ``heterogeneity_note`` in ``temperature_sweep.json``).

Checked (2026-12) against: FedChill Sec. 2.1-2.2 / Fig. 1 (client x T
validation-accuracy heat map; heterogeneity score vs accuracy coloured by
T) and App. A.5 (Pearson r and two-sided p of client characteristics vs the
best temperature; r = -0.389 over 10 clients gives p = 0.267 by the t test
with n - 2 degrees of freedom, which :mod:`chillfl.metrics.correlation`
reproduces).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from tqdm import tqdm

from chillfl.analysis.counting import PREFIX, ItemLines
from chillfl.analysis.output import add_out, check_folder, out_field
from chillfl.config import RunConfig, check_out_dir, load_config, parse_overrides
from chillfl.data.federated import FederatedData
from chillfl.storage.results import claim_dir, rename_free, strict, to_toml
from chillfl.storage.run_folder import TEMPERATURE_SWEEP_FILE
from chillfl.errors import ConfigError, RunNotStarted, choice_error, stopped_as
from chillfl.experiment import base_losses, build_data, build_initial_model, check_parts
from chillfl.experiments import resolve_config
from chillfl.extras import need
from chillfl.metrics.correlation import CorrelationRow, correlation_table, undefined_row
from chillfl.metrics.correlation import format_table as format_correlation
from chillfl.metrics.correlation import undefined_notes
from chillfl.options import parse_options
from chillfl.progress import NoBar, Progress, as_mode, mode_for
from chillfl.seeds import derive_seed
from chillfl.stderr import say
from chillfl.stop_signals import made_held
from chillfl.temperature.base import require_temperature
from chillfl.temperature.fedchill import FedChillOptions
from chillfl.temperature.heterogeneity import MEASURES, heterogeneity
from chillfl.training.local import LocalSpec, evaluate, run_precision, train_client

DEFAULT_TEMPERATURES: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0)
"""The grid of the task (FedChill Fig. 1 spans T = 0.05 ... 1)."""

TIES: tuple[str, ...] = ("mean", "lowest", "highest")
TEMPERATURES_FIELD = "--temperatures"
TIES_FIELD = "--ties"


VALIDATION_SPLIT = "client_validation"
"""The client's local validation split (``eval.validation`` > 0): rows no test metric reports."""
EVAL_SPLIT = "client_eval"
"""The client's evaluation split: drawn from the test rows its ``local_acc`` reports."""


def scoring_split(data: FederatedData) -> str:
    """The split the sweep scores each client on: its validation split when the config holds one out, else its
    evaluation split. Why: the paper picks each client's best T on validation rows; the evaluation split is test rows."""
    return VALIDATION_SPLIT if data.client_validation_indices is not None else EVAL_SPLIT


def split_rows(data: FederatedData, split: str, cid: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Client ``cid``'s rows of ``split`` (:func:`scoring_split`)."""
    if split == VALIDATION_SPLIT:
        rows = data.client_validation(cid)
        assert rows is not None  # scoring_split chose it because the data holds it
        return rows
    return data.client_eval(cid)


def describe_split(split: str, validation: float) -> str:
    """One line saying which rows scored the clients (printed by the CLI)."""
    if split == VALIDATION_SPLIT:
        return f"scored on: each client's own validation split (eval.validation = {validation:g})"
    return ("scored on: each client's own evaluation split, drawn from the test rows (eval.validation = 0: no validation "
            "split; set eval.validation > 0 to pick the best T on held-out rows)")


@dataclass
class SweepResult:
    """Per-client sweep outcome; arrays are indexed [client] or [client, temperature]."""

    temperatures: list[float]
    accuracy: np.ndarray
    loss: np.ndarray
    class_counts: np.ndarray
    heterogeneity: np.ndarray
    best_temperature: np.ndarray
    best_accuracy: np.ndarray
    gain: np.ndarray
    correlation: dict[str, list[CorrelationRow]] = field(default_factory=dict)
    folder: Path | None = None
    clients: list[int] = field(default_factory=list)
    """The client id of each row (empty: rows 0..n-1); clients without training rows have none."""
    score_note: str | None = None
    """Set when :attr:`heterogeneity` is FedChill's default score, not one the config chose (:func:`score_options`)."""
    split: str = EVAL_SPLIT
    """The split :attr:`accuracy` is on: ``VALIDATION_SPLIT`` or ``EVAL_SPLIT`` (:func:`scoring_split`)."""

    def accuracy_label(self) -> str:
        """The accuracy axis' label, naming the split: test rows are not called validation rows."""
        return "validation accuracy (%)" if self.split == VALIDATION_SPLIT else "accuracy on own test-row split (%)"

    def client_ids(self) -> list[int]:
        return self.clients or list(range(self.accuracy.shape[0]))

    def non_finite(self) -> dict[int, list[float]]:
        """Client id -> the temperatures whose cell is not finite (its training diverged there); only clients with some."""
        cells = {cid: [t for t, a in zip(self.temperatures, row) if not math.isfinite(a)] for cid, row in zip(self.client_ids(), self.accuracy)}
        return {cid: temps for cid, temps in cells.items() if temps}

    def correlation_markdown(self) -> str:
        """A.5's table: each measure vs the best temperature (and vs the gain), Pearson r and p."""
        lines = [f"# Temperature sweep: {self.accuracy.shape[0]} clients, T in {', '.join(f'{t:g}' for t in self.temperatures)}", ""]
        for target, title in (("best_temperature", "best temperature"), ("gain", "accuracy gain over the largest T")):
            lines += [f"## Client characteristic vs {title} (Pearson)", "", "| measure | r | p | n |", "|---|---|---|---|"]
            for row in self.correlation[target]:
                lines.append(f"| {row['measure']} | {_fmt(row['r'])} | {_fmt(row['p'])} | {row['n']} |")
            lines += ["", *(f"nan: no r, {why}." for why in undefined_notes(self.correlation[target]))]
            lines.append("")
        lines += [f"Not finite (training diverged; the best is taken over the other cells): {cells}." for cells in [describe_cells(self.non_finite())] if cells]
        return "\n".join(lines)


def describe_cells(cells: dict[int, list[float]]) -> str:
    """``client 1 at T = 1; client 2 at T = 0.5, 1`` ("" when none)."""
    return "; ".join(f"client {cid} at T = {', '.join(f'{t:g}' for t in temps)}" for cid, temps in cells.items())


def _fmt(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x:.3f}"


def parse_temperatures(text: str | Sequence[float] | None) -> list[float]:
    """``"0.05,0.1,1"`` (or a list) -> the temperatures in a run's range, sorted; a value given twice is refused (:func:`~chillfl.temperature.base.require_temperature`); None -> the default grid."""
    if text is None:
        return list(DEFAULT_TEMPERATURES)
    items: Sequence[Any] = text.split(",") if isinstance(text, str) else text
    values = []
    for item in items:
        try:
            value = float(item)
        except (TypeError, ValueError):
            raise ConfigError(TEMPERATURES_FIELD, f"expected comma-separated numbers > 0, got {item!r}") from None
        require_temperature(value, TEMPERATURES_FIELD)  # a run's own range and message: a grid point trains as a run's T
        values.append(value)
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:  # as compare's grids: a repeated point was dropped without a word (the grid the user typed was not the one run)
        raise ConfigError(TEMPERATURES_FIELD, f"duplicate values: {', '.join(f'{t:g}' for t in twice)} twice in {', '.join(f'{t:g}' for t in values)}")
    grid = sorted(values)
    if len(grid) < 2:
        raise ConfigError(TEMPERATURES_FIELD, f"give at least 2 distinct temperatures, got {list(items)!r}")
    return grid


def best_temperatures(accuracy: np.ndarray, temperatures: Sequence[float], ties: str = "mean") -> np.ndarray:
    """Per row of ``accuracy`` [clients, temps]: the temperature of the highest accuracy (ties: see Choices).

    Only finite cells compete: a training that diverged at one T gives a NaN cell, and NaN as the row's maximum
    matched no cell (NaN for the client, then for every correlation). A row with no finite cell gives NaN."""
    if ties not in TIES:
        raise choice_error(TIES_FIELD, ties, TIES)
    acc = np.asarray(accuracy, dtype=np.float64)
    temps = np.asarray(temperatures, dtype=np.float64)
    out = np.full(acc.shape[0], math.nan)
    for i, (row, top) in enumerate(zip(acc, best_accuracies(acc))):
        if math.isnan(top):
            continue
        tied = temps[np.isclose(row, top, rtol=0.0, atol=1e-12)]  # a NaN cell is close to nothing
        out[i] = tied.mean() if ties == "mean" else (tied.min() if ties == "lowest" else tied.max())
    return out


def best_accuracies(accuracy: np.ndarray) -> np.ndarray:
    """Per row: the highest finite accuracy (NaN when no cell is finite), without numpy's all-NaN warning."""
    acc = np.asarray(accuracy, dtype=np.float64)
    return np.array([row[np.isfinite(row)].max() if np.isfinite(row).any() else math.nan for row in acc])


def score_options(config: RunConfig) -> tuple[FedChillOptions, str | None]:
    """The options of the score on the plots, and a note when they are FedChill's defaults (None: the config's own).

    Why the note: the score is FedChill's Eq. 6, read from ``[temperature]`` only when its policy is ``fedchill``; under
    any other policy (``fixed``, a plugin's) the plots silently showed the defaults, which the config did not choose."""
    if reads_score(config):
        table = {k: v for k, v in config.temperature.items() if k != "policy"}
        return parse_options(FedChillOptions, table, "temperature"), None
    d = FedChillOptions()
    why = ("temperature.init = false: the run reads no score (its measure, normalisation and p_g are ignored)"
           if config.temperature.get("policy") == "fedchill" else
           f"temperature.policy {str(config.temperature.get('policy'))!r} has no heterogeneity score of its own")
    return d, f"h is Eq. 6 at FedChill's defaults (measure {d.measure}, normalisation {d.normalisation}, uniform p_g): {why}"


def reads_score(config: RunConfig) -> bool:
    """Whether the config's run computes FedChill's score from its ``[temperature]`` options (policy ``fedchill`` with
    ``init``): otherwise the run says it ignores them, and the sweep does not read them either (a ``p_g`` of the wrong
    length was refused here after the run had said it was ignored)."""
    return config.temperature.get("policy") == "fedchill" and config.temperature.get("init", True) is not False


def plot_score(config: RunConfig, counts: np.ndarray) -> np.ndarray:
    """The heterogeneity shown on the plots: Eq. 6 as FedChill would compute it for this config (:func:`score_options`)."""
    options, _ = score_options(config)
    return heterogeneity(counts, options.measure, options.p_g, options.normalisation)


def measure_table(counts: np.ndarray, p_g: Sequence[float] | None = None) -> dict[str, np.ndarray]:
    """Every registered client characteristic on its raw scale (A.5's predictors and more)."""
    return {name: heterogeneity(counts, name, p_g, "none") for name in MEASURES}


def local_spec(config: RunConfig) -> LocalSpec:
    """The config's client settings with its base loss and no method terms (local training only)."""
    losses = base_losses()
    if config.client.loss not in losses:
        raise choice_error("client.loss", config.client.loss, list(losses))
    c = config.client
    return LocalSpec(epochs=c.epochs, batch_size=c.batch_size, momentum=c.momentum, weight_decay=c.weight_decay, optim=c.optim(), base_loss=losses[c.loss])


def run_temperature_sweep(
    config: RunConfig,
    temperatures: Sequence[float] | str | None = None,
    *,
    ties: str = "mean",
    progress: Progress = True,
    write: bool = True,
) -> SweepResult:
    """Train every client alone at every temperature and evaluate it on its own split (see module docstring)."""
    grid = parse_temperatures(temperatures)
    if ties not in TIES:
        raise choice_error(TIES_FIELD, ties, TIES)
    check_sweep(config)
    if write:  # before the training: its folder is written only at the end (an unwritable out_dir was refused after it)
        check_out_dir(config.out_dir)
    data = build_data(config)
    all_counts = data.class_counts()
    clients = [cid for cid in range(data.num_clients) if all_counts[cid].sum() > 0]
    if len(clients) < data.num_clients:  # as a run does: it lists them under no_data and never trains them
        idle = [cid for cid in range(data.num_clients) if cid not in clients]
        say(f"{PREFIX}temperature sweep: clients {idle} have no training rows (a run lists them under no_data); skipped")
    if len(clients) < 2:
        raise ConfigError("federation.num_clients", f"the correlations need at least 2 clients with training rows, got {len(clients)}")
    split = scoring_split(data)
    empty = [cid for cid in clients if len(split_rows(data, split, cid)[1]) == 0]
    if empty and split == VALIDATION_SPLIT:
        raise ConfigError("eval.validation", f"clients {empty} have no local validation rows; the sweep scores every client on its own (raise eval.validation)")
    if empty:
        raise ConfigError("eval.client_split", f"clients {empty} have no evaluation samples; the sweep needs a split for every client")
    # one training a client from client.lr (round 1's): refused before any, naming client.epochs' schedule, as a run's
    # check does; the training's own check would blame "a method's stage" mid-sweep
    config.client.check_step_lr_floor(None, max(int(n) for n in data.train_sizes()), "client")
    model, initial = build_initial_model(config, data.dataset.input_shape, data.num_classes)
    spec = local_spec(config)
    counts = all_counts[clients]
    h = plot_score(config, counts)
    _, note = score_options(config)
    p_g = config.temperature.get("p_g") if reads_score(config) else None

    acc = np.zeros((len(clients), len(grid)))
    loss = np.zeros_like(acc)
    mode = as_mode(progress)  # the CLI's "lines" where stderr is no terminal: a \r-redrawn bar piles up into one line in a log
    bar: tqdm | ItemLines | NoBar = (ItemLines(len(clients), "temperature sweep", "client") if mode == "lines" else NoBar() if mode == "off" else
                                     tqdm(total=len(clients), desc="temperature sweep", unit="client", dynamic_ncols=True))
    device = next(iter(initial.values())).device
    # the bar first: closed however the loop ends (another thread's precision refused, a training error), or its tqdm
    # monitor thread outlived the sweep; then the config's math, not the caller's autocast or matmul precision (as a run)
    with bar, run_precision(config.precision, device):
        for i, cid in enumerate(clients):
            x, y = data.client_train(cid)
            xe, ye = split_rows(data, split, cid)
            seed = derive_seed(config.seed, "sweep", cid)
            for j, t in enumerate(grid):
                out = train_client(model, initial, x, y, spec=spec, lr=config.client.lr, temperature=t, context={}, generator=torch.Generator().manual_seed(seed))
                acc[i, j], loss[i, j] = evaluate(model, out.params, xe, ye, config.eval.batch_size)
            bar.set_postfix({"best T": f"{best_temperatures(acc[i : i + 1], grid, ties)[0]:g}"}, refresh=False)
            bar.update(1)

    best_t = best_temperatures(acc, grid, ties)
    best_acc = best_accuracies(acc)
    gain = best_acc - acc[:, -1]
    measures = measure_table(counts, p_g)
    result = SweepResult(grid, acc, loss, counts, h, best_t, best_acc, gain, clients=clients, score_note=note, split=split)
    left_out(result)
    result.correlation = {"best_temperature": finite_correlation(measures, best_t), "gain": finite_correlation(measures, gain)}
    if write:
        result.folder = _write(config, result, ties)
    return result


def check_sweep(config: RunConfig) -> None:
    """The sweep's own requirements of the config, checked before the run's (:func:`check_parts`): a run's reason, such as
    FedChill's decay needing each client's accuracy, is not why the sweep, which runs no decay, refuses it."""
    if config.eval.clients == "none":
        raise ConfigError("eval.clients", "the sweep evaluates every client on its own split; set eval.clients = 'sampled' or 'all'")


def finite_correlation(measures: dict[str, np.ndarray], target: np.ndarray) -> list[CorrelationRow]:
    """:func:`correlation_table` over the clients whose ``target`` is finite: one client whose training diverged made
    every r NaN. Fewer than 2 such clients: every row NaN, saying why."""
    keep = np.isfinite(target)
    if keep.sum() < 2:
        why = f"only {int(keep.sum())} client(s) have a finite value (training diverged)"
        return [undefined_row(name, int(keep.sum()), why) for name in measures]
    return correlation_table({name: values[keep] for name, values in measures.items()}, target[keep])


def left_out(result: SweepResult) -> None:
    """Name, once on stderr, each client a correlation leaves out; refuse when fewer than 2 have a best temperature."""
    ids = result.client_ids()
    dead = [ids[i] for i in np.flatnonzero(np.isnan(result.best_accuracy))]
    if len(ids) - len(dead) < 2:
        raise ConfigError("client.lr", f"the sweep's training diverged at every temperature for clients {dead}, leaving "
                                       f"{len(ids) - len(dead)} client(s) to correlate; lower client.lr or drop the lowest temperatures")
    if dead:
        say(f"{PREFIX}temperature sweep: clients {dead} have no finite accuracy at any temperature (training diverged); "
            "left out of the correlations")
    no_gain = [ids[i] for i in np.flatnonzero(np.isfinite(result.best_accuracy) & ~np.isfinite(result.gain))]
    if no_gain:
        say(f"{PREFIX}temperature sweep: clients {no_gain} have no finite accuracy at the largest temperature; "
            "left out of the gain correlation")


def _write(config: RunConfig, result: SweepResult, ties: str) -> Path:
    """The sweep's folder, written as ``NAME-temperature-sweep.partial`` and renamed once whole. Whatever stops the
    writing (a Ctrl-C, a full disk, a figure that fails) removes it again: nothing resumes an analysis, and a
    half-written ``.partial`` only pushed the next sweep of the name to ``NAME-temperature-sweep-2``.

    Claimed as a run's folder is (:func:`~chillfl.storage.results.claim_dir`): it appears under its name locked and
    holding its ``config.toml``, never empty, where another process's claim (a rename, which replaces an empty folder)
    took it over; two sweeps of one name at once get ``NAME-temperature-sweep`` and ``-2``, each its own. A file system
    without file locks is no refusal (``locks=False``): the claim comes after all the training, and nothing resumes or
    shares a sweep's folder."""
    (folder, partial, lock), held = made_held(
        lambda: claim_dir(Path(config.out_dir), f"{config.name}-temperature-sweep", lambda made: _write_config(made, config), locks=False))
    try:
        held.release()  # one that came meanwhile lands here, where the folder is removed again
        _fill(partial, config, result, ties)
        folder = rename_free(partial, folder, f"{config.name}-temperature-sweep")  # one finished meanwhile: the next free -N
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    finally:
        lock.release()
    return folder


def _write_config(folder: Path, config: RunConfig) -> None:
    """The sweep's ``config.toml``: its folder's first file (:func:`_write`)."""
    (folder / "config.toml").write_text(to_toml(config.to_dict()), encoding="utf-8")


def _fill(partial: Path, config: RunConfig, result: SweepResult, ties: str) -> None:
    """The sweep's files beside its ``config.toml``: the per-client table, the correlations and the two figures."""
    non_finite = result.non_finite()
    clients = [
        {
            "client": cid,
            "size": int(result.class_counts[i].sum()),
            "class_counts": [int(c) for c in result.class_counts[i]],
            "heterogeneity": float(result.heterogeneity[i]),
            "accuracy": [float(a) for a in result.accuracy[i]],
            "loss": [float(v) for v in result.loss[i]],
            "non_finite_temperatures": non_finite.get(cid, []),  # cells left out of the best: training diverged there
            "best_temperature": float(result.best_temperature[i]),
            "best_accuracy": float(result.best_accuracy[i]),
            "gain": float(result.gain[i]),
        }
        for i, cid in enumerate(result.client_ids())
    ]
    skipped = sorted(set(range(max(result.client_ids()) + 1)) - set(result.client_ids()))  # no training rows (a run's no_data)
    sweep = {"temperatures": result.temperatures, "ties": ties, "split": result.split, "clients": clients, "skipped_no_training_rows": skipped,
             **({"heterogeneity_note": result.score_note} if result.score_note else {})}
    # strict JSON, as every other analysis writes (non-finite as null): an undefined r, a diverged cell's accuracy was a bare NaN
    (partial / TEMPERATURE_SWEEP_FILE).write_text(json.dumps(strict(sweep), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    (partial / "correlation.json").write_text(json.dumps(strict(result.correlation), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    (partial / "correlation.md").write_text(result.correlation_markdown(), encoding="utf-8")
    plot_heatmap(result, partial / "heatmap.png", title=config.name)
    plot_scatter(result, partial / "scatter.png", title=config.name)


# ----------------------------------------------------------------------------- plots


def plot_heatmap(result: SweepResult, path: str | Path, title: str = "") -> None:
    """Fig. 1 (left): client x temperature accuracy on each client's own split (its label names which), rows sorted by
    heterogeneity (top: least)."""
    need("matplotlib", "plots", "plots")  # lazy: matplotlib is the `plots` extra
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from chillfl.plots.figure import fit_title, save_figure
    from matplotlib.patches import Rectangle

    order = np.argsort(result.heterogeneity, kind="stable")
    grid = result.accuracy[order]
    n, m = grid.shape
    fig = Figure(figsize=(1.1 * m + 3.0, max(3.0, 0.32 * n + 1.6)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(100 * grid, aspect="auto", cmap="viridis", interpolation="nearest")
    fig.colorbar(image, ax=ax, label=result.accuracy_label())
    ax.set_xticks(range(m), [f"{t:g}" for t in result.temperatures])
    ids = result.client_ids()
    ax.set_yticks(range(n), [f"client {ids[c]} (h={result.heterogeneity[c]:.2f})" for c in order], fontsize=7 if n > 20 else 9)
    ax.set_xlabel("training temperature T")
    # over the figure, wrapped to its width: a long run name as the axes' title was cut off at both edges of the image
    fit_title(fig, f"{title}: accuracy per client and temperature" if title else "accuracy per client and temperature")
    for i, (row, top) in enumerate(zip(grid, result.best_accuracy[order])):
        for j in np.flatnonzero(np.isclose(row, top, rtol=0.0, atol=1e-12)):  # the finite best: a NaN cell (blank) never is
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.5))
        if n * m <= 400:
            lo, hi = image.get_clim()
            for col, value in enumerate(row):
                light = (100 * value - lo) / max(hi - lo, 1e-9) > 0.6  # viridis is light at the top
                ax.text(col, i, f"{100 * value:.0f}", ha="center", va="center", fontsize=7, color="black" if light else "white")
    fig.tight_layout()
    note_below(fig, result.score_note)  # its rows' h and their order are that score too
    save_figure(fig, path, dpi=110)  # atomic, never through a link planted at path


NOTE_CHARS_PER_INCH = 15
"""Characters of a fontsize-7 note that fit an inch of figure width, with room to spare (DejaVu Sans averages ~13)."""


def note_below(fig: Any, note: str | None) -> None:
    """``note`` under the axes, wrapped to the figure's width, the axes raised to make room (nothing without one).
    Why wrapped: the heat map of a short grid is ~5 inches wide, and a note of one line ran off its edge."""
    if not note:
        return
    lines = textwrap.wrap(note, max(20, int(fig.get_figwidth() * NOTE_CHARS_PER_INCH)))
    inches = 0.15 + 0.13 * len(lines)  # fontsize 7: ~0.12 inch a line
    bottom = fig.subplotpars.bottom + inches / fig.get_figheight()
    fig.subplots_adjust(bottom=min(0.5, bottom))
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, ha="left", va="bottom")


T_COLOURS = "viridis"
"""The scatter's colour map of T: sequential, so that every T has a colour; the diverging ``coolwarm`` put the grid's
middle T (0.25 of 0.05-1 on its log scale) at its white centre, where those dots vanished on the white axes."""


def plot_scatter(result: SweepResult, path: str | Path, title: str = "") -> None:
    """Fig. 1 (right): heterogeneity vs accuracy coloured by T; plus A.5's heterogeneity vs best T with a trend line."""
    need("matplotlib", "plots", "plots")  # lazy: matplotlib is the `plots` extra
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure
    from chillfl.plots.figure import fit_title, legend_below, plain_log_labels, save_figure

    temps = np.asarray(result.temperatures)
    fig = Figure(figsize=(11, 4.2))
    FigureCanvasAgg(fig)
    ax, ax_best = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    h = np.repeat(result.heterogeneity, len(temps))
    colour = np.tile(temps, len(result.heterogeneity))
    points = ax.scatter(h, 100 * result.accuracy.ravel(), c=colour, cmap=T_COLOURS, norm=LogNorm(temps.min(), temps.max()), s=22, alpha=0.85)
    ax.scatter(result.heterogeneity, 100 * result.best_accuracy, facecolors="none", edgecolors="black", s=70, linewidths=1.0, label="client's best")
    plain_log_labels(fig.colorbar(points, ax=ax, label="temperature T").ax.yaxis)  # 0.1, 0.5, 1, not 10^-1 and 10^0 alone
    ax.set(xlabel="heterogeneity score h (Eq. 6)", ylabel=result.accuracy_label(), title="accuracy vs heterogeneity, by T")
    ax_best.scatter(result.heterogeneity, result.best_temperature, color="tab:blue", s=30)
    fit = np.isfinite(result.best_temperature)  # a client whose training diverged at every T has no best one
    if fit.sum() >= 2 and np.ptp(result.heterogeneity[fit]) > 0:
        slope, intercept = np.polyfit(result.heterogeneity[fit], result.best_temperature[fit], 1)
        xs = np.linspace(result.heterogeneity[fit].min(), result.heterogeneity[fit].max(), 2)
        # r of the points drawn: the ratio score's row was quoted whatever the x axis was (measure = size: its r had the other sign)
        (row,) = correlation_table({"h": result.heterogeneity[fit]}, result.best_temperature[fit])
        said = f"Pearson r = {_fmt(row['r'])} of the plotted h" if not math.isnan(row["r"]) else f"no Pearson r: {row.get('undefined', 'undefined')}"
        ax_best.plot(xs, slope * xs + intercept, color="tab:red", lw=1, label=f"trend ({said})")  # not "r = nan" in a legend
    ax_best.set(xlabel="heterogeneity score h (Eq. 6)", ylabel="best temperature", title="best temperature vs heterogeneity (A.5)")
    for a in (ax, ax_best):
        a.grid(alpha=0.3)
        if a.get_legend_handles_labels()[0]:  # under the panel: inside, its legend covered points (a scatter has some in every corner)
            legend_below(a)
    if title:
        fit_title(fig, title)  # wrapped: a long run name ran past both edges
    fig.tight_layout()
    note_below(fig, result.score_note)
    save_figure(fig, path, dpi=110)  # atomic, never through a link planted at path


# ----------------------------------------------------------------------------- CLI


def cmd_temperature_sweep(args: argparse.Namespace) -> int:
    """``chillfl analyze temperature-sweep``: run the sweep, print the A.5 table and the folder."""
    overrides = parse_overrides(list(args.overrides))
    if args.out is not None:  # -o wins over an override out_dir=, as `chillfl run --out` does
        check_folder(args.out, out_field(args))
        overrides["out_dir"] = args.out
    config = load_config(resolve_config(args.config), overrides)
    check_sweep(config)  # first: a run's reason to refuse the config (e.g. FedChill's decay) is not the sweep's
    check_parts(config)  # the sweep trains without the method's parts, but a config it names wrongly is still a mistake
    for module, what in (("scipy.stats", "correlations"), ("matplotlib", "plots")):  # before the sweep trains anything
        need(module, "analysis", what)
    with stopped_as(lambda: RunNotStarted(None)):  # interrupted: "nothing was written" (its .partial is removed), not a bare line
        result = run_temperature_sweep(config, args.temperatures, ties=args.ties, progress=mode_for(args.quiet))
    print(describe_split(result.split, config.eval.validation))
    print("best temperature per client: " + ", ".join(f"{c}: {t:g}" if math.isfinite(t) else f"{c}: none" for c, t in zip(result.client_ids(), result.best_temperature)))
    if cells := describe_cells(result.non_finite()):
        print(f"not finite (training diverged; the best is over the other cells): {cells}")
    print(format_correlation(result.correlation["best_temperature"]))
    if result.score_note:
        print(f"note: {result.score_note}")
    print(f"results: {result.folder}")
    return 0


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``temperature-sweep`` under ``chillfl analyze``."""
    p = subparsers.add_parser(
        "temperature-sweep",
        help="train each client alone at each temperature: FedChill Fig. 1 heat map, scatter and A.5 correlations",
        description="Train every client alone at every temperature of a grid, evaluate on its own validation split "
        "(with eval.validation > 0; else its evaluation split, drawn from the test rows, and said so), "
        "and write config.toml, heatmap.png, scatter.png, correlation.md/.json and temperature_sweep.json (FedChill Fig. 1, App. A.5) "
        "into the folder <out_dir>/<name>-temperature-sweep/ (e.g. results/demo-temperature-sweep/; -2, -3, ... when it exists; "
        "-o DIR (or the override out_dir=PATH) sets where). "
        "The heterogeneity score h on the plots is FedChill's Eq. 6 with the config's [temperature] measure, p_g and "
        "normalisation when its policy is fedchill; under any other policy, FedChill's defaults (said in a note).",
    )
    p.add_argument("config", help="TOML config file or bundled experiment name (its client settings are used)")
    p.add_argument("overrides", nargs="*", help="section.option=value overrides, e.g. client.epochs=30")
    p.add_argument("--temperatures", default=None, metavar="T1,T2,...", help="temperature grid (default: 0.05,0.1,0.25,0.5,1)")
    # "-1,1" is read as an unknown flag by Python < 3.13's argparse ("expected one argument"), so the range check never said
    # what was wrong: a value that starts as a number does (as Python 3.13's matcher reads it; no option of this command does)
    p._negative_number_matcher = re.compile(r"^-\.?\d")
    p.add_argument("--ties", default="mean", help="best temperature when several tie: mean (default, of the tied ones), lowest, highest")
    add_out(p, "the folder the sweep's folder <name>-temperature-sweep/ goes into (default: the config's out_dir, results/)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress (a bar on a terminal, else a plain line every 30 s)")
    p.set_defaults(func=cmd_temperature_sweep)
    return p
