"""``dba``: the distributed backdoor attack (Xie, Huang, Chen & Li, "DBA: Distributed Backdoor Attacks against
Federated Learning", ICLR 2020): data poisoning whose trigger no single attacker ever plants whole.

A global pixel trigger ``T`` is split into ``K = parts`` disjoint local triggers, ``T = T_0 ∪ ... ∪ T_{K-1}``.
With the attackers sorted by id, attacker j (0-based) poisons with local trigger ``T_{j mod K}`` only (in the
paper, one attacker per part): a share ``poison_fraction`` of its rows become ``(R(x, T_{j mod K}), target)``,
``R(x, T)`` setting each pixel of ``T`` to each channel's largest training input (white), and trains on them
and on its clean rows as an honest client would. The attack's success is measured with the *global* trigger: the
probe is the test inputs whose label is not ``target``, ``R(x, T)`` labelled ``target``, so
``attack_success_rate`` = the share of them the global model puts in ``target`` (the paper's attack success rate).

Layout: part k is a one-pixel-high bar of ``bar_length`` pixels in row ``(k // 2) (1 + gap)``, columns from
``(k mod 2) (bar_length + gap)``, counted from the image's top-left: two bars a row, ``gap`` pixels apart both ways.
With 4 parts (the default with 4 attackers or more), bars of 2 and gap 1 on 8x8 digits the global trigger is::

    # # . # # . . .      row 0: T_0 = (0,0),(0,1)   T_1 = (0,3),(0,4)
    . . . . . . . .
    # # . # # . . .      row 2: T_2 = (2,0),(2,1)   T_3 = (2,3),(2,4)

Choices
-------
* Layout: the authors' MNIST setting (``utils/mnist_params.yaml`` of AI-secure/DBA) is 4 one-pixel-high bars of
  4 pixels in the top-left of a 28x28 image, two a row, 2 pixels apart both ways (rows 0 and 3, columns 0-3 and
  6-9). Scaled to 8x8 (a factor of 3.5) that is bars of ~1 pixel 0.6 apart; the defaults round it up to bars of
  2 (a bar of 1 is a single pixel, no longer a bar) and a gap of 1, keeping the 2x2 grid of bars and the corner.
  ``bar_length``, ``gap`` and ``parts`` set it; more than 4 parts add rows of two bars below.
* ``parts`` unset: one part per attacker, at most 4 (:func:`resolve`). The paper has one attacker per part and 4
  parts (its K); 4 attackers or more give its 4 parts, fewer give one part each (the default federation's 2
  attackers, 2 parts), where 4 were refused. Here attacker j takes part j mod K, so more attackers than parts share
  parts, and an explicit ``parts`` above the attackers is refused (``attack.parts``): a part nobody plants would
  be in the probe's trigger and in no training row.
* ``poison_fraction = 0.5`` (as ``backdoor``): the authors' code relabels 20 of each batch of 64 (0.31), redrawn
  every batch; here a fixed share of each attacker's rows, drawn once from (seed, "attack", "poison", client), the
  backdoor's stream, so ``dba`` and ``backdoor`` poison the same rows and differ only in the trigger.
* ``target = 0`` (the authors' MNIST target is 2; any class: an option). The probe leaves out the test inputs
  of class ``target``, as the authors' ``poison_test_dataset``.
* The trigger value is each channel's largest training input (the authors set the pixel to 1 on every channel,
  their inputs' largest, as neither MNIST nor CIFAR is normalised there: white), as ``backdoor``.
* Not modelled: the paper's attackers also train their poisoned rows with their own lr and epochs and scale
  their update (model replacement, factor 100 in the single-shot setting) in chosen rounds only. Here they train
  as honest clients, in every round they are sampled (the multi-shot setting without scaling); one ``kind`` runs
  at a time (docs/attacks.md, "Not yet").

Checked against (2026-12-01) AI-secure/DBA ``utils/mnist_params.yaml``: ``*_poison_pattern`` (the four bars
above), ``poisoning_per_batch: 20`` of ``batch_size: 64``, ``poison_label_swap: 2``, ``scale_weights_poison:
100`` (the scaling not modelled here); ``image_helper.py`` ``add_pixel_pattern`` and ``poison_test_dataset``;
vio1etus/FLPoison ``attackers/dba.py`` (the same layout rule: row (k // 2)(1 + gap), column (k mod 2)(length + gap),
local trigger ``worker_id mod 4``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chillfl.attacks.spec import AttackSpec
from chillfl.options import require
from chillfl.wording import counted

if TYPE_CHECKING:
    import torch

    from chillfl.attacks.poison import Pattern
    from chillfl.data import FederatedData

Cells = tuple[tuple[int, int], ...]

MOST_PARTS = 4
"""The paper's K: ``parts`` left unset is one per attacker, at most this many."""


@dataclass(frozen=True)
class DbaOptions:
    """``target``: the class triggered inputs are labelled with. ``poison_fraction``: the share of an attacker's rows
    that carry its local trigger. ``parts``: K, the number of local triggers (unset: one per attacker, at most
    :data:`MOST_PARTS`, :func:`resolve`). ``bar_length``: each local trigger's length in pixels (a one-pixel-high
    bar). ``gap``: pixels between neighbouring bars, across and down."""

    target: int = 0
    poison_fraction: float = 0.5
    parts: int | None = None
    bar_length: int = 2
    gap: int = 1

    def validate(self, section: str) -> None:
        require(self.target >= 0, f"{section}.target", f"must be a class >= 0, got {self.target}")
        require(0.0 < self.poison_fraction <= 1.0, f"{section}.poison_fraction", f"must be in (0, 1], got {self.poison_fraction}")
        require(self.parts is None or 1 <= self.parts <= 64, f"{section}.parts", f"must be in [1, 64] local triggers, got {self.parts}")
        require(1 <= self.bar_length <= 64, f"{section}.bar_length", f"must be in [1, 64] pixels, got {self.bar_length}")
        require(0 <= self.gap <= 64, f"{section}.gap", f"must be in [0, 64] pixels, got {self.gap}")


