"""``precision = "bf16"`` on a model whose trainable weights are not float32, and half weights under ``fp32``.

torch's autocast leaves float64 layers in float64: a ``model.double()`` under bf16 trained in float64 with its logits
(and so its loss and gradients) rounded to float32 by an unconditional ``.float()``, recorded as ``precision = "bf16"``.
A half model (``.bfloat16()``, ``.half()``) under ``fp32`` trained in 16 bits throughout, with nothing said.
"""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

import chillfl
import chillfl.training.local as local
from chillfl.errors import ConfigError
from chillfl.training.local import half_to_float, half_weights_note, resolve_compute

CPU = torch.device("cpu")


def _mlp() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


def _data() -> chillfl.TensorData:
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 6, generator=gen), torch.randint(0, 3, (40,), generator=gen)
    return chillfl.TensorData(x[:30], y[:30], x[30:], y[30:], num_classes=3)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_bf16_refuses_a_model_whose_trainable_weights_are_not_float32(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "bf16_supported", lambda device: True)  # this CPU's kernels are not the question
    with pytest.raises(ConfigError) as err:
        resolve_compute("auto", "bf16", _mlp().to(dtype), CPU)
    assert err.value.field == "precision" and str(dtype).removeprefix("torch.") in err.value.message
    assert "\n" not in str(err.value)
    assert resolve_compute("auto", "fp32", _mlp().to(dtype), CPU) == ("contiguous", "fp32")  # fp32 runs the model as it is


def test_bf16_takes_a_float32_model_with_other_buffers_or_frozen_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "bf16_supported", lambda device: True)
    model = _mlp()
    model.register_buffer("counts", torch.zeros(3, dtype=torch.float64))  # not a trained weight
    frozen = model[2].double().requires_grad_(False)  # a frozen layer: the run keeps it as given
    assert frozen.weight.dtype == torch.float64
    assert resolve_compute("auto", "bf16", model, CPU) == ("contiguous", "bf16")


def test_a_float64_run_under_bf16_is_refused_in_one_line_naming_precision() -> None:
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=_mlp().double(), data=_data(), config={"precision": "bf16", "device": "cpu", "federation": {"num_clients": 2, "rounds": 1}},
                    write=False, progress=False)
    assert err.value.field == "precision"  # on a CPU without bf16 kernels: the same field, the other reason


def test_only_half_logits_are_raised_to_float32() -> None:
    t = torch.ones(2, dtype=torch.float64)
    assert half_to_float(t) is t
    assert half_to_float(torch.ones(2, dtype=torch.bfloat16)).dtype == torch.float32
    assert half_to_float(torch.ones(2, dtype=torch.float16)).dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_weights_under_fp32_are_a_note_naming_their_dtype(dtype: torch.dtype) -> None:
    note = half_weights_note(_mlp().to(dtype), "fp32")
    assert note is not None and note.startswith("note: ") and str(dtype).removeprefix("torch.") in note and "\n" not in note
    assert half_weights_note(_mlp(), "fp32") is None and half_weights_note(_mlp().double(), "fp32") is None


def test_a_bfloat16_model_run_under_fp32_says_the_note(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        result = chillfl.run(model=_mlp().bfloat16(), data=_data(), config={"device": "cpu", "executor": "sequential",
                             "federation": {"num_clients": 2, "rounds": 1}}, write=False, progress=False)
    assert result.model is not None and {p.dtype for p in result.model.parameters()} == {torch.bfloat16}  # trained as given
    assert "the model's trainable weights are bfloat16" in caplog.text
