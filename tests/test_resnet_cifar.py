"""ResNet-20/32 (SCARLET's CIFAR models) and FedChill's baseline ResNet-18: parameter counts worked out
by hand, forward shapes, the option-A shortcut, the width-reduced final stage, vmap."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, vmap

from chillfl.errors import ConfigError
from chillfl.models import build_model, model_names
from chillfl.models.parts import forward_with_features, head_name
from chillfl.models.registry import count_parameters
from chillfl.models.resnet_cifar import BasicBlock

CIFAR = (3, 32, 32)


def cifar_resnet_count(n: int, classes: int) -> int:
    # stem: 3x3 conv 3 -> 16 (432) + BN (32)
    # a block c_in -> c: conv 3x3 c_in*c*9 + BN 2c + conv 3x3 c*c*9 + BN 2c; option-A shortcuts have no parameters
    # stages: n blocks at 16, n at 32 (the first from 16), n at 64 (the first from 32); head 64*classes + classes
    def block(cin: int, c: int) -> int:
        return cin * c * 9 + 2 * c + c * c * 9 + 2 * c

    total = 3 * 16 * 9 + 2 * 16
    for cin, c in ((16, 16), (16, 32), (32, 64)):
        total += block(cin, c) + (n - 1) * block(c, c)
    return total + 64 * classes + classes


def test_hand_count_formula_gives_the_papers_sizes() -> None:
    assert cifar_resnet_count(3, 10) == 269_722  # "0.27M" (He et al. 2016, Table 6)
    assert cifar_resnet_count(5, 10) == 464_154  # "0.46M"


@pytest.mark.parametrize("name,n,classes", [("resnet20", 3, 10), ("resnet32", 5, 10), ("resnet20", 3, 100), ("resnet32", 5, 100)])
def test_cifar_resnet_parameter_counts(name: str, n: int, classes: int) -> None:
    assert count_parameters(build_model(name, CIFAR, classes, seed=0)) == cifar_resnet_count(n, classes)


def test_fedchill_resnet18_parameter_counts_match_table_1() -> None:
    # torchvision resnet18 without its fc: 11,689,512 - (512*1000 + 1000) = 11,176,512
    # + Linear(512, 64) = 32,832 + Linear(64, C): C = 10 -> 650, C = 100 -> 6,500
    # FedChill Table 1: 11.209 (CIFAR-10) and 11.215 (CIFAR-100) million, truncated to three decimals
    c10 = count_parameters(build_model("resnet18_fedchill", CIFAR, 10, seed=0))
    c100 = count_parameters(build_model("resnet18_fedchill", CIFAR, 100, seed=0))
    assert c10 == 11_176_512 + 32_832 + 650 == 11_209_994
    assert c100 == 11_176_512 + 32_832 + 6_500 == 11_215_844
    assert (c10 // 1000, c100 // 1000) == (11_209, 11_215)


@pytest.mark.parametrize("name,conv", [("resnet18", "blocks.7.conv2"), ("resnet18_fedchill", "layer4.blocks.1.conv2")])
def test_resnet18_torchvision_init(name: str, conv: str) -> None:
    # a 3x3 conv 512 -> 512 (2,359,296 weights): torchvision's kaiming_normal_(fan_out = 512*9 = 4608, relu) has
    # std sqrt(2 / 4608) = 0.0208333; PyTorch's default, uniform in +-1/sqrt(fan_in = 4608), std 1/sqrt(3 * 4608) = 0.0085052
    def std(options: dict[str, str]) -> float:
        return float(build_model(name, CIFAR, 10, options, seed=0).get_submodule(conv).weight.detach().std())

    assert std({"init": "torchvision"}) == pytest.approx(0.0208333, rel=0.01)
    assert std({}) == pytest.approx(0.0085052, rel=0.01)
    with pytest.raises(ConfigError, match="model.init"):
        build_model(name, CIFAR, 10, {"init": "xavier"})


@pytest.mark.parametrize("name", ["resnet20", "resnet32", "resnet18_fedchill"])
def test_registered_forward_and_representation(name: str) -> None:
    assert name in model_names()
    model = build_model(name, CIFAR, 7, seed=0).eval()
    z, logits = forward_with_features(model, torch.randn(2, *CIFAR))
    assert logits.shape == (2, 7)
    assert z.shape == (2, 64)  # 64 channels (ResNet-20/32) / the 64-d code (ResNet-18)
    assert head_name(model) == ("classifier" if name == "resnet18_fedchill" else "fc")


def test_small_inputs_fit() -> None:
    assert build_model("resnet20", (1, 8, 8), 10, seed=0)(torch.randn(2, 1, 8, 8)).shape == (2, 10)
    with pytest.raises(ConfigError) as info:
        build_model("resnet32", (3, 32), 10)
    assert info.value.field == "model.name"


def test_option_a_shortcut_subsamples_and_zero_pads() -> None:
    block = BasicBlock(2, 4, 2, "pad")
    x = torch.arange(2 * 4 * 4, dtype=torch.float32).view(1, 2, 4, 4)
    out = block._pad_shortcut(x, 4)
    # channels (0, x_0[::2, ::2], x_1[::2, ::2], 0)
    assert out.shape == (1, 4, 2, 2)
    assert out[0, 0].abs().sum() == 0 and out[0, 3].abs().sum() == 0
    torch.testing.assert_close(out[0, 1], x[0, 0, ::2, ::2])
    torch.testing.assert_close(out[0, 2], x[0, 1, ::2, ::2])


def test_reduced_width_stage_is_the_sliced_network() -> None:
    # the width-0.25 last stage of ResNet-20 equals a 16-channel stage built from the first weights' slices
    model = build_model("resnet20", CIFAR, 10, seed=0).train()
    x = torch.randn(3, 32, 8, 8, generator=torch.Generator().manual_seed(0))
    reduced = model.layer3(x[:, :8], 0.25)
    assert reduced.shape == (3, 16, 4, 4)
    first = model.layer3.blocks[0]
    h = torch.nn.functional.conv2d(x[:, :8], first.conv1.weight[:16, :8], stride=2, padding=1)
    h = torch.relu(torch.nn.functional.batch_norm(h, None, None, first.bn1.weight[:16], first.bn1.bias[:16], True))
    h = torch.nn.functional.conv2d(h, first.conv2.weight[:16, :16], padding=1)
    h = torch.nn.functional.batch_norm(h, None, None, first.bn2.weight[:16], first.bn2.bias[:16], True)
    shortcut = torch.nn.functional.pad(x[:, :8, ::2, ::2], (0, 0, 0, 0, 4, 4))
    expected_first = torch.relu(h + shortcut)
    rest = expected_first
    for block in model.layer3.blocks[1:]:
        rest = block(rest, 0.25)
    torch.testing.assert_close(reduced, rest)
    # ResNet-18's last stage: 64 of 256 input channels, 128 of 512 output channels, projection shortcut sliced too
    r18 = build_model("resnet18_fedchill", CIFAR, 10, seed=0).train()
    assert r18.layer4(torch.randn(2, 64, 2, 2), 0.25).shape == (2, 128, 1, 1)


def test_vmap_matches_per_model_forward() -> None:
    models = [build_model("resnet20", (1, 8, 8), 4, seed=i).eval() for i in range(2)]
    x = torch.randn(2, 3, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    states = [dict(m.state_dict()) for m in models]
    stacked = {k: torch.stack([s[k] for s in states]) for k in states[0]}
    out = vmap(lambda st, xb: functional_call(models[0], st, (xb,)))(stacked, x)
    torch.testing.assert_close(out, torch.stack([m(x[i]) for i, m in enumerate(models)]), rtol=1e-4, atol=1e-5)


def test_code_length_option() -> None:
    model = build_model("resnet18_fedchill", CIFAR, 10, {"code_length": 32}, seed=0)
    assert model.classifier.in_features == 32
    with pytest.raises(ConfigError) as info:
        build_model("resnet18_fedchill", CIFAR, 10, {"code_length": 0})
    assert info.value.field == "model.code_length"
