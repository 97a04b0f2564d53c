"""The Python API (``chillfl.run``): the documented example as it stands, any method on a user's module, honest configs.

Runs are tiny (sklearn digits as tensors, a 2-layer MLP, 3-5 clients, 2-5
rounds) so the file stays well under a minute on two cores; nothing is downloaded.
"""

from __future__ import annotations

import copy
import csv
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import chillfl
from chillfl.cli import main
from chillfl.errors import ConfigError
from chillfl.resolve import algorithm_table, model_table, partition_table, temperature_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


class TinyMLP(nn.Module):
    """A user's own model: a class the registry has never heard of."""

    def __init__(self, inputs: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(inputs, 24), nn.ReLU(), nn.Linear(24, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


@pytest.fixture(scope="module")
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)


@pytest.fixture
def data(digits: tuple[torch.Tensor, torch.Tensor]) -> chillfl.TensorData:
    x, y = digits
    return chillfl.TensorData(x[:1400], y[:1400], x[1400:], y[1400:], num_classes=10, name="digits-tensors")


def registries() -> dict[str, list[str]]:
    """Every registry's keys, read from the dicts themselves (not via the name functions)."""
    from chillfl.aggregation.registry import ALGORITHMS
    from chillfl.data import DATASETS, PARTITIONERS
    from chillfl.settings.distillation import METHODS
    from chillfl.models import MODELS
    from chillfl.temperature import POLICIES

    return {
        "algorithms": sorted(ALGORITHMS),
        "datasets": sorted(DATASETS),
        "partitioners": sorted(PARTITIONERS),
        "methods": sorted(METHODS),
        "models": sorted(MODELS),
        "policies": sorted(POLICIES),
    }


@pytest.fixture(autouse=True)
def registries_untouched():
    """No test in this file may leave a registry changed: the API passes a user's model through."""
    before = registries()
    yield
    assert registries() == before


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


SMALL = {"federation": {"num_clients": 4, "rounds": 2}, "client": {"lr": 0.05, "batch_size": 32}, "eval": {"client_split_size": 20}}


# ---------------------------------------------------------------- the documented example


def test_doc_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    example, csv_example = python_blocks(DOC.read_text(encoding="utf-8"))[:2]
    ns: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(example, str(DOC), "exec"), ns)
    result, model, trained = ns["result"], ns["model"], ns["trained"]

    assert isinstance(trained, nn.Sequential) and trained is not model
    assert not same(weights(trained), weights(model)), "the returned model must hold trained weights"
    assert result.summary["final_global_acc"] > 0.5  # chance is 0.1
    assert len(result.records) == 5
    assert result.folder == Path("results") / "run" and (tmp_path / result.folder / "model.safetensors").is_file()

    from chillfl.analysis.replay import load_model_state

    saved = load_model_state(tmp_path / result.folder)
    assert same({k: saved[k] for k in weights(trained)}, weights(trained))

    config = chillfl.load_config(tmp_path / result.folder / "config.toml")
    assert config.model == {"name": "custom", "class": "torch.nn.modules.container.Sequential", "parameters": 64 * 32 + 32 + 32 * 10 + 10, "dtype": "float32"}
    assert config.dataset == {"name": "custom", "source": "tensors", "num_classes": 10, "input_shape": [64], "train_size": 1400, "test_size": 397}
    written = {k: v for k, v in algorithm_table({"name": "scaffold"}).items() if v is not None}  # every option, resolved; None has no TOML form
    assert config.algorithm == written and config.temperature == temperature_table({"policy": "fixed", "value": 0.25})
    assert result.config.model == config.model

    exec(compile(csv_example, str(DOC), "exec"), ns)  # the callback example, after the first
    with open(tmp_path / "rounds.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["round"]) for r in rows] == [1, 2, 3, 4, 5]


def test_import_chillfl_does_not_import_torch() -> None:
    code = "import sys, chillfl; assert 'torch' not in sys.modules, 'torch'; print(chillfl.__version__); chillfl.run; assert 'torch' in sys.modules"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == chillfl.__version__
    assert {"run", "TensorData", "Result", "ConfigError", "__version__"} <= set(dir(chillfl))
    with pytest.raises(AttributeError):
        chillfl.no_such_name  # noqa: B018


def test_entry_modules_import_torch_with_the_gc_paused_and_restore_it() -> None:
    # a spy on gc.disable/enable: torch must come in between them, and the collector must be back on after
    code = (
        "import gc, sys\n"
        "frozen = gc.get_freeze_count()\n"  # the interpreter's own: 0 on 3.11, hundreds on 3.12+
        "log = []\n"
        "disable, enable = gc.disable, gc.enable\n"
        "gc.disable = lambda: (log.append(('off', 'torch' in sys.modules)), disable())[1]\n"
        "gc.enable = lambda: (log.append(('on', 'torch' in sys.modules)), enable())[1]\n"
        "import chillfl.runner\n"
        "assert log[:2] == [('off', False), ('on', True)], log\n"
        "assert gc.isenabled() and gc.get_freeze_count() == frozen\n"  # a library import freezes nothing (the caller's cycles)
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    # torch imported first: chillfl leaves the collector alone
    code = "import gc, sys, torch\ngc.disable = None\nimport chillfl.api\nassert gc.isenabled()\nprint('ok')\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


# ---------------------------------------------------------------- any method on a user's module


@pytest.mark.parametrize(
    "algorithm",
    [{"name": "fedavg"}, {"name": "fedprox", "mu": 0.01}, {"name": "scaffold"}, {"name": "pa3fed", "base": "fedprox", "base_options": {"mu": 0.01}}],
    ids=["fedavg", "fedprox", "scaffold", "pa3fed"],
)
def test_any_algorithm_trains_the_users_model(algorithm: dict[str, Any], data: chillfl.TensorData) -> None:
    torch.manual_seed(0)
    model = TinyMLP()
    initial = weights(model)
    result = chillfl.run(model=model, data=data, config={**SMALL, "algorithm": algorithm}, write=False, progress=False)
    assert same(weights(model), initial), "the caller's module is never trained"
    assert type(result.model) is TinyMLP and not same(weights(result.model), initial)
    assert same(weights(result.model), {k: v for k, v in result.state.items()})
    assert [r["round"] for r in result.records] == [1, 2] and result.folder is None
    assert result.summary["final_global_acc"] > 0.2
    assert result.config.algorithm == algorithm_table(algorithm) and result.config.model["class"] == f"{__name__}.TinyMLP"


def test_soft_label_method_returns_the_server_model(digits: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = digits
    images = chillfl.TensorData(x[:1400].reshape(-1, 1, 8, 8), y[:1400], x[1400:].reshape(-1, 1, 8, 8), y[1400:])
    torch.manual_seed(1)
    model = TinyMLP()
    initial = weights(model)
    config = {
        **SMALL,
        "distillation": {"method": "scarlet", "public_size": 120, "subset_size": 40, "server_epochs": 1, "distill_batch_size": 32},
    }
    result = chillfl.run(model=model, data=images, config=config, write=False, progress=False)
    assert type(result.model) is TinyMLP and not same(weights(result.model), initial)
    assert len(result.records) == 2 and "bytes_cumulative" in result.records[-1]
    assert result.config.dataset["input_shape"] == [1, 8, 8] and result.config.dataset["num_classes"] == 10  # inferred

    alone = chillfl.run(model=model, data=images, config={**SMALL, "distillation": {"method": "individual"}}, write=False, progress=False)
    assert alone.model is None  # no server model to return


def test_callbacks_see_every_round(data: chillfl.TensorData) -> None:
    seen: list[int] = []
    ended: list[Any] = []

    class Recorder:
        def on_round(self, record: dict[str, Any]) -> None:
            seen.append(record["round"])

        def on_end(self, output: Any) -> None:
            ended.append(output)

    rounds: list[int] = []
    cfg = {**SMALL, "federation": {"num_clients": 3, "rounds": 3}}
    result = chillfl.run(model=TinyMLP(), data=data, config=cfg, callbacks=[Recorder(), lambda r: rounds.append(r["round"])], write=False, progress=False)
    assert seen == rounds == [1, 2, 3]
    assert len(ended) == 1 and ended[0].records == result.records
    with pytest.raises(ConfigError, match=r"^callbacks\[0\]"):
        chillfl.run(model=TinyMLP(), data=data, config=cfg, callbacks=[42], write=False, progress=False)


def test_registered_model_on_user_data_and_overrides(data: chillfl.TensorData) -> None:
    """Without ``model``, the config's registered model is built for the data; overrides sit on top of ``config``."""
    result = chillfl.run(
        data=data,
        config={**SMALL, "model": {"name": "mlp"}, "partition": {"name": "dirichlet", "alpha": 0.3}},
        write=False,
        progress=False,
        seed=3,
        **{"client.lr": 0.1, "partition.name": "iid"},
    )
    assert result.config.model == model_table({"name": "mlp"}) and result.config.dataset["name"] == "custom"
    assert result.config.seed == 3 and result.config.client.lr == 0.1
    assert result.config.partition == {"name": "iid"}  # a new partitioner drops the old one's alpha
    from chillfl.models.mlp import MLP

    assert isinstance(result.model, MLP)


def test_config_forms_and_overrides(tmp_path: Path) -> None:
    """A dict, a TOML file, a bundled experiment and a RunConfig all take the same overrides."""
    path = tmp_path / "exp.toml"
    path.write_text('[partition]\nname = "dirichlet"\nalpha = 0.3\n\n[client]\nlr = 0.2\n', encoding="utf-8")
    from_file = chillfl.make_config(path, {"partition.name": "iid", "client.epochs": 2})
    assert from_file.name == "exp" and from_file.partition == {"name": "iid"} and (from_file.client.lr, from_file.client.epochs) == (0.2, 2)
    seeded = chillfl.make_config({}, {"partition.alpha": 0.1})  # no [partition]: the default partitioner, new alpha
    assert seeded.partition == partition_table({"name": "dirichlet", "alpha": 0.1})
    assert chillfl.make_config(seeded, {"seed": 4}).seed == 4
    assert chillfl.make_config("demo").name == "demo"  # a bundled experiment, as on the command line
    with pytest.raises(ConfigError) as exc:
        chillfl.make_config(42)  # type: ignore[arg-type]
    assert exc.value.field == "config"
    with pytest.raises(ConfigError) as exc:
        chillfl.make_config({"partition": "iid"}, {"partition.alpha": 0.1})
    assert exc.value.field.startswith("partition")


# ---------------------------------------------------------------- honest configs


def test_saved_custom_config_refuses_to_run_from_the_cli(tmp_path: Path, data: chillfl.TensorData, capsys: pytest.CaptureFixture[str]) -> None:
    torch.manual_seed(2)
    model = TinyMLP()
    first = chillfl.run(model=copy.deepcopy(model), data=data, config={**SMALL, "name": "mine"}, out_dir=tmp_path, progress=False)
    saved = first.folder / "config.toml"
    text = saved.read_text(encoding="utf-8")
    assert 'name = "custom"' in text and f'class = "{__name__}.TinyMLP"' in text and 'source = "digits-tensors"' in text

    capsys.readouterr()
    assert main(["run", str(saved), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("chillfl: error: model.name: 'custom'") and "Traceback" not in err and err.count("\n") == 1
    assert "chillfl.run(model=...)" in err and "flexchill_cnn" in err
    with pytest.raises(ConfigError) as exc:
        chillfl.run(data=data, config=saved, write=False, progress=False)  # the data again, but no model
    assert exc.value.field == "model.name"
    with pytest.raises(ConfigError) as exc:
        chillfl.run(model=model, config=saved, write=False, progress=False)  # the model again, but no data
    assert exc.value.field == "dataset.name"

    again = chillfl.run(model=model, data=data, config=saved, write=False, progress=False)  # both again: the same run
    assert again.records == first.records
    assert same(weights(again.model), weights(first.model))


@pytest.mark.parametrize(
    "change, field",
    [
        ({"y_train": torch.full((1400,), 10)}, "data.y_train"),  # a label out of range
        ({"y_test": -torch.ones(397, dtype=torch.int64)}, "data.y_test"),
        ({"y_train": torch.zeros(1399, dtype=torch.int64)}, "data.y_train"),  # one label short
        ({"y_train": torch.zeros(1400)}, "data.y_train"),  # float labels
        ({"y_train": torch.zeros(1400, 1, dtype=torch.int64)}, "data.y_train"),
        ({"x_test": torch.zeros(397, 63)}, "data.x_test"),  # another sample shape
        ({"x_train": torch.zeros(1400)}, "data.x_train"),  # no feature axis
        ({"x_train": torch.full((1400, 64), float("nan"))}, "data.x_train"),
        ({"x_train": [[0.0] * 64] * 1400}, "data.x_train"),  # a list, not a tensor
        ({"num_classes": 1}, "data.num_classes"),
        ({"num_classes": 12}, "data.num_classes"),  # the model outputs 10 logits
    ],
)
def test_bad_user_input_names_its_field(change: dict[str, Any], field: str, data: chillfl.TensorData, tmp_path: Path) -> None:
    fields = {k: getattr(data, k) for k in ("x_train", "y_train", "x_test", "y_test", "num_classes")}
    bad = chillfl.TensorData(**{**fields, **change})
    with pytest.raises(ConfigError) as exc:
        chillfl.run(model=TinyMLP(), data=bad, config=SMALL, out_dir=tmp_path / "out", progress=False)
    assert exc.value.field == field, exc.value
    assert not (tmp_path / "out").exists(), "nothing is written before the inputs are checked"


def test_a_model_that_does_not_fit_the_data(data: chillfl.TensorData, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        chillfl.run(model=TinyMLP(inputs=32), data=data, config=SMALL, out_dir=tmp_path, progress=False)
    assert exc.value.field == "model" and "fails on a batch of inputs of shape (2, 64)" in exc.value.message
    with pytest.raises(ConfigError) as exc:
        chillfl.run(model="TinyMLP", data=data, config=SMALL, progress=False)  # type: ignore[arg-type]
    assert exc.value.field == "model"
    with pytest.raises(ConfigError) as exc:
        chillfl.run(model=TinyMLP(), data=(1, 2), config=SMALL, progress=False)  # type: ignore[arg-type]
    assert exc.value.field == "data"
    with pytest.raises(ConfigError) as exc:
        chillfl.run(model=TinyMLP(), data=data, config={**SMALL, "client": {"lrr": 0.1}}, progress=False)
    assert exc.value.field == "client.lrr"
    (tmp_path / "file").write_text("", encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        chillfl.run(model=TinyMLP(), data=data, config=SMALL, out_dir=tmp_path / "file", progress=False)
    assert exc.value.field == "out_dir"
    (tmp_path / "file").unlink()
    assert list(tmp_path.iterdir()) == []


def test_available_lists_every_registry() -> None:
    names = chillfl.available()
    assert {"fedavg", "scaffold", "pa3fed"} <= set(names["algorithms"]) and "scarlet" in names["distillation_methods"]
    assert names["models"] == registries()["models"]
    assert {"fedproto", "fedhkd"} <= set(names["prototype_methods"]) and "proximal" in names["loss_terms"]


def test_available_is_what_chillfl_list_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """``available()`` (its docstring: "what chillfl list prints") lacked the attacks and the privacy mechanisms."""
    from chillfl.cli import main

    assert main(["list"]) == 0
    listed = {}
    for line in re.sub(r"\n +", " ", capsys.readouterr().out).splitlines():  # wrapped lines joined
        title, _, names = line.partition(": ")
        if not title.startswith("experiments"):
            listed[title.replace(" ", "_")] = names.split(", ")
    assert chillfl.available() == listed
    assert {"label_flip", "scaling"} <= set(chillfl.available()["attacks"]) and "dp-fedavg" in chillfl.available()["privacy_mechanisms"]
