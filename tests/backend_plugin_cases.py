"""Plugins and per-client optimiser state on the Ray and Flower backends: the cases both test files run.

``tests/test_backend_plugins.py`` runs them through chillfl's Flower server and client apps in this process (no Ray);
``tests/private_net/test_plugins_on_backends.py`` on a local Ray (``executor = "ray"``) and under Flower's simulation
engine. The user's modules are written to a folder put on ``sys.path`` (not the working directory): the workers must
import them from the driver's import path, as the ``processes`` executor's do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chillfl.config import RunConfig, load_config
from test_extending_docs import files
from test_objective_plugin_terms import PLUGIN as USER_TERM
from test_plugin_models import USER_MODELS
from test_plugin_partitioners import USER_SPLITS

MODULES = {"my_methods": files()["my_methods.py"], "my_fl_models": USER_MODELS, "my_fl_splits": USER_SPLITS, "ext_term_plugin": USER_TERM}
"""docs/extending.md's ``my_methods.py`` (FedDyn: an aggregator with a client half, client state and a loss term), and
the plugin model, partitioner and loss term of the tests of those parts."""

BASE: dict[str, Any] = {
    "seed": 5,
    "threads": 1,
    "device": "cpu",
    "dataset.name": "digits",
    "model.name": "mlp",
    "model.hidden": [16],
    "federation.num_clients": 4,
    "federation.clients_per_round": 3,
    "federation.rounds": 3,  # 3 of 4: clients come back
    "client.batch_size": 32,
    "client.lr": 0.05,
    "eval.client_split_size": 20,
}

PLUGINS: dict[str, Any] = {
    "algorithm": {"name": "my_methods:FEDDYN", "alpha": 0.01},
    "model": {"name": "my_fl_models:Net", "hidden": 10},
    "partition": {"name": "my_fl_splits:round_robin", "offset": 2},
    "objective": {"terms": [{"name": "ext_term_plugin:L2", "weight": 0.001}]},
}
"""Every part by import path in one run: FedDyn (server rule, client half, term), a model, a partitioner, a term."""

CASES: dict[str, dict[str, Any]] = {
    "plugins": PLUGINS,
    "local-kept-momentum": {"algorithm": {"name": "local_only", "keep_optimizer_state": True}, "client.momentum": 0.9},
    "local-kept-adam": {
        "algorithm": {"name": "local_only", "keep_optimizer_state": True},
        "client.optimizer": "adam",
        "model": {"name": "my_fl_models:Net", "hidden": 10},
        "partition": {"name": "my_fl_splits:halves"},  # drawn from the partition's seeded rng: a Flower node rebuilds the same split
    },
    "apfl-alpha-sgd": {"algorithm": {"name": "apfl", "alpha_step": "sgd", "alpha_lr": 0.02}, "client.momentum": 0.9},
}
"""Local-only's kept optimiser state (momentum; Adam's moments and step count, with a plugin model and a seeded split) and
APFL's own alpha step: the client states a backend must carry from one participation to the next."""

DEFAULTS: dict[str, dict[str, Any]] = {
    "local-kept-momentum": {"algorithm": {"name": "local_only"}},
    "local-kept-adam": {"algorithm": {"name": "local_only"}},
    "apfl-alpha-sgd": {"algorithm": {"name": "apfl"}},
}
"""The same runs with the option off: a case must differ from it, or the backend was not shown to carry anything."""


def write_modules(folder: Path) -> None:
    """The user's modules as ``.py`` files in ``folder``."""
    for name, source in MODULES.items():
        (folder / f"{name}.py").write_text(source, encoding="utf-8")


def config(case: str, out_dir: Path, executor: str = "sequential", **extra: Any) -> RunConfig:
    """Case ``case``'s config (``extra``: more overrides, e.g. ``checkpoint.every``)."""
    return load_config(None, {**BASE, "name": case, "out_dir": str(out_dir), "executor": executor, **CASES[case], **extra})
