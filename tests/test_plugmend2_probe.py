"""Mend from report-rev109b 3: check_trains_at asks a copy of the policy for its T, and deep-copied a policy holding
1 GB of tensors (doubling its memory at every build). A policy whose tensors exceed PROBE_COPY_BYTES is not asked,
as one that cannot be copied is not; one that holds little is still asked (and a false declaration refused)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from chillfl.extend import Capabilities, ConstantTemperature, FedAvg
from chillfl.temperature import registry
from test_plugmend_checks import _refused, _run


class Lying(ConstantTemperature):
    """Declares T = 0.5 and trains every client at 0.7; holds ``size`` float32s."""

    capabilities = Capabilities(trains_at=0.5)

    def __init__(self, size: int) -> None:
        super().__init__(0.5)
        self.cache = {"rows": [torch.zeros(size)]}

    def temperature(self, client_id: int, round: int) -> float:
        return 0.7


def test_a_policy_holding_more_than_the_limit_is_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not copied, so not asked: its false declaration is not caught (sound, not complete), and it runs."""
    monkeypatch.setattr(registry, "PROBE_COPY_BYTES", 4 * 1000)
    holds_little, said = registry._holds_little, []

    def spy(obj: Any, limit: int) -> bool:
        said.append(holds_little(obj, limit))  # the probe's own question: copy it or not
        return said[-1]

    monkeypatch.setattr(registry, "_holds_little", spy)
    assert _run(aggregator=FedAvg(), policy=Lying(1001)) is not None  # 4004 bytes: over the limit, so not asked (it lies)
    assert said == [False]


def test_a_policy_holding_little_is_still_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "PROBE_COPY_BYTES", 4 * 1000)
    err = _refused(tmp_path, aggregator=FedAvg(), policy=Lying(1000))  # 4000 bytes: at the limit, asked
    assert err.field == "policy" and "declares trains_at = 0.5" in err.message and "is 0.7 at round 0" in err.message


def test_holds_little_counts_each_tensor_once_through_containers_and_attributes() -> None:
    from chillfl.temperature.registry import _holds_little  # noqa: PLC0415 - new with the mend

    t = torch.zeros(10, dtype=torch.float64)  # 80 bytes

    class Holder:
        def __init__(self) -> None:
            self.a = t
            self.b = [t, (t, {"k": t})]  # the same tensor: counted once
            self.c = np.zeros(5, dtype=np.int32)  # 20 bytes
            self.d = torch.nn.Linear(2, 1)  # 3 float32: 12 bytes

    assert _holds_little(Holder(), 112)
    assert not _holds_little(Holder(), 111)
