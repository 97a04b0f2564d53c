"""``chillfl analyze cache-ratio`` and ``chillfl analyze soft-label-entropy`` (SCARLET Figs. 3 and 4 c/d).

* ``cache-ratio`` simulates, for each cache duration D, the share of the
  round's public subset P^t served from the cache (Fig. 3: |P| = 10,000,
  |P^t| = 1,000). It uses the same validity rule and expiry policy as the
  protocol's :class:`~chillfl.protocols.softlabels.cache.ServerCache`, so it is the
  "simple simulation" Sec. IV-C suggests for choosing D. Prints the mean ratio
  over all rounds and over the last quarter (the steady state), writes a PNG.
* ``soft-label-entropy`` takes a set of soft-labels -- a ``.pt`` / ``.npy``
  file holding ``[n, C]`` (already averaged) or ``[K, n, C]`` (per client,
  averaged here), or two built-in examples -- and prints / plots the mean
  entropy of ERA (Eq. 2) against T and of Enhanced ERA (Eq. 4) against beta.

Choices
-------
* Built-in examples (Fig. 4 a/b): ``high`` = softmax(N(0, 0.5^2) logits) and
  ``low`` = softmax(N(0, 3^2) logits), 1,000 x 10, seeded; the paper shows one
  vector of each kind, we average over many so the curves are smooth.
* Default grids: T = the DS-FL tuning grid of Appendix B plus 1.0;
  beta = 0.5 ... 5 (beta = 1 recovers the input entropy, Fig. 4d).

Checked (2026-12) against: SCARLET Fig. 3 (|P| = 10,000, |P^t| = 1,000;
y: share of P^t cached, x: round; D = 10 ... 800) and Fig. 4 (c)(d) (ERA
entropy vs T on a log axis, Enhanced ERA entropy vs beta). Each run of the
command prints the closed-form steady state next to the simulated means.
"""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from chillfl.numeric import row_sum_tolerance
from chillfl.analysis.labels import ends_with, unique_label
from chillfl.analysis.output import add_out, check_folder, out_field
from chillfl.analysis.softlabels import (
    entropy_vs_beta,
    entropy_vs_temperature,
    plot_cache_ratio,
    plot_entropy_vs_beta,
    plot_entropy_vs_temperature,
    simulate_cache_ratio,
    steady_state_cache_ratio,
)
from chillfl.distillation.era import require_beta, require_era_temperature
from chillfl.errors import ConfigError
from chillfl.options import comma_items
from chillfl.extras import need
from chillfl.paths import check_writable_dir

DEFAULT_DURATIONS = "10,25,50,100,200,800"
DEFAULT_TEMPS = "0.001,0.005,0.01,0.05,0.1,0.5,1"
DEFAULT_BETAS = "0.5,1,1.25,1.5,2,3,5"
EXAMPLES = ("high", "low")


MAX_PUBLIC = 10**8
MAX_ROUNDS = 10**6
MAX_WORK = 10**10
"""Bounds of ``cache-ratio``: |P| (one int64 each), rounds, and rounds x |P| (each round draws from all of P)."""


def _numbers(text: str, field: str, kind: type = float) -> list[Any]:
    try:
        values = [kind(v) for v in comma_items(text, field, f"comma-separated {kind.__name__}s")]
    except ValueError:
        raise ConfigError(field, f"expected comma-separated {kind.__name__}s, got {text!r}") from None
    if not values:
        raise ConfigError(field, "give at least one value")
    return values


def _writable_png(path: str, field: str) -> Path:
    """A figure path this user can write (:func:`chillfl.plots.figure.figure_file`: ``name`` is ``name.png``): not a folder,
    its folder creatable (else one line naming ``field``)."""
    from chillfl.plots.figure import figure_file

    out = figure_file(path, field)
    check_writable_dir(str(out.absolute().parent), field)
    return out


