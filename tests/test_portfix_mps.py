"""``device = "mps"`` was accepted wherever torch saw Apple's Metal backend, then the first client update failed in a
long traceback: chillfl sums losses and metrics in float64 on the device, which Metal lacks. It is refused up front,
in one line on ``device``, before anything trains."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from chillfl.cli import main
from chillfl.errors import ConfigError
from chillfl.experiment import resolve_device


def test_mps_is_refused_even_where_torch_sees_metal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    with pytest.raises(ConfigError) as err:
        resolve_device("mps")
    assert err.value.field == "device" and "float64" in err.value.message and "'cpu'" in err.value.message
    assert resolve_device("cpu") == torch.device("cpu")


def test_a_run_on_mps_ends_with_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    config = tmp_path / "c.toml"
    config.write_text(f'name = "m"\nout_dir = "{tmp_path / "out"}"\ndataset = {{ name = "digits" }}\nmodel = {{ name = "mlp", hidden = [8] }}\n'
                      'federation = { num_clients = 2, rounds = 1 }\n', encoding="utf-8")
    assert main(["run", str(config), "--device", "mps", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("chillfl: error: device: 'mps' is not supported yet")
