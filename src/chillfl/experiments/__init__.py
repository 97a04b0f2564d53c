"""Bundled experiment configs (TOML), addressable by name, e.g. ``chillfl run flexchill/table4-digits``.

Files whose name starts with ``_`` (``flexchill/_base-digits.toml``) are shared
bases that configs ``extends``: not experiments, so neither listed nor found by name.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

DEMO_GRID = ["temperature=1,0.25,0.05"]
"""The demo's temperatures: ``chillfl run`` with no config compares demo.toml at these."""


def catalogue_notes() -> tuple[dict[str, str], dict[str, float]]:
    """``_catalogue.toml``: folder -> the paper it reruns, and experiment -> its measured CPU minutes."""
    with (experiments_root() / "_catalogue.toml").open("rb") as f:
        notes = tomllib.load(f)
    return dict(notes["papers"]), {k: float(v) for k, v in notes["measured_cpu_minutes"].items()}


def experiments_root() -> Path:
    return Path(str(resources.files("chillfl.experiments")))


def bundled_experiments() -> list[str]:
    """Names of the bundled configs (relative paths without ``.toml``)."""
    root = experiments_root()
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.toml") if not is_base(p.relative_to(root)))


def is_base(path: Path) -> bool:
    """A shared base (``_base-digits.toml``): some part of its path starts with ``_``."""
    return any(part.startswith("_") for part in path.parts)


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False for paths the OS refuses to look at (too long, NUL): the reader then says "not found"."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def resolve_config(name_or_path: str) -> Path:
    """A config file path: an existing file, else a bundled experiment name; unknown -> the path itself."""
    path = Path(name_or_path)
    if _is_file(path):
        return path
    relative = Path(name_or_path.removesuffix(".toml") + ".toml")
    if is_base(relative) or relative.is_absolute() or ".." in relative.parts:
        return path
    bundled = experiments_root() / relative
    return bundled if _is_file(bundled) else path
