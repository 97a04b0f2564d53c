"""FedRS and FedLC: the adjusted losses by hand, their identity settings against FedAvg, and tiny runs.

The by-hand cases use 3 classes, a client with counts n = (4, 1, 0) (class 2 missing), one sample with
logits z = (1, 2, 3) and label y = 0.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from chillfl.aggregation.base import Local
from chillfl.aggregation.fedlc import COUNTS as LC_COUNTS
from chillfl.aggregation.fedlc import Calibrated
from chillfl.aggregation.fedrs import COUNTS as RS_COUNTS
from chillfl.aggregation.fedrs import Restricted
from chillfl.aggregation.logit_adjust import AdjustedLoss
from chillfl.aggregation.registry import make_aggregator
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.runner import run_experiment
from chillfl.training.local import LocalSpec
from chillfl.training.objective import temperature_cross_entropy

COUNTS = torch.tensor([4.0, 1.0, 0.0])
Y = torch.tensor([0])


def logits() -> torch.Tensor:
    return torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)


def fedrs_loss(alpha: float) -> AdjustedLoss:
    return AdjustedLoss(temperature_cross_entropy, Restricted(alpha), RS_COUNTS)


def fedlc_loss(tau: float, absent: str = "mask") -> AdjustedLoss:
    return AdjustedLoss(temperature_cross_entropy, Calibrated(tau, absent), LC_COUNTS)


# ---------------------------------------------------------------- the losses by hand


def test_fedrs_scales_the_missing_class_logit_by_hand() -> None:
    # alpha = 0.5: z' = (1, 2, 0.5 * 3) = (1, 2, 1.5)
    # CE(z', 0) = log(e^1 + e^2 + e^1.5) - 1 = log(2.718282 + 7.389056 + 4.481689) - 1 = log(14.589027) - 1 = 1.680270
    # dL/dz_2 = alpha * softmax(z')_2 = 0.5 * 4.481689 / 14.589027 = 0.153598 (the chain rule through alpha z_2)
    # dL/dz_0 = softmax(z')_0 - 1 = -0.813676, dL/dz_1 = softmax(z')_1 = 0.506480
    assert torch.equal(Restricted(0.5)(torch.tensor([[1.0, 2.0, 3.0]]), COUNTS), torch.tensor([[1.0, 2.0, 1.5]]))
    z = logits()
    loss = fedrs_loss(0.5)(z, Y, 1.0, context={RS_COUNTS: COUNTS})
    assert loss.item() == pytest.approx(1.6802697, abs=1e-6)
    (grad,) = torch.autograd.grad(loss, z)
    torch.testing.assert_close(grad, torch.tensor([[-0.8136763, 0.5064804, 0.1535979]]), atol=1e-6, rtol=0)



def test_fedrs_proportional_scaling_of_the_authors_code_by_hand() -> None:
    # n = (4, 1, 0), alpha = 0.5: s = 0.5 + 0.5 * (4, 1, 0) / 4 = (1, 0.625, 0.5); z' = (1, 1.25, 1.5)
    scaled = Restricted(0.5, proportional=True)(torch.tensor([[1.0, 2.0, 3.0]]), COUNTS)
    torch.testing.assert_close(scaled, torch.tensor([[1.0, 1.25, 1.5]]))
    assert torch.equal(Restricted(1.0, proportional=True)(torch.tensor([[1.0, 2.0, 3.0]]), COUNTS), torch.tensor([[1.0, 2.0, 3.0]]))
    # through the registry: the option picks the mode
    agg, _ = make_aggregator("fedrs", {"alpha": 0.5, "scaling": "proportional"}, num_clients=2, model=torch.nn.Linear(2, 3), seed=0)
    assert agg.client_half().adjust == Restricted(0.5, proportional=True)  # type: ignore[attr-defined]


def test_fedrs_composes_with_the_temperature_by_hand() -> None:
    # T = 2: the base loss at T on z' = (1, 2, 1.5): CE(z'/2) with z'/2 = (0.5, 1, 0.75)
    # log(e^0.5 + e^1 + e^0.75) - 0.5 = log(1.648721 + 2.718282 + 2.117000) - 0.5 = log(6.484003) - 0.5 = 1.369338
    loss = fedrs_loss(0.5)(logits(), Y, 2.0, context={RS_COUNTS: COUNTS})
    assert loss.item() == pytest.approx(1.3693381, abs=1e-6)


def test_fedrs_on_the_weights_alone_leaves_the_bias_out_by_hand() -> None:
    # logit = "weights" (the authors' code, s_c (h . w_c)): bias b = (0.5, 0, 1), z - b = (0.5, 2, 2), class 2 scaled
    # by 0.5: z' = (0.5, 2, 1); CE(z', 0) = log(e^0.5 + e^2 + e^1) - 0.5 = log(1.648721 + 7.389056 + 2.718282) - 0.5
    # = log(11.756059) - 0.5 = 2.464369 - 0.5 = 1.964369
    loss = AdjustedLoss(temperature_cross_entropy, Restricted(0.5), RS_COUNTS, bias="fc.bias")
    assert loss.uses_features  # it asks the step for the parameters
    params = {"fc.weight": torch.zeros(3, 2), "fc.bias": torch.tensor([0.5, 0.0, 1.0])}
    value = loss(logits(), Y, 1.0, features=torch.zeros(1, 2), params=params, context={RS_COUNTS: COUNTS})
    assert value.item() == pytest.approx(1.9643688, abs=1e-6)
    # on a real head z = W h + b the bias cancels: the loss gives it no gradient (the weights get theirs)
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], requires_grad=True)
    b = torch.tensor([0.5, 0.0, 1.0], requires_grad=True)
    h = torch.tensor([[1.0, 2.0]])
    value = loss(h @ w.T + b, Y, 1.0, features=h, params={"fc.weight": w, "fc.bias": b}, context={RS_COUNTS: COUNTS})
    gw, gb = torch.autograd.grad(value, [w, b])
    assert torch.equal(gb, torch.zeros(3)) and gw.abs().sum() > 0
    # through the registry: the option names the head's bias
    agg, _ = make_aggregator("fedrs", {"logit": "weights"}, num_clients=2, model=torch.nn.Sequential(torch.nn.Linear(2, 3)), seed=0)
    assert agg.client_half().bias == "0.bias"  # type: ignore[attr-defined]


def test_fedlc_calibrates_the_logits_by_hand() -> None:
    # tau = 1: n^(-1/4) = (4^(-1/4), 1, masked) = (0.707107, 1, 1e9)
    # z' = (1 - 0.707107, 2 - 1, 3 - 1e9) = (0.292893, 1, ~-1e9): class 2 gets probability 0
    # CE(z', 0) = log(e^0.292893 + e^1) - 0.292893 = log(1.340280 + 2.718282) - 0.292893 = 1.400833 - 0.292893 = 1.107940
    q = 4 ** -0.25
    adjusted = Calibrated(1.0)(torch.tensor([[1.0, 2.0, 3.0]]), COUNTS)
    torch.testing.assert_close(adjusted[0, :2], torch.tensor([1 - q, 1.0]))
    assert adjusted[0, 2].item() < -1e8
    z = logits()
    loss = fedlc_loss(1.0)(z, Y, 1.0, context={LC_COUNTS: COUNTS})
    assert loss.item() == pytest.approx(1.1079403, abs=1e-6)
    (grad,) = torch.autograd.grad(loss, z)
    assert grad[0, 2].item() == 0.0  # the masked class takes no gradient


def test_fedlc_counts_a_missing_class_as_one_sample_when_asked_by_hand() -> None:
    # absent = "one": z' = (0.292893, 1, 3 - 1) = (0.292893, 1, 2)
    # CE = log(1.340280 + 2.718282 + 7.389056) - 0.292893 = log(11.447618) - 0.292893 = 2.144890
    loss = fedlc_loss(1.0, "one")(logits(), Y, 1.0, context={LC_COUNTS: COUNTS})
    assert loss.item() == pytest.approx(2.1448902, abs=1e-6)


def test_fedlc_composes_with_the_temperature_by_hand() -> None:
    # T = 2: the base loss at T on the calibrated logits, so the margin is halved too: z'/2 = (0.146447, 0.5, ~-5e8)
    # CE = log(e^0.146447 + e^0.5) - 0.146447 = log(1.157703 + 1.648721) - 0.146447 = 1.031915 - 0.146447 = 0.885468
    loss = fedlc_loss(1.0)(logits(), Y, 2.0, context={LC_COUNTS: COUNTS})
    assert loss.item() == pytest.approx(0.8854682, abs=1e-6)


def test_the_identity_settings_leave_the_logits_bitwise() -> None:
    z = torch.randn(5, 3)
    assert torch.equal(Restricted(1.0)(z, COUNTS), z)
    assert torch.equal(Calibrated(0.0)(z, COUNTS), z)  # tau = 0: no NaN from 0 * inf on the missing class


def test_the_half_trains_with_the_clients_own_counts() -> None:
    agg, terms = make_aggregator("fedlc", None, num_clients=1, model=torch.nn.Sequential(torch.nn.Linear(2, 3)), seed=0)
    assert terms == []
    half: Any = agg.client_half()
    spec = LocalSpec(epochs=1, batch_size=4)
    (objective,) = half.objectives(spec)
    assert isinstance(objective.base_loss, AdjustedLoss) and objective.base_loss.base_loss is spec.base_loss
    y = torch.tensor([0, 1, 0, 0, 0])  # n = (4, 1, 0)
    local = Local(0, torch.zeros(5, 2), y, {"0.weight": torch.zeros(3, 2)}, {}, 0.1, {}, 0, spec)
    train = next(half.train(local))
    assert train.objective == 0
    assert torch.equal(train.context[LC_COUNTS], COUNTS)


# ---------------------------------------------------------------- options


@pytest.mark.parametrize(("name", "options", "field"), [
    ("fedrs", {"alpha": 1.5}, "algorithm.alpha"),
    ("fedrs", {"alpha": -0.1}, "algorithm.alpha"),
    ("fedlc", {"tau": -1.0}, "algorithm.tau"),
    ("fedlc", {"tau": math.inf}, "algorithm.tau"),
])
def test_option_errors_name_their_field(name: str, options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_aggregator(name, options, num_clients=4, model=torch.nn.Linear(2, 3), seed=0)
    assert err.value.field == field


# ---------------------------------------------------------------- runs

TINY: dict[str, Any] = {
    "seed": 3,
    "device": "cpu",
    "threads": 1,
    "dataset.name": "digits",
    "model.name": "mlp",
    "model.hidden": [16],
    "partition.name": "dirichlet",
    "partition.alpha": 0.1,  # clients miss classes
    "federation.num_clients": 4,
    "federation.clients_per_round": 4,
    "federation.rounds": 2,
    "client.batch_size": 32,
    "client.lr": 0.05,
    "eval.client_split_size": 20,
}


def records(**over: Any) -> list[dict[str, Any]]:
    return run_experiment(load_config(None, {**TINY, **over}), write=False, progress=False).records


@pytest.fixture(scope="module")
def fedavg() -> list[dict[str, Any]]:
    return records(**{"algorithm.name": "fedavg"})


@pytest.mark.parametrize("identity", [{"algorithm.name": "fedrs", "algorithm.alpha": 1.0}, {"algorithm.name": "fedlc", "algorithm.tau": 0.0}])
def test_the_identity_setting_is_fedavgs_run_bitwise(identity: dict[str, Any], fedavg: list[dict[str, Any]]) -> None:
    assert records(**identity) == fedavg


@pytest.mark.parametrize(
    "method",
    [
        {"algorithm.name": "fedrs"},
        {"algorithm.name": "fedrs", "algorithm.scaling": "proportional"},
        {"algorithm.name": "fedrs", "algorithm.logit": "weights"},
        {"algorithm.name": "fedlc"},
    ],
)
def test_a_tiny_run_differs_from_fedavg_and_executors_agree(method: dict[str, Any], fedavg: list[dict[str, Any]]) -> None:
    seq = records(**method)
    assert all(math.isfinite(r["train_loss"]) for r in seq)
    assert [r["train_loss"] for r in seq] != [r["train_loss"] for r in fedavg]
    vec = records(**method, executor="vectorized")
    assert len(vec) == len(seq)
    for a, b in zip(seq, vec):  # methods_e2e.assert_executors_agree's tolerance
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4, abs=1e-6)