def cmd_cache_ratio(args: argparse.Namespace) -> int:
    need("matplotlib", "analysis", "plots")  # the command's output is a figure: say so before simulating

    durations = _numbers(args.durations, "--durations", int)
    if any(d < 0 for d in durations):
        raise ConfigError("--durations", f"must be >= 0, got {durations}")
    if not 1 <= args.public_size <= MAX_PUBLIC:  # the cache is one int64 per public sample
        raise ConfigError("--public-size", f"must be in [1, {MAX_PUBLIC}], got {args.public_size}")
    if not 0 < args.subset_size <= args.public_size:
        raise ConfigError("--subset-size", f"must be in 1..--public-size={args.public_size}, got {args.subset_size}")
    if not 1 <= args.rounds <= MAX_ROUNDS:
        raise ConfigError("--rounds", f"must be in [1, {MAX_ROUNDS}], got {args.rounds}")
    if args.rounds * args.public_size > MAX_WORK:  # each round draws from all of P: minutes beyond this
        raise ConfigError("--rounds", f"--rounds x --public-size must be at most {MAX_WORK:.0e} (a simulation of minutes), got {args.rounds * args.public_size:.1e}")
    check_seed(args.seed)
    output = _writable_png(args.out, out_field(args))
    ratios = {d: simulate_cache_ratio(args.public_size, args.subset_size, d, args.rounds, args.seed, args.on_expire) for d in durations}
    tail = max(1, args.rounds // 4)
    print(f"cached share of P^t (|P| = {args.public_size}, |P^t| = {args.subset_size}, {args.rounds} rounds, expiry: {args.on_expire})")
    print("| D | mean ratio | mean ratio, last quarter | steady state (closed form) | soft-labels sent vs D = 0 |")
    print("|---|---|---|---|---|")
    for d, r in ratios.items():
        mean = float(np.mean(r))
        closed = steady_state_cache_ratio(args.subset_size / args.public_size, d, args.on_expire)
        print(f"| {d} | {mean:.3f} | {float(np.mean(r[-tail:])):.3f} | {closed:.3f} | {1 - mean:.3f} |")
    out = plot_cache_ratio(ratios, output)
    print(f"plot: {out}")
    return 0


def check_seed(seed: int) -> None:
    """Refuse a ``--seed`` outside [0, 2**63) in one line. Why: torch's generator takes at most 2**64 - 1, and a larger
    seed (or ``seed + 1``, the second example's) ended in a traceback ("Overflow when unpacking long long"); the bound
    leaves room for every example's ``seed + i``."""
    if not 0 <= seed < 2**63:
        raise ConfigError("--seed", f"must be in [0, 2**63), got {seed}")


def example_soft_labels(kind: str, seed: int, n: int = 1000, num_classes: int = 10) -> torch.Tensor:
    """Fig. 4 (a) ``high``- or (b) ``low``-entropy soft-labels ``[n, C]`` (seeded, global RNG untouched)."""
    scale = {"high": 0.5, "low": 3.0}[kind]
    gen = torch.Generator().manual_seed(seed)
    return torch.softmax(scale * torch.randn((n, num_classes), generator=gen, dtype=torch.float64), dim=-1)


def _short_reason(exc: BaseException) -> str:
    """A loader's error in a few words. Why: torch's weights-only refusal is a paragraph with a link, and it filled the
    one-line error (704 characters, literal ``\\n`` included)."""
    if isinstance(exc, pickle.UnpicklingError):
        return "torch.load (weights only) cannot read tensors from it"
    first = " ".join(str(exc).split()).split(". ")[0] or type(exc).__name__
    return first if len(first) <= 100 else first[:97] + "..."


def load_soft_labels(path: str) -> torch.Tensor:
    """A ``.pt`` (tensor) or ``.npy`` file of soft-labels ``[n, C]`` or ``[K, n, C]``, non-negative."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError("--soft-labels", f"file not found: {p}")
    try:
        data = torch.from_numpy(np.load(p)) if p.suffix == ".npy" else torch.load(p, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's error
        raise ConfigError("--soft-labels", f"{p} is not a soft-label file (.pt tensor / .npy array): {_short_reason(exc)}") from None
    if not isinstance(data, torch.Tensor) or data.dim() not in (2, 3) or not data.is_floating_point():
        raise ConfigError("--soft-labels", f"{p} must hold a float tensor [n, C] or [K, n, C]")
    if not bool(torch.isfinite(data).all()):
        raise ConfigError("--soft-labels", f"{p} has nan or infinite entries; soft-labels are probabilities")
    if bool((data < 0).any()):
        raise ConfigError("--soft-labels", f"{p} has negative entries; soft-labels are probabilities")
    sums = data.to(torch.float64).sum(-1)
    tol = row_sum_tolerance(data.dtype, data.shape[-1])
    bad = (sums - 1).abs() > tol
    if bool(bad.any()):  # counts, ReLU'd logits, an all-zero row: beta = 1 read them as probabilities (a negative "entropy")
        row = tuple(int(i) for i in bad.nonzero()[0])
        where = f"row {row[0]}" if len(row) == 1 else f"row {row}"
        raise ConfigError("--soft-labels", f"{p}: {where} sums to {float(sums[row]):.6g}; each row must sum to 1 (within {tol:.3g}): "
                                           "soft-labels are probabilities")
    data = data.to(torch.float64)
    return data / data.sum(-1, keepdim=True)  # off 1 by rounding only: beta = 1 (returned unnormalised) is then an exact entropy


def soft_label_names(paths: Sequence[str]) -> dict[str, str]:
    """Each ``--soft-labels`` file under a name of its own, every file named by one rule: its stem (``a/x.npy``: ``x``),
    with as many parent folders as it takes to tell it from the other files
    (:func:`~chillfl.analysis.labels.unique_label`); or, where stems do not tell the files apart or a stem's label
    reads as another file's name, every file by its whole name (``x.npy``, ``x.pt``). A file given twice is one set.

    Why one rule for all: stems were used where unique and names where not, file by file, so ``a/x.npy``, ``a/x.pt``,
    ``b/x.npy`` came out ``x.npy``, ``x.pt`` and ``x`` (``b/x.npy`` under a name that reads as a file ``x``), beside
    ``b/x.npy.pt`` ``a/x.npy`` was ``x`` and ``b/x.npy.pt`` was ``x.npy``; and a stem equal to another file's path
    (``a/x.npy.pt``'s stem is ``a/x.npy``) took its entry, so ``a/x.npy`` was left out unsaid. Before that, ``a/x.npy``
    and ``b/x.npy`` were both ``x`` and only the last was printed and drawn."""
    files = {Path(p).resolve(): p for p in paths}
    stems = {f: f.with_suffix("") for f in files}
    if len(set(stems.values())) == len(stems):
        by_stem = {f: unique_label(s, stems.values()) for f, s in stems.items()}
        if not any(ends_with(g, label) for f, label in by_stem.items() for g in files if g != f):
            return {label: files[f] for f, label in by_stem.items()}
    return {unique_label(f, files): p for f, p in files.items()}


def cmd_soft_label_entropy(args: argparse.Namespace) -> int:
    need("matplotlib", "analysis", "plots")

    temps = _numbers(args.temps, "--temps")
    betas = _numbers(args.betas, "--betas")
    for t in temps:  # ERA's own bounds, on the flag: nan, or 1e-5, failed midway, naming era.temperature
        require_era_temperature(t, "--temps")
    for b in betas:
        require_beta(b, "--betas")
    check_folder(args.out, out_field(args))  # before anything is computed or drawn: one line, not a traceback
    check_seed(args.seed)
    sets = {label: load_soft_labels(path) for label, path in soft_label_names(args.soft_labels or []).items()}
    if not sets:
        sets = {f"{kind}-entropy example": example_soft_labels(kind, args.seed + i) for i, kind in enumerate(EXAMPLES)}
    for name, soft in sets.items():
        print(f"{name}:")
        print("  ERA (Eq. 2), mean entropy (nats) vs T:        " + "  ".join(f"T={t:g}: {e:.3f}" for t, e in zip(temps, entropy_vs_temperature(soft, temps))))
        print("  Enhanced ERA (Eq. 4), mean entropy vs beta:   " + "  ".join(f"b={b:g}: {e:.3f}" for b, e in zip(betas, entropy_vs_beta(soft, betas))))
    out_dir = Path(args.out)
    p1 = plot_entropy_vs_temperature(sets, temps, out_dir / "entropy_vs_temperature.png")
    p2 = plot_entropy_vs_beta(sets, betas, out_dir / "entropy_vs_beta.png")
    print(f"plots: {p1} {p2}")
    return 0


def add_parser(analyses: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register ``cache-ratio`` and ``soft-label-entropy`` under ``chillfl analyze``."""
    p = analyses.add_parser("cache-ratio", help="SCARLET Fig. 3: simulated share of P^t served from the cache, per duration D",
                            description="Simulate SCARLET's cache: the share of each round's P^t served from it, per duration D "
                                        "(SCARLET Fig. 3); prints the table and writes the figure to -o (default cache_ratio.png).")
    p.add_argument("--public-size", type=int, default=10_000, help="|P| (default 10000)")
    p.add_argument("--subset-size", type=int, default=1_000, help="|P^t| drawn per round (default 1000)")
    p.add_argument("--durations", default=DEFAULT_DURATIONS, help=f"comma-separated D values (default {DEFAULT_DURATIONS})")
    p.add_argument("--rounds", type=int, default=2_000, help="rounds to simulate (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulated draws of P^t (default 0)")
    p.add_argument("--on-expire", choices=("drop", "refresh"), default="drop", help="expiry policy (default drop = Algorithm 2)")
    add_out(p, "the figure's file, a PNG path (default cache_ratio.png)", old=("--output",), default="cache_ratio.png", metavar="FILE")
    p.set_defaults(func=cmd_cache_ratio)

    p = analyses.add_parser("soft-label-entropy", help="SCARLET Fig. 4 c/d: entropy of ERA vs T and Enhanced ERA vs beta",
                            description="Entropy of ERA's soft-labels against T and of Enhanced ERA's against beta (SCARLET Fig. 4 c/d); "
                                        "writes entropy_vs_temperature.png and entropy_vs_beta.png into -o.")
    p.add_argument("--soft-labels", action="append", metavar="FILE", help=".pt or .npy soft-labels [n, C] or [K, n, C] (repeatable; default: built-in examples)")
    p.add_argument("--temps", default=DEFAULT_TEMPS, help=f"ERA temperatures (default {DEFAULT_TEMPS})")
    p.add_argument("--betas", default=DEFAULT_BETAS, help=f"Enhanced ERA betas (default {DEFAULT_BETAS})")
    p.add_argument("--seed", type=int, default=0, help="seed of the built-in examples")
    add_out(p, "output folder: where entropy_vs_temperature.png and entropy_vs_beta.png go (default: the current directory)", old=("--out-dir",), default=".")
    p.set_defaults(func=cmd_soft_label_entropy)


def main(argv: Sequence[str] | None = None) -> int:  # pragma: no cover - convenience for python -m
    parser = argparse.ArgumentParser(prog="chillfl analyze")
    add_parser(parser.add_subparsers(dest="analysis", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))
