"""Where a paper's text is ambiguous and its authors' code is not, the full-size configs follow the code (no training).

* FLex&Chill's "learning rate decay of 1e-5" (Sec. 4.1) is the authors' ``--decay``, which ``utils.py`` passes to the
  optimiser as ``weight_decay`` with no lr schedule: the configs ran ``lr_decay = 0.99999`` and weight decay 0.
* FLex&Chill's CIFAR100-ResNet18 is torchvision's ``resnet18()`` (the authors' ``models/ResNet18.py``), and FedChill
  Table 1's FedAlign row is FedHKD's torchvision ResNet-18: both drew convs with PyTorch's per-layer init.
* SCARLET's ResNet-20 is Idelbayev's ``resnet.py`` (``kaiming_normal_`` at fan_in on every conv and linear weight):
  chillfl had only a fan_out draw on the convs and PyTorch's default head (``resnet20``'s ``init = "kaiming_fan_in"``).
"""

from __future__ import annotations

import math

import pytest
import torch

from chillfl.config import load_config, variant_config
from chillfl.experiments import resolve_config
from chillfl.models.registry import build_model

FLEXCHILL_FULL = ["flexchill/table4-cifar10", "flexchill/table4-cifar100-resnet18", "flexchill/table4-femnist-dnn",
                  "flexchill/table4-mnist-dnn", "flexchill/table7-fedbn-cifar10", "flexchill/table7-fedprox-cifar10",
                  "flexchill/table7-scaffold-cifar10"]
FEDCHILL_TABLE1 = [f"fedchill/table1-{d}-{k}" for d in ("cifar10", "cifar100", "svhn") for k in (10, 20, 50)]
SCARLET_FULL = ["scarlet/fig7-cifar10-a005", "scarlet/fig7-cifar10-a03", "scarlet/fig9-cache-plugin-cifar10",
                "scarlet/fig10-cache-duration-cifar10", "scarlet/fig11-cache-duration-fine-cifar10",
                "scarlet/fig12-beta-cifar10-a005", "scarlet/fig12-beta-cifar10-a03"]


@pytest.mark.parametrize("name", FLEXCHILL_FULL)
def test_flexchill_full_size_runs_weight_decay_1e5_and_a_constant_lr(name: str) -> None:
    c = load_config(resolve_config(name))
    assert (c.client.weight_decay, c.client.lr_decay) == (1e-5, 1.0)


def test_flexchill_digits_configs_keep_their_optimiser() -> None:
    # the CPU-scale configs' documented outputs stand: no weight decay, no lr decay
    c = load_config(resolve_config("flexchill/table4-digits"))
    assert (c.client.weight_decay, c.client.lr_decay) == (0.0, 1.0)


def test_flexchill_resnet18_draws_convs_as_torchvision() -> None:
    c = load_config(resolve_config("flexchill/table4-cifar100-resnet18"))
    assert c.model["init"] == "torchvision"
    model = build_model("resnet18", (3, 32, 32), 100, {k: v for k, v in c.model.items() if k != "name"}, seed=0)
    # a 3x3 64 -> 64 conv: kaiming_normal_ fan_out = 64 * 9, std sqrt(2 / 576) = 0.0589 (PyTorch's own: 0.0241)
    std = float(model.blocks[0].conv1.weight.detach().std())
    assert std == pytest.approx(math.sqrt(2 / 576), rel=0.05)


@pytest.mark.parametrize("name", FEDCHILL_TABLE1)
def test_fedchill_table1_fedalign_row_uses_torchvision_init(name: str) -> None:
    base = load_config(resolve_config(name))
    row = variant_config(base, "FedAlign", base.variants["FedAlign"])
    assert (row.model["name"], row.model.get("init")) == ("resnet18_fedchill", "torchvision")


@pytest.mark.parametrize("name", SCARLET_FULL)
def test_scarlet_full_size_resnet20_uses_the_authors_init(name: str) -> None:
    c = load_config(resolve_config(name))
    assert (c.model["name"], c.model.get("init")) == ("resnet20", "kaiming_fan_in")


def test_kaiming_fan_in_std_by_hand() -> None:
    fan_in = build_model("resnet20", (3, 32, 32), 10, {"init": "kaiming_fan_in"}, seed=0)
    default = build_model("resnet20", (3, 32, 32), 10, {}, seed=0)
    # std sqrt(2 / fan_in) (kaiming_normal_'s defaults: a = 0, leaky_relu gain sqrt(2)):
    # stem 3x3 from 3 channels: fan_in 27 -> 0.272 (fan_out 16 * 9 = 144 -> 0.118)
    # first conv of stage 3, 3x3 32 -> 64: fan_in 288 -> 0.0833 (fan_out 576 -> 0.0589)
    # head 64 -> 10: fan_in 64 -> 0.177 (PyTorch's Linear: uniform(+-1/8), std 1 / (8 sqrt 3) = 0.0722)
    cases = [(lambda m: m.conv1.weight, 27, 144), (lambda m: m.layer3.blocks[0].conv1.weight, 288, 576)]
    for weight, fin, fout in cases:
        assert float(weight(fan_in).detach().std()) == pytest.approx(math.sqrt(2 / fin), rel=0.1)
        assert float(weight(default).detach().std()) == pytest.approx(math.sqrt(2 / fout), rel=0.1)
    assert float(fan_in.fc.weight.detach().std()) == pytest.approx(math.sqrt(2 / 64), rel=0.1)
    assert float(default.fc.weight.detach().std()) == pytest.approx(1 / (8 * math.sqrt(3)), rel=0.1)
    assert float(fan_in.fc.weight.detach().abs().max()) > 1 / 8  # a normal draw, not PyTorch's bounded uniform
    # biases and batch norms stay as PyTorch's
    assert torch.equal(fan_in.bn1.weight, torch.ones(16)) and float(fan_in.fc.bias.detach().abs().max()) <= 1 / 8


def test_resnet32_takes_the_same_option() -> None:
    model = build_model("resnet32", (3, 32, 32), 100, {"init": "kaiming_fan_in"}, seed=0)
    assert float(model.fc.weight.detach().std()) == pytest.approx(math.sqrt(2 / 64), rel=0.1)
