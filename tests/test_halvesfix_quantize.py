"""The quantiser's refusal names the option that set its bits (``distillation.bits_up`` / ``bits_down``), not ``cfd.bits``,
a field no config has."""

from __future__ import annotations

import pytest
import torch

from chillfl.distillation.methods.cfd import CFD, CFDClient, CFDMethodOptions
from chillfl.distillation.quantize import DeltaCoder, compress, quantize
from chillfl.errors import ConfigError
from chillfl.protocols.softlabels.messages import SoftLabelUplink

PROBS = torch.tensor([[0.7, 0.3], [0.2, 0.8]])


def test_cfd_names_its_own_fields() -> None:
    """Options built without their check (Python), so the quantiser is the one to refuse."""
    up = CFDMethodOptions(bits_up=20)
    with pytest.raises(ConfigError, match=r"^distillation\.bits_up: must be in 1\.\.16"):
        CFDClient(up, 2, 0).upload(0, 1, torch.arange(2), PROBS, None)  # type: ignore[arg-type]
    down = CFDMethodOptions(bits_down=20)
    with pytest.raises(ConfigError, match=r"^distillation\.bits_down: must be in 1\.\.16"):
        CFD(down, 2, 0, "int32", 2).combine(PROBS)
    coded = CFDMethodOptions(bits_up=20, delta_coding=True)
    uplink = SoftLabelUplink(client_id=0, round=1, indices=torch.arange(2), soft_labels=PROBS, bits=20)
    with pytest.raises(ConfigError, match=r"^distillation\.bits_up: must be in 1\.\.16"):
        CFD(coded, 2, 0, "int32", 2).uplink_bytes(uplink)


def test_the_caller_gives_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^mine\.bits: "):
        quantize(PROBS, 0, "mine.bits")
    with pytest.raises(ConfigError, match=r"^mine\.bits: "):
        compress(PROBS, 17, option="mine.bits")
    with pytest.raises(ConfigError, match=r"^mine\.bits: "):
        DeltaCoder(17, 2, "mine.bits")
    assert quantize(PROBS, 1).tolist() == [[1, 0], [0, 1]]  # valid bits: codes as before
