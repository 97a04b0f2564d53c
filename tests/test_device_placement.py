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
