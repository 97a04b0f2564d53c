"""Training-batch augmentation on tensors: random crop with padding, horizontal flip; input normalisation.

Configured by ``[dataset.augment]``::

    [dataset.augment]
    crop_padding = 4          # 0: no crop
    padding_mode = "reflect"  # or "constant" (zeros)
    flip = true               # horizontal flip with probability 1/2
    normalize = "dataset"     # false | "dataset" | [[means...], [stds...]]

Crop and flip are applied where a training step forms its minibatch
(:func:`chillfl.training.local.train_client` and the vectorised executor's
gather), never to evaluation data; a data-poisoning attack's pixel trigger is
stamped on its marked rows after them (:mod:`chillfl.data.stamp`), so the
crop and flip never move it. Everything runs on the batch's device: the
random offsets are drawn on the CPU (so every device draws the same numbers)
and the crop and flip of a whole ``[clients, batch, C, H, W]`` stack are one
gather, without a Python loop over samples (and without materialising the
padded images).

Randomness: the offsets and flips of client ``c``'s ``s``-th step come from a
``torch.Generator`` seeded with ``derive_seed(job_seed, "augment", s)``, where
the job seed is already derived from (run seed, round, client). A step's
augmentation therefore does not depend on the executor, the chunk a client
sits in, or any other client, and runs stay bitwise reproducible.

Choices
-------
* Order as torchvision's ``RandomCrop(padding) -> RandomHorizontalFlip``:
  crop offsets ``(dy, dx)`` are uniform in ``[0, 2p]``, the crop is
  ``padded[dy:dy+H, dx:dx+W]``, then the crop is mirrored left-right with
  probability 1/2. The FLex&Chill authors' CIFAR pipeline uses
  ``RandomCrop(32, padding=4, padding_mode='reflect')`` and a flip; hence
  ``padding_mode = "reflect"`` (mirror without repeating the edge, as
  ``torch.nn.functional.pad``). ``"constant"`` pads with black, the raw pixel
  value 0, as torchvision's default ``fill=0`` before ``Normalize`` (SCARLET's
  code): in the model's input space that is ``(0 - mean_c) / std_c`` per
  channel, from the standardisation the dataset records (0 when it records
  none). SCARLET flips before cropping; with offsets uniform on [0, 2p] the
  two orders give the same distribution of crops.
* ``normalize`` acts once on the whole dataset (train and test alike, so
  evaluation sees the same scale): ``"dataset"`` (default) is chillfl's usual
  per-channel standardisation with the train set's mean and std; ``false``
  leaves pixels in [0, 1]; ``[[m1, m2, m3], [s1, s2, s3]]`` uses given
  constants (e.g. the papers' CIFAR-10 means and stds). The last two need a
  dataset that records the channel statistics chillfl standardised it with
  (every image dataset: CIFAR, SVHN, MNIST-style, ``digits``, ``hf``, and the
  memory-mapped ``femnist``, ``flwr_femnist``, ``tiny_imagenet``,
  ``caltech256``, whose cache's ``meta.json`` keeps them; not ``mnist1d``,
  ``synthetic``, ``flwr_shakespeare``).

Checked against (2026-12): torchvision's RandomCrop(32, padding=4, padding_mode) (offsets on [0, 2p], fill 0 before Normalize) + RandomHorizontalFlip(0.5); FLex&Chill, SCARLET code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from chillfl.errors import ConfigError
from chillfl.numeric import is_finite_real, is_real
from chillfl.options import parse_options, require, short_repr

AUGMENT_KEY = "augment"
SECTION = "dataset.augment"
MAX_PADDING = 1024


@dataclass(frozen=True)
class AugmentOptions:
    """Crop padding (0: no crop), padding mode, horizontal flip; ``normalize``: "dataset", false or [[means], [stds]]."""

    crop_padding: int = 0
    padding_mode: Literal["reflect", "constant"] = "reflect"
    flip: bool = False
    normalize: str | bool | list[list[float]] = "dataset"

    def validate(self, section: str) -> None:
        require(0 <= self.crop_padding <= MAX_PADDING, f"{section}.crop_padding", f"must be in [0, {MAX_PADDING}], got {self.crop_padding}")
        norm_stats(self.normalize, f"{section}.normalize")

    @property
    def active(self) -> bool:
        """Whether training batches are changed at all (normalisation is not per batch)."""
        return self.crop_padding > 0 or self.flip


FLOAT32_TINY = float(torch.finfo(torch.float32).tiny)
FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def norm_stats(value: Any, field: str) -> tuple[tuple[float, ...], tuple[float, ...]] | str | None:
    """``normalize`` checked: "dataset", None (for false) or (means, stds) with stds > 0."""
    if value == "dataset" and isinstance(value, str):
        return "dataset"
    if value is False:
        return None
    ok = isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (list, tuple)) and len(v) >= 1 for v in value)
    if ok:
        means, stds = value
        ok = len(means) == len(stds) and all(is_real(v) for v in [*means, *stds])
    if not ok:
        raise ConfigError(field, f'expected "dataset", false or [[means...], [stds...]] of equal length, got {short_repr(value)}')
    # finite, and inside float32's normal range: a NaN mean, an infinite std or a std of 1e-40 (1 / std overflows float32)
    # made every input NaN, 0 or infinite, and the run then "diverged" in round 1 with a hint to lower the learning rate
    require(all(is_finite_real(m) and abs(m) <= FLOAT32_MAX for m in means), field, f"means must be finite float32 values, got {short_repr(list(means))}")
    require(all(is_finite_real(s) and FLOAT32_TINY <= s <= FLOAT32_MAX for s in stds), field,
            f"stds must be > 0 and finite in float32 (>= {FLOAT32_TINY:.3g}), got {short_repr(list(stds))}")
    return tuple(float(m) for m in means), tuple(float(s) for s in stds)


def parse_augment(table: Mapping[str, Any] | None) -> AugmentOptions:
    """The ``[dataset.augment]`` table (absent: no augmentation)."""
    if table is None:
        return AugmentOptions()
    if not isinstance(table, Mapping):
        raise ConfigError(SECTION, f"expected a table, got {short_repr(table)}")
    return parse_options(AugmentOptions, table, SECTION)


def split_augment(options: Mapping[str, Any] | None) -> tuple[dict[str, Any], AugmentOptions]:
    """A ``[dataset]`` option table without its ``augment`` sub-table, and that sub-table parsed."""
    rest = dict(options or {})
    return rest, parse_augment(rest.pop(AUGMENT_KEY, None))


# ---------------------------------------------------------------- normalisation (whole dataset)


def rescaler(opts: AugmentOptions, mean: Sequence[float] | None, std: Sequence[float] | None, channels: int, name: str) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The map from chillfl's standardised inputs to ``opts.normalize``'s scale (None: keep them as they are).

    ``mean`` / ``std``: the per-channel standardisation the dataset applied
    (x = (raw - mean) / std), None when it applied none.
    """
    field = f"{SECTION}.normalize"
    stats = norm_stats(opts.normalize, field)
    if stats == "dataset":
        return None
    if mean is None or std is None:
        raise ConfigError(field, f'dataset {name!r} has no recorded channel statistics to undo; only "dataset" is allowed for it')
    if stats is not None:
        require(len(stats[0]) == channels, field, f"gives {len(stats[0])} channel(s); dataset {name!r} has {channels}")
    old_m, old_s = torch.tensor(mean), torch.tensor(std)
    new_m, new_s = (torch.zeros(channels), torch.ones(channels)) if stats is None else (torch.tensor(stats[0]), torch.tensor(stats[1]))

    def scale(x: torch.Tensor) -> torch.Tensor:
        shape = [1, -1] + [1] * (x.dim() - 2)
        raw = unstandardise(x, old_m.view(shape), old_s.view(shape))
        out = raw if stats is None else (raw - new_m.to(x.dtype).view(shape)) / new_s.to(x.dtype).view(shape)
        # each constant may be finite and still put (raw - mean) / std past float32 ([[1e38], [0.1]]): every input infinite,
        # and the run "diverged" in round 1 with a hint to lower the learning rate
        require(stats is None or bool(torch.isfinite(out).all()), field,
                f"{short_repr([list(stats[0]), list(stats[1])]) if stats else ''} puts inputs of dataset {name!r} past float32's range "
                "((x - mean) / std is not finite): give its real per-channel mean and std")
        return out

    return scale


