"""The maths of attacks on an attacker's training data (``label_flip``, ``backdoor``), applied once to the run's data.

The attackers' rows of the training set are rewritten before any client is built, so every protocol
(parameters, soft-labels, prototypes) and every executor trains the attackers on the same poisoned rows,
and a resumed run rebuilds them bit for bit (a pure function of the seed: nothing to checkpoint).

* ``label_flip``: every training label y of an attacker becomes ``map[y]``, by default ``C - 1 - y``
  (the whole label space, as Fang et al. 2020; Tolpegin et al. 2020 flip one source class to one target:
  a ``label_map`` that moves one label).
* ``backdoor`` (pixel-pattern trigger, Gu et al. 2017 / Bagdasaryan et al. 2020): a share
  ``poison_fraction`` of each attacker's rows, drawn from (seed, "attack", "poison", client), get a
  ``trigger_size`` x ``trigger_size`` square in the bottom-right corner, each channel set to that
  channel's largest training input (white, on inputs normalised per channel), and the label ``target``.
  The other rows stay clean, so the attacker's model keeps its main-task accuracy.
  The square is a mark on the rows (:func:`stamped`), stamped where they are read and, in an augmented
  training batch, after its crop and flip (:mod:`chillfl.data.stamp`).
* ``dba`` (Xie et al. 2020) stamps each attacker's rows the same way with a :class:`Pattern`: its own part
  of a global trigger that only the probe shows whole.

Checked against (2026-12-02) vio1etus/FLPoison ``attackers/synthesizers/pixel_synthesizer.py`` (a trigger of
raw value 1 on every channel, normalised with the data set's per-channel mean and std: white) and AI-secure/DBA
``image_helper.py`` ``add_pixel_pattern`` (1 on every channel of unnormalised inputs: white). Until 2026-12-02 every
channel took the largest value over all channels, above the range of a channel whose largest is smaller (the
same on 1-channel data). Both references stamp batches after their transforms, and so does chillfl since 2026-12-02
(:mod:`chillfl.data.stamp`): which rows carry the trigger is drawn once per attacker, and an augmented training
batch crops and flips them clean, then stamps the trigger at its fixed pixels, as on the probe. Until then the stored
rows were stamped before ``[dataset.augment]``'s crop and flip, which moved or cut the trigger in training; runs
without augmentation train on the same bits either way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Collection, Sequence

import numpy as np
import torch

from chillfl.data import FederatedData
from chillfl.errors import ConfigError
from chillfl.seeds import derive_seed
from chillfl.attacks.select import rounded_share
from chillfl.attacks.spec import resolved, spec_of
from chillfl.settings.attack import AttackConfig
from chillfl.data.stamp import Marks


Value = float | tuple[float, ...]
"""A trigger's pixel value: one for every channel, or one per channel (dim -3 of the inputs, :func:`channel_max`)."""


def _filler(value: Value, x: torch.Tensor, trailing: int) -> float | torch.Tensor:
    """``value`` in a shape that broadcasts over the stamped region of ``x``: a float, or the per-channel values as a
    (C, 1, ..., 1) tensor with ``trailing`` ones (the region's dims after the channel)."""
    if isinstance(value, (int, float)):
        return float(value)
    if len(value) == 1:
        return float(value[0])
    return torch.tensor(value, dtype=x.dtype, device=x.device).reshape(-1, *([1] * trailing))


@dataclass(frozen=True)
class Trigger:
    """The backdoor's pattern: a ``size`` x ``size`` square of ``value`` in the last two (spatial) dims' bottom-right corner."""

    size: int
    value: Value

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (a batch: N x ... x H x W) with the trigger stamped on every row, as a new tensor."""
        out = x.clone()
        out[..., -self.size :, -self.size :] = _filler(self.value, out, 2)
        return out


@dataclass(frozen=True)
class Pattern:
    """A trigger made of single pixels: ``value`` at each (row, column) of ``cells``, counted from the top-left of the last two (spatial) dims."""

    cells: tuple[tuple[int, int], ...]
    value: Value

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (a batch: N x ... x H x W) with every cell set to ``value`` on every row and channel, as a new tensor."""
        out = x.clone()
        rows = torch.tensor([r for r, _ in self.cells], dtype=torch.long, device=x.device)
        cols = torch.tensor([c for _, c in self.cells], dtype=torch.long, device=x.device)
        out[..., rows, cols] = _filler(self.value, out, 1)
        return out


