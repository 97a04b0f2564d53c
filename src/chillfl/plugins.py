"""Methods from outside the package: ``"pkg.module:Name"`` import paths and the ``chillfl.plugins`` entry points.

A config may name a user's aggregator by import path::

    [algorithm]
    name = "mypkg.robust:GeometricMedian"
    eps = 1e-6            # the class's own options, validated like a built-in's

and an installed distribution may register names under the entry-point group
``chillfl.plugins`` (``[project.entry-points."chillfl.plugins"] mymethod =
"mypkg.robust:GeometricMedian"``), which then show in ``chillfl list`` and are
used as ``name = "mymethod"``. The same works for temperature policies
(``[temperature] policy = ...``) and soft-label methods (``[distillation]
method = ...``); ``chillfl list`` shows each entry point under the part its
object belongs to. Nothing is registered in a global table: a name is
resolved where it is read, every time.

This module only finds and imports the named object; what it must be (an
aggregator class, or an :class:`~chillfl.aggregation.registry.AlgorithmSpec`)
is checked by the registry that reads it. A path that cannot be imported is
one :class:`~chillfl.errors.ConfigError` line naming the field.
"""

from __future__ import annotations

import importlib
import logging
import re
from importlib import metadata
from typing import Any, Callable, Sequence

from chillfl.errors import ConfigError

log = logging.getLogger(__name__)

GROUP = "chillfl.plugins"
_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


def is_import_path(name: str) -> bool:
    """Whether ``name`` reads as ``module.path:Attribute`` (a user's object) rather than a registered name."""
    return ":" in name


def load_object(path: str, field: str) -> Any:
    """The object ``path`` = ``"pkg.module:Name"`` names; a ConfigError on ``field`` when it cannot be imported."""
    if not _PATH.match(path):
        raise ConfigError(field, f"{path!r} is not an import path; write 'package.module:Name'")
    module_name, _, attribute = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - the user's module: any error while importing it is a bad config value
        raise ConfigError(field, f"cannot import module {module_name!r} of {path!r} ({type(exc).__name__}: {exc})") from None
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise ConfigError(field, f"module {module_name!r} has no attribute {attribute!r}")
        obj = getattr(obj, part)
    return obj


def entry_points() -> dict[str, str]:
    """Name -> import path of every ``chillfl.plugins`` entry point of the installed distributions."""
    return {ep.name: ep.value for ep in metadata.entry_points(group=GROUP)}


def plugin_names(accepts: Callable[[Any], bool] | None = None) -> list[str]:
    """Entry-point names, or those whose object ``accepts`` takes (each registry passes its own test: an
    aggregator, a temperature policy, a soft-label method), so that ``chillfl list`` shows each under its part.

    An entry point whose module cannot be imported is left out of every part, with one warning naming it.
    """
    names = sorted(entry_points())
    if accepts is None:
        return names
    out = []
    for name in names:
        try:
            obj = load_object(entry_points()[name], f"plugin {name!r}")
        except ConfigError as exc:
            log.warning("%s", exc)
            continue
        if accepts(obj):
            out.append(name)
    return out


def has_methods(obj: Any, methods: Sequence[str]) -> bool:
    """Whether ``obj`` (a class) has every one of ``methods``: how a registry recognises a user's class."""
    return isinstance(obj, type) and all(callable(getattr(obj, m, None)) for m in methods)


def resolve(name: str, field: str) -> Any | None:
    """The object ``name`` refers to: an import path, or an entry point's target; None when it is neither."""
    if is_import_path(name):
        return load_object(name, field)
    path = entry_points().get(name)
    return None if path is None else load_object(path, field)
