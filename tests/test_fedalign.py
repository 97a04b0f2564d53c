"""FedAlign (Mendieta et al., CVPR 2022): transmitting matrix, power-iteration Lipschitz estimate and the
term on hand-worked examples; the width-reduced final stage; executors; refusal of other models."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.models import build_model
from chillfl.models.resnet_cifar import make_divisible
from chillfl.training.fedalign import FedAlignOptions, FedAlignTerm, lipschitz_loss, top_singular_value, transmitting_matrix
from chillfl.training import local
from chillfl.training.local import StepLoss, LocalSpec, model_state, split_state
from methods_e2e import assert_executors_agree, config, records, resumed_records

SMALL = {"model.name": "resnet20", "dataset.test_fraction": 0.7, "federation.num_clients": 8, "federation.clients_per_round": 2}
"""ResNet-20 is the slow part: fewer training samples and clients per round keep the end-to-end runs short."""


def test_transmitting_matrix_and_top_singular_value_by_hand() -> None:
    # X: 2 channels over HW = 2 positions, X = [[1, 0], [0, 2]]; Y: 1 channel, Y = [[3, 4]]
    # T = X Y^T / HW = [[1*3 + 0*4], [0*3 + 2*4]] / 2 = [[1.5], [4]]
    # T T^T = [[2.25, 6], [6, 16]]: lambda_max = trace = 18.25 (rank one), sigma = sqrt(18.25) = 4.2720...
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0]]).view(1, 2, 1, 2)
    y = torch.tensor([[3.0, 4.0]]).view(1, 1, 1, 2)
    t = transmitting_matrix(x, y)
    torch.testing.assert_close(t, torch.tensor([[[1.5], [4.0]]]))
    assert top_singular_value(t).item() == pytest.approx(math.sqrt(18.25), rel=1e-6)
    # a full-rank 2x2 case: T = diag(3, 1) -> sigma = 3 (power iteration from (1, 1) converges: ratio (1/9)^10)
    assert top_singular_value(torch.tensor([[[3.0, 0.0], [0.0, 1.0]]])).item() == pytest.approx(3.0, rel=1e-6)


def test_input_is_pooled_to_the_output_size() -> None:
    # X: 1 channel on 2x2 = [[1, 2], [3, 6]] -> pooled to 1x1: mean 3; Y: 1 channel 1x1 = [[2]]; T = 3 * 2 / 1 = 6
    x = torch.tensor([[1.0, 2.0], [3.0, 6.0]]).view(1, 1, 2, 2)
    y = torch.tensor([[2.0]]).view(1, 1, 1, 1)
    torch.testing.assert_close(transmitting_matrix(x, y), torch.tensor([[[6.0]]]))


def test_lipschitz_loss_by_hand() -> None:
    # reduced pass: sigma_s = sqrt(18.25) (example above); full pass: Y doubled -> T doubled -> sigma_t = 2 sqrt(18.25)
    # L = (sigma_s - sigma_t)^2 = 18.25; its gradient reaches only the reduced output
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0]]).view(1, 2, 1, 2)
    y_reduced = torch.tensor([[3.0, 4.0]]).view(1, 1, 1, 2).requires_grad_(True)
    y_full = (2 * torch.tensor([[3.0, 4.0]]).view(1, 1, 1, 2)).requires_grad_(True)
    loss = lipschitz_loss(x, y_reduced, x, y_full)
    assert loss.item() == pytest.approx(18.25, rel=1e-5)
    g_reduced, g_full = torch.autograd.grad(loss, [y_reduced, y_full], allow_unused=True)
    assert g_full is None and g_reduced is not None and g_reduced.abs().sum() > 0


def test_make_divisible_matches_the_slimmable_rounding() -> None:
    assert [make_divisible(v) for v in (8.0, 16.0, 4.0, 12.0, 64 * 0.25, 512 * 0.25)] == [8, 16, 8, 16, 16, 128]


def _step(model: torch.nn.Module, term: FedAlignTerm, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(total loss, CE) of one training step of ``model`` with ``term``, and the leaf parameters."""
    params, buffers = split_state(model, model_state(model))
    params = {k: v.requires_grad_(True) for k, v in params.items()}
    loss_fn = StepLoss(model, LocalSpec(epochs=1, batch_size=len(y), terms=(term,)), factor=False)
    model.train()
    value, _ = loss_fn(params, buffers, x, y, 1.0, {})
    plain = StepLoss(model, LocalSpec(epochs=1, batch_size=len(y)), factor=False)
    ce, _ = plain(params, split_state(model, model_state(model))[1], x, y, 1.0, {})
    return value, ce, params


