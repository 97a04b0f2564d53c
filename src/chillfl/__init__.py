"""chillfl: federated learning on non-IID data.

Logit chilling (FLex&Chill), FedChill, PA3Fed and SCARLET, with the baselines
they compare against, composed from orthogonal parts by configuration.

The Python API (``chillfl.run``, ``chillfl.TensorData``, ...; see
:mod:`chillfl.api` and docs/python-api.md) is loaded on first use, so
``import chillfl`` stays cheap: torch is imported only when an API name is.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_API = {
    "run": "api",
    "Result": "api",
    "TensorData": "api",
    "available": "api",
    "make_config": "api",
    "Callback": "runner",
    "RunOutput": "runner",
    "RunConfig": "config",
    "load_config": "config",
    "ConfigError": "errors",
    "ArrayDataset": "data",
}
"""Public name -> the ``chillfl`` submodule that defines it (imported on first access)."""

__all__ = [
    "ArrayDataset",
    "Callback",
    "ConfigError",
    "Result",
    "RunConfig",
    "RunOutput",
    "TensorData",
    "__version__",
    "available",
    "load_config",
    "make_config",
    "run",
]

if TYPE_CHECKING:
    from chillfl.api import Result, TensorData, available, make_config, run
    from chillfl.config import RunConfig, load_config
    from chillfl.data import ArrayDataset
    from chillfl.errors import ConfigError
    from chillfl.runner import Callback, RunOutput


def _submodule(where: str) -> ModuleType:
    """Plain import statements (not importlib), so the import graph test sees these dependencies."""
    if where == "api":
        from chillfl import api

        return api
    if where == "runner":
        from chillfl import runner

        return runner
    if where == "config":
        from chillfl import config

        return config
    if where == "errors":
        from chillfl import errors

        return errors
    from chillfl import data

    return data


def __getattr__(name: str) -> Any:
    """Import an API name's module on first access (PEP 562) and cache the name here."""
    where = _API.get(name)
    if where is None:
        raise AttributeError(f"module 'chillfl' has no attribute {name!r}")
    value = getattr(_submodule(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
