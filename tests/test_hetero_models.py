"""Heterogeneous client models: the [model] assignment, its one-line errors, who accepts it, per-architecture records."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_client_models, build_experiment
from chillfl.models.assign import plan_models
from chillfl.models.registry import MODELS
from chillfl.models.spec import ModelSpec
from chillfl.runner import run_experiment

from kd_helpers import BASE, MIXED, check_every_executor


def test_groups_and_list_assign_architectures():
    plan = plan_models(MIXED, 6)
    assert plan.field == "model.groups" and plan.arch_of == (1, 1, 1, 0, 2, 0)
    assert plan.archs[0] == {"name": "mlp", "hidden": [256]} and plan.archs[1] == {"name": "flexchill_cnn"}
    assert [plan.label(i) for i in range(3)] == ["mlp(hidden=[256])", "flexchill_cnn", "mlp(hidden=[32, 256])"]
    plan = plan_models({"name": "mlp", "assign": ["mlp", "flexchill_cnn", "mlp"]}, 3)
    assert plan.arch_of == (0, 1, 0) and plan.field == "model.assign"
    plain = plan_models({"name": "mlp"}, 3)
    assert not plain.heterogeneous and plain.arch_of == (0, 0, 0)
    assert plan_models({"name": "mlp", "groups": [{"clients": "0-1,3", "name": "mcmahan_cnn"}]}, 5).arch_of == (1, 1, 0, 1, 0)


@pytest.mark.parametrize(
    ("table", "field", "words"),
    [
        ({"assign": ["mlp"]}, "model.assign", "1 names for federation.num_clients = 4"),
        ({"assign": "mlp"}, "model.assign", "list of model names"),
        ({"assign": ["mlp"] * 4, "groups": [{"clients": 0, "name": "mlp"}]}, "model.groups", "not both"),
        ({"groups": [{"clients": "0-9", "name": "mlp"}]}, "model.groups[0].clients", "client 4 is out of range"),
        ({"groups": [{"clients": "0-1", "name": "mlp"}, {"clients": [1], "name": "mlp"}]}, "model.groups[1].clients", "already in model.groups[0]"),
        ({"groups": [{"clients": "a-b", "name": "mlp"}]}, "model.groups[0].clients", "ranges like"),
        ({"groups": [{"name": "mlp"}]}, "model.groups[0].clients", "is required"),
        ({"groups": [{"clients": [0]}]}, "model.groups[0].name", "is required"),
        ({"groups": []}, "model.groups", "non-empty"),
    ],
)
def test_bad_assignments_name_their_field(table, field, words):
    with pytest.raises(ConfigError) as err:
        plan_models({"name": "mlp", **table}, 4)
    assert err.value.field == field and words in err.value.message


def _cfg(**tables):
    cfg = load_config(None, {"dataset.name": "digits", "federation.num_clients": 6, "federation.clients_per_round": 2})
    return cfg.with_overrides(tables)


@pytest.mark.parametrize("key", ["assign", "groups"])
def test_parameter_sharing_refuses_heterogeneous_models(key):
    table = {"name": "mlp", "assign": ["mlp", "flexchill_cnn"] * 3} if key == "assign" else MIXED
    with pytest.raises(ConfigError) as err:
        build_experiment(_cfg(model=table))
    assert err.value.field == f"model.{key}" and "models never travel" in err.value.message


def test_unknown_architecture_in_a_group_is_named():
    cfg = _cfg(model={"name": "mlp", "groups": [{"clients": [0], "name": "nope"}]}, prototypes={"method": "fedproto"})
    with pytest.raises(ConfigError) as err:
        build_experiment(cfg)
    assert err.value.field == "model.groups[0].name"  # which group, by its place in the list


def test_cli_prints_one_line_and_exits_2(tmp_path, capsys):
    toml = tmp_path / "bad.toml"
    toml.write_text('[dataset]\nname = "digits"\n[federation]\nnum_clients = 4\nclients_per_round = 2\nrounds = 1\n[model]\nname = "mlp"\nassign = ["mlp", "flexchill_cnn", "mlp", "mlp"]\n')
    assert main(["run", str(toml), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.assign" in err[0]
    assert not (tmp_path / "out").exists()


def test_soft_labels_with_heterogeneous_models_every_executor():
    dsfl = {"method": "dsfl", "public_size": 200, "subset_size": 100, "server_epochs": 1, "distill_batch_size": 32}
    recs = check_every_executor({"model": MIXED, "distillation": dsfl})
    assert recs[-1]["global_acc"] is not None


def test_records_stay_per_client_and_the_summary_counts_parameters_per_architecture():
    cfg = load_config(None, {**BASE, "eval.clients": "all", "checkpoint.client_models": True}).with_overrides({"model": MIXED, "prototypes": {"method": "fedproto"}})
    out = run_experiment(cfg, write=False, progress=False)
    arch = out.summary["architectures"]
    models = build_client_models(build_experiment(cfg))
    assert list(arch) == ["mlp(hidden=[256])", "flexchill_cnn", "mlp(hidden=[32, 256])"]
    assert arch["flexchill_cnn"]["clients"] == [0, 1, 2] and arch["mlp(hidden=[32, 256])"]["clients"] == [4]
    # MLP 64 -> 256 -> 10 on 8x8 digits: 64*256 + 256 + 256*10 + 10 = 19210
    assert arch["mlp(hidden=[256])"]["parameters"] == 19210 == models.parameter_counts()[0]
    # each client keeps its own model of its own architecture
    assert out.client_states and out.model_state is None  # FedProto: no global model
    for cid, state in out.client_states.items():
        own = models.states[models.plan.arch_of[cid]]
        assert {k: v.shape for k, v in state.items()} == {k: v.shape for k, v in own.items()}
    assert set(out.records[-1]["client_train_loss"]) <= {str(c) for c in range(6)}


def test_vectorized_executor_batches_each_architecture_together(monkeypatch):
    """One vmapped batch per architecture and stage: the spec names the architecture, drive() groups by spec."""
    from chillfl.executors.vectorized import VectorizedExecutor

    calls: list[tuple[str, int]] = []
    original = VectorizedExecutor._run_vectorized

    def spy(self, jobs):
        calls.append((type(self.model).__name__ if self.spec.model is None else type(self.spec.model).__name__, len(jobs)))
        assert all(j.spec is None or j.spec.model is None or j.spec.model is self.spec.model for j in jobs)
        return original(self, jobs)

    monkeypatch.setattr(VectorizedExecutor, "_run_vectorized", spy)
    over = {**BASE, "federation.clients_per_round": 6, "federation.rounds": 1, "executor": "vectorized"}
    cfg = load_config(None, over).with_overrides({"model": MIXED, "prototypes": {"method": "fedproto"}})
    run_experiment(cfg, write=False, progress=False)
    # 6 clients, one round: the CNN group (0-2), the default MLP (3, 5) and the two-layer MLP (4), each one batch
    assert sorted(n for _, n in calls) == [1, 2, 3] and len(calls) == 3


@pytest.mark.parametrize("key", ["assign", "groups"])
def test_a_model_passed_from_python_with_per_client_architectures_is_one_line(key):
    """``chillfl.run(module, config)`` replaced ``[model]`` by the module's record and dropped ``[[model.groups]]`` silently:
    every client trained the module, and had the groups been kept, their models would have inherited its frozen names."""
    from torch import nn

    import chillfl

    module = nn.Sequential(nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    module[1].weight.requires_grad_(False)
    table = {"assign": ["mlp"] * 6} if key == "assign" else {"groups": [{"clients": "0-2", "name": "mlp", "hidden": [256]}]}
    config = {"dataset": {"name": "digits"}, "federation": {"num_clients": 6, "clients_per_round": 3, "rounds": 1},
              "distillation": {"method": "dsfl", "public_size": 200, "subset_size": 100}, "model": table}
    with pytest.raises(ConfigError) as err:
        chillfl.run(module, config=config, write=False, progress=False)
    assert err.value.field == f"model.{key}" and "from Python" in err.value.message
    cfg = load_config(None, {"dataset.name": "digits", "federation.num_clients": 6, "distillation.method": "dsfl", "distillation.public_size": 200,
                             "distillation.subset_size": 100})
    with pytest.raises(ConfigError) as err:  # a config recording the module (a saved run's, edited) meets the same line where the run is built
        build_experiment(cfg.with_overrides({"model": {"name": "custom", **table}}), model=module)
    assert err.value.field == f"model.{key}"


class SevenRows(torch.nn.Module):
    """A plugin model whose declared head gives 7 logits, whatever the data's classes."""

    def __init__(self, declared: str = "fc") -> None:
        super().__init__()
        self.declared = declared
        self.body = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 256), torch.nn.ReLU())
        self.fc = torch.nn.Linear(256, 7)

    def head_name(self) -> str:
        return self.declared

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x))


