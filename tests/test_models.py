"""Tests of the model registry: shapes, hand-counted parameters, vmap, errors."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from chillfl.errors import ConfigError
from chillfl.models import MODELS, build_model, count_parameters, model_names

CIFAR = (3, 32, 32)
DIGITS = (1, 8, 8)  # sklearn digits
MNIST = (1, 28, 28)


def n_params(name: str, shape: tuple[int, ...], classes: int = 10, **options: object) -> int:
    return count_parameters(build_model(name, shape, classes, options, seed=0))


# ---------------------------------------------------------------- registry


def test_model_names_is_sorted_registry() -> None:
    names = model_names()
    assert names == sorted(MODELS)
    for required in (
        "flexchill_cnn", "femnist_dnn", "mlp", "mcmahan_cnn", "har_cnn1d", "fedchill_cnn1",
        "fedchill_cnn2", "fedchill_cnn3", "svhn_cnn", "alexnet", "resnet18", "vit",
    ):
        assert required in names


# ---------------------------------------------------------------- forward shapes

SHAPE_CASES = [
    ("flexchill_cnn", CIFAR), ("flexchill_cnn", DIGITS), ("flexchill_cnn", MNIST),
    ("mcmahan_cnn", CIFAR), ("mcmahan_cnn", DIGITS),
    ("femnist_dnn", MNIST), ("mlp", CIFAR), ("mlp", (64,)),
    ("har_cnn1d", (9, 128)), ("har_cnn1d", (561,)),
    ("fedchill_cnn1", CIFAR), ("fedchill_cnn1", DIGITS),
    ("fedchill_cnn2", CIFAR), ("fedchill_cnn2", DIGITS),
    ("fedchill_cnn3", DIGITS),
    ("svhn_cnn", CIFAR), ("svhn_cnn", DIGITS),
    ("alexnet", CIFAR), ("alexnet", MNIST), ("alexnet", DIGITS),
    ("resnet18", DIGITS),
    ("vit", CIFAR), ("vit", DIGITS),
]


@pytest.mark.parametrize("name,shape", SHAPE_CASES)
def test_forward_shape(name: str, shape: tuple[int, ...]) -> None:
    options = {"hidden": 32} if name == "alexnet" else {}  # keep the test light
    model = build_model(name, shape, 7, options, seed=0).eval()
    out = model(torch.zeros(2, *shape))
    assert out.shape == (2, 7)


def test_batch_norm_running_stats_untouched_by_construction() -> None:
    # The flatten-size dummy forward must not update BN statistics.
    model = build_model("svhn_cnn", CIFAR, 10, seed=0)
    bn = model.features[1]
    assert isinstance(bn, nn.BatchNorm2d)
    assert torch.equal(bn.running_mean, torch.zeros(32))
    assert int(bn.num_batches_tracked) == 0
    assert model.training


def test_no_inplace_activations() -> None:
    for name, shape in [("flexchill_cnn", CIFAR), ("fedchill_cnn1", CIFAR), ("alexnet", DIGITS), ("har_cnn1d", (1, 64))]:
        model = build_model(name, shape, 3, {"hidden": 8} if name == "alexnet" else {}, seed=0)
        for module in model.modules():
            assert not getattr(module, "inplace", False), f"{name}: {module}"


# ---------------------------------------------------------------- hand-counted parameters


def test_flexchill_cnn_count_cifar() -> None:
    # FLex&Chill Table 2 at 3x32x32, padding 0: 32 -conv5-> 28 -pool-> 14 -conv5-> 10 -pool-> 5
    # conv1 3*10*25+10 = 760; conv2 10*20*25+20 = 5020; fc1 (20*5*5=500)*256+256 = 128256;
    # fc2 256*10+10 = 2570 -> 136606
    model = build_model("flexchill_cnn", CIFAR, 10, seed=0)
    assert model.fc1.in_features == 500  # the table's Linear(500, 256)
    assert count_parameters(model) == 136606


def test_flexchill_cnn_batch_norm_adds_bn_params() -> None:
    # BN after each conv: 2*10 + 2*20 = 60 affine parameters -> 136606 + 60
    assert n_params("flexchill_cnn", CIFAR, batch_norm=True) == 136666
    model = build_model("flexchill_cnn", CIFAR, 10, {"batch_norm": True}, seed=0)
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 2


def test_flexchill_cnn_auto_padding_on_digits() -> None:
    # 8x8 does not fit the no-padding layout (needs 16x16) -> padding 2 ("same"):
    # 8 -conv-> 8 -pool-> 4 -conv-> 4 -pool-> 2; flatten 20*2*2 = 80
    # conv1 1*10*25+10 = 260; conv2 5020; fc1 80*256+256 = 20736; fc2 2570 -> 28586
    model = build_model("flexchill_cnn", DIGITS, 10, seed=0)
    assert model.fc1.in_features == 80
    assert count_parameters(model) == 28586


def test_mcmahan_cnn_counts() -> None:
    # 3x32x32, padding 0: 32 -> 28 -> 14 -> 10 -> 5, flatten 64*25 = 1600
    # conv1 3*32*25+32 = 2432; conv2 32*64*25+64 = 51264; fc1 1600*512+512 = 819712;
    # fc2 512*10+10 = 5130 -> 878538
    model = build_model("mcmahan_cnn", CIFAR, 10, seed=0)
    assert model.fc1.in_features == 1600
    assert count_parameters(model) == 878538
    # McMahan et al. (2017) report 1,663,370 parameters for their MNIST CNN ("same" padding):
    # conv1 1*32*25+32 = 832; conv2 51264; fc1 (64*7*7=3136)*512+512 = 1606144; fc2 5130
    assert n_params("mcmahan_cnn", MNIST, padding=2) == 1663370


def test_mcmahan_cnn_default_on_mnist_is_the_papers_cnn() -> None:
    # The default on 28x28 must be McMahan et al.'s MNIST CNN (1,663,370, "same" padding, flatten 3136),
    # not the unpadded 28 -> 24 -> 12 -> 8 -> 4 layout (flatten 1024: 832 + 51264 + 524800 + 5130 = 582026)
    model = build_model("mcmahan_cnn", MNIST, 10, seed=0)
    assert model.fc1.in_features == 64 * 7 * 7
    assert count_parameters(model) == 1663370
    assert n_params("mcmahan_cnn", MNIST, padding=0) == 582026
    # the switch is at 32 pixels a side: 31x31 pads ("same": 31 -> 15 -> 7), 32x32 does not (tested above)
    assert build_model("mcmahan_cnn", (1, 31, 31), 10, seed=0).fc1.in_features == 64 * 7 * 7
    assert build_model("mcmahan_cnn", (3, 32, 40), 10, seed=0).fc1.in_features == 64 * 5 * 7


def test_femnist_dnn_count() -> None:
    # 784*512+512 = 401920; 512*256+256 = 131328; 256*128+128 = 32896; 128*62+62 = 7998 -> 574142
    assert n_params("femnist_dnn", MNIST, 62) == 574142


def test_mlp_count_and_options() -> None:
    # 3072*64+64 = 196672; 64*10+10 = 650 -> 197322
    assert n_params("mlp", CIFAR) == 197322
    # hidden [] is softmax regression: 4*3+3 = 15
    assert n_params("mlp", (4,), 3, hidden=[]) == 15
    # hidden [5, 2]: 4*5+5 = 25; 5*2+2 = 12; 2*3+3 = 9 -> 46
    assert n_params("mlp", (4,), 3, hidden=[5, 2]) == 46


def test_har_cnn1d_count() -> None:
    # FLex&Chill Table 9, 1 input channel, 6 classes:
    # conv 1*16*7+16 = 128, bn 32; conv 16*32*5+32 = 2592, bn 64; conv 32*64*5+64 = 10304, bn 128;
    # conv 64*128*3+128 = 24704, bn 256; fc 128*6+6 = 774 -> 38982
    assert n_params("har_cnn1d", (561,), 6) == 38982
    assert n_params("har_cnn1d", (1, 561), 6) == 38982
    # 9 channels: first conv 9*16*7+16 = 1024 instead of 128 -> 38982 + 896 = 39878
    assert n_params("har_cnn1d", (9, 128), 6) == 39878


def test_har_cnn1d_vector_input_equals_one_channel_sequence() -> None:
    a = build_model("har_cnn1d", (40,), 6, seed=3).eval()
    b = build_model("har_cnn1d", (1, 40), 6, seed=3).eval()
    x = torch.randn(4, 40, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(a(x), b(x.unsqueeze(1)))


def test_vit_count() -> None:
    # FLex&Chill Table 8 at 3x32x32, patch 4 -> 8*8 = 64 patches + CLS = 65 tokens
    # patch conv 3*256*16+256 = 12544; cls 256; pos 65*256 = 16640
    # per layer: qkv 256*768+768 = 197376; proj 256*256+256 = 65792; 2 LayerNorms 2*512 = 1024;
    #   fc1 256*1024+1024 = 263168; fc2 1024*256+256 = 262400 -> 789760; x3 = 2369280
    # final LayerNorm 512; head 256*10+10 = 2570 -> 2401802
    assert n_params("vit", CIFAR) == 2401802


def test_vit_attn_dropout_drops_attention_weights() -> None:
    # TransformerEncoderLayer (the module Table 8's argument names come from) also drops attention weights.
    # q = k = 0 -> both of 2 tokens weigh 1/2; v = 1 everywhere, proj = identity -> output 1/2 + 1/2 = 1.
    # attn_dropout 0.5 in training keeps each weight as 1 or drops it to 0: every output is 0, 1 or 2.
    from chillfl.models.vit import SelfAttention

    attn = SelfAttention(4, 1, attn_dropout=0.5)
    with torch.no_grad():
        attn.qkv.weight.zero_(), attn.qkv.bias.copy_(torch.tensor([0.0] * 8 + [1.0] * 4))
        attn.proj.weight.copy_(torch.eye(4)), attn.proj.bias.zero_()
    x = torch.zeros(64, 2, 4)
    torch.testing.assert_close(attn.eval()(x), torch.ones(64, 2, 4))
    torch.manual_seed(0)
    out = attn.train()(x)
    assert set(out.unique().tolist()) == {0.0, 1.0, 2.0}
    assert n_params("vit", CIFAR, attn_dropout=0.1) == 2401802  # no parameters of its own
    with pytest.raises(ConfigError, match="attn_dropout"):
        build_model("vit", CIFAR, 10, {"attn_dropout": 1.0})


def test_resnet18_count_cifar_stem() -> None:
    # stem 3*64*9 = 1728 + BN 128
    # stage1: 4 convs 64*64*9 = 36864 each -> 147456, 4 BN 512
    # stage2: 64*128*9 = 73728 + 3*128*128*9 = 442368 + shortcut 64*128 = 8192 + 5 BN 1280 = 525568
    # stage3: 128*256*9 = 294912 + 3*589824 = 1769472 + 32768 + 5 BN 2560 = 2099712
    # stage4: 256*512*9 = 1179648 + 3*2359296 = 7077888 + 131072 + 5 BN 5120 = 8393728
    # fc 512*10+10 = 5130 -> 1856 + 147968 + 525568 + 2099712 + 8393728 + 5130 = 11173962
    model = build_model("resnet18", CIFAR, 10, seed=0)
    assert count_parameters(model) == 11173962
    assert model.stem[0].kernel_size == (3, 3)


def test_resnet18_stem_and_norm_options() -> None:
    # imagenet stem: 7x7 conv 3*64*49 = 9408 instead of 1728 -> 11173962 + 7680 = 11181642
    assert n_params("resnet18", CIFAR, stem="imagenet") == 11181642
    big = build_model("resnet18", (3, 96, 96), 10, seed=0)
    assert big.stem[0].kernel_size == (7, 7)  # auto picks imagenet above 64 px
    # norm none drops every affine pair: BN channels 64 + 4*64 + 5*128 + 5*256 + 5*512 = 4800 -> -9600
    assert n_params("resnet18", CIFAR, norm="none") == 11173962 - 9600
    group = build_model("resnet18", CIFAR, 10, {"norm": "group", "norm_groups": 4}, seed=0)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in group.modules())
    assert all(m.num_groups == 4 for m in group.modules() if isinstance(m, nn.GroupNorm))
    assert count_parameters(group) == 11173962  # GroupNorm has the same affine parameters


def test_alexnet_variants() -> None:
    # cifar: 3x3/2 conv: 32 -> 16 -pool-> 8 -pool-> 4 -> 4 -> 4 -pool-> 2; flatten 256*2*2 = 1024
    cifar = build_model("alexnet", CIFAR, 10, {"hidden": 16}, seed=0)
    assert cifar.classifier[1].in_features == 1024
    # mnist: 3x3/1 conv: 28 -pool-> 14 -pool-> 7 -> 7 -> 7 -pool-> 3; flatten 256*3*3 = 2304
    mnist = build_model("alexnet", MNIST, 10, {"hidden": 16}, seed=0)
    assert mnist.classifier[1].in_features == 2304
    # convs (3 channels): 1792 + 110784 + 663936 + 884992 + 590080 = 2251584
    # fc 1024*16+16 = 16400; 16*16+16 = 272; 16*10+10 = 170 -> 2268426
    assert count_parameters(cifar) == 2268426


# ---------------------------------------------------------------- FedChill counts vs the paper

# FedChill reports 685k (Sec. 4), 4.959M (Table 1), 13.95M/13.96M (Sec. 5.2.1/4) and 1.243M (Table 1).
# The paper's figures are truncated to 3-4 significant digits (685k covers 685,000-685,999, i.e.
# 0.15%); our CNN2 reading is 0.20% above 4.959M. 0.25% accepts these and rejects any other
# reading we tried (the literal CNN2 table is 47% low, every other variant more than 2% off).
PAPER_TOLERANCE = 0.0025


def test_fedchill_cnn1_count() -> None:
    # convs: 896 + 9248 + 18496 + 36928 + 73856 + 147584 = 287008; BN 2*(32+32+64+64+128+128) = 896
    # AdaptiveAvgPool(2,2): flatten 128*4 = 512
    # fc 512*512+512 = 262656 + BN 1024; 512*256+256 = 131328 + BN 512; 256*10+10 = 2570
    # -> 287904 + 263680 + 131840 + 2570 = 685994
    count = n_params("fedchill_cnn1", CIFAR)
    assert count == 685994
    assert count == pytest.approx(685_000, rel=PAPER_TOLERANCE)


def test_fedchill_cnn2_count() -> None:
    # literal Table 8: convs 1792 + 73856 + 295168 + 1180160 = 1550976; BN 2*(64+128+256+512) = 1920
    # AdaptiveAvgPool(1,1): flatten 512; fc 512*1024+1024 = 525312; 1024*512+512 = 524800; 5130
    # -> 1552896 + 1055242 = 2608138
    assert n_params("fedchill_cnn2", CIFAR, extra_conv=False) == 2608138
    # default adds conv 512->512: 512*512*9+512 = 2359808 + BN 1024 -> 2608138 + 2360832 = 4968970
    count = n_params("fedchill_cnn2", CIFAR)
    assert count == 4968970
    assert count == pytest.approx(4_959_000, rel=PAPER_TOLERANCE)


def test_fedchill_cnn3_count() -> None:
    # convs: 2240 + 2*57680 + 115360 + 2*230560 + 461120 + 2*921920 + 1843840 + 3687040 = 8529920
    # BN 2*(3*80 + 3*160 + 3*320 + 2*640) = 5920 -> 8535840; AdaptiveAvgPool(2,2): flatten 640*4 = 2560
    # fc 2560*1536+1536 = 3933696 + BN 3072; 1536*768+768 = 1180416 + BN 1536;
    #    768*384+384 = 295296 + BN 768; 384*10+10 = 3850 -> 5418634
    # -> 8535840 + 5418634 = 13954474
    count = n_params("fedchill_cnn3", CIFAR)
    assert count == 13954474
    assert count == pytest.approx(13_960_000, rel=PAPER_TOLERANCE)
    assert count == pytest.approx(13_950_000, rel=PAPER_TOLERANCE)


def test_svhn_cnn_count() -> None:
    # convs: 896 + 9248 + 18496 + 36928 + 73856 + 147584 + (128*256*9+256 = 295168) = 582176
    # BN 2*(32+32+64+64+128+128+256) = 1408; AdaptiveAvgPool(2,2): flatten 256*4 = 1024
    # fc 1024*512+512 = 524800 + BN 1024; 512*256+256 = 131328 + BN 512; 2570 -> 660234
    # -> 583584 + 660234 = 1243818
    count = n_params("svhn_cnn", CIFAR)
    assert count == 1243818
    assert count == pytest.approx(1_243_000, rel=PAPER_TOLERANCE)


def test_fedchill_dropout_option() -> None:
    with_dropout = build_model("fedchill_cnn1", CIFAR, 10, seed=0)
    without = build_model("fedchill_cnn1", CIFAR, 10, {"dropout": False}, seed=0)
    assert sum(isinstance(m, nn.Dropout) for m in with_dropout.modules()) == 2
    assert not any(isinstance(m, nn.Dropout) for m in without.modules())


# ---------------------------------------------------------------- vmap over stacked clients


def _vmapped(models: list[nn.Module], x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")

    def run(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], xb: torch.Tensor) -> torch.Tensor:
        return functional_call(base, (p, b), (xb,))

    return vmap(run)(params, buffers, x), buffers


@pytest.mark.parametrize(
    "name,shape,options",
    [
        ("flexchill_cnn", DIGITS, {"batch_norm": True}),  # BatchNorm in eval mode
        ("svhn_cnn", (3, 16, 16), {}),
        ("vit", DIGITS, {"dim": 32, "mlp_dim": 64}),
    ],
)
def test_vmap_matches_per_model_forward(name: str, shape: tuple[int, ...], options: dict) -> None:
    models = [build_model(name, shape, 4, options, seed=i).eval() for i in range(3)]
    x = torch.randn(3, 5, *shape, generator=torch.Generator().manual_seed(0))
    out, _ = _vmapped(models, x)
    expected = torch.stack([m(x[i]) for i, m in enumerate(models)])
    assert out.shape == (3, 5, 4)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(out[0], out[1])  # the copies really have different weights


def test_vmap_train_mode_batch_norm_updates_stacked_buffers() -> None:
    models = [build_model("flexchill_cnn", DIGITS, 4, {"batch_norm": True}, seed=i) for i in range(3)]
    x = torch.randn(3, 6, *DIGITS, generator=torch.Generator().manual_seed(1))
    out, buffers = _vmapped(models, x)
    expected = torch.stack([m(x[i]) for i, m in enumerate(models)])  # train mode: batch statistics
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    running = torch.stack([m.features[1].running_mean for m in models])
    assert running.abs().sum() > 0
    torch.testing.assert_close(buffers["features.1.running_mean"], running)


# ---------------------------------------------------------------- determinism


def test_seed_gives_same_weights_and_leaves_global_rng() -> None:
    state = torch.random.get_rng_state()
    a = build_model("vit", DIGITS, 3, {"dim": 16, "mlp_dim": 16}, seed=5)
    b = build_model("vit", DIGITS, 3, {"dim": 16, "mlp_dim": 16}, seed=5)
    c = build_model("vit", DIGITS, 3, {"dim": 16, "mlp_dim": 16}, seed=6)
    assert torch.equal(torch.random.get_rng_state(), state)
    for (k, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(pa, pb), k
    assert not torch.equal(a.pos, c.pos)


# ---------------------------------------------------------------- errors


def test_unknown_model_name() -> None:
    with pytest.raises(ConfigError) as info:
        build_model("lenet", CIFAR, 10)
    assert info.value.field == "model.name"
    assert "flexchill_cnn" in info.value.message and "resnet18" in info.value.message


def test_section_names_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        build_model("lenet", CIFAR, 10, section="server_model")
    assert info.value.field == "server_model.name"


@pytest.mark.parametrize(
    "name,options,field",
    [
        ("flexchill_cnn", {"batchnorm": True}, "model.batchnorm"),  # unknown key
        ("flexchill_cnn", {"batch_norm": "yes"}, "model.batch_norm"),  # wrong type
        ("flexchill_cnn", {"padding": -1}, "model.padding"),
        ("mlp", {"hidden": [64, 0]}, "model.hidden"),
        ("resnet18", {"norm": "layer"}, "model.norm"),
        ("resnet18", {"stem": "tiny"}, "model.stem"),
        ("resnet18", {"norm": "group", "norm_groups": 3}, "model.norm_groups"),
        ("alexnet", {"variant": "imagenet"}, "model.variant"),
        ("alexnet", {"dropout": 1.0}, "model.dropout"),
        ("vit", {"heads": 3}, "model.heads"),
        ("femnist_dnn", {"hidden": [10]}, "model.hidden"),
    ],
)
def test_bad_options(name: str, options: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_model(name, CIFAR, 10, options)
    assert info.value.field == field


def test_name_key_in_options_is_ignored() -> None:
    model = build_model("mlp", (4,), 3, {"name": "mlp", "hidden": [2]}, seed=0)
    # 4*2+2 = 10; 2*3+3 = 9 -> 19
    assert count_parameters(model) == 19


@pytest.mark.parametrize(
    "name,shape,options,expected",
    [
        ("flexchill_cnn", DIGITS, {"padding": 0}, "at least 16x16, dataset gives 8x8"),
        ("mcmahan_cnn", (1, 12, 12), {"padding": 0}, "at least 16x16, dataset gives 12x12"),
        ("fedchill_cnn2", (1, 4, 4), {}, "at least 8x8, dataset gives 4x4"),
        ("svhn_cnn", (3, 32, 7), {}, "at least 8x8, dataset gives 32x7"),
        # cifar AlexNet: conv 3x3/2 pad 1 maps 15 -> (15+2-3)//2+1 = 8, then pools 8 -> 4 -> 2 -> 1;
        # 14 -> 7 -> 3 -> 1 -> 0 does not fit
        ("alexnet", DIGITS, {"variant": "cifar"}, "at least 15x15, dataset gives 8x8"),
        ("vit", (1, 3, 3), {}, "at least 4x4, dataset gives 3x3"),
        ("har_cnn1d", (1, 7), {}, "length at least 8, dataset gives 7"),
        ("flexchill_cnn", (784,), {}, "(C, H, W)"),
        ("resnet18", (3, 32), {}, "(C, H, W)"),
        ("har_cnn1d", CIFAR, {}, "(C, L) or (L,)"),
    ],
)
def test_input_does_not_fit(name: str, shape: tuple[int, ...], options: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_model(name, shape, 10, options)
    assert info.value.field == "model.name"
    assert expected in info.value.message


# ---------------------------------------------------------------- the meta-device count (the memory check)


def _wrapped_signal(*args: object) -> nn.Module:
    """A build that a stop signal reached inside a package, which wrapped its exception (Python 3.11's ``__set_name__``)."""
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as exc:
        raise RuntimeError("Error calling __set_name__ on '_Thing' instance 'x' in 'Thing'") from exc


def _broken(*args: object) -> nn.Module:
    raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (1x64 and 63x10)")


def _past_int64(*args: object) -> nn.Module:
    return nn.Linear(2**40, 2**40)  # 2**80 weights: torch cannot count the storage


@pytest.mark.parametrize(("build", "said"), [(_wrapped_signal, "__set_name__"), (_broken, "mat1")], ids=["wrapped-signal", "another-error"])
def test_meta_size_reads_only_an_overflow_as_too_large(monkeypatch: pytest.MonkeyPatch, build: object, said: str) -> None:
    """Any RuntimeError of a registered model's meta build was counted inf, then refused as "model.hidden: ... too large":
    a stop signal's exception that a package wrapped (the command is stopped) or a bug read as a false size error."""
    from chillfl.models.registry import meta_size

    monkeypatch.setitem(MODELS, "mlp", MODELS["mlp"]._replace(build=build))
    with pytest.raises(RuntimeError, match=said):
        meta_size("mlp", (64,), 10, MODELS["mlp"].options())
    monkeypatch.setitem(MODELS, "mlp", MODELS["mlp"]._replace(build=_past_int64))
    assert meta_size("mlp", (64,), 10, MODELS["mlp"].options()) == float("inf")  # a size past int64 is still too large


def test_meta_size_of_a_plugin_model_passes_a_wrapped_signal_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin model's failed meta build counts 0 (its real build says what is wrong), but a wrapped stop signal was
    counted 0 too: the signal was lost, and the real build went on."""
    import sys
    import types

    from chillfl.models.registry import meta_size

    module = types.ModuleType("meta_size_plugin")
    module.wrapped, module.broken = _wrapped_signal, _broken  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "meta_size_plugin", module)
    assert meta_size("meta_size_plugin:broken", (64,), 10, None) == 0.0
    with pytest.raises(RuntimeError) as info:
        meta_size("meta_size_plugin:wrapped", (64,), 10, None)
    assert isinstance(info.value.__cause__, KeyboardInterrupt)
