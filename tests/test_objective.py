"""Logit chilling's loss: CE(z / T, y) and its gradient (softmax(z/T) - y) / T."""

import math

import pytest
import torch

from chillfl.training.objective import temperature_cross_entropy


def test_value_matches_hand_computation():
    # z = [2, 0], y = 0, T = 0.5 -> z/T = [4, 0]; CE = log(1 + e^-4) = 0.0181499...
    z = torch.tensor([[2.0, 0.0]])
    y = torch.tensor([0])
    assert temperature_cross_entropy(z, y, 0.5).item() == pytest.approx(math.log(1 + math.exp(-4)), rel=1e-5)


def test_temperature_one_is_plain_cross_entropy():
    z = torch.tensor([[0.3, -1.2, 2.0], [1.0, 1.0, 1.0]])
    y = torch.tensor([2, 0])
    # sample 2: uniform logits -> CE = log 3
    expected = (torch.logsumexp(z[0], 0) - z[0, 2] + math.log(3)) / 2
    assert temperature_cross_entropy(z, y, 1.0).item() == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.parametrize("temperature", [0.01, 0.05, 0.5, 1.0, 4.0])
def test_gradient_is_softmax_minus_onehot_over_t(temperature):
    z = torch.tensor([[1.0, -0.5, 0.25], [0.1, 0.2, -0.3], [3.0, 0.0, -3.0]], requires_grad=True)
    y = torch.tensor([0, 2, 1])
    temperature_cross_entropy(z, y, temperature).backward()
    onehot = torch.nn.functional.one_hot(y, 3).float()
    expected = (torch.softmax(z.detach() / temperature, dim=1) - onehot) / temperature / len(y)
    torch.testing.assert_close(z.grad, expected, rtol=1e-5, atol=1e-6)


def test_hand_gradient_two_classes():
    # z = [0, 0], y = 0, T = 0.25: softmax = [.5, .5], grad = ([.5,.5] - [1,0]) / .25 = [-2, 2]
    z = torch.zeros(1, 2, requires_grad=True)
    temperature_cross_entropy(z, torch.tensor([0]), 0.25).backward()
    torch.testing.assert_close(z.grad, torch.tensor([[-2.0, 2.0]]))


def test_stable_at_very_low_temperature():
    z = torch.tensor([[50.0, -50.0, 10.0]], requires_grad=True)
    loss = temperature_cross_entropy(z, torch.tensor([1]), 0.01)  # z/T spans 1e4: naive softmax overflows
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(z.grad).all()
    # loss = logsumexp([5000, -5000, 1000]) - (-5000) = 5000 + 5000 = 10000 (other terms underflow)
    assert loss.item() == pytest.approx(10000.0, rel=1e-6)


def test_per_client_temperatures_under_vmap_match_one_call_each():
    # the vectorised executor evaluates the loss for many clients at once, each with its own T
    from torch.func import vmap

    z = torch.tensor([[[2.0, 0.0]], [[0.0, 0.0]], [[1.0, -1.0]]])  # 3 clients x 1 sample x 2 classes
    y = torch.tensor([[0], [1], [1]])
    t = torch.tensor([0.5, 1.0, 0.25])
    got = vmap(temperature_cross_entropy)(z, y, t)
    # z/T = [4, 0], [0, 0], [4, -4] -> CE = log(1 + e^-4), log 2, log(e^4 + e^-4) + 4 = log(1 + e^8)
    expected = torch.tensor([math.log(1 + math.exp(-4)), math.log(2), math.log(1 + math.exp(8))])
    torch.testing.assert_close(got, expected)
