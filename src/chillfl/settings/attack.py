"""The ``[attack]`` table: which clients are adversarial and what they do (docs/attacks.md).

Typed and checked here, below the config; the attacks themselves live in :mod:`chillfl.attacks`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

from chillfl.options import require

KINDS = ("none", "label_flip", "sign_flip", "scaling", "gaussian", "lie", "backdoor")
DATA_KINDS = ("label_flip", "backdoor")
"""Attacks on the attacker's training data: they apply under every protocol."""
UPDATE_KINDS = ("sign_flip", "scaling", "gaussian", "lie")
"""Attacks on what the attacker uploads in place of its honest model."""


@dataclass(frozen=True)
class AttackConfig:
    """Adversarial clients (docs/attacks.md).

    ``kind``: ``none`` (off), ``label_flip``, ``sign_flip``, ``scaling``, ``gaussian``, ``lie`` or ``backdoor``.
    ``fraction``: the share of all clients that attack, ``round(fraction * num_clients)`` of them drawn
    once from the run's seed; ``clients``: explicit attacker ids instead (then ``fraction`` is ignored).
    ``factor``: ``sign_flip`` sends ``w - factor (w_i - w)`` (0: 1); ``scaling`` sends ``w + factor (w_i - w)``
    (0: n / m, the round's clients over its attackers, Bagdasaryan et al.'s gamma = n / eta at eta = 1).
    ``sigma``: ``gaussian`` sends ``w + N(0, sigma^2 I)`` (soft-labels: noised rows; prototypes: noised class means). ``z``: ``lie`` sends ``mean - z std`` of the
    round's benign models per coordinate (0: Baruch et al.'s z_max from the round's n and m).
    ``label_map``: ``label_flip``'s map, entry c the label class c becomes (empty: ``C - 1 - c``).
    ``target``, ``poison_fraction``, ``trigger_size``: ``backdoor``'s target class, the share of the
    attacker's training rows that carry the trigger (relabelled ``target``), and the side of the trigger's
    square of maximum-intensity pixels in the bottom-right corner.
    """

    kind: Literal["none", "label_flip", "sign_flip", "scaling", "gaussian", "lie", "backdoor"] = "none"
    fraction: float = 0.2
    clients: tuple[int, ...] = ()
    factor: float = 0.0
    sigma: float = 1.0
    z: float = 0.0
    label_map: tuple[int, ...] = ()
    target: int = 0
    poison_fraction: float = 0.5
    trigger_size: int = 2

    SWITCH: ClassVar[str] = "kind"
    """The option that turns the table on: options written while no run of a config sets it are refused (``chillfl.config.check_switches``)."""

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    def validate(self, section: str) -> None:
        require(0.0 <= self.fraction < 1.0, f"{section}.fraction", f"must be in [0, 1), got {self.fraction}")
        require(all(c >= 0 for c in self.clients), f"{section}.clients", f"client ids are >= 0, got {list(self.clients)}")
        require(len(set(self.clients)) == len(self.clients), f"{section}.clients", f"lists a client twice: {list(self.clients)}")
        require(math.isfinite(self.factor) and self.factor >= 0, f"{section}.factor", f"must be >= 0 (0: the kind's default), got {self.factor}")
        require(math.isfinite(self.sigma) and self.sigma > 0, f"{section}.sigma", f"must be > 0, got {self.sigma}")
        require(math.isfinite(self.z) and self.z >= 0, f"{section}.z", f"must be >= 0 (0: z_max from n and m), got {self.z}")
        require(all(c >= 0 for c in self.label_map), f"{section}.label_map", f"labels are >= 0, got {list(self.label_map)}")
        require(self.target >= 0, f"{section}.target", f"must be a class >= 0, got {self.target}")
        require(0.0 < self.poison_fraction <= 1.0, f"{section}.poison_fraction", f"must be in (0, 1], got {self.poison_fraction}")
        require(1 <= self.trigger_size <= 64, f"{section}.trigger_size", f"must be in [1, 64] pixels, got {self.trigger_size}")
