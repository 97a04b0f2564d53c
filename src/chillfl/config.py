"""Run configuration: TOML file + ``key=value`` overrides -> validated :class:`RunConfig`.

Precedence: command-line overrides > config file > defaults below. The
resolved config is written into every result folder, so a run can always be
repeated from its own output. A config read here keeps each part's table as
written; :func:`chillfl.resolve.resolved` (above the registries, so not
imported here) fills in every option's default, as the command line and
:func:`chillfl.make_config` do.

Pluggable parts (dataset, partition, model, temperature, algorithm) are
tables with a ``name`` (``policy`` for temperature) plus that part's own
options; each part parses and validates its options itself (see
:mod:`chillfl.options`), so adding a method never touches this file.

Every input is checked before anything is written, and every mistake is one
:class:`~chillfl.errors.ConfigError` naming the field: numbers finite and in
int64, sizes bounded, names that cannot leave ``out_dir`` (:func:`check_name`),
no nesting deeper than :data:`MAX_DEPTH`, ``[variants]`` / ``[compare]`` /
``[distillation]`` typed here, a writable ``out_dir`` (:func:`check_out_dir`).
"""

from __future__ import annotations

import codecs
import copy
import dataclasses
import errno
import functools
import logging
import math
import os
import re
import stat
import sys
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from chillfl.errors import ConfigError, did_you_mean
from chillfl.experiments import experiments_root
from chillfl.numeric import is_real, is_whole
from chillfl.once import warn_once
from chillfl.options import OwnTable, Scale, coerce, option_type, parse_options, require, require_range, require_visible_text, short_path, short_repr, warn_unread
from chillfl.paths import FAILED, PARTIAL, check_writable_dir, home_path
from chillfl.plugins import PluginNotImported
from chillfl.settings.distillation import METHOD_DEFAULTED as DISTILLATION_METHOD_DEFAULTED
from chillfl.settings.distillation import DistillationOptions, DistillationSetup, parse_distillation
from chillfl.settings.prototypes import PrototypeOptions, PrototypeSettings, parse_prototypes
from chillfl.settings.privacy import OFF as PRIVACY_OFF
from chillfl.settings.privacy import PrivacyConfig, PrivacyOptions
from chillfl.settings.attack import OFF as ATTACK_OFF
from chillfl.settings.attack import AttackConfig, AttackOptions
from chillfl.settings.chosen import NamedSpec
from chillfl.training.schedule import (CONSTANT, LR_FLOOR, LrSchedule, Optimizer, StageSteps, below_floor, first_below, first_step_below_floor,
                                      planned_steps, schedule_field, schedule_term, step_lr)
from chillfl.tune import dotted_grid, parse_tune

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

MAX_CLIENTS = 10**7
MAX_ROUNDS = 10**7
MAX_EPOCHS = 100_000
MAX_THREADS = 4096
"""Far above any machine's cores; 100000 threads abort inside libgomp instead of raising."""
MAX_BATCH = 2**31 - 1
"""Batch and split sizes are C ints in torch's kernels."""
MAX_NAME_BYTES = 200
"""A run folder is ``<name>[-compare][-N][.partial]``: 200 bytes leave room for the
suffixes under the 255-byte file-name limit of common file systems."""
MAX_DEPTH = 32
"""Config tables and lists nest no deeper than this (real configs: about 5)."""


@dataclass(frozen=True)
class FederationConfig:
    """How many clients exist and how many train each round."""

    num_clients: int = 10
    rounds: int = 30
    clients_per_round: int | None = None
    """Number of clients sampled per round; ``None`` -> use ``client_fraction``."""
    client_fraction: float = 1.0
    """Fraction of clients sampled per round, in (0, 1] (ignored when clients_per_round is set)."""
    sampling: Literal["fixed", "poisson"] = "fixed"
    """``fixed``: ``sample_size()`` distinct clients a round; ``poisson``: each client independently with probability
    q = sample_size() / num_clients (the count varies; a round that draws nobody is skipped). Poisson is what the
    subsampled mechanism's privacy accountant bounds (docs/privacy.md)."""
    dropout: float = 0.0
    """Probability that a sampled client is unavailable for the round: it receives nothing and never reports."""
    stragglers: float = 0.0
    """Probability that an available client is a straggler: it completes only part of its local steps."""
    straggler_work: Literal["uniform", "fixed"] = "uniform"
    """A straggler's share of its local steps: ``uniform`` on (0, 1), or ``fixed`` = ``straggler_fraction``."""
    straggler_fraction: float = 0.5
    straggler_policy: Literal["partial", "drop"] = "partial"
    """``partial``: a straggler reports the steps it completed (FedProx's partial work, Li et al. 2020); ``drop``: it reports
    nothing, as a dropped client (the FedAvg baseline of Li et al. 2020, Sec. 5.2, whose code drops the slow devices).
    The same draws pick the stragglers under both, so a FedAvg run with ``drop`` and a FedProx run with ``partial`` at
    one seed lose or slow down the same clients, as the paper's comparison does."""
    min_clients: int = 1
    """Fewest reporting clients a round needs; below it the round is retried or skipped (``on_too_few``)."""
    on_too_few: Literal["skip", "retry"] = "skip"
    """``skip``: no training, the model stays; ``retry``: redraw who is available (up to 10 times, then skip; at once when fewer than ``min_clients`` were sampled)."""

    def validate(self, section: str) -> None:
        for name in ("dropout", "stragglers"):
            value = getattr(self, name)
            require(0.0 <= value < 1.0, f"{section}.{name}", f"must be in [0, 1), got {value}")
        require(0.0 < self.straggler_fraction <= 1.0, f"{section}.straggler_fraction", f"must be in (0, 1], got {self.straggler_fraction}")
        require_range(self.num_clients, 1, MAX_CLIENTS, f"{section}.num_clients")
        require_range(self.rounds, 1, MAX_ROUNDS, f"{section}.rounds")
        require(0.0 < self.client_fraction <= 1.0, f"{section}.client_fraction", f"must be in (0, 1], got {self.client_fraction}")
        if self.clients_per_round is not None:
            require(
                1 <= self.clients_per_round <= self.num_clients,
                f"{section}.clients_per_round",
                f"must be in [1, num_clients={self.num_clients}], got {self.clients_per_round}",
            )
        require(1 <= self.min_clients <= self.sample_size(), f"{section}.min_clients", f"must be in [1, clients per round = {self.sample_size()}], got {self.min_clients}")

    @property
    def size_field(self) -> str:
        """The field that sets :meth:`sample_size` here, for a refusal of it: ``clients_per_round`` where given, else
        ``client_fraction`` below 1, else ``num_clients`` (every client a round: only more of them give more)."""
        if self.clients_per_round is not None:
            return "federation.clients_per_round"
        return "federation.client_fraction" if self.client_fraction < 1 else "federation.num_clients"

    def sample_size(self) -> int:
        """Clients a round: the count under ``fixed`` sampling, the expected count (q N) under ``poisson``.

        From ``client_fraction``: ``max(1, floor(C N))``, McMahan et al.'s ``max(C K, 1)`` truncated as Flower
        (``int(n * fraction_fit)``), FL-bench and PFLlib (``int(client_num * join_ratio)``) do, so that their
        fraction gives the same count here; the product is nudged up by 1e-9 first, so that 0.29 x 100
        (28.999999999999996 in floating point) is 29 clients, not 28. (Python's ``round`` used before rounded
        halves to even: 1.5 -> 2 but 2.5 -> 2.)"""
        if self.clients_per_round is not None:
            return self.clients_per_round
        return max(1, math.floor(self.client_fraction * self.num_clients + 1e-9))

    def expected_participants(self, rounds: int | None = None) -> float:
        """Clients expected to take part at least once in the first ``rounds`` rounds (None: the run's R), N (1 - (1 - m / N)^R)
        with m of N sampled uniformly each round: what prices once-a-client work (a first fit, FedMD's pretraining) in the time
        estimates, and the clients' own models a round evaluates where models stay with the clients."""
        r = self.rounds if rounds is None else rounds
        return self.num_clients * (1 - (1 - self.sample_size() / self.num_clients) ** r)


