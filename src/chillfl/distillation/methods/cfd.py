"""CFD (Sattler et al. 2022): uplink quantised to b_up bits, downlink to b_down bits, plain mean (see :mod:`chillfl.distillation.quantize`).

Checked against: kitsuyaazuma/SCARLET (branch ``reproducibility``) ``src/algorithm/cfd.py`` and ``src/config/algorithm/cfd.yaml``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

import torch

from chillfl.distillation.quantize import FULL_PRECISION_BITS, DeltaCoder, OneBitMode, compress, payload_bytes, renormalized, renormalizes
from chillfl.options import require
from chillfl.settings.distillation import SECTION
from chillfl.protocols.softlabels.messages import SoftLabelUplink
from chillfl.protocols.softlabels.method import Aggregate, SoftLabelClientHooks, SoftLabelMethod, SoftLabelSpec, NoState

if TYPE_CHECKING:
    from chillfl.config import RunConfig


Downlink = Literal["mean", "server"]
UP, DOWN = f"{SECTION}.bits_up", f"{SECTION}.bits_down"
"""The options that set the quantisers' bits, which the quantiser names when it refuses them."""


@dataclass(frozen=True)
class CFDOptions:
    """CFD options (defaults: SCARLET Table V, CIFAR-10).

    ``downlink``: what the b_down-bit downlink quantises: ``"mean"`` the clients' averaged (dequantised) uploads,
    which the server model also trains on; ``"server"`` the server model's own softmax outputs after it has
    distilled the plain mean (CFD's two-way distillation, as the SCARLET authors' ``cfd.py`` does).
    """

    bits_up: int = 1
    bits_down: int = 32
    one_bit: OneBitMode = "uniform"
    renormalize: bool = False
    delta_coding: bool = False
    downlink: Downlink = "mean"

    def validate(self, section: str) -> None:
        for name in ("bits_up", "bits_down"):
            value = getattr(self, name)
            require(1 <= value <= 16 or value == FULL_PRECISION_BITS, f"{section}.{name}", f"must be in 1..16 or 32, got {value}")
        require(self.one_bit in ("uniform", "argmax"), f"{section}.one_bit", f"unknown value {self.one_bit!r}; allowed: argmax, uniform")
        require(self.downlink in ("mean", "server"), f"{section}.downlink", f"unknown value {self.downlink!r}; allowed: mean, server")


@dataclass(frozen=True)
class CFDMethodOptions(CFDOptions):
    """CFD options (SCARLET Table V: b_up = 1, b_down = 32, no delta coding)."""

    def validate(self, section: str) -> None:
        super().validate(section)
        if self.delta_coding:
            require(self.bits_up < FULL_PRECISION_BITS, f"{section}.delta_coding", "needs bits_up in 1..16 (32 bits are not quantised)")
            require(
                not (self.bits_up == 1 and self.one_bit == "argmax"),
                f"{section}.delta_coding",
                "is not available with one_bit = 'argmax' (hard labels are not codes)",
            )


class CFDClient(SoftLabelClientHooks[CFDMethodOptions]):
    """CFD's client: quantises its upload to b_up bits.

    It never renormalises: the server does, after decoding (:meth:`CFD.aggregate`). Why: the message is the codes, and
    with delta coding the server prices the codes it reads back from the values; renormalised values are not the codes
    the client quantised (2-bit [1, 1, 0] goes up as [1/3, 1/3, 0], renormalised [0.5, 0.5, 0], which re-quantises to [2, 2, 0])."""

    def upload(self, cid: int, round: int, indices: torch.Tensor, probs: torch.Tensor, state: NoState) -> SoftLabelUplink:
        o = self.options
        values = compress(probs, o.bits_up, o.one_bit, False, UP)
        bits = None if o.bits_up >= FULL_PRECISION_BITS else o.bits_up
        return SoftLabelUplink(client_id=cid, round=round, indices=indices, soft_labels=values, bits=bits)


class CFD(SoftLabelMethod[CFDMethodOptions]):
    """CFD's server half: plain mean, and down b_down bits of it (``downlink = "mean"``) or of the server model's
    predictions after it distilled the mean (``"server"``); with delta coding, each client's decoder prices its uplink."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._coders: dict[int, DeltaCoder] = {}
        self.downlink_from_server = self.options.downlink == "server"

    def uplink_bytes(self, uplink: SoftLabelUplink) -> dict[str, int]:
        o = self.options
        if o.delta_coding:
            coder = self._coders.setdefault(uplink.client_id, DeltaCoder(o.bits_up, self.num_classes, UP))
            return {"soft_labels": coder.encode(uplink.indices, uplink.soft_labels).nbytes()}
        return {"soft_labels": payload_bytes(uplink.soft_labels, o.bits_up, o.one_bit)}

    def aggregate(self, round: int, indices: torch.Tensor, uplinks: Sequence[SoftLabelUplink]) -> Aggregate:
        """The plain mean; with ``renormalize``, of each client's rows renormalised after decoding (the receiver's step, as
        the uplink carries the quantiser's codes: :class:`CFDClient`)."""
        o = self.options
        if renormalizes(o.bits_up, o.one_bit, o.renormalize):
            uplinks = [dataclasses.replace(up, soft_labels=renormalized(up.soft_labels)) for up in uplinks]
        return super().aggregate(round, indices, uplinks)

    def combine(self, mean: torch.Tensor) -> torch.Tensor:
        """``"mean"``: the mean as it goes down (b_down bits), the server's target too; ``"server"``: the plain mean, the server's target."""
        if self.downlink_from_server:
            return mean
        o = self.options
        return compress(mean, o.bits_down, o.one_bit, o.renormalize, DOWN)

    def server_downlink(self, probs: torch.Tensor) -> torch.Tensor:
        """``downlink = "server"``: the server model's softmax outputs quantised to b_down bits."""
        o = self.options
        return compress(probs, o.bits_down, o.one_bit, o.renormalize, DOWN)

    def state_dict(self) -> dict[str, Any]:
        """Each client's last uplink codes as the server's delta decoder holds them."""
        return {str(cid): coder.state_dict() for cid, coder in self._coders.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._coders = {}
        for cid, coder_state in state.items():
            coder = DeltaCoder(self.options.bits_up, self.num_classes, UP)
            coder.load_state_dict(coder_state)
            self._coders[int(cid)] = coder

    def downlink_soft_bytes(self, rows: torch.Tensor) -> int:
        if rows.numel() == 0:
            return 0
        return payload_bytes(rows, self.options.bits_down, self.options.one_bit)


def notes(options: CFDMethodOptions, config: RunConfig) -> list[str]:
    """The 1-bit ``uniform`` quantiser thresholds each class probability at 0.5; a client trained at T != 1 labels the public
    set with its T = 1 softmax, near uniform, so most of its rows go up as all zeros and the server model stops learning
    (99 % of rows at a fixed T = 0.2 on digits, the global loss flat at the initial model's)."""
    from chillfl.temperature.registry import constant_temperature

    if options.one_bit != "uniform" or 1 not in (options.bits_up, options.bits_down) or constant_temperature(config.temperature) == 1.0:
        return []
    return ["distillation.one_bit = 'uniform' thresholds each class probability at 0.5, and clients trained at a temperature other than 1 "
            "label the public set with a near-uniform T = 1 softmax: most rows go up as all zeros and the server model stops learning; "
            "distillation.one_bit = 'argmax' sends the hard label instead (the SCARLET authors' CFD)"]


SPEC = SoftLabelSpec("cfd", CFDMethodOptions, CFD, CFDClient, summary="quantised soft-labels, plain mean", notes=notes)
