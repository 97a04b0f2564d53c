"""A model named in the config with the wrong logit count is blamed on ``model.name``: its classes come from
``[dataset]``, and ``data.num_classes`` is no config key (it stays the field of ``chillfl.run(data=TensorData(...))``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from plugin_modules import plugin_module
from test_plugin_mistakes import TINY

SOURCE = '''
from torch import nn


class Three(nn.Module):
    def __init__(self, input_shape, num_classes, options=None, section=None):
        super().__init__()
        self.fc = nn.Linear(64, 3)

    def forward(self, x):
        return self.fc(x.flatten(1))
'''


def test_a_named_model_with_wrong_logits_names_model_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.toml").write_text(f'name = "p"\nout_dir = "{(tmp_path / "out").as_posix()}"\n')
    with plugin_module(tmp_path, monkeypatch, "fieldfix_logits", SOURCE):
        assert main(["run", str(tmp_path / "c.toml"), "-q", *TINY, "model.name=fieldfix_logits:Three", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["chillfl: error: model.name: outputs 3 logits per sample; the data has 10 classes"]
