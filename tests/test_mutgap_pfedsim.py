"""pFedSim built from Python (mut102 F3, F6): ``similarity = "flat"`` reads no weight matrix, so an instance without a
``weight_key`` runs, as the config's builder gives it ``""``; ``state_keys`` leaves out a non-persistent buffer, which
no client sends (a KeyError mid-run otherwise)."""

from __future__ import annotations

import torch
from test_pfedsim_keys_bind import TiedNet
from test_pyagg_bind import X, Y, config, same
from torch import nn

import chillfl


def test_a_flat_similarity_instance_without_a_weight_key_runs_as_the_config() -> None:
    from chillfl.aggregation.pfedsim import PFedSim, PFedSimOptions, state_keys

    data = chillfl.TensorData(X, Y, X, Y, num_classes=2)
    torch.manual_seed(1)
    net = TiedNet().double()
    aggregator = PFedSim(3, state_keys(net), ["head.weight", "head.bias"], "", None, PFedSimOptions(similarity="flat"))
    got = chillfl.run(model=net, data=data, config=config({"name": "fedavg"}), write=False, progress=False, aggregator=aggregator)
    torch.manual_seed(1)
    again = chillfl.run(model=TiedNet().double(), data=data, config=config({"name": "pfedsim", "similarity": "flat"}), write=False, progress=False)
    assert same(dict(got.state), dict(again.state))


class Buffered(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.register_buffer("kept", torch.zeros(2))
        self.register_buffer("scratch", torch.zeros(2), persistent=False)


def test_state_keys_leave_out_a_non_persistent_buffer() -> None:
    from chillfl.aggregation.pfedsim import state_keys

    assert state_keys(Buffered()) == ["lin.weight", "lin.bias", "kept"]