@dataclass(frozen=True)
class NoOptions:
    """The test models' (empty) options."""


@pytest.fixture
def plugin_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(MODELS, "seven_rows", ModelSpec(NoOptions, lambda shape, classes, o, s: SevenRows()))
    monkeypatch.setitem(MODELS, "no_such_head", ModelSpec(NoOptions, lambda shape, classes, o, s: SevenRows("nope")))


SHARING = {"prototypes": {"prototypes": {"method": "fedproto"}},
           "soft labels": {"distillation": {"method": "dsfl", "public_size": 200, "subset_size": 100}}}


@pytest.mark.parametrize("protocol", sorted(SHARING))
@pytest.mark.parametrize(("model", "says"), [("seven_rows", "SevenRows's declared classifier head 'fc' has 7 outputs; the data have 10 classes"),
                                             ("no_such_head", "SevenRows declares its classifier head 'nope', which is not one of its submodules")])
def test_every_groups_model_has_its_head_checked_when_the_run_is_built(plugin_models: None, protocol: str, model: str, says: str) -> None:
    table = {"name": "mlp", "hidden": [256], "groups": [{"clients": "0-1", "name": "mlp", "hidden": [32, 256]}, {"clients": [3], "name": model}]}
    with pytest.raises(ConfigError) as err:
        build_experiment(_cfg(model=table, **SHARING[protocol]))
    assert err.value.field == "model.groups[1]" and err.value.message == says


