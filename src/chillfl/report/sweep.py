"""An interrupted comparison goes on where it stopped: ``chillfl resume results/NAME-compare.partial``.

A comparison's folder (``NAME-compare.partial`` until its table is written)
holds its base ``config.toml`` and ``sweep.json``: the variants as they ran
(controls included), the seeds, the tuning grid, the selection rule and the
reference, all a resumed sweep needs beyond the config. Each of its runs is a
run folder of its own, in one of four states, which the resumed sweep reads:

* ``RUN`` (finished): its metrics and summary are read back, not rerun;
* ``RUN.failed``: it diverged; the sweep reports it as before (``failure.json``);
* ``RUN.partial`` with a checkpoint: it resumes from that checkpoint
  (:func:`chillfl.runner.resume_experiment`, bitwise as an uninterrupted run);
* ``RUN.partial`` without one, or no folder: it runs from the start.

So the resumed sweep's table equals the uninterrupted sweep's, bit for bit on
one machine (``tests/test_sweep_resume.py``). A comparison of a user's own
data, model or method parts (``chillfl.compare(dataset=..., model=...)``)
cannot be rebuilt from its folder, and is not resumable.

This module also holds what a comparison runs (:class:`Variant`, :class:`CompareOptions`) and its run
loop (:class:`Sweep`); imports flow one way: :mod:`chillfl.report.compare` (grids, tables,
``resume_compare``) uses it, never the reverse.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from glob import escape as glob_escape
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import torch

from chillfl.storage.checkpoint import read_state
from chillfl.storage.model_file import read_model
from chillfl.executors.pools import WorkerPools
from chillfl.storage.results import PARTIAL, read_metrics, refuse_links, remove_tree
from chillfl.storage.run_folder import CHECKPOINT
from chillfl.environment import code_sha256
from chillfl.errors import ConfigError, Diverged, one_line
from chillfl.experiment import build_experiment
from chillfl.progress import Progress, format_seconds
from chillfl import runner
from chillfl.runner import CLIENT_MODELS, MODEL, RunInterrupted, RunOutput, run_experiment

if TYPE_CHECKING:
    from torch import nn

    from chillfl.config import RunConfig
    from chillfl.data import FederatedData
    from chillfl.experiment import Plugged

log = logging.getLogger("chillfl.report.compare")

SWEEP_FILE = "sweep.json"
FORMAT = 1
FIELD = "run_dir"


@dataclass
class Variant:
    label: str
    overrides: dict[str, Any]
    temperature: float | None = None
    lr_scale: float = 1.0
    """Multiplies ``client.lr`` after the variant and its tuning point are applied (the 1/T control)."""
    short: str | None = None
    """A grid variant's folder name from its values (``fedavg-lr0.01``); None: the label made a name."""


@dataclass
class CompareOptions:
    """What ``compare`` runs beyond the variants; None fields fall back to the config's ``[compare]``/``[tune]``."""

    seeds: list[int] | None = None
    tune: dict[str, list[Any]] | None = None
    controls: bool | None = None
    select: str | None = None


class MadeWith(TypedDict):
    code_sha256: str
    torch: str


class SweepRecord(TypedDict):
    """``sweep.json``, as written (variants and options in their JSON form)."""

    format: int
    resumable: bool
    reference: str | None
    options: dict[str, Any]
    variants: list[dict[str, Any]]
    config_sha256: str
    made_with: MadeWith


def sweep_record(config_toml: bytes, variants: list[Variant], options: CompareOptions, reference: str | None, resumable: bool) -> SweepRecord:
    """What ``sweep.json`` holds: what :func:`read_sweep` gives back (``resumable`` False: a user's own data or parts), the
    SHA-256 of the comparison's ``config.toml``, which a resume checks, and the code and torch that ran it, which
    :func:`find_sweep` checks before a finished comparison is reused."""
    return {"format": FORMAT, "resumable": resumable, "reference": reference, "options": asdict(options),
            "variants": [asdict(v) for v in variants], "config_sha256": hashlib.sha256(config_toml).hexdigest(),
            "made_with": {"code_sha256": code_sha256(), "torch": str(torch.__version__)}}


