"""The representation/head split every representation-based method uses."""

import pytest
import torch
from torch import nn
from torch.func import functional_call

from chillfl.models.parts import NoHeadError, forward_with_features, head_name
from chillfl.models.registry import build_model


def test_mlp_split_by_hand() -> None:
    model = nn.Sequential(nn.Linear(2, 3, bias=False), nn.ReLU(), nn.Linear(3, 2, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, -1.0]]))
        model[2].weight.copy_(torch.tensor([[1.0, 1.0, 1.0], [0.0, 2.0, 0.0]]))
    feats, logits = forward_with_features(model, torch.tensor([[2.0, 3.0]]))
    assert head_name(model) == "2"
    assert feats.tolist() == [[2.0, 3.0, 0.0]]  # relu(2 - 3) = 0
    assert logits.tolist() == [[5.0, 6.0]]


@pytest.mark.parametrize("name", ["mlp", "mcmahan_cnn", "fedchill_cnn1", "resnet18", "har_cnn1d"])
def test_registered_models_logits_unchanged(name: str) -> None:
    shape = (32,) if name == "mlp" else (9, 32) if name == "har_cnn1d" else (3, 32, 32)
    torch.manual_seed(0)
    model = build_model(name, shape, 10, {}).eval()
    x = torch.randn(4, *shape)
    feats, logits = forward_with_features(model, x)
    assert torch.equal(logits, model(x))
    assert feats.shape[0] == 4 and feats.dim() == 2
    assert not any(h for m in model.modules() for h in m._forward_pre_hooks.values())  # hook removed


def test_functional_call_and_vmap() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    params = {k: torch.stack([v, 2 * v]) for k, v in model.named_parameters()}
    x = torch.randn(5, 3)

    def one(p: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return forward_with_features(model, x, call=lambda inp: functional_call(model, p, (inp,)))

    feats, logits = torch.func.vmap(one)(params)
    assert feats.shape == (2, 5, 4) and logits.shape == (2, 5, 2)
    assert torch.allclose(logits[1], functional_call(model, {k: v[1] for k, v in params.items()}, (x,)))


def test_no_linear_is_refused() -> None:
    with pytest.raises(NoHeadError):
        head_name(nn.Conv2d(1, 1, 1))