def channel_max(x: torch.Tensor) -> tuple[float, ...]:
    """Each channel's largest value over ``x`` (N x C x H x W, the channel dim -3): white on every channel of a
    normalised image. Inputs with no channel dim (N x H x W) have one value."""
    if x.ndim < 4:
        return (float(x.max()),)
    channel = x.ndim - 3
    return tuple(float(v) for v in torch.amax(x, dim=[d for d in range(x.ndim) if d != channel]))


def flip_map(label_map: Sequence[int], num_classes: int) -> list[int]:
    """``label_flip``'s map, entry c the label class c becomes: ``label_map`` or (empty) ``C - 1 - c``."""
    if not label_map:
        return [num_classes - 1 - c for c in range(num_classes)]
    if len(label_map) != num_classes or max(label_map) >= num_classes:
        raise ConfigError("attack.label_map", f"needs one label in [0, {num_classes}) per class ({num_classes} entries), got {list(label_map)}")
    return list(label_map)


def flip_labels(y: torch.Tensor, mapping: Sequence[int]) -> torch.Tensor:
    """Each label y replaced by ``mapping[y]``."""
    return torch.tensor(list(mapping), dtype=y.dtype, device=y.device)[y]


def poison_rows(n: int, fraction: float, seed: int, client: int) -> np.ndarray:
    """Which of a client's ``n`` rows carry the trigger: ``round(fraction * n)`` of them (:func:`~chillfl.attacks.select.rounded_share`;
    at least one), from the client's own stream."""
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    count = max(1, rounded_share(fraction, n))
    rng = np.random.default_rng(derive_seed(seed, "attack", "poison", client))
    return np.sort(rng.choice(n, size=count, replace=False))


def trigger_value(kind: str, what: str, height: int, width: int, target: int, data: FederatedData, layout: tuple[str, str]) -> tuple[float, ...]:
    """The values a pixel trigger stamps (each channel's largest training input, :func:`channel_max`), once the data can take a ``height`` x ``width``
    trigger; a ConfigError naming ``attack.kind`` (``what`` the kind stamps) where inputs are no images or are read
    anew each round, naming ``attack.target`` where ``target`` is no class.

    ``what`` names the trigger's height x width (the refusal of one too large for the images says it once).
    ``layout``: (the option field that sizes the trigger, how to make it fit), named where the inputs are images but
    smaller than the trigger: the option is what to change, not the kind.
    """
    shape = data.dataset.input_shape
    if len(shape) < 2:
        raise ConfigError("attack.kind", f"'{kind}' stamps {what}, and inputs of shape {list(shape)} are no images")
    if shape[-2] < height or shape[-1] < width:
        field, fix = layout
        raise ConfigError(field, f"'{kind}' stamps {what}, larger than the {shape[-2]}x{shape[-1]} images: {fix}")  # ``what`` gives its size
    if data.dataset.train_items is not None:
        raise ConfigError("attack.kind", f"'{kind}' stamps the stored training inputs, and this dataset reads its items anew each round (redraw)")
    if target >= data.num_classes:
        raise ConfigError("attack.target", f"must be a class in [0, {data.num_classes}), got {target}")
    return channel_max(data.dataset.x_train)


def trigger_of(size: int, target: int, data: FederatedData) -> Trigger:
    """The backdoor's trigger for this data set; ConfigError naming ``attack.kind`` where inputs are no images."""
    fits = f"set it to at most {min(data.dataset.input_shape[-2:])}" if len(data.dataset.input_shape) >= 2 else ""
    return Trigger(size, trigger_value("backdoor", f"a {size}x{size} pixel square", size, size, target, data, ("attack.trigger_size", fits)))


