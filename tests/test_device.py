"""Device choice on any machine: names are validated, a missing GPU is one clear error, ``auto`` resolves."""

from __future__ import annotations

import pytest
import torch

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import resolve_device


@pytest.mark.parametrize("name", ["gpu", "cuda:", "cuda:x", "CPU", ""])
def test_bad_device_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, {"device": name})
    assert info.value.field == "device"


def test_auto_resolves_to_what_is_there() -> None:
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'out_dir = "{tmp_path / "out"}"\n')
    assert main(["run", str(cfg), "-q", "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: device: 'cuda' needs a CUDA GPU")
    assert not (tmp_path / "out").exists()


def test_the_saved_config_records_the_device_that_ran(tmp_path) -> None:
    from chillfl.runner import run_experiment

    over = {"out_dir": str(tmp_path), "federation.num_clients": 2, "federation.rounds": 1, "model.name": "mlp", "device": "auto"}
    out = run_experiment(load_config(None, over), progress=False)
    assert out.folder is not None
    assert f'device = "{resolve_device("auto")}"' in (out.folder / "config.toml").read_text()


def test_the_protocol_is_built_and_the_run_finished_under_the_runs_device_settings(monkeypatch) -> None:
    """FedMD trains its server model while the protocol is built; on CUDA that must already run with deterministic
    algorithms and after CUBLAS_WORKSPACE_CONFIG is set (cuBLAS reads it once, at its first call), as the rounds do."""
    import contextlib

    import chillfl.runner as runner
    from chillfl.config import load_config

    active: list[bool] = [False]
    seen: dict[str, bool] = {}

    @contextlib.contextmanager
    def settings(config, device):
        active[0] = True
        try:
            yield
        finally:
            active[0] = False

    def spy(name, real):
        def wrapped(*args, **kwargs):
            seen[name] = active[0]
            return real(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(runner, "device_settings", settings)
    monkeypatch.setattr(runner, "build_protocol", spy("build_protocol", runner.build_protocol))
    monkeypatch.setattr(runner, "finish_run", spy("finish", runner.finish_run))
    over = {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 3, "federation.rounds": 1, "eval.clients": "none",
            "distillation.method": "fedmd", "distillation.public_size": 60, "distillation.subset_size": 20, "distillation.transfer_epochs": 1}
    runner.run_experiment(load_config(None, over), write=False, progress=False)
    assert seen == {"build_protocol": True, "finish": True} and not active[0]
