"""An analysis's output folder, checked before anything is computed.

Why: an unwritable ``-o`` was refused only after every run had been computed (minutes over many runs).
"""

from __future__ import annotations

from pathlib import Path

from chillfl.errors import ConfigError
from chillfl.paths import check_writable_dir

OUT = "--out"
"""The output option (with ``-o``); its error lines name it."""
FILE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg", ".json")
"""Suffixes of the files an analysis writes: a new output folder named so is a file name given for the folder."""


def check_folder(out: str, field: str = OUT) -> Path:
    """An output folder that can be written (made later), checked before anything is computed: one line naming ``field``.
    Why the suffix: ``-o reliability.png`` made a folder of that name, the files inside it."""
    folder = Path(out)
    if out and not folder.exists() and folder.suffix.lower() in FILE_SUFFIXES:
        raise ConfigError(field, f"is the folder the files are written into, got {out}, a file name ({folder.suffix}); give a folder")
    check_writable_dir(out, field)  # empty, under a file, on /proc, read-only: one line, not a traceback
    return folder
