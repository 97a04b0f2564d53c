"""``read_number`` returns a number or a 0-d tensor, and refuses the rest as its siblings do (it returned a string or a vector as is)."""

from __future__ import annotations

import re

import pytest
import torch

from chillfl.extend import read_number


@pytest.mark.parametrize("value", [0.5, 3, torch.tensor(0.25)])
def test_numbers_come_back_unchanged(value):
    assert read_number({"mu": value}, "mu") is value


@pytest.mark.parametrize(
    ("value", "said"),
    [("s", "str"), (torch.tensor([0.1, 0.2]), "shape (2,)"), ({"w": torch.zeros(1)}, "a table"), ([0.1], "list"), (True, "bool")],
)
def test_anything_else_is_a_type_error_naming_the_key(value, said):
    with pytest.raises(TypeError, match=rf"context\['mu'\] must be a number or a 0-d tensor, got .*{re.escape(said)}"):
        read_number({"mu": value}, "mu")


def test_a_batched_number_under_vmap_is_read_as_a_0d_tensor():
    # the vectorised executor stacks one number per client and vmaps: each client sees its own 0-d tensor
    out = torch.func.vmap(lambda mu: read_number({"mu": mu}, "mu") * 2)(torch.tensor([1.0, 2.0]))
    assert out.tolist() == [2.0, 4.0]
