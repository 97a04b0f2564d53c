"""``label_flip``: every training label y of an attacker becomes ``map[y]``, by default ``C - 1 - y``.

The whole label space, as Fang et al. 2020; Tolpegin et al. 2020 flip one source class to one target:
a ``label_map`` that moves one label. Data poisoning, so it runs under every protocol
(:func:`chillfl.attacks.poison.relabelled`).

Checked against (2026-12-02) lishenghui/blades ``blades/adversaries/labelflip_adversary.py`` (``num_class - 1 -
target`` on every training batch) and vio1etus/FLPoison ``attackers/synthesizers/synthesizer.py`` (``all2all``:
``num_classes - 1 - label``; its ``LabelFlipping`` defaults to ``targeted``, source 2 to target 7: a ``label_map``).
Here every row of an attacker is flipped, as Blades; FLPoison's ``targeted`` flips only the source class's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from chillfl.attacks.spec import AttackSpec
from chillfl.options import require

if TYPE_CHECKING:
    from chillfl.data import FederatedData


@dataclass(frozen=True)
class LabelFlipOptions:
    """``label_map``: entry c is the label class c becomes (empty: ``C - 1 - c``)."""

    label_map: tuple[int, ...] = ()

    def validate(self, section: str) -> None:
        require(all(c >= 0 for c in self.label_map), f"{section}.label_map", f"labels are >= 0, got {list(self.label_map)}")


def poison(options: LabelFlipOptions, data: FederatedData, attackers: frozenset[int], seed: int) -> FederatedData:
    from chillfl.attacks.poison import flip_map, relabelled

    return relabelled(data, attackers, flip_map(options.label_map, data.num_classes))


SPEC = AttackSpec("label_flip", LabelFlipOptions, summary="the attackers train on flipped labels (c -> C - 1 - c, or label_map)", poison=poison)
