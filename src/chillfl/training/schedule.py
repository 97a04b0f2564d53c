"""The local optimiser's settings and learning-rate schedules, as plain data (no torch: the config builds them).

The tensor maths that reads them is :mod:`chillfl.training.optim`; the module docstring there gives the formulas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Literal

OptimizerName = Literal["sgd", "adam", "adamw"]
ScheduleName = Literal["constant", "step", "cosine"]


@dataclass(frozen=True)
class LrSchedule:
    """A learning-rate factor of a position ``t`` in ``[0, total)`` (formulas: :mod:`chillfl.training.optim`)."""

    name: ScheduleName = "constant"
    step_size: int = 1
    gamma: float = 0.1
    min_factor: float = 0.0
    """Cosine's floor as a fraction of the peak lr (``lr_min / lr``)."""

    def factor(self, t: int, total: int) -> float:
        if self.name == "step":
            return float(self.gamma ** (t // self.step_size))
        if self.name == "cosine":
            f = self.min_factor
            return f + (1.0 - f) * (1.0 + math.cos(math.pi * t / max(total, 1))) / 2.0
        return 1.0


CONSTANT = LrSchedule()


@dataclass(frozen=True)
class Optimizer:
    """The local optimiser besides SGD's momentum and weight decay (those stay on the spec).

    ``step_schedule``: the lr schedule over a round's local steps (the per-round
    schedule is applied by the server, in the round's lr).
    """

    name: OptimizerName = "sgd"
    nesterov: bool = False
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    clip_norm: float = 0.0
    """Clip each client's whole gradient to this L2 norm; 0 = off."""
    step_schedule: LrSchedule = CONSTANT
    sam_rho: float = 0.0
    """Sharpness-aware steps (FedSAM): the radius of the ball each step's gradient is taken at the worst point of; 0 = off
    (:mod:`chillfl.training.sam`)."""
    sam_adaptive: bool = False
    """ASAM's scale-invariant ball (FedASAM): the perturbation scaled by |w| (+ ``sam_eta``)."""
    sam_eta: float = 0.0
    """ASAM's eta: the scaling is ``|w| + sam_eta`` (0: the SAM reference code's ``|w|``)."""

    @property
    def dense(self) -> bool:
        """Whether the update needs every gradient whole (Adam's squares, the clipping norm)."""
        return self.name != "sgd" or self.clip_norm > 0

    @property
    def plain(self) -> bool:
        """Plain SGD steps at one lr a round: what SCAFFOLD, FedNova and VRL-SGD's normalisations assume."""
        return self.name == "sgd" and not self.nesterov and self.step_schedule.name == "constant"


SGD = Optimizer()


def planned_steps(num_samples: int, batch_size: int, epochs: int) -> int:
    """Steps of a full local training (:func:`~chillfl.training.local.batch_order`'s count, a trailing single sample merged)."""
    if num_samples <= 0:
        return 0
    per_epoch = -(-num_samples // batch_size)
    if per_epoch > 1 and num_samples - (per_epoch - 1) * batch_size == 1:
        per_epoch -= 1
    return per_epoch * epochs


def merges_tail(num_samples: int, batch_size: int) -> bool:
    """Whether an epoch's last batch holds ``batch_size`` + 1 samples: :func:`~chillfl.training.local.batch_order` merged a
    trailing single sample into it (num_samples = k * batch_size + 1, k >= 1). DP-SGD's accountant charges that step at its
    own, larger sampling rate."""
    return num_samples > batch_size and (num_samples - 1) % batch_size == 0


def step_lr(optimizer: Optimizer, lr: float, step: int, total: int) -> float:
    """The lr of local step ``step`` (0-based) of ``total``: the round's ``lr`` times the step schedule."""
    if optimizer.step_schedule.name == "constant":
        return lr
    return lr * optimizer.step_schedule.factor(step, total)


LR_FLOOR = 2.0**-126
"""float32's smallest normal number (``torch.finfo(torch.float32).tiny``): the least lr a run accepts in any round
(:meth:`~chillfl.config.ClientConfig.check_lr_floor`) and at any local step (:func:`first_step_below_floor`). Below it a
float32 step ``lr * g`` is subnormal or 0, so the round trains nothing, and an lr of 0 (float64 underflow) makes the
methods that divide by it fail."""


def first_below(lr: Callable[[int], float], n: int) -> int:
    """The least ``i`` in ``[0, n)`` with ``lr(i) < LR_FLOOR``, by bisection: ``lr`` is non-increasing and ``lr(n - 1)``
    below the floor (a schedule's lr over its rounds, or over a round's local steps)."""
    lo, hi = -1, n - 1  # lr(lo) >= LR_FLOOR (lo = -1: before the first), lr(hi) < LR_FLOOR
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if lr(mid) >= LR_FLOOR else (lo, mid)
    return hi


def first_step_below_floor(optimizer: Optimizer, lr: float, total: int) -> int | None:
    """The first of ``total`` local steps that :func:`step_lr` takes below :data:`LR_FLOOR` from ``lr``; None: none does.

    Why: a schedule over local steps runs over each training's own planned steps, and a training with more steps than
    ``client.epochs`` gives (a method's stage, a distillation phase) takes the lr further down the same curve; its last
    step has the least lr (the schedule is non-increasing in the step), so one look tells whether any step is below."""
    if optimizer.step_schedule.name == "constant" or total <= 0 or step_lr(optimizer, lr, total - 1, total) >= LR_FLOOR:
        return None
    return first_below(lambda k: step_lr(optimizer, lr, k, total), total)


@dataclass(frozen=True)
class StageSteps:
    """A training a round runs besides ``client.epochs``' one (a method's stage, a distillation phase), as the check
    before the run counts its local steps (:meth:`~chillfl.config.ClientConfig.check_stage_lr_floor`)."""

    epochs: int
    epochs_field: str
    """The option that sets ``epochs`` (``algorithm.head_epochs``): what the refusal says to lower."""
    batch_size: int
    optim: Optimizer
    """Its optimiser: its ``step_schedule`` runs over the training's own planned steps."""
    rows: int
    """The most rows one training of it sees."""
    over: str
    """Those rows as the line says them: "the largest client's 360 rows", "the 100 public rows a round draws"."""
    lr: float | None = None
    """Its own lr, the same every round; None: each round's lr (``client.lr``, its decay and its schedule over rounds)."""


def schedule_field(schedule: LrSchedule, section: str) -> str:
    """The option of ``schedule`` that takes the lr down within it: ``lr_gamma`` for ``step``, ``lr_min`` for ``cosine``."""
    return f"{section}.lr_gamma" if schedule.name == "step" else f"{section}.lr_min"


def schedule_term(schedule: LrSchedule, step: int, total: int) -> str:
    """The schedule's factor at ``step`` of ``total`` as a factor of a formula: `` * 0.1^3``, `` * 0.00886 (cosine)``."""
    if schedule.name == "step":
        return f" * {schedule.gamma:g}^{step // schedule.step_size}"
    return f" * {schedule.factor(step, total):.3g} (cosine)"


def below_floor(step: int, steps: int, takes: str, formula: str, value: float, field: str, lower: str) -> str:
    """The refusal of a local step below :data:`LR_FLOOR`: one wording for the check before the run and the one in training."""
    return (f"local step {step + 1} of the {steps} {takes} would train at lr {formula} = {value:.3g}, below float32's smallest normal "
            f"number ({LR_FLOOR:.3g}): the float32 steps do nothing from there on; raise {field} or lower {lower}")