def write_sweep(partial: Path, record: SweepRecord) -> None:
    """``sweep.json`` in the comparison's ``.partial`` folder (beside its ``config.toml``)."""
    (partial / SWEEP_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def find_sweep(parent: Path, name: str, record: SweepRecord) -> Path | None:
    """The comparison folder under ``parent`` that the sweep ``record`` would make again, finished or (else) interrupted.

    Candidates are ``NAME``, ``NAME-2``, ... as :func:`~chillfl.storage.results.claim_dir` names them, with or
    without ``.partial``; one matches when its ``sweep.json`` equals ``record``: same config, variants, seeds,
    tuning, reference, code and torch. Anything else (another config, an older chillfl) is never reused.
    """
    wanted = json.loads(json.dumps(record, sort_keys=True))  # as it reads back (tuples as lists)
    found: Path | None = None
    for folder in sorted(parent.glob(f"{glob_escape(name)}*"), key=lambda p: p.name):
        base = folder.name.removesuffix(PARTIAL)
        if not (base == name or (base.startswith(f"{name}-") and base[len(name) + 1:].isdigit())) or folder.is_symlink():
            continue
        try:
            saved = json.loads((folder / SWEEP_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if saved != wanted:
            continue
        if not folder.name.endswith(PARTIAL) and (folder / "table.json").is_file():
            return folder  # a finished one first: nothing to run
        if folder.name.endswith(PARTIAL) and found is None:
            found = folder
    return found


def read_sweep(folder: Path, force: bool = False) -> tuple[list[Variant], CompareOptions, str | None]:
    """(variants, options, reference) of the comparison in ``folder``; ConfigError (one line) if it cannot resume.

    An edited ``config.toml`` would recompute every run's config while the finished runs were read back as they ran:
    refused, unless ``force``."""
    try:
        record = json.loads((folder / SWEEP_FILE).read_text(encoding="utf-8"))
        fmt, resumable, reference = record.get("format"), record["resumable"], record["reference"]
        variants, options = [Variant(**v) for v in record["variants"]], CompareOptions(**record["options"])
        config = (folder / "config.toml").read_bytes()
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(FIELD, f"{folder / SWEEP_FILE} is unreadable ({type(exc).__name__}: {exc})") from None
    if fmt != FORMAT:
        raise ConfigError(FIELD, f"{folder / SWEEP_FILE} has format {fmt!r}; this chillfl reads {FORMAT}")
    if not resumable:
        raise ConfigError(FIELD, f"{folder} compared a user's own data, model or method parts, which its folder does not hold: run the comparison again")
    if record.get("config_sha256") != hashlib.sha256(config).hexdigest() and not force:
        raise ConfigError("config.toml", f"{folder / 'config.toml'} changed since the comparison started; `chillfl resume --force` resumes with it as it is now")
    return variants, options, reference


def is_sweep(folder: Path) -> bool:
    """Whether ``folder`` is a comparison's folder (``chillfl resume`` then resumes the sweep, not one run)."""
    return (folder / SWEEP_FILE).is_file()


def check_resumable(folder: Path) -> None:
    """One line for a comparison folder that is finished, missing or holds a link."""
    if not folder.is_dir():
        raise ConfigError(FIELD, f"{folder} does not exist")
    if not folder.name.endswith(PARTIAL):
        raise ConfigError(FIELD, f"{folder} is a finished comparison (its table is written); nothing to resume")
    if not (folder / "config.toml").is_file():
        raise ConfigError(FIELD, f"{folder} is not a chillfl comparison folder (no config.toml)")
    refuse_links(folder, FIELD)


@dataclass(frozen=True)
class DivergedBefore:
    """A run that diverged before the interruption (its ``failure.json``): it stays diverged."""

    round: int | None


def finished_run(partial: Path, name: str) -> RunOutput | DivergedBefore | None:
    """A resumed sweep's run ``name`` as it ended before: its output read back, its divergence, or None."""
    done, failed = partial / name, partial / f"{name}.failed"
    if (done / "summary.json").is_file():
        summary = json.loads((done / "summary.json").read_text(encoding="utf-8"))
        model = read_model(done / MODEL) if (done / MODEL).is_file() else None
        clients = {int(c): dict(m) for c, m in read_state(done / CLIENT_MODELS).items()} if (done / CLIENT_MODELS).is_file() else {}
        return RunOutput(done, read_metrics(done), summary, model, clients)
    if (failed / "failure.json").is_file():
        return DivergedBefore(json.loads((failed / "failure.json").read_text(encoding="utf-8")).get("round"))
    return None


def stopped_run(partial: Path, name: str) -> Path | None:
    """The run ``name``'s folder if it stopped with a checkpoint (to resume); one stopped before its first is removed."""
    stopped = partial / f"{name}{PARTIAL}"
    if (stopped / CHECKPOINT).is_file():
        return stopped
    if stopped.is_dir():  # nothing to keep: it runs again from the start
        remove_tree(stopped)
    return None


@dataclass
class Sweep:
    """The comparison's runs as they finish: their outputs and failures, run or (resuming) read back or resumed."""

    partial: Path | None
    resuming: bool
    force: bool
    progress: Progress
    pools: WorkerPools
    total: int
    ran: int = 0
    """Runs run or resumed by this process (not read back): the ETA's basis."""
    busy_s: float = 0.0
    results: dict[tuple[str, int, int], RunOutput | None] = field(default_factory=dict)
    failures: dict[tuple[str, int, int], str] = field(default_factory=dict)

    def run(self, i: int, config: "RunConfig", key: tuple[str, int, int], data: "FederatedData", model: "nn.Module | None", plugged: "Plugged | None") -> None:
        """The ``i``-th run (``key``: variant, tuning point, seed); resuming, what it has already (:func:`finished_run`, :func:`stopped_run`) first."""
        partial = self.partial
        cfg = config if partial is None else config.with_overrides({"out_dir": str(partial)})
        label = f"[{i + 1}/{self.total}] {cfg.name}"
        before = finished_run(partial, cfg.name) if self.resuming and partial is not None else None
        if self.total > 1:
            eta = f", ETA {format_seconds(self.busy_s / self.ran * (self.total - i))}" if self.ran else ""  # from the runs that ran here
            log.info("run %d of %d: %s%s", i + 1, self.total, cfg.name, " (finished before: read back)" if before is not None else eta)
        if isinstance(before, DivergedBefore):
            self.results[key], self.failures[key] = None, f"diverged at round {before.round}"
            return
        if before is not None:
            self.results[key] = before
            return
        start = time.monotonic()
        try:
            stopped = stopped_run(partial, cfg.name) if self.resuming and partial is not None else None
            if stopped is not None:
                self.results[key] = runner.resume_experiment(stopped, progress=self.progress, pools=self.pools, label=label, force=self.force)
            else:
                own = build_experiment(cfg, data=data, model=model, plugged=plugged) if model is not None or plugged else None
                self.results[key] = run_experiment(cfg, write=partial is not None, progress=self.progress, data=data, label=label, experiment=own, pools=self.pools)
        except Diverged as exc:  # the sweep goes on; its folder is NAME.failed and every table says so
            self.results[key], self.failures[key] = None, f"diverged at round {exc.round}"
            log.warning("%s diverged (%s); the comparison goes on", cfg.name, exc)
        except (ConfigError, RunInterrupted):
            raise
        except Exception as exc:  # noqa: BLE001 - one failed run (a lost worker, out of memory) must not lose the others
            self.results[key], self.failures[key] = None, f"failed: {type(exc).__name__}"
            log.warning("%s failed (%s: %s); the comparison goes on", cfg.name, type(exc).__name__, one_line(str(exc))[:200])
        finally:
            self.ran += 1
            self.busy_s += time.monotonic() - start
