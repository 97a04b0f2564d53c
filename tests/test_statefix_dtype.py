"""A user's model whose dtype is not torch's default trains: the probe that sizes its convolutions is of the model's dtype."""

import torch
from torch import nn

import chillfl


def _data(dtype: torch.dtype = torch.float32) -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(200, 1, 8, 8, generator=g, dtype=dtype), torch.randint(0, 4, (200,), generator=g)
    return chillfl.TensorData(x[:160], y[:160], x[160:], y[160:], num_classes=4)


def _conv() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(144, 4))


CONFIG = {"federation": {"num_clients": 4, "rounds": 1}}


def test_float32_conv_model_under_float64_default() -> None:
    model, data = _conv(), _data()
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = chillfl.run(model=model, data=data, config=CONFIG, write=False, progress=False)
    finally:
        torch.set_default_dtype(before)
    assert len(out.records) == 1
    assert {v.dtype for v in out.state.values() if v.is_floating_point()} == {torch.float32}


def test_float64_conv_model_under_float32_default() -> None:
    out = chillfl.run(model=_conv().double(), data=_data(torch.float64), config=CONFIG, write=False, progress=False)
    assert len(out.records) == 1