def test_term_on_resnet20_is_mu_times_ce_in_value_and_reaches_only_the_reduced_final_stage() -> None:
    model = build_model("resnet20", (3, 16, 16), 4, seed=0)
    x, y = torch.randn(6, 3, 16, 16, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 2, 3, 0, 1])
    term = FedAlignTerm("layer3", FedAlignOptions(mu=0.45))
    value, ce, params = _step(model, term, x, y)
    # "ce" scale: mu * (CE / L) * L = mu * CE in value
    assert value.item() == pytest.approx(1.45 * ce.item(), rel=1e-5)
    term_grads = torch.autograd.grad(value - ce, list(params.values()), allow_unused=True, retain_graph=True)
    by_name = dict(zip(params, term_grads))
    for name, g in by_name.items():
        if not name.startswith("layer3."):
            assert g is None or g.abs().sum() == 0, name  # the stage input is detached
    # the reduced pass reads the first 16 of 64 output channels and 8 of 32 input channels of layer3's first conv
    g = by_name["layer3.blocks.0.conv1.weight"]
    assert g is not None and g[:16, :8].abs().sum() > 0
    assert g[16:].abs().sum() == 0 and g[:, 8:].abs().sum() == 0


def test_plain_scale_is_mu_times_the_lipschitz_loss() -> None:
    model = build_model("resnet20", (3, 16, 16), 4, seed=0)
    x, y = torch.randn(6, 3, 16, 16, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 2, 3, 0, 1])
    value, ce, _ = _step(model, FedAlignTerm("layer3", FedAlignOptions(mu=2.0, scale="none")), x, y)
    # recompute L by hand from the stage's input and the two passes
    with torch.no_grad():
        model.train()
        h = torch.relu(model.bn1(model.conv1(x)))
        stage_in = model.layer2(model.layer1(h))
        full = model.layer3(stage_in)
        reduced_in = stage_in[:, :8]
        reduced = model.layer3(reduced_in, 0.25)
    expected = 2.0 * lipschitz_loss(reduced_in, reduced, stage_in, full).item()
    assert (value - ce).item() == pytest.approx(expected, rel=1e-4)