@dataclass(frozen=True)
class ClientConfig:
    """Local training: SGD (momentum, Nesterov), Adam or AdamW; weight decay, clipping, an lr schedule (docs/optimizers.md)."""

    epochs: int = 1
    batch_size: int = 16
    """Rows per local step. An epoch's trailing batch of one row is merged into the batch before it (batch norm cannot
    normalise one row: :func:`chillfl.training.local.batch_order`), with or without batch norm; so ``batch_size = 1`` is not
    per-sample SGD: an epoch of n >= 2 rows takes n - 1 steps, its last of 2 rows (a 2-row client: 1 step of 2 rows)."""
    lr: float = 0.01
    lr_decay: float = 1.0
    """Multiplicative per-round decay: lr at round t (0-based) is lr * lr_decay**t (times ``lr_schedule``)."""
    optimizer: Literal["sgd", "adam", "adamw"] = "sgd"
    momentum: float = 0.0
    """SGD's momentum (``torch.optim.SGD``, dampening 0); only with ``optimizer = "sgd"``."""
    nesterov: bool = False
    weight_decay: Scale = 0.0
    """L2 term added to the gradient (SGD, Adam); decoupled, ``w <- w (1 - lr wd)``, for AdamW."""
    beta1: float | None = None
    """Adam(W)'s first-moment decay; unset = 0.9. Only with ``adam`` / ``adamw``."""
    beta2: float | None = None
    """Adam(W)'s second-moment decay; unset = 0.999."""
    eps: float | None = None
    """Adam(W)'s denominator term; unset = 1e-8."""
    clip_norm: float = 0.0
    """Clip each local gradient to this L2 norm (over all parameters, ``clip_grad_norm_``'s rule); 0 = off."""
    lr_schedule: Literal["constant", "step", "cosine"] = "constant"
    lr_schedule_over: Literal["rounds", "steps"] = "rounds"
    """``rounds``: one lr per round, t = round of ``federation.rounds``; ``steps``: within each round, t = local step."""
    lr_step_size: int = 1
    """``step``: multiply the lr by ``lr_gamma`` every ``lr_step_size`` rounds (or local steps)."""
    lr_gamma: float = 0.1
    lr_min: float = 0.0
    """``cosine``: the lr it anneals to (``CosineAnnealingLR``'s eta_min), below ``lr``."""
    loss: str = "standard"
    """Base loss: ``standard`` (temperature cross-entropy) or a gradient ablation (FedChill Table 5)."""
    sam_rho: float = 0.0
    """Sharpness-aware local steps (FedSAM): each step's gradient at ``w + rho g / ||g||``; 0 = off (docs/optimizers.md)."""
    sam_adaptive: bool = False
    """FedASAM: the perturbation scaled by ``|w|`` (``rho |w|^2 g / || |w| g ||``); needs ``sam_rho`` > 0."""
    sam_eta: float = 0.0
    """ASAM's eta: T = ``|w| + eta`` (Kwon et al.'s code: 0.01); 0, the SAM reference code's ``|w|``; needs ``sam_adaptive``."""

    def validate(self, section: str) -> None:
        require_range(self.epochs, 1, MAX_EPOCHS, f"{section}.epochs")
        require_range(self.batch_size, 1, MAX_BATCH, f"{section}.batch_size")
        require(self.lr > 0, f"{section}.lr", f"must be > 0, got {self.lr}")
        require(self.lr >= LR_FLOOR, f"{section}.lr", f"{self.lr:.3g} is below float32's smallest normal number ({LR_FLOOR:.3g}): "
                "the float32 steps do nothing at it and the methods that divide by the lr fail; raise it")
        require(0 < self.lr_decay <= 1.0, f"{section}.lr_decay", f"must be in (0, 1], got {self.lr_decay}")
        require(0 <= self.momentum < 1, f"{section}.momentum", f"must be in [0, 1), got {self.momentum}")
        require(self.weight_decay >= 0, f"{section}.weight_decay", f"must be >= 0, got {self.weight_decay}")
        require(self.clip_norm >= 0 and math.isfinite(self.clip_norm), f"{section}.clip_norm", f"must be >= 0 (0 = off), got {self.clip_norm}")
        adam = self.optimizer in ("adam", "adamw")
        if self.optimizer != "sgd":
            require(self.momentum == 0, f"{section}.momentum", f"is SGD's; optimizer = {self.optimizer!r} has beta1 instead (leave momentum 0)")
        if self.nesterov:
            require(self.optimizer == "sgd" and self.momentum > 0, f"{section}.nesterov", "needs optimizer = 'sgd' and momentum > 0")
        for name in ("beta1", "beta2"):
            value = getattr(self, name)
            if value is not None:
                require(adam, f"{section}.{name}", f"is read by optimizer = 'adam' or 'adamw' only, not {self.optimizer!r}")
                require(0 <= value < 1, f"{section}.{name}", f"must be in [0, 1), got {value}")
        if self.eps is not None:
            require(adam, f"{section}.eps", f"is read by optimizer = 'adam' or 'adamw' only, not {self.optimizer!r}")
            require(0 < self.eps <= 1, f"{section}.eps", f"must be in (0, 1], got {self.eps}")
        require_range(self.lr_step_size, 1, MAX_ROUNDS * MAX_EPOCHS, f"{section}.lr_step_size")
        require(0 < self.lr_gamma <= 1, f"{section}.lr_gamma", f"must be in (0, 1], got {self.lr_gamma}")
        # below lr where cosine anneals to it; another schedule never reads it (the warning below), so a tuned lr under
        # lr_min there is no clash
        require(math.isfinite(self.lr_min) and 0 <= self.lr_min and (self.lr_schedule != "cosine" or self.lr_min < self.lr), f"{section}.lr_min",
                f"must be in [0, lr = {self.lr}), got {self.lr_min}")
        require(math.isfinite(self.sam_rho) and 0 <= self.sam_rho <= 1e3, f"{section}.sam_rho", f"must be in [0, 1e3] (0 = off), got {self.sam_rho}")
        if self.sam_adaptive:
            require(self.sam_rho > 0, f"{section}.sam_adaptive", "scales the sharpness-aware perturbation: set sam_rho > 0 too")
        require(math.isfinite(self.sam_eta) and 0 <= self.sam_eta <= 1e3, f"{section}.sam_eta", f"must be in [0, 1e3], got {self.sam_eta}")
        if self.sam_eta:
            require(self.sam_adaptive, f"{section}.sam_eta", "is ASAM's (T = |w| + eta): set sam_adaptive = true too")
        # Options the schedule never reads, set away from their defaults: one warning, not a refusal, since
        # `--grid client.lr_schedule=constant,cosine` over a file that sets lr_min reads it in one variant only;
        # accepted silently, a schedule left at constant hid that lr_min did nothing.
        warn_unread(self, self.unread_schedule_options(), section,
                    f"by {section}.lr_schedule = {self.lr_schedule!r} (lr_min is cosine's, lr_gamma and lr_step_size step's)")

    def unread_schedule_options(self) -> list[str]:
        """The schedule's options ``lr_schedule`` never reads (``lr_min`` under ``constant``): warned about, and left
        out of the step-size check, which refused one after the warning had said the run ignores it."""
        reads = {"constant": (), "step": ("lr_schedule_over", "lr_step_size", "lr_gamma"), "cosine": ("lr_schedule_over", "lr_min")}[self.lr_schedule]
        return [n for n in ("lr_schedule_over", "lr_step_size", "lr_gamma", "lr_min") if n not in reads]

    def schedule(self) -> LrSchedule:
        """The ``lr_schedule`` as factors of a position (the round, or the local step)."""
        return LrSchedule(self.lr_schedule, self.lr_step_size, self.lr_gamma, self.lr_min / self.lr)

    def optim(self) -> Optimizer:
        """The local step's optimiser (:class:`~chillfl.training.optim.Optimizer`); the schedule goes in when it runs over local steps."""
        return Optimizer(
            self.optimizer,
            self.nesterov,
            (0.9 if self.beta1 is None else self.beta1, 0.999 if self.beta2 is None else self.beta2),
            1e-8 if self.eps is None else self.eps,
            self.clip_norm,
            self.schedule() if self.lr_schedule_over == "steps" else CONSTANT,
            self.sam_rho,
            self.sam_adaptive,
            self.sam_eta,
        )

    def check_lr_floor(self, rounds: int, section: str) -> None:
        """Refuse a schedule whose lr falls below :data:`LR_FLOOR` in some round of a run of ``rounds``, naming the
        option that takes it there and the first such round.

        Why: ``lr * lr_decay**t`` (or a step schedule's ``lr_gamma``) reaches 0 in float64 after enough rounds, and far
        sooner falls below what float32 steps resolve: those rounds train nothing, and the methods that divide by the
        lr crashed with a traceback (q-FFL's 1 / lr, SCAFFOLD's control variate) or went NaN with "lower client.lr"
        (VRL-SGD, FedCP). The lr is non-increasing in the round (decay and gamma are at most 1, cosine anneals
        down), so the last round's is the smallest, and the first round below the floor is found by bisection."""
        last = rounds - 1
        if self.lr_at(last, rounds) >= LR_FLOOR:
            return
        t = first_below(lambda r: self.lr_at(r, rounds), rounds)
        decay = self.lr_decay**t
        over_rounds = self.lr_schedule != "constant" and self.lr_schedule_over == "rounds"
        factor = self.schedule().factor(t, rounds) if over_rounds else 1.0
        formula = f"{self.lr:g}" + (f" * {self.lr_decay:g}^{t}" if self.lr_decay < 1 else "")
        formula += schedule_term(self.schedule(), t, rounds) if over_rounds else ""
        field = f"{section}.lr_decay" if decay <= factor else schedule_field(self.schedule(), section)
        raise ConfigError(field, f"round {t + 1} of federation.rounds = {rounds} would train at lr {formula} = {self.lr_at(t, rounds):.3g}, below "
                                 f"float32's smallest normal number ({LR_FLOOR:.3g}): the float32 steps do nothing from there on and the methods "
                                 f"that divide by the lr fail; raise {field} or lower federation.rounds")

    def check_step_lr_floor(self, rounds: int | None, rows: int, section: str) -> None:
        """Refuse a schedule over local steps whose lr falls below :data:`LR_FLOOR` at some local step of some round,
        ``rows``: the largest client's training rows; naming the option that takes it there, the round and the step.

        Why: :meth:`check_lr_floor` sees the rounds only; a round's local steps are known once the data is partitioned
        (:func:`~chillfl.training.schedule.planned_steps` of a client's rows), and a step schedule's ``lr_gamma`` (or
        cosine's end, times ``lr_decay``'s) took a round's later steps to 0 or a subnormal: a run that trained nothing
        from there on, without a word. Each client runs the schedule over its own planned steps; the largest client
        takes the most, so its last step's lr in the last round is the run's least (the lr is non-increasing in the
        round and in the step), and the first round, then the first step of it, below the floor is found by bisection.
        ``rounds`` None: one training from ``lr`` (the temperature sweep's), the line names no round."""
        steps = planned_steps(rows, self.batch_size, self.epochs)
        if self.lr_schedule == "constant" or self.lr_schedule_over != "steps" or steps == 0:
            return
        optim = self.optim()
        n = 1 if rounds is None else rounds
        found = self._first_step_below(n, optim, steps)
        if found is None:
            return
        t, s = found
        decay, factor = self.lr_decay**t, optim.step_schedule.factor(s, steps)
        formula = f"{self.lr:g}" + (f" * {self.lr_decay:g}^{t}" if self.lr_decay < 1 else "") + schedule_term(optim.step_schedule, s, steps)
        field = f"{section}.lr_decay" if decay <= factor else schedule_field(optim.step_schedule, section)
        takes = (f"a {'training' if rounds is None else 'round'} takes ({section}.epochs = {self.epochs} over the largest client's {rows} rows "
                 f"in batches of {section}.batch_size = {self.batch_size}, {section}.lr_schedule_over = 'steps')"
                 + ("" if rounds is None else f" in round {t + 1} of federation.rounds = {rounds}"))
        raise ConfigError(field, below_floor(s, steps, takes, formula, step_lr(optim, self.lr_at(t, n), s, steps), field, f"{section}.epochs"))

    def check_stage_lr_floor(self, rounds: int, stage: StageSteps, section: str, first: int = 1) -> None:
        """Refuse a training besides ``client.epochs``' one (a method's stage, a distillation phase) whose schedule over
        local steps takes a step below :data:`LR_FLOOR` in some round, naming the option that takes it there, the round,
        the step and the stage's epochs option.

        Why: such a training runs the schedule over its own planned steps, further down the curve than
        :meth:`check_step_lr_floor` counts; refused only when it first trained, a run with an lr decayed over rounds
        died hours in (leaving a checkpointed run's ``.partial`` folder). The lr is non-increasing in the round and in the
        step, as there; a stage's own lr (``stage.lr``) is the same every round, so its first round is the one.
        ``first``: the first round (1-based) the stage runs in (the soft-label clients distil from round 2 on): a run of
        fewer rounds never trains it, and the rounds before it are not counted."""
        steps = planned_steps(stage.rows, stage.batch_size, stage.epochs)
        schedule = stage.optim.step_schedule
        if schedule.name == "constant" or steps == 0 or rounds < first:
            return
        found = self._first_step_below(rounds, stage.optim, steps, stage.lr, first - 1)
        if found is None:
            return
        t, s = found
        lr = self.lr_at(t, rounds) if stage.lr is None else stage.lr
        if stage.lr is None:
            formula, decay = f"{self.lr:g}" + (f" * {self.lr_decay:g}^{t}" if self.lr_decay < 1 else ""), self.lr_decay**t
        else:
            formula, decay = f"{stage.lr:g}", 1.0
        formula += schedule_term(schedule, s, steps)
        field = f"{section}.lr_decay" if decay <= schedule.factor(s, steps) else schedule_field(schedule, section)
        when = (f" in round {t + 1} of federation.rounds = {rounds}" if stage.lr is None
                else " in every round" if first == 1 else f" from round {first} on")
        takes = (f"steps of the {stage.epochs_field} training ({stage.epochs} epochs over {stage.over} in batches of "
                 f"{stage.batch_size}, {section}.lr_schedule_over = 'steps'" + ("" if stage.lr is None else f", from its own lr {stage.lr:g}") + f"){when}")
        raise ConfigError(field, below_floor(s, steps, takes, formula, step_lr(stage.optim, lr, s, steps), field, stage.epochs_field))

    def _first_step_below(self, rounds: int, optim: Optimizer, steps: int, lr: float | None = None, start: int = 0) -> tuple[int, int] | None:
        """(round, step), both 0-based, of the first local step below :data:`LR_FLOOR` of a training of ``steps`` steps
        from each round's lr (``lr`` None) or from ``lr``, over rounds ``start`` to ``rounds - 1``; None: no step is.
        Bisection over the rounds (the last step of each is its least), then over the steps of the first round below."""
        def at(r: int) -> float:
            return self.lr_at(r + start, rounds) if lr is None else lr

        if first_step_below_floor(optim, at(rounds - start - 1), steps) is None:
            return None
        t = first_below(lambda r: step_lr(optim, at(r), steps - 1, steps), rounds - start)
        s = first_step_below_floor(optim, at(t), steps)
        assert s is not None  # round t's last step is below
        return t + start, s

    def lr_at(self, round: int, rounds: int | None = None) -> float:
        """The lr of round ``round`` (0-based) of ``rounds``: ``lr * lr_decay**round``, times the schedule over rounds."""
        lr = self.lr * self.lr_decay**round
        if self.lr_schedule == "constant" or self.lr_schedule_over != "rounds":
            return lr
        if rounds is None:
            raise ValueError("lr_at needs the run's rounds for a schedule over rounds")
        return lr * self.schedule().factor(round, rounds)


