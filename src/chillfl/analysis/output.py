"""The output option every analysis spells alike: ``-o/--out`` (a folder; cache-ratio's: its figure file).

Why: calibration, cka, aggregation-* and grad-norms took ``-o/--out``, while cache-ratio took ``-o/--output``,
soft-label-entropy ``--out-dir`` and temperature-sweep only the override ``out_dir=``: a command line moved from one
analysis to another failed on the option's name. The old spellings stay accepted (hidden from ``--help``), so that
existing scripts run on, and an error names the spelling that was typed.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Sequence

from chillfl.errors import ConfigError
from chillfl.paths import check_name_lengths, check_writable_dir, home_path

OUT = "--out"
"""The one spelling (with ``-o``); its error lines name it."""
FILE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg", ".json")
"""Suffixes of the files an analysis writes: a new output folder named so is a file name given for the folder."""


class _Out(argparse.Action):
    """Stores the value and, in ``out_field``, the spelling typed (``-o`` is ``--out``): the one an error names."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, home_path(values) if isinstance(values, str) else values)
        namespace.out_field = OUT if option_string in (None, "-o", OUT) else option_string


def add_out(parser: argparse.ArgumentParser, help: str, *, old: Sequence[str] = (), default: str | None = None, metavar: str = "DIR") -> None:
    """``-o/--out`` into ``args.out``, and each of the ``old`` spellings as a hidden alias of it."""
    parser.add_argument("-o", OUT, dest="out", action=_Out, default=default, metavar=metavar, help=help)
    for name in old:
        parser.add_argument(name, dest="out", action=_Out, default=argparse.SUPPRESS, metavar=metavar, help=argparse.SUPPRESS)
    parser.set_defaults(out_field=OUT)


def out_field(args: argparse.Namespace) -> str:
    """The spelling of the output option the command line used (``--out`` when it used none)."""
    return str(getattr(args, "out_field", OUT))


def check_folder(out: str, field: str = OUT) -> Path:
    """An output folder that can be written (made later), checked before anything is computed: one line naming ``field``.
    Why the suffix: ``-o reliability.png`` made a folder of that name, the files inside it."""
    folder = Path(out)
    check_name_lengths(out, field)  # before exists(), which raises for a component over 255 bytes
    if out and not folder.exists() and folder.suffix.lower() in FILE_SUFFIXES:
        raise ConfigError(field, f"is the folder the files are written into, got {out}, a file name ({folder.suffix}); give a folder")
    check_writable_dir(out, field)  # empty, under a file, on /proc, read-only: one line, not a traceback
    return folder
