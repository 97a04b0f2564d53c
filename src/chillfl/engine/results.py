"""Result folders: written under a ``.partial`` name, renamed only when complete.

A finished folder holds ``config.toml`` (the resolved config), ``metrics.jsonl``
(one JSON object per round), ``summary.json`` and PNG plots. An interrupted or
failed run leaves ``<name>.partial/``, never a folder that looks finished.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

import tomli_w


def _without_none(value: Any) -> Any:
    """TOML has no null: drop None values (every option whose value can be None defaults to None)."""
    if isinstance(value, Mapping):
        return {str(k): _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_without_none(v) for v in value]
    return value


def to_toml(data: Mapping[str, Any]) -> str:
    """``data`` as TOML (tomli-w: lists of tables, nested tables and every scalar round-trip; None omitted)."""
    return tomli_w.dumps(_without_none(data))


def strict(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None: result files are strict JSON (no NaN literals)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return value


def unique_dir(parent: Path, name: str) -> Path:
    """``parent/name``, or ``name-2``, ``name-3``... if taken (finished or in progress)."""
    candidate, n = parent / name, 1
    while candidate.exists() or candidate.with_name(candidate.name + ".partial").exists():
        n += 1
        candidate = parent / f"{name}-{n}"
    return candidate


class ResultWriter:
    """Writes one run's folder; ``finish()`` makes it final by renaming it."""

    def __init__(self, out_dir: str | Path, name: str) -> None:
        parent = Path(out_dir)
        parent.mkdir(parents=True, exist_ok=True)
        self.final = unique_dir(parent, name)
        self.path = self.final.with_name(self.final.name + ".partial")
        self.path.mkdir()
        self._metrics = (self.path / "metrics.jsonl").open("w", encoding="utf-8")

    @classmethod
    def reopen(cls, path: str | Path, records: Sequence[Mapping[str, Any]]) -> "ResultWriter":
        """Continue writing the interrupted run folder ``path`` (``NAME.partial``, or a stopped run's ``NAME``) after ``records``.

        ``metrics.jsonl`` is rewritten with ``records`` only: rounds written after
        the checkpoint the run resumes from are run again.
        """
        self = cls.__new__(cls)
        self.path = Path(path)
        name = self.path.name.removesuffix(".partial")
        final = self.path.with_name(name)
        if final == self.path:  # a completed folder of a run a callback stopped early: it continues in place
            self.final = final
        else:
            self.final = final if not final.exists() else unique_dir(self.path.parent, name)
        tmp = self.path / "metrics.jsonl.tmp"
        tmp.write_text("".join(json.dumps(strict(r), sort_keys=True, allow_nan=False) + "\n" for r in records), encoding="utf-8")
        tmp.replace(self.path / "metrics.jsonl")
        self._metrics = (self.path / "metrics.jsonl").open("a", encoding="utf-8")
        return self

    def write_config(self, config: Mapping[str, Any], header: str = "") -> None:
        """``config.toml``; ``header``: comment lines on top (what the run ran with)."""
        (self.path / "config.toml").write_text(header + to_toml(config), encoding="utf-8")

    def append(self, record: Mapping[str, Any]) -> None:
        self._metrics.write(json.dumps(strict(record), sort_keys=True, allow_nan=False) + "\n")
        self._metrics.flush()

    def write_json(self, name: str, data: Any) -> None:
        (self.path / name).write_text(json.dumps(strict(data), indent=2, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")

    def finish(self) -> Path:
        self._metrics.close()
        self.path.rename(self.final)
        return self.final

    def fail(self, reason: Mapping[str, Any]) -> Path:
        """Mark the run failed: ``failure.json`` with the reason, the folder renamed ``NAME.failed``."""
        self._metrics.close()
        self.write_json("failure.json", reason)
        failed = self.final.with_name(self.final.name + ".failed")
        n = 1
        while failed.exists():
            n += 1
            failed = self.final.with_name(f"{self.final.name}.failed-{n}")
        self.path.rename(failed)
        self.path = failed
        return failed

    def abort(self) -> None:
        """Close files; the folder stays as ``*.partial`` for inspection."""
        self._metrics.close()


def read_metrics(folder: str | Path) -> list[dict[str, Any]]:
    with (Path(folder) / "metrics.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def series(records: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(rounds, values) for rounds where ``key`` was measured."""
    pts = [(r["round"], r[key]) for r in records if r.get(key) is not None]
    return [p[0] for p in pts], [float(p[1]) for p in pts]


def rounds_to_reach(records: Sequence[Mapping[str, Any]], key: str, target: float) -> int | None:
    """First round whose ``key`` is >= target (None if never)."""
    for rnd, value in zip(*series(records, key)):
        if value >= target:
            return rnd
    return None


def summarize(records: Sequence[Mapping[str, Any]], target: float | None = None) -> dict[str, Any]:
    """Final and best values of the accuracy/loss metrics, with the round of each best."""
    out: dict[str, Any] = {"rounds": records[-1]["round"] if records else 0}
    for key, better in (("global_acc", max), ("local_acc", max), ("global_client_acc", max), ("global_loss", min), ("local_loss", min), ("train_loss", min),
                        ("global_ece", min), ("global_nll", min), ("global_brier", min), ("val_acc", max), ("val_loss", min)):
        rounds, values = series(records, key)
        finite = [(r, v) for r, v in zip(rounds, values) if math.isfinite(v)]
        if not finite:
            continue
        best_round, best = better(finite, key=lambda p: p[1])
        out[f"final_{key}"] = values[-1]
        out[f"best_{key}"] = best
        out[f"best_{key}_round"] = best_round
    if target is not None:
        out["target_accuracy"] = target
        out["rounds_to_target"] = rounds_to_reach(records, "global_acc", target)
    return out


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