@dataclass(frozen=True)
class EvalConfig:
    """What is evaluated, and how often.

    ``global_acc``: the aggregated model on the global test set.
    ``local_acc``: each client's own model right after its local training, on
    that client's own split (drawn from the test set with the client's class
    proportions), averaged over clients; a method whose ``local_eval =
    "averaged"`` (FedPer, FedRep, LG-FedAvg, FedDBE, FedCAC, FedCP) measures it on the server after
    the round's average instead (docs/personalised.md). ``clients = "all"`` averages the
    latest local accuracy of every client that has trained so far and also
    reports ``global_client_acc``: the global model on every client's split.
    """

    every: int = 1
    clients: Literal["sampled", "all", "none"] = "sampled"
    client_split: Literal["proportional", "natural", "partition", "none"] = "proportional"
    client_split_size: int = 100
    batch_size: int = 1024
    target_accuracy: float | None = None
    """Optional: report the first evaluated round (every ``every`` rounds) whose global accuracy reaches this value."""
    ece_bins: int = 15
    """Equal-width confidence bins of ``global_ece`` (see docs/analysis.md)."""
    validation: float = 0.0
    """Fraction of the global test set held out as the server's validation split (``val_acc``,
    what ``compare``'s ``[tune]`` selects on); test metrics use the rest. 0 = none."""

    def due(self, t: int, rounds: int) -> bool:
        """Whether round ``t`` (1-based) of a run of ``rounds`` evaluates the global model: every ``every``-th round, and the last."""
        return t % self.every == 0 or t == rounds

    def evaluated_rounds(self, rounds: int) -> list[int]:
        """The rounds (1-based) of a run of ``rounds`` that evaluate (:meth:`due`): what the time estimates price test passes on."""
        return [t for t in range(1, rounds + 1) if self.due(t, rounds)]

    def validate(self, section: str) -> None:
        require(0.0 <= self.validation < 1.0, f"{section}.validation", f"must be in [0, 1) (0 = no validation split), got {self.validation}")
        require_range(self.every, 1, MAX_ROUNDS, f"{section}.every")
        require_range(self.ece_bins, 1, 1000, f"{section}.ece_bins")
        require_range(self.client_split_size, 1, MAX_BATCH, f"{section}.client_split_size")
        require_range(self.batch_size, 1, MAX_BATCH, f"{section}.batch_size")
        if self.target_accuracy is not None:
            require(
                0 < self.target_accuracy <= 1,
                f"{section}.target_accuracy",
                f"must be an accuracy in (0, 1], got {self.target_accuracy}",
            )
        if self.clients != "none":
            require(
                self.client_split != "none",
                f"{section}.client_split",
                f"must not be 'none' when {section}.clients = {self.clients!r} (local accuracy needs client splits)",
            )


EXECUTORS = ("auto", "sequential", "vectorized", "processes", "ray")


@dataclass(frozen=True)
class RayConfig:
    """``executor = "ray"``: where the client updates run and what each worker asks Ray for (docs/ray.md).

    ``address``: a running cluster (``host:port`` or ``ray://host:port``); empty: the
    ``RAY_ADDRESS`` environment variable, else a local Ray started for the run and
    shut down at its end. ``num_cpus`` / ``num_gpus``: the Ray resources each worker
    (an actor that runs whole client updates) requests. ``workers``: how many (0: as
    many as the cluster fits, at most the clients per round). ``max_retries``: how
    often a worker that died is restarted and its calls retried before the run stops.
    ``start_timeout``: seconds to wait for the workers to be placed before giving up.
    """

    address: str = ""
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    workers: int = 0
    max_retries: int = 3
    start_timeout: float = 120.0

    def validate(self, section: str) -> None:
        require(0 <= self.num_cpus <= 4096, f"{section}.num_cpus", f"must be in [0, 4096], got {self.num_cpus}")
        require(0 <= self.num_gpus <= 1024, f"{section}.num_gpus", f"must be in [0, 1024], got {self.num_gpus}")
        require(self.num_cpus > 0 or self.num_gpus > 0, f"{section}.num_cpus", "a worker must request some CPU or GPU (num_cpus or num_gpus > 0)")
        require_range(self.workers, 0, 100_000, f"{section}.workers")
        require_range(self.max_retries, 0, 1000, f"{section}.max_retries")
        require(0 < self.start_timeout <= 86_400, f"{section}.start_timeout", f"must be in (0, 86400] seconds, got {self.start_timeout}")
        require(self.address.isprintable() and len(self.address) <= 1000, f"{section}.address", f"must be a printable host:port, got {short_repr(self.address)}")
        # "" starts a local Ray (or reads RAY_ADDRESS); "  " read as an address and failed late, inside Ray, after the data loaded
        require(not self.address.isspace(), f"{section}.address", f"must be a host:port or empty (a local Ray), not blank, got {short_repr(self.address)}")


@dataclass(frozen=True)
class ObjectiveConfig:
    """Terms added to the local objective whatever the aggregator, where the maths allows.

    ``proximal_mu``: FedProx's ``mu/2 ||w - w^t||^2`` towards the round's global
    model (Li et al., Eq. 2) on top of any parameter-sharing aggregator, e.g.
    SCAFFOLD + a proximal term. 0 = off. Refused with ``algorithm = "fedprox"``
    (which has its own ``mu``) and by a protocol with its own objective (soft labels:
    the clients train with the base loss only; prototypes).

    ``terms``: more terms, each a registered name (``"proximal"``), an import path
    (``"pkg.mod:Term"``) or a ``chillfl.plugins`` entry point, or a table
    ``{name = "...", <its options>}`` (:mod:`chillfl.training.terms`). Added after the
    method's own terms, to any method that accepts terms (parameter sharing); refused by a
    protocol with its own objective.
    """

    proximal_mu: float = 0.0
    terms: tuple[str | dict[str, Any], ...] = ()

    def validate(self, section: str) -> None:
        require(0 <= self.proximal_mu <= 1e6, f"{section}.proximal_mu", f"must be in [0, 1e6] (0 = off), got {self.proximal_mu}")
        for i, entry in enumerate(self.terms):
            where = f"{section}.terms[{i}]"  # the entry, as training.terms.entry_field names it everywhere else (a lone one too)
            if isinstance(entry, dict):
                name = entry.get("name")
                require(isinstance(name, str) and bool(name), where, f"a term's table needs a name (a registered term or \"pkg.mod:Term\"), got {sorted(entry)}")
            else:
                require(bool(entry), where, "a term's name must not be empty")


@dataclass(frozen=True)
class CheckpointConfig:
    """When the run state is saved into the run folder (``checkpoint.safetensors``), so ``chillfl resume`` can continue.

    ``every``: write the run state every k rounds (0: only when the run is
    interrupted by SIGINT/SIGTERM). ``client_models``: also save every
    client's own model at the end, where the method keeps one (soft-label and
    prototype clients; FedBN, FedPer, FedRep, Ditto and APFL's personal models).
    """

    every: int = 10
    client_models: bool = False

    def validate(self, section: str) -> None:
        require(0 <= self.every <= MAX_ROUNDS, f"{section}.every", f"must be in [0, {MAX_ROUNDS}] (0 = only on interrupt), got {self.every}")


SINK_NAMES = ("csv", "tensorboard", "wandb", "mlflow")


@dataclass(frozen=True)
class LogConfig:
    """Metric sinks besides ``metrics.jsonl`` (:mod:`chillfl.sinks`): files under the run folder, or a tracking service.

    ``sinks``: any of ``csv`` (``metrics.csv``, ``metrics_clients.csv``), ``tensorboard`` (``tensorboard/``,
    the ``tensorboard`` extra), ``wandb`` (a W&B run, files in ``wandb/``, the
    ``wandb`` extra), ``mlflow`` (an MLflow run, the ``mlflow`` extra).
    ``wandb_project``: the W&B project name. ``wandb_mode``: ``auto`` (online
    when W&B has an API key, ``wandb login``, or as ``WANDB_MODE`` says; else
    offline, said in one line), ``online`` or ``offline`` (nothing leaves the
    machine; ``wandb sync`` uploads it later). ``mlflow_tracking_uri``: where
    the MLflow run goes (``""``: MLflow's own choice, ``$MLFLOW_TRACKING_URI`` or
    its local default); ``mlflow_experiment``: its experiment name.
    ``per_client``: every round's record also maps each client whose local accuracy it averages to that accuracy and loss
    (``local_accs``, ``local_losses``, and ``local_val_accs`` where the clients measure one), so that what steers a
    client (FedChill's decay reads its accuracy) can be checked from the run's files; off, the record keeps the means.
    """

    sinks: tuple[Literal["csv", "tensorboard", "wandb", "mlflow"], ...] = ()
    wandb_project: str = "chillfl"
    wandb_mode: Literal["auto", "online", "offline"] = "auto"
    mlflow_tracking_uri: str = ""
    mlflow_experiment: str = "chillfl"
    per_client: bool = False

    def validate(self, section: str) -> None:
        seen = [s for i, s in enumerate(self.sinks) if s in self.sinks[:i]]
        require(not seen, f"{section}.sinks", f"lists {seen[0]!r} twice" if seen else "")
        # a blank name ("  ") passed isprintable(): W&B and MLflow got a project or experiment named by spaces, a run filed where no one looks
        ok = bool(self.wandb_project) and not self.wandb_project.isspace() and self.wandb_project.isprintable() and "/" not in self.wandb_project
        require(ok, f"{section}.wandb_project", f"must be a printable name without '/', not empty or blank, got {short_repr(self.wandb_project)}")
        require(self.mlflow_tracking_uri.isprintable(), f"{section}.mlflow_tracking_uri", f"must be printable, got {short_repr(self.mlflow_tracking_uri)}")
        # "" is MLflow's own choice of store; "  " was taken as a URI
        require(not self.mlflow_tracking_uri.isspace(), f"{section}.mlflow_tracking_uri", f"must be a URI or empty (MLflow's default), not blank, got {short_repr(self.mlflow_tracking_uri)}")
        ok = bool(self.mlflow_experiment) and not self.mlflow_experiment.isspace() and self.mlflow_experiment.isprintable()
        require(ok, f"{section}.mlflow_experiment", f"must be a printable name, not empty or blank, got {short_repr(self.mlflow_experiment)}")


DEVICE_CHOICES = ("cpu", "cuda", "cuda:N", "auto")
"""The ``device`` values a run accepts, as its error and the generated reference list them; ``mps`` is a known name
(:func:`is_device_name`) that every run refuses (no float64 on Metal), so it is none of them."""


def is_device_name(name: str) -> bool:
    """``cpu``, ``cuda``, ``cuda:N``, ``mps`` or ``auto`` (N: up to three ASCII digits)."""
    if name in ("cpu", "cuda", "mps", "auto"):
        return True
    head, _, index = name.partition(":")
    return head == "cuda" and index.isascii() and index.isdigit() and len(index) <= 3


