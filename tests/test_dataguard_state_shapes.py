"""Saved states that do not fit the model are refused with one line naming the tensor.

``replay.predict`` (``chillfl analyze calibration``, ``aggregation-*``), ``cka.layer_features`` and
``grad_norms.input_gradient_norms`` ran a saved state through ``functional_call`` unchecked: a scalar bias
where the model has a [2] one was broadcast into wrong logits, a missing tensor silently taken from the module.
"""

from __future__ import annotations

import pytest
import torch

from chillfl.analysis.cka import layer_features
from chillfl.analysis.grad_norms import input_gradient_norms
from chillfl.analysis.replay import predict
from chillfl.errors import ConfigError
from test_revbfix_load_run import Watched

X = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, -1.0, 0.5, 2.0]])


def _state(bias: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"fc.weight": torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]]), "fc.bias": bias}


def test_predict_is_the_states_logits_by_hand() -> None:
    logits = predict(Watched(), _state(torch.tensor([0.5, -1.0])), X)
    assert torch.equal(logits, torch.tensor([[1.5, 3.0], [0.5, 1.0]]))  # x[0] + 0.5, x[3] - 1


@pytest.mark.parametrize("bias", [torch.tensor(0.5), torch.zeros(1), torch.zeros(1, 2)])
def test_a_bias_of_another_shape_is_refused_not_broadcast(bias: torch.Tensor) -> None:
    with pytest.raises(ConfigError) as err:
        predict(Watched(), _state(bias), X)
    assert err.value.field == "model"
    assert "\n" not in str(err.value) and f"'fc.bias' is {list(bias.shape)}, the model's is [2]" in str(err.value)


def test_a_missing_or_extra_tensor_is_refused() -> None:
    state = _state(torch.zeros(2))
    with pytest.raises(ConfigError, match="the saved state has no tensor 'fc.bias'"):
        predict(Watched(), {"fc.weight": state["fc.weight"]}, X)  # fc.bias was the module's own, without a word
    with pytest.raises(ConfigError, match="Watched has no tensor 'head.bias'"):
        predict(Watched(), {**state, "head.bias": torch.zeros(2)}, X)


def test_cka_features_and_gradient_norms_refuse_it_too() -> None:
    bad = _state(torch.tensor(0.5))
    model = Watched()
    with pytest.raises(ConfigError, match="'fc.bias' is \\[\\]"):
        layer_features(model, bad, X, ["fc"])
    assert not model.fc._forward_hooks  # refused before its hooks went on (they stayed on the model)
    with pytest.raises(ConfigError, match="'fc.bias' is \\[\\]"):
        input_gradient_norms(Watched(), bad, X, torch.tensor([0, 1]), 1.0)
