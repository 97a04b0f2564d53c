"""Device placement without a GPU: ``precision = "tf32"`` is refused off CUDA (one line, exit 2)."""

from __future__ import annotations

import pytest

from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.runner import run_experiment


def test_tf32_is_refused_on_the_cpu() -> None:
    """TF32 is a tensor-core mode of NVIDIA GPUs: a CPU run would be fp32 under another name."""
    cfg = load_config(None, {"dataset.name": "digits", "model.name": "mlp", "device": "cpu", "precision": "tf32", "federation.rounds": 1})
    with pytest.raises(ConfigError) as err:
        run_experiment(cfg, write=False, progress=False)
    assert err.value.field == "precision" and "\n" not in str(err.value)


def test_tf32_on_the_cpu_exits_2_with_one_line(tmp_path, capsys) -> None:
    from chillfl.cli import main

    code = main(["run", "-q", "--device", "cpu", "--out", str(tmp_path), "demo", "dataset.name=digits", "precision=tf32", "federation.rounds=1"])
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert code == 2 and len(errors) == 1 and "precision" in errors[0] and "Traceback" not in errors[0]
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_strict_fallbacks_turn_a_vmap_failure_into_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """CHILLFL_STRICT_VECTORIZED=1 (the suite's default): no warning-and-rerun that could hide a real exception."""
    import torch
    from torch import nn

    from chillfl.executors.sequential import ClientJob
    from chillfl.engine.predict import FallbackRefused
    from chillfl.executors.vectorized import VectorizedExecutor
    from chillfl.training.local import LocalSpec, model_state

    monkeypatch.setenv("CHILLFL_STRICT_VECTORIZED", "1")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 3))  # a random op: vmap refuses it
    g = torch.Generator().manual_seed(1)
    jobs = [ClientJob(c, model_state(model), torch.randn(6, 4, generator=g), torch.randint(0, 3, (6,), generator=g), 0.1, 1.0, {}, c) for c in range(2)]
    ex = VectorizedExecutor(model, LocalSpec(epochs=1, batch_size=3), accelerator=True)  # the vmapped path, as on a GPU
    with pytest.raises(FallbackRefused, match="randomness|random"):
        ex.run(jobs)