def encodes_as_utf8(path: str) -> bool:
    """Whether ``path`` is text UTF-8 can write: a folder name holding a non-UTF-8 byte (Latin-1 ``caf\\xe9``) reaches
    Python as a lone surrogate, which config.toml, the metrics and the report (all UTF-8) cannot record."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _non_utf8_hint() -> str:
    """What helps with a path that is not UTF-8: only Python reading paths in another encoding is mended by UTF-8 mode;
    a folder name holding a Latin-1 byte on a UTF-8 system reads the same whatever is set."""
    encoding = sys.getfilesystemencoding()
    if codecs.lookup(encoding).name != "utf-8":
        return f"Python reads paths as {encoding} here: set PYTHONUTF8=1"
    return "a folder name holds a byte that is not UTF-8, e.g. Latin-1: rename it or choose another folder"


def check_name(name: str, field: str = "name") -> None:
    """A run name becomes a folder under ``out_dir``: it must not escape it or hide characters.

    Refused: empty or blank, a leading ``.`` (hidden, ``..``) or ``-`` (read as an
    option by ``rm``, ``ls``...), a trailing ``.partial`` or ``.failed`` (a finished run's folder read as a stopped or
    failed one), ``/`` or ``\\``, control and format characters
    (newlines, NUL, terminal escapes, bidi overrides), a byte that is not UTF-8, more than
    :data:`MAX_NAME_BYTES` bytes of UTF-8.
    """
    require(bool(name) and not name.isspace(), field, f"must be a non-empty name, got {short_repr(name)}")
    require(not name.startswith((".", "-")), field, f"must not start with '.' or '-', got {short_repr(name)}")
    require(not name.endswith((PARTIAL, FAILED)), field, f"must not end in {PARTIAL!r} or {FAILED!r}, which mark an unfinished or failed run's folder, got {short_repr(name)}")
    require("/" not in name and "\\" not in name, field, f"must not contain '/' or '\\', got {short_repr(name)}")
    # a byte that is not UTF-8 (argv under a UTF-8 locale) arrives as a lone surrogate: named as what it is
    require(encodes_as_utf8(name), field, f"must be UTF-8 text (a byte that is not UTF-8 cannot be a folder name recorded in config.toml), got {short_repr(name)}")
    require_visible_text(name, field, "a name")
    size = len(name.encode("utf-8", "surrogatepass"))
    require(size <= MAX_NAME_BYTES, field, f"must be at most {MAX_NAME_BYTES} bytes of UTF-8, got {size}")


def safe_name(label: str) -> str:
    """A folder name for a variant label ("FedChill*" -> "FedChill_star", "T=0.5" -> "T0.5"), always a valid name."""
    label = label.replace("=", "").replace(", ", "_").replace("*", "_star")
    label = re.sub(r"(\d)e\+(\d)", r"\1e\2", label)  # 1e+06 -> 1e06: its "+" made "_" read 1e_06, like 1e-06
    keep = [c if ((c.isalnum() and c.isprintable()) or c in "-_.") else "_" for c in label]
    name = "".join(keep).strip("_.").lstrip("-.")[:MAX_NAME_BYTES]
    while len(name.encode("utf-8")) > MAX_NAME_BYTES:
        name = name[:-1]
    if name.endswith((PARTIAL, FAILED)):  # a label "x.partial": its finished folder read as a stopped run
        name = name[:name.rindex(".")] + "_" + name[name.rindex(".") + 1:]
    return name or "variant"


COMPARE_KEYS = ("reference", "baseline", "seeds", "controls", "select", "local")
MAX_SEEDS = 1000
PART_KEYS = {"dataset": "name", "partition": "name", "model": "name", "temperature": "policy", "algorithm": "name"}
WHOLE_PARTS = (*PART_KEYS, "distillation", "prototypes")
"""In a variant, a table for one of these replaces the part whole (its options belong to its name)."""


@dataclass(frozen=True)
class RunConfig:
    """A whole experiment. ``seed`` + this config determine every metric bit for bit."""

    name: str = "run"
    seed: int = 0
    executor: str = "sequential"
    out_dir: str = "results"
    data_dir: str = "data"
    threads: int = 1
    """torch intra-op threads for the run (0: torch's default). Part of the config because the
    thread count changes float reduction order: bitwise reproducibility holds at a fixed count.
    One thread suits the small CPU models; raise it for large models. The vectorised executor
    trains chunks of clients on ``cores // threads`` worker threads (one when 0)."""
    device: str = "auto"
    """Where data, models and states live: ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (the first CUDA GPU if there is
    one, else the CPU); ``mps`` is refused at run start (no float64 on Metal). Results are bitwise reproducible per device."""
    deterministic: bool = True
    """On CUDA: use PyTorch's deterministic algorithms (``torch.use_deterministic_algorithms``)."""
    memory_format: Literal["auto", "contiguous", "channels_last"] = "auto"
    """Layout of 4-d activations and conv weights in local training: ``channels_last`` (NHWC) runs the same
    fp32 maths in faster CPU convolution kernels; ``auto``: channels-last on the CPU for models whose
    ``Conv2d`` layers output at least 8,192 elements a sample (e.g. the McMahan CNN on 32x32), else contiguous (:func:`chillfl.training.local.resolve_compute`). Evaluation is unaffected."""
    precision: Literal["fp32", "tf32", "bf16"] = "fp32"
    """``bf16``: local training's forward runs under ``torch.autocast`` in bfloat16 (loss, gradients and
    updates of the fp32 state stay fp32) on a CPU or GPU that supports it; faster, slightly less accurate.
    ``tf32`` (CUDA only): fp32 tensors, with matmuls and convolutions on TF32 tensor cores for the whole
    run (``torch.backends.cuda.matmul.allow_tf32`` and ``cudnn.allow_tf32``, restored after); refused on
    other devices, which have no such mode. ``fp32``: torch's defaults, whatever the caller set (autocast,
    ``set_float32_matmul_precision``, oneDNN's bf16 are off for the run, restored after:
    :func:`chillfl.training.local.run_precision`): IEEE fp32 matmuls; on CUDA, cuDNN convolutions may use TF32
    (torch's own default)."""
    batched_conv: Literal["auto", "grouped", "gemm", "nhwc", "loop"] = "auto"
    """How the vectorised executor's vmapped step runs the clients' convolutions (Conv2d, Conv1d): ``auto`` (``nhwc``
    on CUDA in bf16 or TF32 where ``cuda_graphs`` records the steps (plain SGD at a constant local rate, no DP-SGD),
    where it measured fastest; ``grouped`` elsewhere:
    :func:`chillfl.training.batched_conv.resolve_batched_conv`), ``grouped`` (vmap's
    one grouped convolution, the clients folded into the channels), ``gemm`` (each client's convolution as
    a gather of its windows + one matrix product, all clients in ONE batched GEMM: :mod:`chillfl.training.conv_gemm`), ``nhwc``
    (vmap's grouped convolution laid out channels-last, the clients' channels interleaved, Conv2d only:
    :mod:`chillfl.training.conv_nhwc`) or ``loop`` (one plain channels-last convolution per client, the clients
    folded into the batch between layers, Conv2d only; the same module; meant with ``cuda_graphs = true``); the last
    three are meant for GPUs, where cuDNN ran the grouped form one kernel per client. On an H200 workload 1's
    graphed bf16 round took 0.46 s with ``nhwc`` against 0.60 s ``grouped``, and 1.43 s with ``loop``; ``gemm`` (its windows
    gathered since 2026-12-04; the ``unfold`` form before took 5x as long) is slower on the CPU and not yet measured
    on a GPU (docs/gpu.md). Same maths, other rounding; a client trained alone is unaffected, and an executor without the
    vectorised step (``sequential``, ``processes``, ``ray``) refuses any value but ``auto`` (and ``grouped``, the default
    until 2026-12-04 that older folders record, which it takes with a warning: :data:`FORMER_BATCHED_CONV`)."""
    cuda_graphs: bool = False
    """On a CUDA device, the vectorised executor records each chunk's step of all its clients once per batch shape as a
    CUDA graph and replays it: one launch a step instead of about 1,500 (:mod:`chillfl.executors.step_graphs`); later
    chunks (rounds) of the same structure replay the same graphs on their own values. It
    applies to plain SGD (momentum, weight decay, clipping) at a constant local rate; other steps and other devices run as
    without it, and an executor without the vectorised step refuses it. A replay runs the recorded step's very kernels, so it is meant to give the same bits
    as without it on the same GPU (the CUDA suite compares them). Off by default: on an H200 (docs/gpu.md) it cut
    workload 1's launches from 75,647 a round to 1,354 but its round only by 5 %, and sped workload 2's round 1.4x,
    one run each."""
    compile: bool = False
    """The vectorised executor (``vectorized``, or ``auto`` when it vectorises) runs the forward and backward of a chunk's
    full-batch step of all its clients through ``torch.compile`` (inductor, one graph per shape: :mod:`chillfl.executors.compiled`).
    A compiled run is reproducible (same config and seed, same bits on one machine, torch build and thread count; resume
    included) but not bitwise equal to the eager run or to the other executors; each new step shape pays a compile of
    seconds, shared by a sweep's runs of one method and model. Steps of only some clients, short last batches, the CPU's
    client-by-client path for large convolutions, SAM's and DP-SGD's steps (vmapped), and evaluation stay eager. Needs a C++ compiler on the CPU and Triton on
    a GPU; off by default: on the CPU it was slower (docs/gpu.md has the measurements)."""
    strict: bool = False
    """An exploding training loss that stays finite (>= 1e4 x round 1's or above 1e3, both in T = 1 units, loss x T below T = 1: :mod:`chillfl.engine.health`)
    stops the run as a divergence (exit 3, ``NAME.failed``) instead of one warning line. ``--strict`` on the command line."""
    federation: FederationConfig = field(default_factory=FederationConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    log: LogConfig = field(default_factory=LogConfig)
    client: ClientConfig = field(default_factory=ClientConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    """Differential privacy (:mod:`chillfl.privacy`, docs/privacy.md); ``mechanism = "none"``: off."""
    attack: AttackConfig = field(default_factory=AttackConfig)
    """Adversarial clients (:mod:`chillfl.attacks`, docs/attacks.md); ``kind = "none"``: off."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    """Options of ``executor = "ray"`` (ignored by the other executors)."""
    dataset: dict[str, Any] = field(default_factory=lambda: {"name": "digits"})
    partition: dict[str, Any] = field(default_factory=lambda: {"name": "dirichlet", "alpha": 0.5})
    model: dict[str, Any] = field(default_factory=lambda: {"name": "flexchill_cnn"})
    temperature: dict[str, Any] = field(default_factory=lambda: {"policy": "none"})
    algorithm: dict[str, Any] = field(default_factory=lambda: {"name": "fedavg"})
    distillation: dict[str, Any] = field(default_factory=dict)
    """Options of the soft-label protocol (SCARLET / DS-FL family); empty for parameter sharing."""
    prototypes: dict[str, Any] = field(default_factory=dict)
    """Options of the prototype-sharing protocol (FedProto, FedHKD); empty otherwise."""
    variants: dict[str, Any] = field(default_factory=dict)
    """``chillfl compare`` without ``--grid``: label -> table of overrides (a paper table's rows)."""
    compare: dict[str, Any] = field(default_factory=dict)
    """``chillfl compare`` options: ``reference`` (label whose best accuracy is the target), ``baseline``,
    ``seeds`` (list: every variant runs at each), ``controls`` (step-size controls for T != 1),
    ``select`` (the tuning rule: ``final`` | ``best`` on the global model's validation accuracy, ``local_final`` |
    ``local_best`` on the clients' local validation accuracy), ``local`` (the seed table adds local
    accuracy and its paired difference to the baseline's)."""
    tune: dict[str, Any] = field(default_factory=dict)
    """``chillfl compare``: option -> list of values; each variant runs at every point of the grid and keeps
    the point with the best validation accuracy (needs ``eval.validation`` > 0)."""

    def __post_init__(self) -> None:
        """``~`` and ``~user`` in ``out_dir`` and ``data_dir`` are the home folder, as a shell would read them: a config
        file (or a quoted command-line value) is read by no shell, and ``out_dir = "~/results"`` wrote into a folder
        literally named ``~`` in the current one (a literal ``~`` folder is ``./~``). The expanded path is recorded; the
        command line's own paths (``--out``) are read by the same :func:`~chillfl.paths.home_path`."""
        if isinstance(self.out_dir, str):
            object.__setattr__(self, "out_dir", home_path(self.out_dir))
        if isinstance(self.data_dir, str):
            object.__setattr__(self, "data_dir", home_path(self.data_dir))

    def switched_on(self, section: str) -> bool:
        """Whether the switched table ``section`` (a key of :data:`SWITCHED`) is on in this run."""
        return {"privacy": self.privacy.enabled, "attack": self.attack.enabled}[section]

    def switched_specs(self) -> list[NamedSpec]:
        """The specs the switched tables that are on choose (the mechanism, then the attack): what they declare
        (their ``figures``) is read from here, so the runner asks for it without naming either."""
        return [table.spec for table in (self.privacy, self.attack) if table.enabled]

    @property
    def protocol(self) -> str:
        """Which protocol runs, decided here and nowhere else (keys :data:`chillfl.protocols.registry.PROTOCOLS`).

        ``softlabels`` when ``[distillation]`` names a method, ``prototypes`` when ``[prototypes]`` is set
        (validation refuses both at once), else ``parameters``.
        """
        if self.distillation.get("method"):
            return "softlabels"
        if self.prototypes:
            return "prototypes"
        return "parameters"

    @functools.cached_property
    def distillation_setup(self) -> DistillationSetup | None:
        """``[distillation]`` parsed and typed (None when the table is empty): parsed once per config, read by everything after.

        A cached property, not a field: ``to_dict`` and the saved config keep the table as written.
        """
        return parse_distillation(self.distillation) if self.distillation else None

    @functools.cached_property
    def prototype_settings(self) -> PrototypeSettings | None:
        """``[prototypes]`` parsed, with the method's defaults filled in (None when the table is empty); parsed once per config."""
        return parse_prototypes(self.prototypes) if self.prototypes else None

    def lr_at(self, round: int) -> float:
        """The clients' learning rate of round ``round`` (0-based): ``client.lr``, its decay and its schedule over rounds."""
        return self.client.lr_at(round, self.federation.rounds)

    def validate(self, section: str) -> None:
        require(self.executor in EXECUTORS, "executor", f"unknown value {short_repr(self.executor)}{did_you_mean(self.executor, EXECUTORS)}; allowed: {', '.join(EXECUTORS)}")
        require(is_device_name(self.device), "device", f"unknown value {short_repr(self.device)}{did_you_mean(self.device, ('cpu', 'cuda', 'auto'))}; "
                f"allowed: {', '.join(DEVICE_CHOICES)} (mps is not supported yet)")
        require_range(self.threads, 0, MAX_THREADS, "threads")
        require(self.seed >= 0, "seed", f"must be >= 0, got {self.seed}")
        for key, path in (("out_dir", self.out_dir), ("data_dir", self.data_dir)):  # "" was the current folder, with nothing said
            require(bool(path) and "\0" not in path, key, f"must be a non-empty path without NUL characters, got {short_repr(path)}")
            require(encodes_as_utf8(path), key, f"must be a path that is valid UTF-8, which the run's config.toml records ({_non_utf8_hint()}), got {short_repr(path)}")
            require_visible_text(path, key, "a path")  # as name: a folder made on disk and printed in the results line
        vectorises = self.executor in ("vectorized", "auto")  # what compile, cuda_graphs and batched_conv act on: else they were silently nothing
        require(not self.compile or vectorises, "compile", f"compiles the vectorised executor's step; executor {self.executor!r} has none: use 'vectorized' or 'auto'")
        require(not self.cuda_graphs or vectorises, "cuda_graphs", f"records the vectorised executor's step as CUDA graphs; executor {self.executor!r} has none: use 'vectorized' or 'auto'")
        if self.batched_conv == FORMER_BATCHED_CONV and not vectorises:
            _say_former_batched_conv(self.executor)
        else:
            require(self.batched_conv == "auto" or vectorises, "batched_conv",
                    f"sets how the vectorised executor's step runs the clients' convolutions; executor {self.executor!r} has none: use 'vectorized' or 'auto'")
        check_name(self.name)
        self.client.check_lr_floor(self.federation.rounds, "client")  # here, where the run's rounds are known
        for part, key in PART_KEYS.items():
            table = getattr(self, part)
            value = table.get(key)
            require(isinstance(value, str), f"{part}.{key}", "is required (a string)" if value is None else f"must be a string (a registered name), got {type(value).__name__} {short_repr(value)}")
        try:
            soft_labels = self.distillation_setup  # parsed here, before the engine converts any of it (e.g. int(public_size))
            prototypes = self.prototype_settings
        except PluginNotImported:  # a results folder read as data names a plugin method: its table stays as written, unparsed
            soft_labels = prototypes = None
        if prototypes is not None:
            require(soft_labels is None, "prototypes.method", "a run shares soft-labels ([distillation]) or prototypes ([prototypes]), not both")
        for key, value in self.compare.items():
            require(key in COMPARE_KEYS, f"compare.{key}", f"unknown option{did_you_mean(key, COMPARE_KEYS)}; allowed: {', '.join(COMPARE_KEYS)}")
            check_compare_option(key, value)
        if self.tune:
            parse_tune(self.tune)
        for label, table in self.variants.items():
            check_variant(self, label, table)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for f in dataclasses.fields(self):  # [attack], [privacy]: one flat table each, as written: the choice's options beside the shared ones
            value = getattr(self, f.name)
            if isinstance(value, OwnTable):
                data[f.name] = value.table()
        return data

    def to_saved_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` as a run folder's ``config.toml`` (and a single run's ``--dry-run``) holds it: without the
        :data:`OPTIONAL_TABLES` left empty, which were noise in one run's record (an empty ``[variants]``, ``[compare]``
        and ``[tune]`` in every run) and read back as the same empty defaults."""
        return {key: value for key, value in self.to_dict().items() if key not in OPTIONAL_TABLES or value}

    def with_overrides(self, overrides: Mapping[str, Any]) -> RunConfig:
        data = self.to_dict()
        apply_overrides(data, overrides)
        return config_from_dict(data)

    def paths_from(self, folder: Path | None) -> RunConfig:
        """This config with its relative input paths, ``data_dir`` and ``partition.from``, read from ``folder`` wherever the
        process is: a resumed run (or comparison) reads the files it started on, not what the folder ``chillfl resume`` is
        typed in holds under the same name (``folder``: where it was started, :func:`chillfl.storage.run_folder.start_folder`).

        A path moves to ``folder`` only when ``folder`` holds it (a folder ``data_dir``, a file ``partition.from``); otherwise,
        and for an absolute path or ``folder`` None (or the current folder), it stays as written and is read from the current
        folder, as before, where a missing dataset is the loader's one line. In memory only: a run folder's ``config.toml``
        keeps the paths as written (its SHA-256 is checked on resume), and no path enters a metric or a run's data key.
        """
        if folder is None:
            return self
        base = Path(os.path.abspath(folder))
        try:
            if base == Path(os.getcwd()):
                return self
        except OSError:  # the current folder was removed: the recorded one is the only one left to read from
            pass

        def moved(path: str, holds: Callable[[Path], bool]) -> str:
            return str(base / path) if not os.path.isabs(path) and holds(base / path) else path

        data_dir = moved(self.data_dir, Path.is_dir)
        partition = self.partition
        source = partition.get("from")
        if partition.get("name") == "file" and isinstance(source, str) and source:
            partition = {**partition, "from": moved(source, Path.is_file)}
        if data_dir == self.data_dir and partition == self.partition:
            return self
        return dataclasses.replace(self, data_dir=data_dir, partition=partition)

    @staticmethod
    def component(table: Mapping[str, Any], key: str = "name") -> tuple[str, dict[str, Any]]:
        """Split a part's table into (name, options)."""
        options = {k: v for k, v in table.items() if k != key}
        return str(table[key]), options


OPTIONAL_TABLES = ("distillation", "prototypes", "variants", "compare", "tune")
"""The run config's tables that are empty unless used (soft-label or prototype sharing, a comparison): each defaults to {}."""


def check_compare_option(key: str, value: Any) -> None:
    """Type one ``[compare]`` option (see :attr:`RunConfig.compare`)."""
    field = f"compare.{key}"
    if key == "seeds":
        ok = isinstance(value, list) and bool(value) and all(is_whole(s) and 0 <= s < 2**63 for s in value)
        require(ok, field, f"expected a non-empty list of integer seeds from 0 to 2**63 - 1, got {short_repr(value)}")
        require(len(set(value)) == len(value), field, f"duplicate seeds in {short_repr(value)}")
        require(len(value) <= MAX_SEEDS, field, f"at most {MAX_SEEDS} seeds, got {len(value)}")
    elif key in ("controls", "local"):
        require(isinstance(value, bool), field, f"expected true or false, got {short_repr(value)}")
    elif key == "select":
        rules = ("final", "best", "local_final", "local_best")  # chillfl.tune.SELECT_RULES
        require(value in rules, field, f"unknown value {short_repr(value)}{did_you_mean(value, rules)}; allowed: {', '.join(rules)}")
    else:
        require(isinstance(value, str), field, f"expected a variant label (a string), got {short_repr(value)}")


FORMER_BATCHED_CONV = "grouped"
"""``batched_conv``'s default until 2026-12-04: every config.toml a run or comparison folder saved before then records it,
beside any executor. Under an executor without the vectorised step it does nothing, as it did then, and is accepted with
one warning (:func:`_say_former_batched_conv`), so such a folder is reported, analysed, resumed and rerun unedited;
any other value there stays refused (it asks for what the executor cannot do)."""


def _say_former_batched_conv(executor: str) -> None:
    """The one warning line for :data:`FORMER_BATCHED_CONV` under a non-vectorising ``executor`` (once a process)."""
    warn_once(logging.getLogger(__name__),
              f"batched_conv = {FORMER_BATCHED_CONV!r} does nothing under executor {executor!r} (only the vectorised executor's step reads it); "
              "accepted because folders written before 2026-12-04 record it as the default", key="former batched_conv")


def config_from_dict(data: Mapping[str, Any], swept: Iterable[str] = ()) -> RunConfig:
    """Validate a plain nested dict (as read from TOML) into a RunConfig; ``swept``: see :func:`check_switches`."""
    check_depth(data)
    data = with_dotted_grids(data)
    part = data.get("partition")
    if isinstance(part, Mapping) and "from" in part and "name" not in part:  # partition.from = "partition.json" alone
        data = {**data, "partition": {"name": "file", **part}}
    _refuse_bare_temperature(data.get("temperature"))
    config = parse_options(RunConfig, data, "")
    check_switches(data, swept)  # after the options' own checks: a bad value or an unknown key is named first
    return config


def _refuse_bare_temperature(value: object) -> None:
    """``temperature=0.5`` (an override, or ``temperature = 0.5`` in a file) is ``--grid temperature=...``'s shorthand,
    which a config does not take: "expected a table" alone left the reader to find ``policy`` and ``value``."""
    if is_real(value):
        fixed = f"temperature.policy=fixed temperature.value={short_repr(value)}"
        raise ConfigError("temperature", f"expected a table, got {short_repr(value)}: a fixed T is {fixed} (only --grid takes temperature=T1,T2 as its shorthand)")


class Switched(typing.Protocol):
    """A table that is off unless one option of it says otherwise."""

    SWITCH: typing.ClassVar[str]

    @classmethod
    def switch_values(cls) -> Sequence[str]:
        """What the switch may be set to."""
        ...


SWITCHED: dict[str, type[Switched]] = {"privacy": PrivacyConfig, "attack": AttackConfig}
"""Tables that are off unless their ``SWITCH`` option says otherwise (``[privacy] mechanism``, ``[attack] kind``)."""


def check_switches(data: Mapping[str, Any], swept: Iterable[str] = ()) -> None:
    """Refuse a switched table's options when no run of the config sets its switch.

    ``swept``: the dotted keys a comparison's command line sweeps (``--grid``, ``--tune``); a switch among them counts
    as set, so ``privacy.delta=1e-3 --grid privacy.mechanism=none,dp-fedavg`` is the base holding a shared option.

    Why: ``[privacy]`` and ``[attack]`` are off by default, so ``noise_multiplier = 1.1``
    written without ``mechanism`` would train with no noise and report no epsilon, and
    ``fraction = 0.2`` without ``kind`` would attack nobody, both silently. The switch set
    anywhere (the table itself, a variant, the tune grid), even to ``"none"``, is a choice:
    options shared in the base table, with the switch set per variant, stay allowed. A
    resolved config (a result folder's) writes every switch.
    """
    variants = data.get("variants")
    tables = [data] + [v for v in variants.values() if isinstance(v, Mapping)] if isinstance(variants, Mapping) else [data]
    tune = data.get("tune")
    for section, cls in SWITCHED.items():
        switch = cls.SWITCH
        written: set[str] = set()
        for table in tables:
            own = table.get(section)
            written.update(own if isinstance(own, Mapping) else ())
            written.update(key.split(".", 1)[1] for key in table if isinstance(key, str) and key.startswith(f"{section}."))
        if isinstance(tune, Mapping):
            written.update(key.split(".", 1)[1] for key in tune if isinstance(key, str) and key.startswith(f"{section}."))
        written.update(key.split(".", 1)[1] for key in swept if key.startswith(f"{section}."))
        if written and switch not in written:
            raise _switch_error(section, cls, written)


def _switch_error(section: str, cls: type[Switched], written: Iterable[str]) -> ConfigError:
    """The refusal of ``written`` options of ``section`` while nothing sets its switch."""
    allowed = ", ".join(repr(v) for v in cls.switch_values() if v != "none")  # 'none' is the off it is now: no way out
    return ConfigError(
        f"{section}.{cls.SWITCH}",
        f"is not set, so {', '.join(f'{section}.{k}' for k in sorted(written))} would change nothing ([{section}] is off by default): set it to one of {allowed}",
    )


def check_sweep_switches(runs: Sequence[RunConfig], keys: Iterable[str]) -> None:
    """:func:`check_switches` for what a sweep adds outside the file (``--grid``, ``--tune``, ``chillfl.compare``'s
    variants): dotted ``keys`` that set a switched table's options while no run of the sweep (``runs``, each variant's
    config) switches it on, and no key sets the switch (a tuning point may), would change nothing: refused the same way.
    Without this, ``--grid privacy.target_epsilon=4,8`` ran a table of identical non-private rows."""
    keys = list(keys)
    for section, cls in SWITCHED.items():
        written = {key.split(".", 1)[1] for key in keys if key.startswith(f"{section}.")}
        if written and cls.SWITCH not in written and not any(run.switched_on(section) for run in runs):
            raise _switch_error(section, cls, written)


def check_depth(data: Mapping[str, Any], limit: int = MAX_DEPTH) -> None:
    """Refuse tables/lists nested deeper than ``limit`` (iteratively: hostile nesting must not hit the recursion limit),
    and a table key that is not a string.

    The depth error names the first two keys on the way down (``model.hidden``). A key that is not a string (a dict
    built in Python, ``{1: 2}`` or ``{"variants": {1: {}}}``) is refused naming its table (``config`` at the top): every
    check after this one reads keys as text (splits, labels, folder names), and one crashed on it with an
    AttributeError; a TOML file's keys are always strings. Every dict entry (:func:`config_from_dict`, a file, the
    Python API) calls this first.
    """
    stack: list[tuple[Any, tuple[str, ...], int]] = [(data, (), 0)]
    while stack:
        node, keys, depth = stack.pop()
        if depth > limit:
            raise ConfigError(".".join(keys[:2]) or "config", f"nested more than {limit} levels deep")
        if isinstance(node, Mapping):
            bad = [k for k in node if not isinstance(k, str)]
            if bad:
                raise ConfigError(".".join(keys) or "config", f"a key must be a string (as a TOML file's are), got {short_repr(bad[0])} ({type(bad[0]).__name__})")
            stack.extend((v, (*keys, k), depth + 1) for k, v in node.items())
        elif isinstance(node, (list, tuple)):
            stack.extend((v, keys, depth + 1) for v in node)


_QUOTED = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'')
_DEEP_KEY = re.compile(r"(?:[A-Za-z0-9_-]+[ \t]*\.[ \t]*){%d,}[A-Za-z0-9_-]+" % MAX_DEPTH)


def check_key_depth(text: str) -> None:
    """Refuse a dotted key or table header of more than :data:`MAX_DEPTH` parts before TOML parses it.

    tomllib takes time quadratic in a dotted key's length (50,000 parts: over
    a minute); :func:`check_depth` would refuse the result anyway. Quoted
    strings count as one key part each, so a dotted value inside a string is
    never mistaken for a key.
    """
    for line in text.splitlines():
        if line.count(".") <= MAX_DEPTH:
            continue
        bare = _QUOTED.sub("q", line)
        found = _DEEP_KEY.search(bare)
        if found:
            parts = [p.strip() for p in found.group().split(".")]
            field = ".".join(parts[:2]) if bare == line else "config"  # quoted parts: no bare name to show
            raise ConfigError(field, f"nested more than {MAX_DEPTH} levels deep")


def merge_overrides(data: dict[str, Any], overrides: Mapping[str, Any]) -> None:
    """Apply a variant's table of overrides to a config dict (in place).

    A table for a pluggable part (:data:`WHOLE_PARTS`) replaces that part whole;
    other tables are merged key by key; ``a.b`` keys are dotted paths.
    """
    dotted: dict[str, Any] = {}
    for key, value in overrides.items():
        if key in WHOLE_PARTS and isinstance(value, dict):
            data[key] = dict(value)
        elif isinstance(value, dict):
            dotted.update({f"{key}.{sub}": subval for sub, subval in value.items()})
        else:
            dotted[key] = value
    terms = dotted.get(TERM_KEY[:-1])
    if isinstance(terms, dict):  # TOML's unquoted objective.terms.ntd.beta = 3.0: a term's option by name, not a new list
        del dotted[TERM_KEY[:-1]]
        dotted.update({f"{TERM_KEY}{name}.{option}": v for name, options in terms.items() for option, v in (options.items() if isinstance(options, dict) else [("", options)])})
    apply_overrides(data, dotted)


def variant_config(base: RunConfig, label: str, overrides: Mapping[str, Any]) -> RunConfig:
    """The config of one variant of ``base``: its overrides applied, named after its label.

    A ``tune`` table in the variant is its own tuning grid (:func:`own_tune`), checked here and not applied.
    """
    for key in ("name", "variants", "compare"):
        if key in overrides:
            raise ConfigError(key, "cannot be set inside a variant (a variant's name is its label)")
    # every variant runs at the comparison's seeds (cell_config sets them): a variant's own seed was dropped silently,
    # and its row read as a run on other data and another initial model while it was the baseline's seed
    require("seed" not in overrides, "seed", "cannot be set inside a variant: every variant runs at the comparison's seeds "
                                             "([compare] seeds or --seeds), which pair its runs with the others'")
    # every run of a comparison goes into the comparison's folder (the config's out_dir/name-compare): a variant's
    # out_dir was dropped silently, and its rows labelled out_dir=aa and out_dir=bb were the same run twice
    require("out_dir" not in overrides, "out_dir", "cannot be set inside a variant: every variant's runs go into the comparison's folder "
                                                   "(the config's out_dir); set out_dir outside the variants")
    own_tune(base.tune, overrides.get("tune"))
    data = dataclasses.replace(base, variants={}, compare={}, tune={}).to_dict()  # not every variant copied into each
    merge_overrides(data, {k: v for k, v in overrides.items() if k != "tune"})
    data["name"] = safe_name(label)
    return config_from_dict(data)


def with_dotted_grids(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """``data`` with its ``[tune]`` grid and every variant's own one keyed by dotted paths (:func:`chillfl.tune.dotted_grid`).

    A variant's ``"tune.algorithm.mu" = [...]`` (a dotted override key, as ``"client.lr" = 0.1`` is) joins its
    own grid too: applied as an override, it nested into a ``tune`` table the grid refused.
    """
    out = dict(data)
    if isinstance(data.get("tune"), Mapping):
        out["tune"] = typed_grid(dotted_grid(data["tune"].items()))
    variants = data.get("variants")
    if isinstance(variants, Mapping):
        out["variants"] = {label: typed_overrides(_own_grid(table, f"variants.{label}.tune")) if isinstance(table, Mapping) else table
                           for label, table in variants.items()}
    return out


def typed_overrides(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A variant's table of overrides with each number of a typed option as the option holds it (:func:`typed_number`),
    through its dotted keys (``"client.lr" = 1``) and nested tables (``client = { lr = 1 }``); its own grid (``tune``) is
    typed by :func:`typed_grid`.

    Why: ``[variants.B] "client.lr" = 1`` and ``= 1.0`` ran the same runs, but the comparison's ``config.toml`` (whose
    SHA-256 ``sweep.json`` records) and its ``sweep.json`` kept the value as typed: two comparisons, whose shards did not
    join one folder. A part's own option (``algorithm.mu``) stays as written here: only its part knows its type, and
    the comparison's plan types it under the part the variant selects (:func:`chillfl.sweeps.plan.typed_variant`).
    """
    out: dict[str, Any] = {}
    for key, value in table.items():
        path = f"{prefix}{key}" if isinstance(key, str) else None
        if path is None or (not prefix and (key == "tune" or key.startswith("tune."))):
            out[key] = value
        elif isinstance(value, Mapping):
            out[key] = typed_overrides(value, f"{path}.")
        else:
            out[key] = typed_number(path, value)
    return out


def typed_number(key: str, value: Any) -> Any:
    """``value`` as the typed option ``key`` of a run's config holds it (``client.lr``, 1 -> 1.0; ``client.epochs``,
    2.0 -> 2), where it is a number the option takes; anything else as written, for the option's own check to name."""
    if not is_real(value):
        return value
    tp = option_type(RunConfig, key)
    if tp is None:
        return value
    try:
        return coerce(value, tp, key)
    except ConfigError:
        return value


def _own_grid(table: Mapping[str, Any], field: str) -> Mapping[str, Any]:
    """A variant's table with its ``tune`` table and its ``"tune.x.y"`` keys as one dotted grid under ``tune``."""
    own = table.get("tune", {})
    loose = [(key[len("tune."):], value) for key, value in table.items() if isinstance(key, str) and key.startswith("tune.")]
    if not isinstance(own, Mapping) or not (own or loose):
        return table  # no grid, or a malformed one that own_tune names
    rest = {key: value for key, value in table.items() if not (key == "tune" or isinstance(key, str) and key.startswith("tune."))}
    return {**rest, "tune": typed_grid(dotted_grid([*own.items(), *loose], field))}


def typed_grid(grid: Mapping[str, Any]) -> dict[str, Any]:
    """A tuning grid with each value of a typed option as the option holds it: ``client.lr = [1, 0.1]`` is
    ``[1.0, 0.1]``, ``client.epochs = [1.0, 2]`` is ``[1, 2]`` (:func:`~chillfl.options.coerce`).

    Why: a comparison's ``sweep.json`` records its ``config.toml``'s SHA-256, its options and variants, and a shard joins
    (``--shard``), ``chillfl reproduce --resume`` reuses, only a folder that records the same. As typed, ``[1, 0.1]`` and
    ``[1.0, 0.1]`` were two comparisons, though they run the same configs under the same names. A value its option
    refuses stays as written, for the point's own check to name; so does every value of a part's own table
    (``algorithm.mu``) here: only its part knows its type, and the plan types it (:func:`chillfl.sweeps.plan.typed_tune`). A folder started before keeps its files as they
    were (its ``config.toml``'s checksum is of its bytes): its resume reads the grid typed, and runs the same configs.
    """
    return {key: [typed_number(key, value) for value in values] if isinstance(key, str) and isinstance(values, list) else values
            for key, values in grid.items()}


def own_tune(shared: Mapping[str, Any], table: Any) -> dict[str, list[Any]]:
    """A variant's own tuning grid (``[variants.LABEL.tune]``), added to the shared ``[tune]`` grid for that variant alone.

    Why: a shared grid can only hold options every variant has (``client.lr``); a method's own hyperparameter
    (FedProx's ``mu``, FedBABU's ``finetune_lr``) is tuned on validation only through its own grid. It adds keys:
    one the shared grid already tunes is refused, so every variant is scored on the same shared points.
    """
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise ConfigError("tune", f"expected a table of option = [values], got {short_repr(table)}")
    parse_tune(table)
    for key in table:
        require(key not in shared, f"tune.{key}", "is tuned by the shared [tune] grid already; a variant's own grid adds other options")
    return {str(k): list(v) for k, v in table.items()}


def _quote_hint(label: str, value: Any) -> str:
    """How to write ``variants.T=1.client.lr=0.1`` (split at its first ``=``, so a variant ``T`` set to a string): the
    name quoted, as the command line reads it (:func:`quoted_variant`)."""
    name_end, dot, rest = value.partition(".") if isinstance(value, str) else ("", "", "")
    if not (dot and "=" in rest):
        return ""
    return f"; a variant name holding '=' is quoted: 'variants.\"{label}={name_end}\".{rest}'"


def check_variant(base: RunConfig, label: str, table: Any) -> None:
    """Validate ``[variants.LABEL]`` against ``base``; errors name the variant (``variants.x.client.lr``)."""
    field = f"variants.{label}"
    if not isinstance(table, dict):
        raise ConfigError(field, f"must be a table of overrides, got {short_repr(table)}{_quote_hint(label, table)}")
    written = dotted_keys([table])
    twice = next((k for k in written if written.count(k) > 1), None)
    if twice is not None:  # "client.lr" = 0.2 beside client.lr = 0.3: one of them was dropped without a word
        raise ConfigError(f"{field}.{twice}", "is given twice (as a dotted key and in a table); keep one")
    try:
        variant_config(base, label, table)
    except ConfigError as exc:
        raise ConfigError(f"{field}.{exc.field}", exc.message + inherited_note(exc.field, table)) from None


def dotted_keys(tables: Iterable[Mapping[str, Any]]) -> list[str]:
    """The dotted keys of override tables: ``section.option`` as written, a nested ``{section: {option: ...}}`` flattened."""
    keys: list[str] = []
    for table in tables:
        for key, value in table.items():
            if isinstance(value, Mapping):
                keys.extend(f"{key}.{sub}" for sub in value)
            else:
                keys.append(key)
    return keys


def inherited_note(field: str, overrides: Mapping[str, Any]) -> str:
    """Where the variant's bad option came from when the variant does not write it but sets its table's switch: the base
    config's table (a ``[attack]`` off, holding ``factor`` for its ``scaling`` variant, refused the ``gaussian`` one on
    ``variants.gauss.attack.factor``, an option that variant never wrote). Empty for any other error, and for any other
    table: a part's table in a variant replaces the base's whole (``algorithm = { mu = 0.0 }`` drops its ``name``)."""
    section, _, _ = field.partition(".")
    switch = METHOD_TABLES.get(section, ("", object, None))
    written = set(dotted_keys([overrides]))
    if switch[2] is None or field in written or f"{section}.{switch[0]}" not in written:
        return ""
    return (f"; this variant takes {field} from the base config's [{section}] table, which holds it for the variants that "
            f"switch its owner on: set it in those variants' own tables instead")


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``a.b.c = value`` in nested dicts, creating tables as needed."""
    parts = key.split(".")
    if not all(parts):
        raise ConfigError(key, "override keys look like section.option=value")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif isinstance(child, OwnTable):
            child = node[part] = child.table()
        elif dataclasses.is_dataclass(child) and not isinstance(child, type):
            child = node[part] = dataclasses.asdict(child)
        elif not isinstance(child, dict):
            raise ConfigError(key, f"{part!r} is a value, not a table")
        node = child
    node[parts[-1]] = value


def parse_value(text: str, field: str = "value") -> Any:
    """Interpret an override value as TOML (numbers, booleans, lists, quoted strings), else a bare string."""
    check_key_depth(text)  # an inline table's dotted keys (``{a.a.a... = 1}``)
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    except RecursionError:
        raise ConfigError(field, "nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise ConfigError(field, str(exc)[:80]) from None


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``key=value`` items -> ``{key: value}``, split at the first ``=`` outside a quoted variant name
    (``variants."T=0.25".client.lr=0.1``, :func:`quoted_variant`)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(item, "overrides look like section.option=value (e.g. client.lr=0.05)")
        key, _, text = quoted_variant(item) or item.partition("=")
        if not key.strip():  # ``=1``: no field to name but the override itself
            raise ConfigError("overrides", f"{short_repr(item)} has no key; overrides look like section.option=value (e.g. client.lr=0.05)")
        out[key.strip()] = parse_value(text.strip(), key.strip())
    return dotted_overrides(out)


def dotted_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A table-valued override (``federation={"rounds": 1}``, ``'federation={rounds=1}'`` on the command line) as its
    dotted keys, so it merges key by key as the docs say; set whole, it replaced the config's table and dropped its
    other options (``num_clients``) silently. One path for the Python API and the CLI."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if isinstance(value, Mapping) and value and "." not in str(key):  # a part's table; a dotted key's table (algorithm.base_options) is set whole
            bad = [k for k in value if not isinstance(k, str)]
            if bad:  # {"client": {1: 2}} became the key 'client.1', refused as an unknown option
                raise ConfigError(str(key), f"a key must be a string (an option name, e.g. 'lr'), got {short_repr(bad[0])} ({type(bad[0]).__name__})")
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def override_hint(field: str, message: str, items: Sequence[str]) -> str:
    """How to quote the command-line override of ``field`` that a type error (``message``) refused; empty where the error
    is of no override's value. An override's value is read as TOML and else kept as a bare string: ``log.sinks=[csv]``
    was refused with "expected a list, got '[csv]'", a list rejected as no list, and ``name=123`` "expected a string"."""
    import shlex

    for item in items:
        key, sep, text = quoted_variant(item) or item.partition("=")
        key, text = key.strip(), text.strip()
        if not sep or key != field:
            continue
        try:
            value = parse_value(text, key)
        except ConfigError:
            return ""
        if message.startswith(("expected a list", "expected a table")) and isinstance(value, str) and text[:1] in "[{":
            fixed = _quoted_words(text)
            if fixed is None:  # [64 32]: no quoting makes it a list (quoting "64 32" gave a string where a number is asked)
                return (f" (an override's value is read as TOML, and {text} is not TOML, so it was one string; write it as TOML: items between "
                        "commas, strings in quotes, and quote the override for the shell)")
            return f" (an override's value is read as TOML, and {text} is not TOML, so it was one string; quote the strings inside it, and the override for the shell: {shlex.quote(f'{key}={fixed}')})"
        if message.startswith("expected a string") and not isinstance(value, str):
            quoted = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
            return f" (an override's value is read as TOML; for the string, quote it, and the override for the shell: {shlex.quote(f'{key}={quoted}')})"
        return ""
    return ""


def _quoted_words(text: str) -> str | None:
    """``[csv, jsonl]`` as the TOML list ``["csv", "jsonl"]``: its bare words quoted; None where that is no TOML list."""
    if not (text.startswith("[") and text.endswith("]")):
        return None
    words = [w.strip() for w in text[1:-1].split(",")] if text[1:-1].strip() else []
    if any(len(w.split()) > 1 and w[:1] not in "\"'" for w in words):  # "64 32": a missing comma, not a string to quote
        return None
    quoted = [w if w[:1] in "\"'" or not isinstance(parse_value(w), str) else '"' + w.replace("\\", "\\\\").replace('"', '\\"') + '"' for w in words]
    fixed = "[" + ", ".join(quoted) + "]"
    return fixed if isinstance(parse_value(fixed), list) else None


def quoted_variant(item: str) -> tuple[str, str, str] | None:
    """``(key, "=", value)`` of an override whose variant name is quoted as TOML quotes a key (``variants."T=0.25".client.lr=0.1``:
    a name may hold ``=``, as the demo's and the bundled tables' ``T=0.25`` do); None for any other item."""
    prefix = VARIANTS_KEY + '"'
    end = item.find('".', len(prefix))
    if not item.startswith(prefix) or end < 0 or "=" not in item[end:]:
        return None
    option, _, text = item[end + 2 :].partition("=")
    return f"{VARIANTS_KEY}{item[len(prefix):end]}.{option}", "=", text


def is_folder(path: Path) -> bool:
    """Whether ``path`` is a folder (a path too long or with a NUL is none)."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def not_a_file(path: Path) -> str | None:
    """What is at ``path``, where a config file was looked for and no regular file or folder is, as the end of a
    sentence (``"is a FIFO"``, ``"is a symbolic-link loop"``); None when nothing is there. Why: a
    FIFO, a socket or a link that loops back on itself was reported as "file not found", a false reason for a file
    that is there."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return "is a symbolic-link loop" if exc.errno == errno.ELOOP else None
    except ValueError:  # NUL in the path
        return None
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))
    what = next((name for test, name in kinds if test(mode)), None)
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else f"is {what}" if what else "is not a regular file"


BOM = "\ufeff"
"""The UTF-8 byte-order mark Windows Notepad puts before a file's text: TOML has no place for it (tomllib said "Invalid
statement (at line 1, column 1)", naming nothing), so one at the very start is dropped."""


def read_toml(path: str | Path) -> dict[str, Any]:
    """The TOML file at ``path``; every way it can be unreadable is a ConfigError on field ``config``. One UTF-8
    byte-order mark before its text is dropped (:data:`BOM`)."""
    p = Path(path)
    try:
        is_file = p.is_file()
    except (OSError, ValueError):  # ENAMETOOLONG, NUL in the path
        is_file = False
    if not is_file:
        odd = not_a_file(p)
        raise ConfigError("config", f"{short_path(str(p))} is a folder, not a config file" if is_folder(p)
                          else f"{short_path(str(p))} {odd}, not a config file" if odd else f"file not found: {short_path(str(p))}")
    try:
        text = p.read_text(encoding="utf-8").removeprefix(BOM)
    except UnicodeDecodeError:
        raise ConfigError("config", f"{p} is not a UTF-8 text file") from None
    except OSError as exc:
        raise ConfigError("config", f"cannot read {p}: {exc.strerror or exc}") from None
    check_key_depth(text)
    try:
        data: dict[str, Any] = tomllib.loads(text)  # typed here: on Python 3.10 tomli may be untyped
        return data
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("config", f"malformed TOML in {p}: {exc}{_bare_word_hint(text, str(exc))}") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise ConfigError("config", f"unreadable value in {p}: {str(exc)[:80]}") from None
    except RecursionError:
        raise ConfigError("config", f"{p} nests tables or lists too deeply") from None


_TOML_AT = re.compile(r"^Invalid value \(at line (\d+), column \d+\)$")


def _bare_word_hint(text: str, message: str) -> str:
    """The fix for a value TOML cannot read that is a bare word: ``name = fedprox`` (YAML and Hydra write strings
    unquoted) or ``decay = True`` (Python's spelling). tomllib says only "Invalid value (at line 2, column 8)"."""
    found = _TOML_AT.match(message)
    lines = text.splitlines()
    if not found or not 0 < int(found[1]) <= len(lines):
        return ""
    key, sep, value = lines[int(found[1]) - 1].partition("=")
    word = value.split("#")[0].strip()
    if not sep or not re.fullmatch(r"[A-Za-z_][\w.:/-]*", word):
        return ""
    if word.lower() in ("true", "false"):
        return f"; TOML writes booleans in lower case: {key.strip()} = {word.lower()}"
    return f"; a string needs quotes: {key.strip()} = \"{word}\""


MAX_EXTENDS = 16
"""Longest ``extends`` chain (real configs: one or two)."""


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The TOML file at ``path`` with its ``extends`` chain resolved: the dict it stands for.

    ``extends = "base.toml"`` (relative to the including file, else a bundled
    config such as ``"flexchill/_base-digits.toml"``) starts from that
    file's resolved dict, and this file's tables are merged into it key by key,
    at any depth (:func:`merge_extends`); this file's values win. Chains are
    allowed (a base may extend another); a cycle, a missing file, a chain
    longer than :data:`MAX_EXTENDS` or a non-string ``extends`` is one
    ConfigError naming ``extends``. A base's ``name`` is not inherited: a run is
    named by its own file (or its own ``name``).
    """
    chain: list[Path] = []
    layers: list[dict[str, Any]] = []
    current = Path(path)
    including: str | None = None  # "extends = 'b.toml' in a.toml" for a base: its errors name extends and the file that named it
    while True:
        try:
            data = read_toml(current)
        except ConfigError as exc:
            if including is None or exc.field != "config":
                raise
            raise ConfigError("extends", f"{exc.message} ({including})") from None
        check_depth(data)  # before merge_extends, which recurses
        chain.append(current.resolve())
        base = data.pop("extends", None)
        layers.append(data)
        if base is None:
            break
        where = f"in {current}"
        if not isinstance(base, str) or not base or "\0" in base:
            raise ConfigError("extends", f"expected a TOML file name (a string), got {short_repr(base)} {where}")
        target = _extends_target(current.parent, base)
        if target is None and is_folder(current.parent / base):  # "file not found" sent the reader looking for a missing file
            raise ConfigError("extends", f"{short_path(str(current.parent / base))} is a folder, not a config file {where}")
        if target is None and (odd := not_a_file(current.parent / base)):  # a FIFO, a link loop: there, but no file
            raise ConfigError("extends", f"{short_path(str(current.parent / base))} {odd}, not a config file {where}")
        if target is None:
            raise ConfigError("extends", f"file not found: {short_repr(base)} (relative to {current.parent}, nor a bundled config){_bundled_hint(base)} {where}")
        if target.resolve() in chain:
            names = " -> ".join(p.name for p in [*chain, target.resolve()])
            raise ConfigError("extends", f"cycle: {names}")
        if len(chain) >= MAX_EXTENDS:  # the target would be file MAX_EXTENDS + 1
            raise ConfigError("extends", f"chain longer than {MAX_EXTENDS} files {where}")
        including = f"extends = {short_repr(base)} {where}"
        current = target
    merged = layers.pop()
    while layers:
        merged.pop("name", None)  # a base's name is not inherited
        merge_extends(merged, layers.pop())
    return merged


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # ENAMETOOLONG, NUL in the path
        return False


def _bundled_hint(base: str) -> str:
    """``" (did you mean 'flexchill/table4-digits'?)"`` for a near miss of a bundled config or base that ``extends`` names
    (not the package's own top-level ``_*.toml``, which are no configs to extend)."""
    root = experiments_root()
    names = sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.toml") if not p.name.startswith("_") or p.parent != root)
    return did_you_mean(base.removesuffix(".toml"), names)


def _extends_target(folder: Path, base: str) -> Path | None:
    """The file ``extends = base`` names: relative to the including file's folder, else a bundled
    config or shared base (``flexchill/_base-digits.toml``, ``.toml`` optional); None if neither exists."""
    local = folder / base
    if _is_file(local):
        return local
    relative = Path(base if base.endswith(".toml") else base + ".toml")
    if relative.is_absolute() or ".." in relative.parts:
        return None
    bundled = experiments_root() / relative
    return bundled if _is_file(bundled) else None


def merge_extends(base: dict[str, Any], child: Mapping[str, Any]) -> None:
    """Merge ``child`` into ``base`` (in place): tables key by key at any depth, other values replaced.

    A pluggable part's table (:data:`PART_KEYS`, and ``[distillation]`` by its
    ``method``) that names another implementation than the base's replaces the
    base's table whole: the base's options belong to the base's choice (as for
    overrides, ``partition.name=iid``).
    """
    for key, value in child.items():
        old = base.get(key)
        if isinstance(value, Mapping) and isinstance(old, dict):
            part_key = {**PART_KEYS, "distillation": "method"}.get(key)
            if part_key is not None and part_key in value and value[part_key] != old.get(part_key):
                base[key] = copy.deepcopy(dict(value))
            else:
                merge_extends(old, value)
        else:
            base[key] = copy.deepcopy(value)


def apply_overrides(data: dict[str, Any], overrides: Mapping[str, Any]) -> None:
    """Apply dotted ``key=value`` overrides to a config dict (in place): the one path for the CLI, the API and variants.

    Overrides merge into a part's table key by key (defaults < file <
    overrides): ``partition.alpha=0.1`` on a file without ``[partition]``
    means the default partitioner with alpha 0.1. An override that picks
    another implementation (``partition.name=iid`` on a Dirichlet base)
    starts that part from an empty table instead: the old table's options
    belong to the old name (a comparison notes where that drops a choice every method
    reads alike: :func:`chillfl.sweeps.run.dropped_choice_notes`). In ``[distillation]`` and ``[prototypes]``, another
    ``method`` keeps the options every method shares and drops the old method's own
    (a resolved table holds the old method's defaults, which are not the new one's);
    ``[distillation]`` drops ``cache_duration`` too, whose default is the method's (:data:`METHOD_DEFAULTED`);
    in ``[attack]``, another ``kind`` does the same (switched on from ``"none"``, it keeps the
    options the table held for it).
    """
    defaults: RunConfig | None = None
    for part, key in PART_KEYS.items():
        if not any(k.startswith(part + ".") for k in overrides):
            continue
        table = data.get(part)
        if table is None:
            defaults = defaults or RunConfig()
            table = getattr(defaults, part)
        if not isinstance(table, Mapping):
            continue  # not a table: config_from_dict names the error
        fallback = "file" if part == "partition" and "partition.from" in overrides else table.get(key)  # from a file: not the old split
        picked = overrides.get(f"{part}.{key}", fallback)
        data[part] = copy.deepcopy(dict(table)) if picked == table.get(key) else {}
    for part, (name_key, shared, off) in METHOD_TABLES.items():
        table = data.get(part)
        key = f"{part}.{name_key}"
        if key in overrides and isinstance(table, Mapping) and overrides[key] != table.get(name_key) and (off is None or table.get(name_key, off) != off):
            kept = _fields(shared) - METHOD_DEFAULTED.get(part, frozenset())  # the old method's own options belong to it, and so do defaults it chose
            data[part] = {k: copy.deepcopy(v) for k, v in table.items() if k in kept}
    for key, value in overrides.items():
        if key.startswith(TUNE_KEY) and isinstance(data.get("tune", {}), Mapping):
            set_tune_axis(data, key.removeprefix(TUNE_KEY), value)
        elif (named := variant_key(data, key)) is not None:
            set_variant_option(data, *named, value)
        elif (named := variant_key(data, f"{key}={value}")) is not None and isinstance(value, str) and "=" in named[1]:
            option, _, text = named[1].partition("=")  # a name holding "=" (T=0.25) unquoted: the first "=" was the name's
            set_variant_option(data, named[0], option.strip(), parse_value(text.strip(), f"{key}={option.strip()}"))
        elif not key.startswith(TERM_KEY):
            set_dotted(data, key, value)
    for key, value in overrides.items():  # after the others: a term's option sets the term of the run's terms, as overridden
        if key.startswith(TERM_KEY):
            set_term_option(data, key, value)


TUNE_KEY = "tune."
"""``tune.<section>.<option>=[...]``: an override that sets one axis of the ``[tune]`` grid."""


def set_tune_axis(data: dict[str, Any], axis: str, values: Any, field: str = "tune") -> None:
    """Set the ``[tune]`` grid's ``axis`` (``client.lr``) to ``values``, however the table spelt it.

    Why: a grid's key is a dotted option name, which a file writes quoted (``"client.lr" = [...]``, the demo) or as
    nested tables (``client.lr = [...]`` unquoted); ``tune.client.lr=[0.05]`` set the nested spelling beside the
    quoted one, and the run was refused as giving ``tune.client.lr`` twice. The override replaces the axis instead."""
    grid = dotted_grid(dict(data.get("tune") or {}).items(), field)
    grid[axis] = values
    data["tune"] = grid


VARIANTS_KEY = "variants."
"""``variants.<name>.<option>=value``: an override of one option of a comparison's variant."""


def variant_key(data: Mapping[str, Any], key: str) -> tuple[str, str] | None:
    """``(name, option)`` of an override ``variants.<name>.<option>`` that names one of ``data``'s variants (the longest
    name that fits), else None.

    Why: a variant's name may hold dots (``"5 epochs at lr 0.1"``), so the key cannot be split at them; the names the
    file gives decide where the name ends."""
    variants = data.get("variants")
    if not key.startswith(VARIANTS_KEY) or not isinstance(variants, Mapping):
        return None
    rest = key.removeprefix(VARIANTS_KEY)
    fits = [name for name in variants if isinstance(name, str) and rest.startswith(name + ".") and isinstance(variants[name], Mapping)]
    if not fits:
        return None
    name = max(fits, key=len)
    return name, rest.removeprefix(name + ".")


def set_variant_option(data: dict[str, Any], name: str, option: str, value: Any) -> None:
    """Set ``option`` of variant ``name`` to ``value``; ``tune.<axis>`` replaces that axis of the variant's own grid
    however the file spelt it (as :func:`set_tune_axis` does for ``[tune]``: ``variants.X.tune.client.lr=[...]``
    was refused as giving the axis twice, beside the file's quoted ``"client.lr"``)."""
    variants = dict(data["variants"])
    variant = copy.deepcopy(dict(variants[name]))
    if option.startswith(TUNE_KEY) and isinstance(variant.get("tune", {}), Mapping):
        set_tune_axis(variant, option.removeprefix(TUNE_KEY), value, f"{VARIANTS_KEY}{name}.tune")
    else:
        try:
            set_dotted(variant, option, value)
        except ConfigError as exc:  # the field as the user wrote it
            raise ConfigError(f"{VARIANTS_KEY}{name}.{exc.field}", exc.message) from None
    variants[name] = variant
    data["variants"] = variants


TERM_KEY = "objective.terms."
"""``objective.terms.<term name>.<option>``: an override or grid key that sets one option of a term of ``[objective] terms``."""


def set_term_option(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``objective.terms.<name>.<option> = value`` on the term of that name (:func:`chillfl.training.terms.with_term_option`).

    Why: ``terms`` is a list, so :func:`set_dotted` refused the key ("'terms' is a value, not a table") and a term's
    options (FedNTD's beta, tau) could not be tuned on validation as every other option is.
    """
    from chillfl.training.terms import with_term_option  # the term registry imports torch: only when such a key is given

    objective = data.get("objective")
    if objective is None:
        objective = data["objective"] = {}
    elif dataclasses.is_dataclass(objective) and not isinstance(objective, type):
        objective = data["objective"] = dataclasses.asdict(objective)
    elif not isinstance(objective, dict):
        raise ConfigError(key, "'objective' is a value, not a table")
    objective["terms"] = with_term_option(objective, key, value)


def _fields(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls) if f.init)


METHOD_TABLES: dict[str, tuple[str, type, str | None]] = {
    "distillation": ("method", DistillationOptions, None),
    "prototypes": ("method", PrototypeOptions, None),
    "attack": ("kind", AttackOptions, ATTACK_OFF),
    "privacy": ("mechanism", PrivacyOptions, PRIVACY_OFF),
}
"""Parts chosen by one key (``method``, ``kind``) whose table mixes options every choice shares (this dataclass) with the
chosen one's own; the value that turns the part off, if it has one (an off table holds options for the choice to come)."""

METHOD_DEFAULTED: dict[str, frozenset[str]] = {"distillation": DISTILLATION_METHOD_DEFAULTED}
"""Of a :data:`METHOD_TABLES` part's shared options, those whose default is the choice's own: a switch of the choice drops
them too (the same overrides may set them again), so the new choice runs at its own default, not the old one's value."""


def name_from_path(path: Path) -> str:
    """The file's stem as the run name, made a valid name if it is not one (``..toml`` -> ``variant``)."""
    try:
        check_name(path.stem)
    except ConfigError:
        return safe_name(path.stem)
    return path.stem


def load_config(path: str | Path | None, overrides: Mapping[str, Any] | None = None, swept: Iterable[str] = ()) -> RunConfig:
    """Read a TOML file (or start from defaults), apply overrides, validate; ``swept``: the keys a comparison's
    ``--grid`` / ``--tune`` set (:func:`check_switches`)."""
    data: dict[str, Any] = read_config_file(path) if path is not None else {}
    if path is not None and "name" not in data:
        data["name"] = name_from_path(Path(path))
    check_depth(data)  # before deepcopy, which recurses
    data = copy.deepcopy(data)
    apply_overrides(data, overrides or {})
    return config_from_dict(data, swept)


def check_out_dir(out_dir: str, field: str = "out_dir") -> None:
    """Refuse an ``out_dir`` that cannot hold result folders, before anything is written (see :func:`check_writable_dir`)."""
    check_writable_dir(out_dir, field)
