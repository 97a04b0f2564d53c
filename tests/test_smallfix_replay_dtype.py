"""``load_run`` refuses a module whose parameters' dtypes are not the run's, and said how to fix it with
``.to(torch.<the first recorded dtype>)``: for a run recorded with mixed dtypes (``float32, float64``, a float64 head)
that made the module all float32, which it refused again (rev102c #5). The ``.to`` advice is given only for one
dtype; for mixed dtypes it says to build the module as the run did."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from chillfl.errors import ConfigError


class MixedHead(torch.nn.Module):
    """A float32 body with a float64 head: the run records ``dtype = "float32, float64"``."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(6, 4)
        self.b = torch.nn.Linear(4, 3).double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)).double()).float()


def _finished(tmp_path: Any, model: torch.nn.Module) -> Any:
    import chillfl

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(80, 6, generator=g), torch.arange(80) % 3
    data = chillfl.TensorData(x[:60], y[:60], x[60:], y[60:], num_classes=3)
    torch.manual_seed(0)
    done = chillfl.run(model, data, {"federation": {"num_clients": 2, "rounds": 1}}, out_dir=tmp_path, progress=False)
    return done, data


def _refusal(folder: Any, model: torch.nn.Module, data: Any) -> str:
    import chillfl

    with pytest.raises(ConfigError) as err:
        chillfl.load_run(folder, model, data)
    assert err.value.field == "model" and "\n" not in err.value.message
    return err.value.message


def test_a_mixed_dtype_run_is_not_told_to_cast_its_module_to_one_dtype(tmp_path: Any) -> None:
    import chillfl

    done, data = _finished(tmp_path, MixedHead())
    assert done.config.model["dtype"] == "float32, float64"
    said = _refusal(done.folder, MixedHead().float(), data)
    assert ".to(" not in said and "trained in float32, float64" in said
    assert "build it as the run did (parameters of float32, float64)" in said
    assert chillfl.load_run(done.folder, MixedHead(), data).model is not None  # built as the run did: taken


def test_a_single_dtype_run_still_gets_the_to_advice_and_it_works(tmp_path: Any) -> None:
    import chillfl

    done, data = _finished(tmp_path, torch.nn.Linear(6, 3))
    said = _refusal(done.folder, torch.nn.Linear(6, 3).double(), data)
    assert "(.to(torch.float32))" in said
    assert chillfl.load_run(done.folder, torch.nn.Linear(6, 3).double().to(torch.float32), data).model is not None  # the advice, followed