def test_a_groups_bad_head_is_one_line_and_exit_2(plugin_models: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    toml = tmp_path / "bad.toml"
    toml.write_text('[dataset]\nname = "digits"\n[federation]\nnum_clients = 4\nclients_per_round = 2\nrounds = 1\n[prototypes]\nmethod = "fedproto"\n'
                    '[model]\nname = "mlp"\nhidden = [256]\n[[model.groups]]\nclients = [2]\nname = "seven_rows"\n')
    for extra in ([], ["--dry-run"]):
        assert main(["run", str(toml), *extra, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("chillfl: error: model.groups[0]: SevenRows's declared classifier head 'fc' has 7 outputs")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("protocol", ["prototypes", "distillation"])
def test_each_architecture_is_built_once_a_run(protocol, monkeypatch):
    """The run's head check builds model.groups' other architectures; the protocol (its check and its build) and the
    summary use those, not new copies: one build per architecture (each one's section names it)."""
    built: list[str] = []
    for name in ("mlp", "flexchill_cnn"):
        spec = MODELS[name]

        def counting(shape, num_classes, options, section, _build=spec.build):
            model = _build(shape, num_classes, options, section)
            if not any(p.is_meta for p in model.parameters()):  # not the memory check's sizing on the meta device
                built.append(section)
            return model

        monkeypatch.setitem(MODELS, name, spec._replace(build=counting))
    table = {"method": "fedproto"} if protocol == "prototypes" else {"method": "dsfl", "public_size": 100, "subset_size": 50, "server_epochs": 1}
    cfg = load_config(None, {**BASE, "federation.rounds": 1}).with_overrides({"model": MIXED, protocol: table})
    out = run_experiment(cfg, write=False, progress=False)
    assert list(out.summary["architectures"]) == ["mlp(hidden=[256])", "flexchill_cnn", "mlp(hidden=[32, 256])"]
    assert sorted(built) == ["model", "model.groups[0]", "model.groups[1]"]
