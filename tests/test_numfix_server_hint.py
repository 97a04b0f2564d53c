"""A client's non-finite loss in round 1, before any server step, names client.lr alone (numext finding 3; the server-step
hint where a server step blew the model up: tests/test_rbfix_server_hint.py).

FedAdam with ``server_lr = 1e30`` leaves the weights huge but finite (no state check fires); round 2's clients then
see a NaN loss, and the hint said only "lower client.lr?" though client.lr was the default.
"""

from __future__ import annotations

import math
import pytest

from chillfl.errors import LOSS_HINT, Diverged
from chillfl.protocols.common import check_finite_loss


def test_round_one_names_client_lr_alone() -> None:
    with pytest.raises(Diverged) as caught:
        check_finite_loss(0, 2, "training loss", math.nan)
    assert str(caught.value) == f"round 1, client 2: training loss is nan ({LOSS_HINT})"
