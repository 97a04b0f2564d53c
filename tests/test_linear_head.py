"""Methods that apply the classifier head as ``W z + b`` declare it (``Capabilities.linear_head``); a run refuses them a non-linear head.

FedRoD, FedDBE, FedGen, FedPAC, FedHKD and FedGH compute with the head's ``weight`` and ``bias`` themselves. Under a
head whose forward is not ``nn.Linear``'s (the docs' cosine classifier) their maths would silently differ from the model's
logits, so the run stops before anything is written, with one line on ``model`` naming the method's reason. Methods
that only read the head's input (MOON) or its row count (FedLC, FedRS) still run on such a head.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import chillfl
from chillfl.aggregation.registry import algorithm_options, algorithm_spec, effective_capabilities, registered_algorithms
from chillfl.cli import main
from chillfl.errors import ConfigError
from chillfl.models.parts import is_linear_head
from chillfl.models.registry import MODELS
from chillfl.models.spec import ModelSpec
from chillfl.prototypes.methods import fedgh, fedhkd


class CosineClassifier(nn.Module):
    """The docs' cosine classifier: a weight [classes, features] like nn.Linear's, other logits."""

    def __init__(self, features: int, classes: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(classes, features) * 0.1)
        self.bias = nn.Parameter(torch.zeros(classes))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return 10.0 * F.normalize(z, dim=1) @ F.normalize(self.weight, dim=1).T + self.bias


class CosineLinear(nn.Linear):
    """An nn.Linear subclass with its own forward: the same parameters, other logits."""

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return F.linear(F.normalize(z, dim=1), F.normalize(self.weight, dim=1), self.bias)


class PlainSubclass(nn.Linear):
    """An nn.Linear subclass that keeps nn.Linear's forward: still W z + b."""


class CosineNet(nn.Module):
    def __init__(self, head: type[nn.Module] = CosineClassifier) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU())
        self.classifier = head(16, 10)

    def head_name(self) -> str:
        return "classifier"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.body(x))


@dataclass(frozen=True)
class NoOptions:
    """The registered test model's (empty) options."""


BASE: dict[str, Any] = {"dataset": {"name": "digits"}, "executor": "sequential", "device": "cpu",
                        "federation": {"num_clients": 3, "clients_per_round": 3, "rounds": 1}, "client": {"batch_size": 32}}

LINEAR = {"fedrod": "FedRoD's personal-head loss", "feddbe": "FedDBE's client model folds the PRBM", "fedgen": "FedGen's teacher",
          "fedpac": "FedPAC's classifier collaboration", "fedcp": "FedCP's conditional input sums the personal head's weight"}


def test_a_linear_head_is_an_nn_linear_with_its_forward() -> None:
    assert is_linear_head(nn.Linear(3, 2)) and is_linear_head(PlainSubclass(3, 2))
    assert not is_linear_head(CosineLinear(3, 2)) and not is_linear_head(CosineClassifier(3, 2)) and not is_linear_head(nn.Conv2d(3, 2, 1))


def test_the_bundled_methods_that_apply_the_head_declare_it() -> None:
    declared = {n for n, s in registered_algorithms().items() if s.capabilities.linear_head is not None}
    assert declared == set(LINEAR)
    assert fedhkd.SPEC.capabilities.linear_head is not None and fedgh.SPEC.capabilities.linear_head is not None


@pytest.mark.parametrize("head", [CosineClassifier, CosineLinear])
@pytest.mark.parametrize("method", sorted(LINEAR))
def test_a_method_that_applies_the_head_refuses_a_nonlinear_one_before_writing(method: str, head: type[nn.Module], tmp_path: Path) -> None:
    config = {**BASE, "algorithm": {"name": method}}
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=CosineNet(head), config=config, out_dir=tmp_path, progress=False)
    line = str(err.value)
    assert err.value.field == "model" and "\n" not in line
    assert line.startswith(f"model: {method} reads the classifier head as a linear map ({LINEAR[method]}")
    assert f"CosineNet's head 'classifier' is a {head.__name__}, not an nn.Linear" in line
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("method", ["fedhkd", "fedgh"])
def test_a_prototype_method_that_applies_the_head_refuses_a_nonlinear_one(method: str, tmp_path: Path) -> None:
    config = {**BASE, "prototypes": {"method": method}}
    with pytest.raises(ConfigError, match=rf"^model: {method} reads the classifier head as a linear map \(.*CosineNet's head 'classifier' is a CosineClassifier"):
        chillfl.run(model=CosineNet(), config=config, out_dir=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())


def test_a_wrapper_inherits_its_bases_linear_head() -> None:
    spec = algorithm_spec("pa3fed")
    options = algorithm_options(spec, "pa3fed", {"base": "fedgen"})
    assert effective_capabilities(spec, options).linear_head == registered_algorithms()["fedgen"].capabilities.linear_head
    with pytest.raises(ConfigError, match=r"^model: pa3fed reads the classifier head as a linear map \(FedGen's teacher"):
        chillfl.run(model=CosineNet(), config={**BASE, "algorithm": {"name": "pa3fed", "base": "fedgen"}}, write=False, progress=False)


@pytest.mark.parametrize("method", ["moon", "fedlc", "fedrs", "fedper"])
def test_methods_that_only_read_the_heads_input_or_rows_run_on_a_nonlinear_head(method: str) -> None:
    result = chillfl.run(model=CosineNet(), config={**BASE, "algorithm": {"name": method}}, write=False, progress=False)
    assert len(result.records) == 1


def test_the_cli_and_its_dry_run_refuse_it_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(MODELS, "cosine_net", ModelSpec(NoOptions, lambda shape, classes, o, s: CosineNet()))
    for extra in ([], ["--dry-run"]):
        code = main(["run", *extra, "dataset.name=digits", "model.name=cosine_net", "algorithm.name=fedrod", "federation.rounds=1",
                     "federation.num_clients=2", "federation.clients_per_round=2", f"out_dir={tmp_path}"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and err[-1].startswith("chillfl: error: model: fedrod reads the classifier head as a linear map (FedRoD's")
        assert sum(line.startswith("chillfl: error:") for line in err) == 1 and not any("Traceback" in line for line in err)
    assert not any(tmp_path.iterdir())


class AppliesTheHead(chillfl.extend.FedAvg):
    """A user's rule passed as an instance from Python, declaring what a named one would."""

    capabilities = chillfl.extend.Capabilities(linear_head="my teacher's CE(W z + b, y)", plain_sgd="my control variate")

    def __init__(self) -> None:
        super().__init__("samples")


def test_an_aggregator_passed_from_python_is_held_to_its_declared_capabilities(tmp_path: Path) -> None:
    # Its class's own capabilities are read as a named class's are: its linear-head need, then its plain-SGD limit.
    with pytest.raises(ConfigError, match=r"^model: AppliesTheHead reads the classifier head as a linear map \(my teacher's CE\(W z \+ b, y\)\); CosineNet's"):
        chillfl.run(model=CosineNet(), config=BASE, aggregator=AppliesTheHead(), out_dir=tmp_path, progress=False)
    with pytest.raises(ConfigError, match=r"^client.optimizer: my control variate assumes SGD steps, so AppliesTheHead needs optimizer = 'sgd'"):
        chillfl.run(model=CosineNet(nn.Linear), config={**BASE, "client": {"batch_size": 32, "optimizer": "adam"}}, aggregator=AppliesTheHead(),
                    out_dir=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())
    result = chillfl.run(model=CosineNet(nn.Linear), config=BASE, aggregator=AppliesTheHead(), write=False, progress=False)
    assert len(result.records) == 1