def resolve(options: DbaOptions, attackers: frozenset[int]) -> DbaOptions:
    """``options`` with ``parts`` unset made one per attacker, at most :data:`MOST_PARTS` (an explicit value is kept).

    Why: the paper's K = 4 is one part per attacker, and a run with fewer attackers (the default 10 clients' 2) was
    refused; with fewer the trigger is split in as many parts as there are attackers, each planted by one."""
    if options.parts is not None:
        return options
    return dataclasses.replace(options, parts=max(1, min(MOST_PARTS, len(attackers))))


def part_count(options: DbaOptions) -> int:
    """K, of options :func:`resolve` has filled in (the runtime gives every hook those)."""
    if options.parts is None:
        raise ValueError("dba's parts is unset: the options must go through resolve() with the run's attackers first")
    return options.parts


def local_cells(options: DbaOptions, part: int) -> Cells:
    """The (row, column) pixels of local trigger ``part``: a bar in row (part // 2)(1 + gap), two bars a row."""
    row = (part // 2) * (1 + options.gap)
    first = (part % 2) * (options.bar_length + options.gap)
    return tuple((row, first + i) for i in range(options.bar_length))


def global_cells(options: DbaOptions) -> Cells:
    """Every local trigger's pixels together: the trigger the probe stamps."""
    return tuple(cell for part in range(part_count(options)) for cell in local_cells(options, part))


def extent(options: DbaOptions) -> tuple[int, int]:
    """(height, width) of the global trigger's bounding box from the top-left."""
    cells = global_cells(options)
    return 1 + max(r for r, _ in cells), 1 + max(c for _, c in cells)


def layout_field(options: DbaOptions, shape: tuple[int, ...]) -> tuple[str, str]:
    """The option to blame when the global trigger does not fit ``shape`` (and how to make it fit): ``gap`` when it is
    set and its default would fit; else ``parts`` when it is too tall (a row of bars per two parts), ``bar_length``
    when too wide."""
    height, width = extent(options)
    default_gap = DbaOptions.gap
    if options.gap != default_gap and len(shape) >= 2:
        h, w = extent(dataclasses.replace(options, gap=default_gap))
        if shape[-2] >= h and shape[-1] >= w:
            return "attack.gap", f"set a smaller gap (the default {default_gap} fits)"
    tall = len(shape) >= 2 and shape[-2] < height
    return ("attack.parts", "set fewer parts or a smaller gap") if tall else ("attack.bar_length", "set a shorter bar_length or a smaller gap")


def _value(options: DbaOptions, data: FederatedData) -> tuple[float, ...]:
    from chillfl.attacks.poison import trigger_value

    height, width = extent(options)
    what = f"{counted(part_count(options), 'bar')} of {options.bar_length} pixels in a {height}x{width} corner"
    return trigger_value("dba", what, height, width, options.target, data, layout_field(options, data.dataset.input_shape))


def global_pattern(options: DbaOptions, data: FederatedData) -> Pattern:
    """The global trigger (every part) with this data set's trigger value."""
    from chillfl.attacks.poison import Pattern

    return Pattern(global_cells(options), _value(options, data))


def parts_of(options: DbaOptions, attackers: frozenset[int]) -> list[frozenset[int]]:
    """Entry k: the attackers that plant local trigger k (the j-th attacker by id plants part j mod K); a ConfigError
    on ``attack.parts`` when a part would have none."""
    from chillfl.errors import ConfigError

    order = sorted(attackers)
    parts = part_count(options)
    if len(order) < parts:
        raise ConfigError("attack.parts", f"splits the trigger into {parts} local triggers, and the run has {len(order)} attackers: set it to at most {len(order)}, "
                                          "or leave it unset (one per attacker), so every part is planted")
    return [frozenset(order[k :: parts]) for k in range(parts)]


def poison(options: DbaOptions, data: FederatedData, attackers: frozenset[int], seed: int) -> FederatedData:
    """Each attacker's share of rows stamped with its own local trigger and labelled ``target``."""
    from chillfl.attacks.poison import Pattern, stamped

    value = _value(options, data)  # the data's refusals first: they hold whatever the attackers
    out = data
    for part, ids in enumerate(parts_of(options, attackers)):
        out = stamped(out, ids, Pattern(local_cells(options, part), value), options.target, options.poison_fraction, seed)
    return out


def probe(options: DbaOptions, data: FederatedData) -> tuple[torch.Tensor, torch.Tensor]:
    """Test inputs whose label is not the target, with the *global* trigger, labelled with the target."""
    from chillfl.attacks.poison import triggered_test

    return triggered_test(data, global_pattern(options, data), options.target)


SPEC = AttackSpec(
    "dba",
    DbaOptions,
    summary="distributed backdoor: each attacker plants one part of a pixel trigger (parts unset: one per attacker, at most 4); success measured with the whole",
    poison=poison,
    probe=probe,
    resolve=resolve,
)
