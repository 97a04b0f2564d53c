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
IMPORT_PLUGINS = ("import the plugin modules the run folders' configs name (a run of your own on a plugin's method); without it "
                  "a folder is read as data, and an analysis that needs a plugin's code is refused in one line")
"""``--import-plugins``' help: the flag is ``chillfl analyze``'s and every analysis's (``default=SUPPRESS`` there, so either
spelling sets it): typed after the analysis's name, as its refusal's hint reads, it was an unrecognized argument."""
HELP = "analyses: temperature-sweep, cache-ratio, soft-label-entropy, scarlet-deficit, calibration, cka, aggregation-accuracy, aggregation-entropy, grad-norms"


def add_analyze_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]", load: bool = True) -> None:
    """The ``analyze`` subcommand; ``load=False`` adds its name and help only (no analysis module is imported)."""
    parser = sub.add_parser("analyze", help=HELP)
    if not load:
        parser.add_argument("analysis", nargs=argparse.REMAINDER)
        return
    parser.add_argument("--import-plugins", action="store_true", help=IMPORT_PLUGINS)
    analyses = parser.add_subparsers(dest="analysis", required=True)
    for module in ANALYSES:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:  # an analysis not installed in this build
            if exc.name != module:
                raise
            continue
        mod.add_parser(analyses)
    for analysis in analyses.choices.values():  # after the analysis's name too, where its own --help lists it
        if "--import-plugins" not in analysis._option_string_actions:
            analysis.add_argument("--import-plugins", action="store_true", default=argparse.SUPPRESS, help=IMPORT_PLUGINS)
