"""Small contracts a mutant of mut102 broke with every test passing (T1, S1, S3): ``[model] dtype`` records a frozen
layer's dtype too (resume and ``load_run`` hold the whole module to it); ``instance_seed`` refuses a bool and a float."""

from __future__ import annotations

import pytest
from torch import nn

from chillfl.seeds import instance_seed
from chillfl.training.local import parameter_dtypes


def test_a_frozen_float64_layer_is_recorded_beside_the_trainable_float32() -> None:
    frozen = nn.Linear(2, 2).double().requires_grad_(False)
    assert parameter_dtypes(nn.Sequential(frozen, nn.Linear(2, 2))) == "float32, float64"


@pytest.mark.parametrize("seed", [True, 3.0, 3.5], ids=["bool", "integral float", "float"])
def test_instance_seed_refuses_a_bool_and_a_float(seed: object) -> None:
    with pytest.raises(TypeError, match="a seed is an int"):
        instance_seed(seed)  # type: ignore[arg-type]
