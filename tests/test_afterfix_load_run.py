"""chillfl.load_run: a finished run folder's model, test rows and client rows, as the run scored them (docs/python-api.md
"Reusing the outputs"). Tiny runs: registry digits, the registry MLP, 4 clients, 2 rounds."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")

DOC = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"

CONFIG = {"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "partition": {"name": "dirichlet", "alpha": 0.3},
          "federation": {"num_clients": 4, "clients_per_round": 4, "rounds": 2}, "log": {"per_client": True}}


def _summary(folder: Path) -> dict[str, float]:
    return json.loads((folder / "summary.json").read_text(encoding="utf-8"))


def _doc_example(name: str) -> str:
    """The python block right after ``<!-- example: NAME -->`` in docs/python-api.md."""
    found = re.search(rf"<!-- example: {re.escape(name)} -->\n```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.S | re.M)
    assert found is not None, f"no example {name!r} in {DOC}"
    return found.group(1)


def test_the_documented_snippet_reproduces_the_recorded_accuracy_with_a_validation_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(_doc_example("load-run"), f"{DOC}:load-run", "exec"), namespace)  # asserts the recorded accuracy itself
    saved, summary = namespace["saved"], _summary(namespace["folder"])
    assert namespace["acc"] == summary["final_global_acc"]
    x, y = saved.data.test()
    assert saved.evaluate(x, y)[1] == pytest.approx(summary["final_global_loss"], rel=1e-6)
    validation = saved.data.validation()
    assert validation is not None and (len(validation[1]), len(y)) == (72, 287)  # digits' 359 test rows, as the page says
    assert isinstance(saved.config, chillfl.RunConfig) and saved.folder == namespace["folder"]
    assert not saved.model.training and saved.client_states == {}


def test_a_saved_client_model_scores_its_local_accuracy_where_the_docs_say_so(tmp_path: Path) -> None:
    """docs/usage.md, ``client_models``: Ditto's saved v_k and FedPer's under local_eval = "averaged" are what local_acc
    measured; FedPer's under the default "trained" is not (the client's head on the averaged body)."""
    def client_accs(name: str, **options: Any) -> tuple[list[float], list[float]]:
        config = {**CONFIG, "algorithm": {"name": name, **options}}
        result = chillfl.run(config=config, out_dir=tmp_path, progress=False, **{"checkpoint.client_models": True})
        assert result.folder is not None
        saved = chillfl.load_run(result.folder)
        last = [json.loads(line) for line in (result.folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines()][-1]
        mine = [saved.evaluate(*saved.data.client_eval(k), state)[0] for k, state in sorted(saved.client_states.items())]
        return mine, [last["local_accs"][str(k)] for k in sorted(saved.client_states)]

    mine, recorded = client_accs("ditto")
    assert mine == pytest.approx(recorded, abs=1e-12)
    mine, recorded = client_accs("fedper", local_eval="averaged")
    assert mine == pytest.approx(recorded, abs=1e-12)
    mine, recorded = client_accs("fedper")
    assert mine != pytest.approx(recorded, abs=1e-12)


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
