"""The memory check's meta-device build (issue 26): no lazily imported torch internals inside the device context.

``build_model`` first counts the model's size on the meta device (``meta_size``). On the
meta device some ops (``relu`` in the dummy forward that sizes a CNN's head, ``normal_`` in
``kaiming_normal_``) run torch's Python decompositions, which import ``torch._dynamo`` on
first use. Inside ``torch.device("meta")`` that import ran with meta as the default device
and, on torch 2.11 and intermittently on 2.13, failed half-way:
``AttributeError: partially initialized module 'torch._dynamo' has no attribute 'disable'``.
Each check runs in a fresh interpreter, where nothing has imported ``torch._dynamo`` yet.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _fresh(code: str, timeout: float = 240) -> str:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_meta_build_of_every_model_imports_no_lazy_torch_internals() -> None:
    """The root cause, deterministically: sizing every registered model leaves torch._dynamo (and sympy) unimported, and the size is exact."""
    out = _fresh(
        """
        import sys
        import torch
        from chillfl.models.registry import MODELS, build_model, meta_size, model_names
        had_sympy = "sympy" in sys.modules  # an older torch imports it with torch itself
        shapes = {"har_cnn1d": (9, 128), "femnist_dnn": (1, 28, 28), "mlp": (64,), "char_lstm": (80,)}
        for name in model_names():
            shape = shapes.get(name, (3, 32, 32))
            counted = meta_size(name, shape, 10, MODELS[name].options())
            assert "torch._dynamo" not in sys.modules, f"{name}: the meta build imported torch._dynamo"
            assert had_sympy or "sympy" not in sys.modules, f"{name}: the meta build imported sympy"  # torch._refs' empty_like: 0.4 s of a run's start
            real = build_model(name, shape, 10)
            n = sum(t.numel() for t in [*real.parameters(), *real.buffers()])
            assert counted == n, (name, counted, n)
        print("checked", len(model_names()))
        """
    )
    assert out.startswith("checked ")


@pytest.mark.parametrize("attempt", range(3))
def test_run_on_cifar_shaped_tensors_with_a_registered_cnn(attempt: int) -> None:
    """The issue's reproduction: chillfl.run on TensorData of CIFAR-shaped rows with mcmahan_cnn, in a fresh process."""
    out = _fresh(
        f"""
        import torch.profiler  # the issue's script imported it first
        import torch
        import chillfl
        g = torch.Generator().manual_seed({attempt})
        x, y = torch.rand(400, 3, 32, 32, generator=g), torch.randint(0, 10, (400,), generator=g)
        data = chillfl.TensorData(x[:300], y[:300], x[300:], y[300:], num_classes=10)
        config = {{"model": {{"name": "mcmahan_cnn"}}, "federation": {{"num_clients": 3, "clients_per_round": 2, "rounds": 1}},
                  "client": {{"epochs": 1, "batch_size": 50}}}}
        result = chillfl.run(data=data, config=config, progress=False, write=False)
        print("rounds", len(result.records))
        """
    )
    assert out.strip().endswith("rounds 1")


def test_shapes_only_skips_value_initialisation_and_keeps_shape_changes() -> None:
    import torch

    from chillfl.models.registry import _ShapesOnly

    with torch.device("meta"), _ShapesOnly():
        t = torch.zeros(3)
        assert t.normal_() is t and t.uniform_(-1, 1) is t  # values only: skipped
        t.unsqueeze_(0)
        w = torch.nn.Linear(4, 2)
    assert t.shape == (1, 3) and t.is_meta
    assert w.weight.shape == (2, 4) and w.weight.is_meta and w.weight.requires_grad
