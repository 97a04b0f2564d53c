"""A bf16 run inside the caller's ``torch.autocast``: the run turns the caller's autocast off and enters its own, and
torch empties autocast's cast cache only when the outermost autocast exits, so with the cache on every step of a
client reused the bf16 copies of its weights cast at its first step (their in-place updates unseen)."""

from __future__ import annotations

import torch
from torch import nn

from chillfl.training.local import LocalSpec, autocast_for, run_precision


def _outputs_after_in_place_updates() -> list[float]:
    layer = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        layer.weight.fill_(1.0)
    x = torch.full((1, 1), 4.0)
    spec = LocalSpec(epochs=1, batch_size=1, precision="bf16")
    out = []
    for _ in range(3):
        with autocast_for(spec, torch.device("cpu")):
            out.append(float(layer(x)))
        with torch.no_grad():
            layer.weight.add_(1.0)  # as the optimiser's in-place step does
    return out


def test_each_step_sees_the_updated_weights_inside_a_callers_autocast() -> None:
    assert _outputs_after_in_place_updates() == [4.0, 8.0, 12.0]
    with torch.autocast("cpu", dtype=torch.bfloat16), run_precision("bf16", torch.device("cpu")):
        assert _outputs_after_in_place_updates() == [4.0, 8.0, 12.0]
