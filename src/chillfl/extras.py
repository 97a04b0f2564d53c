"""Optional dependencies, imported where they are used.

The core (``pip install chillfl``) needs torch, numpy, tqdm, safetensors and
tomli-w only. Everything else is an extra, imported lazily through
:func:`need`, which turns a missing package into one
:class:`~chillfl.errors.MissingExtra` line naming the extra to install:

=============  ==============================================  ================================
extra          packages                                        used by
=============  ==============================================  ================================
plots          matplotlib                                      run/compare figures, ``data show``
analysis       scipy, matplotlib                               ``chillfl analyze``
datasets       scikit-learn, scipy, mnist1d                    ``digits``, ``mnist1d``, ``svhn``
images         pillow                                          ``tiny_imagenet``, ``caltech256`` (JPEGs); ``flwr_femnist``, ``hf`` (images)
tensorboard    tensorboard                                     ``[log] sinks = ["tensorboard"]``
wandb          wandb                                           ``[log] sinks = ["wandb"]``
mlflow         mlflow-skinny (or mlflow), sqlalchemy, alembic  ``[log] sinks = ["mlflow"]``
hf             datasets (its pyarrow), pillow                  ``dataset.name = "hf"``; ``flwr_femnist``, ``flwr_shakespeare`` (LEAF parquet files)
flwr-datasets  flwr-datasets (and datasets)                    ``partition.name = "flwr"``
privacy        opacus                                          ``[privacy]`` (its accountant)
ray            ray                                             ``executor = "ray"``
flower         flwr[simulation]                                :mod:`chillfl.flower` apps
=============  ==============================================  ================================

``all`` is every extra above but ``ray`` and ``flower``; ``test``, ``dev`` and ``docs`` are the contributors' sets
(docs/install.md).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from pathlib import Path
from types import ModuleType

from chillfl.errors import MissingExtra
from chillfl.stop_signals import HeldSignals

PACKAGES = {"PIL": "pillow", "matplotlib": "matplotlib", "scipy": "scipy", "sklearn": "scikit-learn", "mnist1d": "mnist1d", "tensorboard": "tensorboard", "wandb": "wandb",
            "datasets": "datasets", "flwr_datasets": "flwr-datasets", "opacus": "opacus"}
"""Top-level import name -> the package name pip knows."""


def need(module: str, extra: str, what: str) -> ModuleType:
    """``import module``, or :class:`MissingExtra` (``package`` is needed for ``what``: pip install "chillfl[extra]").

    A handler that the import puts on the root logger is taken off again: opacus calls ``logging.basicConfig``
    when imported, which would print every ``chillfl`` log line of a private run a second time, in its format.

    The import runs with the stop signals held (:class:`~chillfl.stop_signals.HeldSignals`), the one that came acted
    on once it is done: a signal's exception raised inside a package's import can be dropped by the package's own code
    (an ``except Exception`` around a ``__set_name__`` error) or leave it half imported. These imports come after a
    command's held start (a comparison's check of its runs loads ``mnist1d``, or ``pyarrow`` for the LEAF files), where
    such a signal was lost: the command went on.
    """
    root = logging.getLogger()
    before = list(root.handlers)
    held = HeldSignals()
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        if exc.name is not None and exc.name.split(".")[0] != top:
            raise  # the package is there but one of *its* imports failed: a real error, not a missing extra
        raise MissingExtra(what, PACKAGES.get(top, top), extra) from None
    finally:
        for handler in [h for h in root.handlers if h not in before]:
            root.removeHandler(handler)
        held.release()


def package_file(package: str, extra: str, what: str, *parts: str) -> Path | None:
    """The data file ``parts`` inside installed ``package``, found without importing it; None where the package has no
    such file (another layout: read it through the package's own API instead). :class:`MissingExtra` as :func:`need`
    where the package is not installed.

    Why: scikit-learn's import took 0.75-1.3 s of every digits run's start-up (the demo's too), to read one bundled CSV.
    """
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise MissingExtra(what, PACKAGES.get(package, package), extra)
    for root in spec.submodule_search_locations or ():
        path = Path(root).joinpath(*parts)
        if path.is_file():
            return path
    return None


def have(module: str) -> bool:
    """Whether ``module`` can be imported (without raising)."""
    try:
        need(module, "", "")
    except MissingExtra:
        return False
    return True
