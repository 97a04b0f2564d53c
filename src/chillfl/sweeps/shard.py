"""One comparison's runs split over several processes or machines (``chillfl run CONFIG --shard K/N``).

A cluster's array job starts N copies of one command, each with its own K::

    chillfl run experiment.toml --shard $SLURM_ARRAY_TASK_ID/4     # K = 1..4

Every shard plans the whole comparison, runs the runs ``i`` with ``i % N == K - 1``, and writes them into one
shared folder, ``OUT_DIR/NAME-compare.partial`` (a filesystem every shard sees): the first to start makes it,
the others join it when its ``sweep.json`` is theirs (same config, variants, seeds, tuning, code and torch;
anything else is refused, so two different comparisons never mix). A shard restarted after a crash reads its
finished runs back and resumes the stopped one, as ``chillfl resume`` does.

While they run, the shards hold a shared lock on the folder; the last one to end, finding every run finished,
writes the table as ``chillfl resume OUT_DIR/NAME-compare.partial`` would (the same numbers as one process
running the comparison, bit for bit on one machine and torch build). If a shard failed, that command, run once
the others have ended, runs what is missing and writes the table.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from chillfl.errors import ConfigError
from chillfl.storage.results import PARTIAL, remove_tree
from chillfl.sweeps.record import SWEEP_FILE, SweepRecord, write_sweep

FIELD = "shard"
_SHARD = re.compile(r"^\s*(\d{1,6})\s*/\s*(\d{1,6})\s*$")


@dataclass(frozen=True)
class Shard:
    """This process's share of a comparison's runs: the ``index``-th of ``count`` (1-based, as array job ids are)."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"K/N"`` with 1 <= K <= N; anything else is a ConfigError on ``shard``."""
        found = _SHARD.match(text)
        if found is None:
            raise ConfigError(FIELD, f"give K/N (this process runs the K-th of N shares, 1 <= K <= N), got {text!r}")
        index, count = int(found[1]), int(found[2])
        if not 1 <= index <= count:
            raise ConfigError(FIELD, f"K/N needs 1 <= K <= N, got {index}/{count}")
        return cls(index, count)

    def takes(self, i: int) -> bool:
        """Whether the ``i``-th run of the comparison (0-based, in plan order) is this shard's."""
        return i % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def join_folder(parent: Path, name: str, config_toml: str, record: SweepRecord, shard: Shard) -> tuple[Path, Path]:
    """``(final, partial)``: the comparison's shared ``parent/name.partial``, made by the first shard, joined by the others.

    The first shard fills a private folder and renames it into place (atomic: a shard that joins never sees it half
    written); a shard that finds it there joins when its ``sweep.json`` equals ``record``.
    """
    final, partial = parent / name, parent / f"{name}{PARTIAL}"
    if os.path.lexists(final):
        raise ConfigError(FIELD, f"{final} is finished (its table is written): nothing is left for shard {shard}; "
                                 "give another out_dir to run the comparison again")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        made = parent / f".{name}.shard-{os.getpid()}-{secrets.token_hex(4)}"
        made.mkdir()
    except OSError as exc:
        raise ConfigError("out_dir", f"cannot create a folder in {parent}: {exc.strerror or exc}") from None
    try:
        (made / "config.toml").write_text(config_toml, encoding="utf-8")
        write_sweep(made, record)
        try:
            os.rename(made, partial)  # fails when another shard's folder is there (it is never empty)
            return final, partial
        except OSError:
            pass
    finally:
        if made.exists():
            remove_tree(made)
    if partial.is_symlink() or not partial.is_dir():
        raise ConfigError(FIELD, f"{partial} is not a comparison folder; remove it or give another out_dir")
    try:
        saved = json.loads((partial / SWEEP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        saved = None
    if saved != json.loads(json.dumps(record, sort_keys=True)):  # as it reads back (tuples as lists)
        raise ConfigError(FIELD, f"{partial} holds another comparison (its {SWEEP_FILE} differs: another config, variants, seeds, tuning, "
                                 "chillfl or torch); every shard must run the same command with the same code, or give each comparison its own out_dir")
    return final, partial
