"""CFD soft-label quantisation and delta coding (Sattler et al., 2022; SCARLET ref. [4]).

CFD ("Compressed Federated Distillation") shrinks the soft-labels clients
upload (b_up bits per element) and the server's broadcast (b_down bits), and
optionally delta-codes them against the previous round. SCARLET runs CFD with
b_up = 1, b_down = 32 and *without* delta coding (Table V, Appendix B).

Quantiser: uniform on [0, 1] with L = 2**b - 1 steps, per element,
deterministic round-half-up::

    code = floor(clamp(x, 0, 1) * L + 1/2)    in {0, ..., L}
    x'   = code / L                           |x - x'| <= 1 / (2 L)  (half a step)

``bits >= 32`` means no quantisation: the float32 values go on the wire.

Choices and gaps
----------------
* SCARLET's description gives only b_up / b_down. We quantise each element
  independently (the task's reading). At b = 1 this thresholds every class
  probability at 0.5, so a vector without a majority class becomes all zeros;
  ``one_bit="argmax"`` instead sends the hard label (one-hot of the argmax),
  which is what the SCARLET authors' CFD code uploads. Hard labels cost
  ceil(log2 C) bits per sample, see :func:`hard_label_bits`.
* Dequantised vectors are not renormalised (``renormalize=False``): the server
  averages many clients' vectors; renormalising is an option, a step of the
  receiver after decoding (CFD's uplink: the server, per client row before the
  mean), so the codes on the wire stay the quantiser's.
* Delta coding: CFD entropy-codes the change of the quantised soft-labels since
  the previous round. We send a change bitmap (1 bit per element) plus the new
  codes of the changed elements (b bits each) -- an upper bound on what an
  entropy coder would need. Both ends keep the last codes per public index in
  a :class:`DeltaCoder`; an index never sent before is coded against all-zero
  codes.

Checked against: kitsuyaazuma/SCARLET (branch ``reproducibility``) ``src/algorithm/cfd.py`` (clients upload the argmax, the server averages
one-hot votes and sends its own model's predictions down, no delta coding); the CFD authors published no code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

import torch

from chillfl.errors import ConfigError

FULL_PRECISION_BITS = 32
"""Bits that mean "not quantised": the soft-labels travel as float32."""
OneBitMode = Literal["uniform", "argmax"]


def _levels(bits: int, option: str) -> int:
    """L = 2**bits - 1; bits outside 1..16 are refused on ``option``, the caller's field that set them."""
    if not 1 <= bits <= 16:
        raise ConfigError(option, f"must be in 1..16 for integer codes (32 = no quantisation), got {bits}")
    return 2**bits - 1


def quantize(x: torch.Tensor, bits: int, option: str = "bits") -> torch.Tensor:
    """Integer codes in {0, ..., 2**bits - 1}: floor(clamp(x, 0, 1) * L + 1/2) (round half up).

    ``option``: the config field that set ``bits`` (``distillation.bits_up``), which a refusal names."""
    levels = _levels(bits, option)
    scaled = x.to(torch.float64).clamp(0.0, 1.0) * levels
    return torch.floor(scaled + 0.5).to(torch.int64)


def dequantize(codes: torch.Tensor, bits: int, dtype: torch.dtype = torch.float32, option: str = "bits") -> torch.Tensor:
    """Codes back to values code / L in [0, 1] (``option``: as :func:`quantize`'s)."""
    return (codes.to(torch.float64) / _levels(bits, option)).to(dtype)


def hard_labels(soft_labels: torch.Tensor) -> torch.Tensor:
    """One-hot of the argmax per row (CFD at one bit as the SCARLET authors implement it); ties -> lowest class."""
    out = torch.zeros_like(soft_labels)
    out.scatter_(-1, soft_labels.argmax(dim=-1, keepdim=True), 1.0)
    return out


def hard_label_bits(num_classes: int) -> int:
    """Bits per sample for a hard label: ceil(log2 C), at least 1."""
    return max(1, math.ceil(math.log2(num_classes)))


def compress(soft_labels: torch.Tensor, bits: int, one_bit: OneBitMode = "uniform", renormalize: bool = False, option: str = "bits") -> torch.Tensor:
    """The soft-labels as the receiver reconstructs them after ``bits``-bit quantisation.

    ``bits >= 32``: unchanged (float32). Bytes on the wire: :func:`payload_bytes`. ``option``: as :func:`quantize`'s.
    """
    if bits >= FULL_PRECISION_BITS:
        return soft_labels.to(torch.float32)
    if bits == 1 and one_bit == "argmax":
        return hard_labels(soft_labels)
    values = dequantize(quantize(soft_labels, bits, option), bits, soft_labels.dtype, option)
    return renormalized(values) if renormalize else values