def triggered_test(data: FederatedData, trigger: Trigger | Pattern, target: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A pixel backdoor's probe: the test inputs whose label is not ``target``, triggered, labelled ``target``."""
    x, y = data.test()
    keep = y != target
    return trigger.apply(x[keep]), y[keep].clone().fill_(target)


def relabel_rows(data: FederatedData, ids: Collection[int], relabel: Callable[[int, torch.Tensor], torch.Tensor]) -> FederatedData:
    """``data`` with the training labels of each client in ``ids`` replaced by ``relabel(client_id, labels)``: a
    ``poison`` hook's way to rewrite the attackers' rows (``label_flip``'s, :func:`relabelled`).

    ``labels`` are the client's rows of ``data.dataset.y_train`` as they were (one call a client, in id order), and
    ``relabel`` returns as many class ids. Written into a copy of ``y_train``: the caller's dataset, which other runs
    share, keeps its labels. Rows are the dataset's, and a partition may give one row to several clients
    (``ClientRows.tiled``): such a row is relabelled for every client that holds it. A slip (a label tensor of another
    shape) is one line on ``attack.kind``."""
    ds = data.dataset
    y = ds.y_train.clone()
    for cid in sorted(ids):
        rows = torch.from_numpy(np.asarray(data.train_indices[cid], dtype=np.int64))
        new = relabel(cid, ds.y_train[rows])
        if not isinstance(new, torch.Tensor) or new.shape != rows.shape or new.dtype.is_floating_point or new.dtype.is_complex or new.dtype == torch.bool:
            got = f"{tuple(new.shape)} {new.dtype}" if isinstance(new, torch.Tensor) else type(new).__name__
            raise ConfigError("attack.kind", f"the attack's relabel gave client {cid} {got} labels; it must return one class id a row "
                                             f"({len(rows)}, integers like the labels it is given)")
        y[rows] = new.to(y.dtype)
    return dataclasses.replace(data, dataset=dataclasses.replace(ds, x_train=ds.x_train, y_train=y))


def relabelled(data: FederatedData, ids: frozenset[int], mapping: Sequence[int]) -> FederatedData:
    """``data`` with each attacker's training label y replaced by ``mapping[y]`` (``label_flip``)."""
    return relabel_rows(data, ids, lambda cid, y: flip_labels(y, mapping))


def stamped(data: FederatedData, ids: frozenset[int], trigger: Trigger | Pattern, target: int, fraction: float, seed: int) -> FederatedData:
    """``data`` with a share ``fraction`` of each attacker's training rows (:func:`poison_rows`) marked with ``trigger`` and
    labelled ``target`` (``backdoor``, ``dba``).

    The labels are rewritten in place of the old; the trigger is a mark (:meth:`FederatedData.with_stamps`): the rows
    read stamped, and an augmented training batch stamps them after its crop and flip (:mod:`chillfl.data.stamp`).
    """
    ds = data.dataset
    y = ds.y_train.clone()
    marks = {}
    for cid in sorted(ids):
        own = np.asarray(data.train_indices[cid], dtype=np.int64)
        mine = poison_rows(len(own), fraction, seed, cid)
        y[torch.from_numpy(own[mine])] = target
        marks[cid] = Marks(mine, trigger)
    return dataclasses.replace(data, dataset=dataclasses.replace(ds, y_train=y)).with_stamps(marks)


def poisoned(data: FederatedData, attack: AttackConfig, ids: frozenset[int], seed: int) -> FederatedData:
    """``data`` with the attackers' training rows rewritten by the kind's ``poison`` hook, given the options resolved for
    ``ids`` (:func:`~chillfl.attacks.spec.resolved`); as it is for a kind without one (or no attacker)."""
    if not attack.enabled or not ids:
        return data
    poison = spec_of(attack).poison
    if poison is None:
        return data
    out = poison(resolved(attack, ids).options, data, ids, seed)
    if not isinstance(out, FederatedData) or out.num_clients != data.num_clients:  # a plugin's hook: one line, not an AttributeError later
        got = f"{out.num_clients} clients' data" if isinstance(out, FederatedData) else type(out).__name__
        raise ConfigError("attack.kind", f"the attack's poison hook must return the run's FederatedData ({data.num_clients} clients) rewritten, got {got}")
    return out
