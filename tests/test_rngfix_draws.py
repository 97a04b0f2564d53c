"""Models whose forward draws from torch's global generator are forked and seeded: fractional max-pooling (in training
and in eval mode alike) and a user's subclass of chillfl's block overriding a helper its inherited forward calls."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from chillfl.engine.predict import outputs
from chillfl.models.resnet_cifar import BasicBlock
from chillfl.models.mlp import MLP
from chillfl.training.local import LocalSpec, conv_outputs_per_sample, draws_global, evaluate, train_client


def frac_model(three: bool = False) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if three:
            return nn.Sequential(nn.Conv3d(1, 2, 3, padding=1), nn.FractionalMaxPool3d(2, output_size=3), nn.Flatten(), nn.Linear(2 * 27, 4))
        return nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.FractionalMaxPool2d(2, output_size=5), nn.Flatten(), nn.Linear(2 * 25, 4))


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(24, 1, 8, 8, generator=g), torch.randint(0, 4, (24,), generator=g)


def test_fractional_max_pooling_draws_in_training_and_eval() -> None:
    from chillfl.training.local import model_draws  # new with the fix: the other tests fail on the old code by their asserts

    for three in (False, True):
        model = frac_model(three)
        assert draws_global(model, LocalSpec(1, 8))
        assert model_draws(model, training=False)
    dropout = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.RReLU())
    assert model_draws(dropout) and not model_draws(dropout, training=False)  # the identity in eval mode: evaluation is not held
    assert not draws_global(nn.Sequential(nn.Conv2d(1, 2, 3), nn.MaxPool2d(2), nn.Flatten()), LocalSpec(1, 8))


def test_training_with_fractional_max_pooling_is_the_callers_seed_free() -> None:
    model, (x, y) = frac_model(), data()
    results = []
    for caller in (1, 2):
        torch.manual_seed(caller)
        before = torch.get_rng_state()
        out = train_client(model, model.state_dict(), x, y, spec=LocalSpec(epochs=1, batch_size=8), lr=0.1, temperature=1.0, context={},
                           generator=torch.Generator().manual_seed(3))
        assert torch.equal(torch.get_rng_state(), before)
        results.append(torch.cat([v.flatten() for v in out.params.values()]))
    assert torch.equal(results[0], results[1])


def test_evaluation_with_fractional_max_pooling_keeps_the_callers_generator() -> None:
    model, (x, y) = frac_model(), data()
    seen = []
    for caller in (1, 2):
        torch.manual_seed(caller)
        before = torch.get_rng_state()
        metrics = evaluate(model, model.state_dict(), x, y, batch_size=8)
        probs = outputs(model, model.state_dict(), x, batch_size=8)
        assert conv_outputs_per_sample(model, x) == 2 * 64
        assert torch.equal(torch.get_rng_state(), before)
        seen.append((metrics, probs))
    assert seen[0][0] == seen[1][0] and torch.equal(seen[0][1], seen[1][1])


class JitteredShortcut(BasicBlock):
    """A user's subclass of chillfl's block: its own shortcut draws, the forward it calls it from is chillfl's."""

    def _pad_shortcut(self, x: torch.Tensor, cout: int) -> torch.Tensor:
        return F.dropout(super()._pad_shortcut(x, cout), 0.5, self.training)


def test_a_subclass_of_chillfls_model_is_the_users_code() -> None:
    block = JitteredShortcut(2, 4, 2, "pad")
    assert draws_global(block, LocalSpec(1, 8))
    assert not draws_global(BasicBlock(2, 4, 2, "pad"), LocalSpec(1, 8))
    assert not draws_global(MLP(4, (8,), 3), LocalSpec(1, 8))
    x, y = torch.randn(8, 2, 4, 4, generator=torch.Generator().manual_seed(0)), torch.zeros(8, dtype=torch.int64)
    head = nn.Sequential(block, nn.Flatten(), nn.Linear(16, 2))
    results = []
    for caller in (1, 2):
        torch.manual_seed(caller)
        out = train_client(head, head.state_dict(), x, y, spec=LocalSpec(epochs=1, batch_size=4), lr=0.1, temperature=1.0, context={},
                           generator=torch.Generator().manual_seed(3))
        results.append(torch.cat([v.flatten() for v in out.params.values()]))
    assert torch.equal(results[0], results[1])
