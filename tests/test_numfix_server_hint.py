"""A client's non-finite loss after a server step names the server-side options, not client.lr alone (numext finding 3).

FedAdam with ``server_lr = 1e30`` leaves the weights huge but finite (no state check fires); round 2's clients then
see a NaN loss, and the hint said only "lower client.lr?" though client.lr was the default.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from chillfl.errors import Diverged
from chillfl.protocols.common import check_finite_loss
from chillfl.runner import run_experiment
from test_pa3fed_e2e import data, tiny_config  # noqa: F401  (data: the module fixture)


def test_round_one_names_client_lr_alone() -> None:
    with pytest.raises(Diverged) as caught:
        check_finite_loss(0, 2, "training loss", math.nan)
    assert str(caught.value) == "round 1, client 2: training loss is nan (lower client.lr?)"


def test_later_rounds_name_the_server_step_too() -> None:
    with pytest.raises(Diverged, match=r"round 2, client 0: training loss is inf \(lower client.lr\? Or, .*server's step.*algorithm.server_lr") as caught:
        check_finite_loss(1, 0, "training loss", math.inf)
    assert "\n" not in str(caught.value)


def test_fedadam_blown_up_by_its_server_lr(data: Any) -> None:  # noqa: F811
    cfg = tiny_config({"name": "fedadam", "server_lr": 1e30}, **{"federation.rounds": 2, "model.name": "mlp"})
    with pytest.raises(Diverged, match=r"round 2, .*algorithm.server_lr"):
        run_experiment(cfg, data=data, write=False, progress=False)