def renormalizes(bits: int, one_bit: OneBitMode, renormalize: bool) -> bool:
    """Whether :func:`compress` with these settings renormalises (quantised codes only: float32 rows and hard labels pass as they are)."""
    return renormalize and bits < FULL_PRECISION_BITS and not (bits == 1 and one_bit == "argmax")


def renormalized(values: torch.Tensor) -> torch.Tensor:
    """Each dequantised row divided by its sum (an all-zero row: uniform), the receiver's step after decoding.

    Why the receiver's: the codes on the wire (and what delta coding prices) are the quantiser's; renormalised values
    can fall off the code grid ([3, 1, 0] at 2 bits is [0.75, 0.25, 0], which quantises to [2, 1, 0])."""
    total = values.sum(dim=-1, keepdim=True)
    uniform = torch.full_like(values, 1.0 / values.shape[-1])
    return torch.where(total > 0, values / total.clamp_min(1e-12), uniform)


def payload_bytes(soft_labels: torch.Tensor, bits: int, one_bit: OneBitMode = "uniform") -> int:
    """Bytes of one quantised soft-label message ``[n, C]``, rounded up once per message."""
    n, c = soft_labels.shape
    if bits >= FULL_PRECISION_BITS:
        return n * c * 4
    if bits == 1 and one_bit == "argmax":
        return math.ceil(n * hard_label_bits(c) / 8)
    return math.ceil(n * c * bits / 8)


@dataclass(frozen=True)
class DeltaMessage:
    """Delta-coded quantised soft-labels: which elements changed and their new codes."""

    indices: torch.Tensor
    changed: torch.Tensor  # bool [n, C]
    new_codes: torch.Tensor  # int64 [num changed], row-major order
    bits: int

    def nbytes(self) -> int:
        """Change bitmap (1 bit per element) + b bits per changed element, rounded up per message."""
        return math.ceil(self.changed.numel() / 8) + math.ceil(self.new_codes.numel() * self.bits / 8)


@dataclass
class DeltaCoder:
    """One end of a delta-coded channel: remembers the last codes sent per public index.

    Sender and receiver each hold one; as long as both see the same messages
    their states stay identical.
    """

    bits: int
    num_classes: int
    option: str = "bits"
    """The config field that set ``bits`` (``distillation.bits_up``), which a refusal names."""
    _last: dict[int, torch.Tensor] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        _levels(self.bits, self.option)

    def _previous(self, indices: torch.Tensor) -> torch.Tensor:
        zeros = torch.zeros(self.num_classes, dtype=torch.int64)
        rows = [self._last.get(i, zeros) for i in indices.tolist()]
        return torch.stack(rows) if rows else torch.zeros((0, self.num_classes), dtype=torch.int64)

    def _remember(self, indices: torch.Tensor, codes: torch.Tensor) -> None:
        for i, row in zip(indices.tolist(), codes):
            self._last[i] = row.clone()

    def encode(self, indices: torch.Tensor, soft_labels: torch.Tensor) -> DeltaMessage:
        """Quantise ``soft_labels`` ``[n, C]`` and code them against the last codes of the same indices."""
        codes = quantize(soft_labels, self.bits, self.option)
        changed = codes != self._previous(indices)
        self._remember(indices, codes)
        return DeltaMessage(indices=indices.clone(), changed=changed, new_codes=codes[changed], bits=self.bits)

    def state_dict(self) -> dict[str, Any]:
        """The last codes per index (checkpoints)."""
        keys = sorted(self._last)
        codes = torch.stack([self._last[i] for i in keys]) if keys else torch.zeros((0, self.num_classes), dtype=torch.int64)
        return {"indices": torch.tensor(keys, dtype=torch.long), "codes": codes}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The codes on the CPU, where the uploads they are compared with live: a resume reads the checkpoint onto the
        run's device, and codes back on a GPU met the next CPU upload in one torch.stack (a device mismatch)."""
        self._last = {int(i): row.to("cpu", copy=True) for i, row in zip(state["indices"].tolist(), state["codes"])}

    def decode(self, message: DeltaMessage, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Rebuild the dequantised soft-labels of ``message`` and update this end's state."""
        codes = self._previous(message.indices).clone()
        codes[message.changed] = message.new_codes
        self._remember(message.indices, codes)
        return dequantize(codes, self.bits, dtype, self.option)