UNDO_ROWS = 4096
"""Rows undone at once: the float64 intermediates of :func:`unstandardise` stay at one block."""


def unstandardise(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """The values ``x = (raw - mean) / std`` was standardised from (``mean`` / ``std``: the float32 constants, shaped to
    broadcast), in ``x``'s dtype; whole numbers exactly.

    Why: undone in float32 (``x * std + mean``), 29 of 720 integer token ids came back 1 ulp off (4.9999995 for 5), and an
    index-reading model then refused them as real-valued. The undo is done in float64 and a value whose nearest whole
    number standardises (as the loader did, in ``x``'s dtype) to exactly the stored ``x`` is given back as that whole
    number: it is what the loader read. Another value is the float64 undo rounded once; the standardisation may have
    merged it with its neighbours, so it can differ from the stored one by an ulp.
    """
    out = torch.empty_like(x)
    m, s = mean.to(x.dtype), std.to(x.dtype)
    for start in range(0, len(x), UNDO_ROWS):
        block = x[start : start + UNDO_ROWS]
        raw = block.double() * std.double() + mean.double()
        whole = raw.round().to(x.dtype) + 0.0  # + 0.0: a stored 0 came back as -0.0 (round of a tiny negative undo)
        out[start : start + UNDO_ROWS] = torch.where((whole - m) / s == block, whole, raw.to(x.dtype))
    return out


def final_stats(opts: AugmentOptions, channels: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The (mean, std) standardisation a rescaled dataset records: (0, 1) for ``false``, the given ones otherwise."""
    stats = norm_stats(opts.normalize, f"{SECTION}.normalize")
    if isinstance(stats, tuple):
        return stats
    return (0.0,) * channels, (1.0,) * channels


def check_shape(opts: AugmentOptions, input_shape: Sequence[int], name: str) -> None:
    """Crop and flip need images [C, H, W]; reflect padding needs padding < H and < W."""
    if not opts.active:
        return
    key = "crop_padding" if opts.crop_padding else "flip"
    require(len(input_shape) == 3, f"{SECTION}.{key}", f"needs images [C, H, W]; dataset {name!r} has inputs of shape {list(input_shape)}")
    if opts.crop_padding and opts.padding_mode == "reflect":
        h, w = input_shape[1], input_shape[2]
        require(opts.crop_padding < min(h, w), f"{SECTION}.crop_padding", f"reflect padding must be < the image size {h}x{w}, got {opts.crop_padding}")


# ---------------------------------------------------------------- crop and flip (training batches)


@dataclass(frozen=True)
class Augment:
    """Crop-and-flip of training batches; a frozen value carried by :class:`~chillfl.training.local.LocalSpec`."""

    crop_padding: int = 0
    padding_mode: Literal["reflect", "constant"] = "reflect"
    flip: bool = False
    fill: tuple[float, ...] = (0.0,)
    """Per-channel value of ``constant`` padding (one value: every channel)."""

    @classmethod
    def from_options(cls, opts: AugmentOptions, mean: Sequence[float] | None = None, std: Sequence[float] | None = None) -> Augment | None:
        """None when nothing would change (so the step is bitwise today's); ``mean``/``std``: the data's standardisation."""
        if not opts.active:
            return None
        fill = (0.0,) if mean is None or std is None else tuple(-m / s for m, s in zip(mean, std))
        return cls(opts.crop_padding, opts.padding_mode, opts.flip, fill)

    def draw(self, seed: int, batch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(dy, dx, flip) of one step's ``batch`` samples: offsets in [0, 2p], flip a bool, from ``seed`` alone.

        Draw order: all dy, then all dx, then all flips (each only when enabled).
        """
        gen = torch.Generator().manual_seed(seed)
        zeros = torch.zeros(batch, dtype=torch.int64)
        span = 2 * self.crop_padding + 1
        dy = torch.randint(span, (batch,), generator=gen) if self.crop_padding else zeros
        dx = torch.randint(span, (batch,), generator=gen) if self.crop_padding else zeros
        flip = torch.randint(2, (batch,), generator=gen).bool() if self.flip else torch.zeros(batch, dtype=torch.bool)
        return dy, dx, flip

    def __call__(self, x: torch.Tensor, seeds: Sequence[int]) -> torch.Tensor:
        """``x`` [clients, batch, C, H, W] augmented, client i's samples drawn from ``seeds[i]`` alone."""
        draws = [self.draw(seed, x.shape[1]) for seed in seeds]
        dy, dx, flip = (torch.stack([d[k] for d in draws]) for k in range(3))
        return crop_flip(x, dy, dx, flip, self.crop_padding, self.padding_mode, self.fill)


def crop_flip(
    x: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, flip: torch.Tensor, padding: int, mode: str = "reflect", fill: Sequence[float] = (0.0,)
) -> torch.Tensor:
    """Pad H and W of ``x`` [..., C, H, W] by ``padding``, crop H x W at (dy, dx), mirror where ``flip``.

    ``mode``: ``reflect`` (needs padding < H, W), or ``constant`` with ``fill[c]`` in channel c.
    ``dy``, ``dx``, ``flip`` have ``x``'s leading shape (one value per image).
    The padded image is never built: output pixel (i, j) of image n reads source
    row ``dy_n + i - p`` and column ``dx_n + j - p`` (``dx_n + W - 1 - j - p`` when
    flipped), reflected back into the image (``-r``, ``2 (H - 1) - r``) or, for
    ``constant``, pointed at one extra fill pixel; then one ``gather`` over the
    flattened H x W plane serves every channel.
    """
    *lead, c, h, w = x.shape
    flat = x.reshape(-1, c, h * w)
    n = flat.shape[0]
    device = x.device
    dy, dx, flip = dy.reshape(n).to(device), dx.reshape(n).to(device), flip.reshape(n).to(device)
    i = torch.arange(h, device=device)
    j = torch.arange(w, device=device)
    rows = dy[:, None] + i - padding  # [n, h] source rows
    cols = dx[:, None] + torch.where(flip[:, None], w - 1 - j, j) - padding  # [n, w] source columns
    if mode == "reflect":
        rows, cols = _reflect(rows, h), _reflect(cols, w)
        index = rows[:, :, None] * w + cols[:, None, :]
    else:
        inside = ((rows >= 0) & (rows < h))[:, :, None] & ((cols >= 0) & (cols < w))[:, None, :]
        index = torch.where(inside, rows.clamp(0, h - 1)[:, :, None] * w + cols.clamp(0, w - 1)[:, None, :], h * w)
        values = torch.tensor(list(fill), dtype=x.dtype).to(device, non_blocking=True).view(1, -1, 1).expand(n, c, 1)  # no host sync on a GPU
        flat = torch.cat([flat, values], dim=2)  # pixel h * w of every channel: the fill
    out = flat.gather(2, index.reshape(n, 1, h * w).expand(n, c, h * w))
    return out.reshape(*lead, c, h, w)


def _reflect(r: torch.Tensor, size: int) -> torch.Tensor:
    """Indices reflected into [0, size) without repeating the edge (valid for -size < r < 2 size - 1)."""
    r = r.abs()
    return torch.where(r >= size, 2 * (size - 1) - r, r)
