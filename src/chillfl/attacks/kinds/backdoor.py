"""``backdoor`` (pixel-pattern trigger, Gu et al. 2017 / Bagdasaryan et al. 2020): data poisoning with a measured success.

A share ``poison_fraction`` of each attacker's rows, drawn from (seed, "attack", "poison", client), get a
``trigger_size`` x ``trigger_size`` square in the bottom-right corner, each channel set to its largest training
input (white), and the label ``target``; the other rows stay clean, so the attacker's model keeps
its main-task accuracy. Its probe: the global test inputs whose label is not ``target``, triggered and
labelled ``target``, so ``attack_success_rate`` is Bagdasaryan et al.'s backdoor accuracy.

Checked against (2026-12-02) vio1etus/FLPoison ``attackers/badnets.py`` and ``synthesizers/pixel_synthesizer.py``
(BadNets: a white square in the bottom-right corner; its defaults: 5x5, 0.32 of each batch, target 6, all-to-one)
and AI-secure/DBA ``image_helper.py`` (``poison_test_dataset`` leaves out the target class, as the probe here).
The defaults here (2x2, 0.5 of the rows, drawn once; target 0) suit 8x8 digits; each is an option.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from chillfl.attacks.spec import AttackSpec
from chillfl.options import require

if TYPE_CHECKING:
    import torch

    from chillfl.data import FederatedData


@dataclass(frozen=True)
class BackdoorOptions:
    """``target``: the class triggered inputs are labelled with. ``poison_fraction``: the share of an attacker's
    training rows that carry the trigger. ``trigger_size``: the side of the trigger's square of maximum-intensity
    pixels in the bottom-right corner."""

    target: int = 0
    poison_fraction: float = 0.5
    trigger_size: int = 2

    def validate(self, section: str) -> None:
        require(self.target >= 0, f"{section}.target", f"must be a class >= 0, got {self.target}")
        require(0.0 < self.poison_fraction <= 1.0, f"{section}.poison_fraction", f"must be in (0, 1], got {self.poison_fraction}")
        require(1 <= self.trigger_size <= 64, f"{section}.trigger_size", f"must be in [1, 64] pixels, got {self.trigger_size}")


def poison(options: BackdoorOptions, data: FederatedData, attackers: frozenset[int], seed: int) -> FederatedData:
    from chillfl.attacks.poison import stamped, trigger_of

    trigger = trigger_of(options.trigger_size, options.target, data)
    return stamped(data, attackers, trigger, options.target, options.poison_fraction, seed)


def probe(options: BackdoorOptions, data: FederatedData) -> tuple[torch.Tensor, torch.Tensor]:
    """Triggered test inputs whose label is not the target, labelled with the target."""
    from chillfl.attacks.poison import trigger_of, triggered_test

    return triggered_test(data, trigger_of(options.trigger_size, options.target, data), options.target)


SPEC = AttackSpec(
    "backdoor",
    BackdoorOptions,
    summary="a pixel trigger on a share of the attackers' rows, relabelled target; attack_success_rate measured",
    poison=poison,
    probe=probe,
)
