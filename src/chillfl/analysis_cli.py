"""``chillfl analyze ...``: each analysis module registers its own subcommand.

The analysis modules import torch, so their subcommands are built only when the command line
asks for ``analyze``: ``chillfl --help`` and every other command stay free of torch's import.
"""

from __future__ import annotations

import argparse
import importlib

ANALYSES = (
    "chillfl.analysis.temperature_sweep",
    "chillfl.analysis.cache_ratio",
    "chillfl.analysis.scarlet_study",
    "chillfl.analysis.calibration",
    "chillfl.analysis.cka",
    "chillfl.analysis.aggregation",
    "chillfl.analysis.grad_norms",
)
HELP = "analyses: temperature-sweep, cache-ratio, soft-label-entropy, scarlet-deficit, calibration, cka, aggregation-accuracy, aggregation-entropy, grad-norms"


def add_analyze_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]", load: bool = True) -> None:
    """The ``analyze`` subcommand; ``load=False`` adds its name and help only (no analysis module is imported)."""
    parser = sub.add_parser("analyze", help=HELP)
    if not load:
        parser.add_argument("analysis", nargs=argparse.REMAINDER)
        return
    parser.add_argument("--import-plugins", action="store_true",
                        help="import the plugin modules the run folders' configs name (a run of your own on a plugin's method); "
                             "without it a folder is read as data, and an analysis that needs a plugin's code is refused in one line")
    analyses = parser.add_subparsers(dest="analysis", required=True)
    for module in ANALYSES:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:  # an analysis not installed in this build
            if exc.name != module:
                raise
            continue
        mod.add_parser(analyses)
