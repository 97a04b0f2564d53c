"""Metric sinks: every round's scalars into CSV, TensorBoard or Weights & Biases (offline).

Sinks are run callbacks (:class:`chillfl.runner.Callback`) plus ``close()``:
the engine knows nothing of them. ``[log] sinks = ["csv", "tensorboard",
"wandb"]`` makes the runner add them to a written run; from Python, pass them
as ``callbacks`` (or set ``log.sinks``). Each writes under the run folder:

============  =========================  ====================================
sink          where                      what
============  =========================  ====================================
csv           ``metrics.csv``             one row per round, ``round`` first
tensorboard   ``tensorboard/``            one scalar per key, step = round
wandb         ``wandb/offline-run-*/``    W&B offline run (``wandb sync`` uploads it)
============  =========================  ====================================

(W&B's own service also writes a debug log into its cache folder,
``~/.cache/wandb/logs`` or ``$WANDB_CACHE_DIR``; the run's data stays in the run folder.)

What is logged (:func:`scalars`): every number of a round's record (booleans
as 0/1), and one level of tables of numbers flattened as ``key/sub`` (e.g.
``client_train_loss/3``); lists and ``None`` are left out. ``metrics.jsonl``
stays the complete, bitwise-reproducible record; sinks are views of it.

Choices
-------
* The CSV file is rewritten whole when a round brings a new column (e.g. the
  first evaluation round), so every row has every column; values are Python's
  shortest round-trip ``repr`` of the float.
* A resumed run: the CSV sink starts from the records up to the checkpoint;
  TensorBoard purges the steps after it (``purge_step``); W&B starts a new
  offline run in the same folder.
* Sinks are closed before the run folder is renamed from ``NAME.partial``, so
  nothing is written into a folder that no longer exists.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from chillfl.extras import need

SinkName = Literal["csv", "tensorboard", "wandb"]
SINKS: tuple[SinkName, ...] = ("csv", "tensorboard", "wandb")
CSV_FILE = "metrics.csv"
TENSORBOARD_DIR = "tensorboard"


class Sink(Protocol):
    """A run callback (``on_round``, ``on_end``) that holds files open until ``close()``."""

    def on_round(self, record: Mapping[str, Any]) -> None: ...

    def on_end(self, output: Any) -> None: ...

    def close(self) -> None: ...


def scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """The loggable numbers of a round's record (without ``round``): numbers, and tables of numbers as ``key/sub``."""
    out: dict[str, float] = {}
    for key, value in record.items():
        if key == "round":
            continue
        if _is_number(value):
            out[key] = float(value)
        elif isinstance(value, Mapping):
            for sub, item in value.items():
                if _is_number(item):
                    out[f"{key}/{sub}"] = float(item)
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and (isinstance(value, bool) or math.isfinite(value))


class CsvSink:
    """``metrics.csv``: one row per round, columns ``round`` then every scalar key in sorted order."""

    def __init__(self, path: str | Path, records: Sequence[Mapping[str, Any]] = ()) -> None:
        self.path = Path(path)
        self.rows: list[tuple[int, dict[str, float]]] = [(int(r["round"]), scalars(r)) for r in records]
        self.columns: list[str] = sorted({k for _, row in self.rows for k in row})
        self._rewrite()

    def on_round(self, record: Mapping[str, Any]) -> None:
        row = scalars(record)
        self.rows.append((int(record["round"]), row))
        if set(row) - set(self.columns):
            self.columns = sorted(set(self.columns) | set(row))
            self._rewrite()
        else:
            with self.path.open("a", newline="", encoding="utf-8") as f:
                self._write_row(csv.writer(f), *self.rows[-1])

    def on_end(self, output: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def _rewrite(self) -> None:
        with self.path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["round", *self.columns])
            for rnd, row in self.rows:
                self._write_row(writer, rnd, row)

    def _write_row(self, writer: Any, rnd: int, row: Mapping[str, float]) -> None:
        writer.writerow([rnd, *(repr(row[c]) if c in row else "" for c in self.columns)])


class TensorBoardSink:
    """TensorBoard event files under ``folder``: one scalar per key, step = round (needs the ``tensorboard`` extra)."""

    def __init__(self, folder: str | Path, start: int = 0) -> None:
        need("tensorboard", "tensorboard", "TensorBoard logs")
        from torch.utils.tensorboard import SummaryWriter

        self.writer: Any = SummaryWriter(log_dir=str(folder), purge_step=start + 1 if start else None)

    def on_round(self, record: Mapping[str, Any]) -> None:
        step = int(record["round"])
        for key, value in scalars(record).items():
            self.writer.add_scalar(key, value, global_step=step)

    def on_end(self, output: Any) -> None:
        pass

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """A Weights & Biases run in offline mode under ``folder/wandb`` (needs the ``wandb`` extra; nothing leaves the machine)."""

    def __init__(self, folder: str | Path, name: str, config: Mapping[str, Any], project: str = "chillfl") -> None:
        wandb = need("wandb", "wandb", "W&B logs")
        settings = wandb.Settings(mode="offline", console="off", silent=True, save_code=False, x_disable_stats=True, x_disable_meta=True)
        self.run: Any = wandb.init(dir=str(folder), project=project, name=name, config=dict(config), settings=settings, reinit="create_new")
        self._closed = False

    def on_round(self, record: Mapping[str, Any]) -> None:
        self.run.log(scalars(record), step=int(record["round"]))

    def on_end(self, output: Any) -> None:
        pass

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.run.finish()


def build_sinks(names: Sequence[str], folder: Path, name: str, config: Mapping[str, Any], records: Sequence[Mapping[str, Any]] = (), project: str = "chillfl") -> list[Sink]:
    """The sinks ``names`` of a run writing into ``folder``; ``records``: the rounds already done (resume)."""
    start = int(records[-1]["round"]) if records else 0
    sinks: list[Sink] = []
    try:
        for sink in names:
            if sink == "csv":
                sinks.append(CsvSink(folder / CSV_FILE, records))
            elif sink == "tensorboard":
                sinks.append(TensorBoardSink(folder / TENSORBOARD_DIR, start))
            elif sink == "wandb":
                sinks.append(WandbSink(folder, name, config, project))
            else:  # validated in the config already
                raise ValueError(f"unknown sink {sink!r}")
    except BaseException:
        close_sinks(sinks)
        raise
    return sinks


def close_sinks(sinks: Sequence[Sink]) -> None:
    """Close every sink (each once; a failing one does not keep the others open)."""
    errors = []
    for sink in sinks:
        try:
            sink.close()
        except Exception as exc:  # noqa: BLE001 - close the rest, then report the first
            errors.append(exc)
    if errors:
        raise errors[0]
