"""chillfl.load_run: a finished run folder's model, test rows and client rows, as the run scored them (docs/python-api.md
"Reusing the outputs"). Tiny runs: registry digits, the registry MLP, 4 clients, 2 rounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIG = {"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "partition": {"name": "dirichlet", "alpha": 0.3},
          "federation": {"num_clients": 4, "clients_per_round": 4, "rounds": 2}, "log": {"per_client": True}}


def _summary(folder: Path) -> dict[str, float]:
    return json.loads((folder / "summary.json").read_text(encoding="utf-8"))


def test_the_documented_snippet_reproduces_the_recorded_accuracy_with_a_validation_split(tmp_path: Path) -> None:
    result = chillfl.run(config=CONFIG, out_dir=tmp_path, progress=False, **{"eval.validation": 0.2, "checkpoint.client_models": True,
                                                                             "algorithm.name": "ditto"})
    assert result.folder is not None
    folder = result.folder
    # the snippet of docs/python-api.md, "Reusing the outputs"
    run = chillfl.load_run(folder)
    x, y = run.data.test()                      # the test rows the run scored (validation rows left out)
    with torch.no_grad():
        acc = (run.model(x).argmax(1) == y).sum().item() / len(y)
    summary = _summary(folder)
    assert acc == summary["final_global_acc"]
    assert run.evaluate(x, y)[0] == summary["final_global_acc"]
    assert run.evaluate(x, y)[1] == pytest.approx(summary["final_global_loss"], rel=1e-6)
    validation = run.data.validation()
    assert validation is not None and len(validation[1]) + len(y) == 359  # digits' test set, split
    assert sorted(run.client_states) == [0, 1, 2, 3]
    assert isinstance(run.config, chillfl.RunConfig) and run.folder == folder
    assert not run.model.training


def test_a_run_on_a_module_from_python_asks_for_it_and_loads_into_it(tmp_path: Path) -> None:
    from sklearn.datasets import load_digits

    xs, ys = load_digits(return_X_y=True)
    x, y = torch.tensor(xs / 16.0, dtype=torch.float32), torch.tensor(ys)
    data = chillfl.TensorData(x[:1400], y[:1400], x[1400:], y[1400:], num_classes=10)

    def net() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))

    config = {k: v for k, v in CONFIG.items() if k not in ("dataset", "model")}
    result = chillfl.run(model=net(), data=data, config=config, out_dir=tmp_path, progress=False)
    assert result.folder is not None
    with pytest.raises(ConfigError) as refused:
        chillfl.load_run(result.folder)
    assert refused.value.field == "model" and "model=" in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        chillfl.load_run(result.folder, model=net())
    assert refused.value.field == "data" and "data=" in str(refused.value)
    run = chillfl.load_run(result.folder, model=net(), data=data)
    tx, ty = run.data.test()
    assert run.evaluate(tx, ty)[0] == _summary(result.folder)["final_global_acc"]
    assert run.client_states == {}


def test_an_unfinished_or_missing_folder_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        chillfl.load_run(tmp_path / "nothing")
    assert refused.value.field == "folder"
