"""Type checks of the Python API's flag and path keywords, where they enter (:mod:`chillfl.api`).

Python does not check annotations: ``progress="no"`` is a truthy string (a progress bar), ``write="False"``
writes, and ``out_dir=5`` became a folder named "5". Each is refused here in one ConfigError naming the
keyword, before anything runs or is written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import get_args

import numpy as np

from chillfl.errors import ConfigError
from chillfl.options import short_repr
from chillfl.progress import Progress, ProgressMode

MODES: tuple[str, ...] = get_args(ProgressMode)


def _what(value: object) -> str:
    return f"{short_repr(value)} ({type(value).__name__})"


def flag(value: object, keyword: str) -> bool:
    """``value`` as a bool when it is one (NumPy's too); else a ConfigError on ``keyword``."""
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(keyword, f"must be True or False, got {_what(value)}")
    return bool(value)


def optional_flag(value: object, keyword: str) -> bool | None:
    """:func:`flag`, or None (the keyword's "decide for me")."""
    return None if value is None else flag(value, keyword)


def progress_mode(value: object, keyword: str = "progress") -> Progress:
    """True, False, or one of the runner's modes ("bar", "lines", "off"); else a ConfigError on ``keyword``."""
    if isinstance(value, str):
        if value not in MODES:
            raise ConfigError(keyword, f"must be True, False or one of {', '.join(repr(m) for m in MODES)}, got {short_repr(value)}")
        return value  # type: ignore[return-value]  # one of MODES
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(keyword, f"must be True, False or one of {', '.join(repr(m) for m in MODES)}, got {_what(value)}")
    return bool(value)


def path(value: object, keyword: str) -> str | Path:
    """``value`` when it names a path (a str or an ``os.PathLike`` giving a str); else a ConfigError on ``keyword``."""
    if isinstance(value, str) or (isinstance(value, os.PathLike) and isinstance(os.fspath(value), str)):
        if not os.fspath(value):
            raise ConfigError(keyword, "must name a folder, got an empty string")
        return value if isinstance(value, (str, Path)) else Path(os.fspath(value))
    raise ConfigError(keyword, f"must be a path (a str or a pathlib.Path), got {_what(value)}")


def optional_path(value: object, keyword: str) -> str | Path | None:
    """:func:`path`, or None (the keyword's default place)."""
    return None if value is None else path(value, keyword)
