"""``PFedSim(...)`` built from Python with ``state_dict()``'s keys on a model with a tied weight (the keys repeat it under
its second name, which the clients never send) failed in its first personalised round with a KeyError. Its bind
refuses such keys on ``aggregator.keys`` in one line, naming the key and the helper that gives the right ones."""

from __future__ import annotations

import torch
from test_pyagg_bind import X, Y, config, same
from torch import nn

import chillfl
from chillfl.errors import ConfigError


class TiedNet(nn.Module):
    """A model whose third layer shares the first's 4 x 4 weight, as a tied embedding and output layer do."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 4, bias=False)
        self.mid = nn.Linear(4, 4)
        self.out = nn.Linear(4, 4, bias=False)
        self.out.weight = self.inp.weight
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.out(torch.tanh(self.mid(self.inp(x))))))

    def head_name(self) -> str:
        return "head"


def _run(keys: list[str]) -> chillfl.Result:
    from chillfl.aggregation.pfedsim import PFedSim, PFedSimOptions

    torch.manual_seed(1)
    net = TiedNet().double()
    return chillfl.run(model=net, data=chillfl.TensorData(X, Y, X, Y, num_classes=2), config=config({"name": "fedavg"}), write=False,
                       progress=False, aggregator=PFedSim(3, keys, ["head.weight", "head.bias"], "head.weight", None, PFedSimOptions()))


def test_state_dict_keys_of_a_tied_model_are_refused_naming_the_key() -> None:
    keys = list(TiedNet().state_dict())
    assert "out.weight" in keys
    try:
        _run(keys)
    except ConfigError as err:
        assert err.field == "aggregator.keys" and "'out.weight'" in err.message and "state_keys(model)" in err.message
        assert "\n" not in err.message
    else:
        raise AssertionError("state_dict() keys of a tied model ran")


def test_the_helpers_keys_run_and_are_the_configs() -> None:
    from chillfl.aggregation.pfedsim import state_keys

    keys = state_keys(TiedNet())
    assert "out.weight" not in keys and "inp.weight" in keys
    got = _run(keys)
    torch.manual_seed(1)
    again = chillfl.run(model=TiedNet().double(), data=chillfl.TensorData(X, Y, X, Y, num_classes=2),
                        config=config({"name": "pfedsim"}), write=False, progress=False)
    assert same(dict(got.state), dict(again.state))


def _refused(head: list[str], weight_key: str) -> ConfigError:
    from chillfl.aggregation.pfedsim import PFedSim, PFedSimOptions, state_keys

    torch.manual_seed(1)
    net = TiedNet().double()
    try:
        chillfl.run(model=net, data=chillfl.TensorData(X, Y, X, Y, num_classes=2), config=config({"name": "fedavg"}), write=False,
                    progress=False, aggregator=PFedSim(3, state_keys(net), head, weight_key, None, PFedSimOptions()))
    except ConfigError as err:
        assert "\n" not in err.message
        return err
    raise AssertionError("ran")


def test_a_head_or_weight_key_the_state_lacks_is_refused_before_the_run() -> None:
    """The constructor dropped head names its keys lack, and weight_key was never checked: a typo ran the warm-up and
    then raised a bare KeyError in the first personalised round (rev102 #1)."""
    err = _refused(["head.wieght", "head.bias"], "head.weight")
    assert err.field == "aggregator.head" and "'head.wieght'" in err.message
    err = _refused([], "head.weight")
    assert err.field == "aggregator.head" and "is empty" in err.message
    err = _refused(["head.weight", "head.bias"], "head.wieght")
    assert err.field == "aggregator.weight_key" and "got 'head.wieght'" in err.message
