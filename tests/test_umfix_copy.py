"""A user's model that copy.deepcopy cannot copy: one ConfigError on ``model``, not a torch traceback."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError


def test_old_weight_norm_is_refused_on_model_with_the_parametrization_named() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's deprecation of the old API
        model = nn.Sequential(nn.utils.weight_norm(nn.Linear(4, 3)))
    x = torch.randn(12, 4)
    y = torch.arange(12) % 3
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=model, data=chillfl.TensorData(x, y, x, y), write=False, progress=False,
                    config={"federation": {"num_clients": 2, "rounds": 1}})
    assert err.value.field == "model"
    assert "'0'" in err.value.message and "torch.nn.utils.parametrizations.weight_norm" in err.value.message