def test_reduced_stage_uses_batch_statistics_and_leaves_running_statistics_alone() -> None:
    model = build_model("resnet20", (3, 16, 16), 4, seed=0)
    before = {k: v.clone() for k, v in model.layer3.state_dict().items()}
    model.train()
    out = model.layer3(torch.randn(4, 8, 8, 8), 0.25)
    assert out.shape == (4, 16, 4, 4)
    for k, v in model.layer3.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_one_vmapped_step_equals_the_sequential_step() -> None:
    # the vectorised executor's step: the same loss and gradients per client, up to float rounding
    model = build_model("resnet20", (1, 8, 8), 10, seed=0)
    spec = LocalSpec(epochs=1, batch_size=16, terms=(FedAlignTerm("layer3"),))
    p, b = split_state(model, model_state(model))
    x, y = torch.randn(16, 1, 8, 8, generator=torch.Generator().manual_seed(0)), torch.arange(16) % 10
    leaf = {k: v.clone().requires_grad_(True) for k, v in p.items()}
    model.train()
    single, _ = StepLoss(model, spec, factor=False)(leaf, {k: v.clone() for k, v in b.items()}, x, y, 1.0, {})
    g1 = torch.autograd.grad(single, list(leaf.values()))
    stacked = {k: torch.stack([v, v]).requires_grad_(True) for k, v in p.items()}
    bufs = {k: torch.stack([v, v]) for k, v in b.items()}
    loss_fn = StepLoss(model, spec, factor=False, vmapped=True)
    pk, bk = list(stacked), list(bufs)

    def flat(*t: torch.Tensor) -> torch.Tensor:
        return loss_fn(dict(zip(pk, t[: len(pk)])), dict(zip(bk, t[len(pk) : -2])), t[-2], t[-1], 1.0, {})[0]

    both = torch.func.vmap(flat)(*stacked.values(), *bufs.values(), torch.stack([x, x]), torch.stack([y, y]))
    g2 = torch.autograd.grad(both.sum(), list(stacked.values()))
    assert both.tolist() == pytest.approx([single.item()] * 2, rel=1e-6)
    for a, c in zip(g1, g2):
        torch.testing.assert_close(c[0], a, rtol=1e-4, atol=1e-5 * float(a.abs().max()))


def test_fedalign_under_every_executor() -> None:
    cfg = config(**{"algorithm.name": "fedalign", "federation.rounds": 1, **SMALL})
    seq = assert_executors_agree(cfg, rel=2e-2)  # see assert_executors_agree: ResNet-20 drifts under vectorization
    assert seq[-1]["train_loss"] != records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))[-1]["train_loss"]


def test_fedalign_resume_is_bitwise(tmp_path: Path) -> None:
    cfg = config(**{"algorithm.name": "fedalign", "federation.rounds": 2, **SMALL})
    assert resumed_records(cfg, 1, tmp_path) == records(cfg)


def test_other_models_are_refused_with_one_line() -> None:
    with pytest.raises(ConfigError) as info:
        build_experiment(config(**{"algorithm.name": "fedalign", "model.name": "mlp"}))
    assert info.value.field == "model.name" and "resnet20" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("bad", [{"algorithm.width": 1.0}, {"algorithm.mu": -0.1}, {"algorithm.scale": "x"}])
def test_bad_options_name_the_field(bad: dict) -> None:
    with pytest.raises(ConfigError) as info:
        build_experiment(config(**{"algorithm.name": "fedalign", "model.name": "resnet20", **bad}))
    assert info.value.field.startswith("algorithm.")


def test_power_iteration_survives_huge_and_zero_maps() -> None:
    # sigma(c M) = c sigma(M): at |M| ~ 1e13 (a T = 0.05 run) K = M M^T would overflow float32 unscaled
    big = torch.tensor([[[3.0e13, 0.0], [0.0, 1.0e13]]])
    assert top_singular_value(big).item() == pytest.approx(3.0e13, rel=1e-5)
    zero = torch.zeros(1, 2, 2, requires_grad=True)
    sigma = top_singular_value(zero)
    (g,) = torch.autograd.grad(sigma.sum(), [zero])
    assert sigma.item() < 1e-20 and torch.isfinite(g).all()


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
@pytest.mark.skipif(not local.bf16_supported(torch.device("cpu")), reason="this CPU has no bf16 kernels (oneDNN): bf16 not run")
def test_fedalign_trains_under_bf16(executor: str) -> None:
    """The reduced-width pass runs outside autocast on the forward's captured activations: they reach it in fp32.

    Found on an H200 (the CUDA suite's first run): bf16 captures met fp32 weights, under both executors.
    """
    cfg = config(**{"algorithm.name": "fedalign", "federation.rounds": 1, "precision": "bf16", "executor": executor, **SMALL})
    assert math.isfinite(records(cfg)[-1]["train_loss"])
