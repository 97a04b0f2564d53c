"""A model declares its classifier head (``head_name()``); only a model that declares none gets the last ``nn.Linear``, with a warning.

The head is what MOON, the prototype family, FedRoD, FedDBE, the projection head and CKA read the
representation from. The old rule (the last registered ``nn.Linear``) silently picked an auxiliary layer
registered after the classifier; a declaration cannot be wrong that way, and a bad one is a ConfigError.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import chillfl
from chillfl.aggregation.apfl import Pair
from chillfl.aggregation.base import personal_model
from chillfl.aggregation.fedper import FedPerOptions, fedper_server, head_keys
from chillfl.aggregation.fedrod import FedRoD
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.extend import DeclaresHead
from chillfl.models.parts import forward_with_features, head_name, head_size, last_linear
from chillfl.models.registry import MODELS, build_model
from chillfl.once import said_once
from chillfl.prototypes.spec import Head
from chillfl.protocols.prototypes import prototype_parts
from chillfl.training.local import LocalSpec
from test_nbfix_head_notes import head_notes
from test_perfedavg import client_reply, close

SHAPES: dict[str, tuple[int, ...]] = {"char_lstm": (80,), "har_cnn1d": (9, 128), "mlp": (64,), "femnist_dnn": (784,)}
"""Inputs each registered model accepts (images (3, 32, 32) for the rest)."""


class AuxAfterHead(nn.Module):
    """A body, the classifier, then an auxiliary ``nn.Linear`` registered after it (reading the input, not z)."""

    def __init__(self, inputs: int = 1, hidden: int = 1, classes: int = 2, bias: bool = False) -> None:
        super().__init__()
        self.body = nn.Linear(inputs, hidden, bias=False)
        self.classifier = nn.Linear(hidden, classes, bias=bias)
        self.aux = nn.Linear(inputs, classes, bias=False)

    def head_name(self) -> str:
        return "classifier"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        return self.classifier(self.body(x)) + 0.0 * self.aux(x)  # the auxiliary output takes no part in the logits


class Undeclared(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class AlsoUndeclared(Undeclared):
    pass


class Declares(nn.Module):
    """Declares whatever name it is given, to test the checks on a declaration."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 8))
        self.conv = nn.Conv2d(8, 10, 1)
        self.fc = nn.Linear(8, 10)

    def head_name(self) -> str:
        return self.name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x))


def registered(name: str, projection: int = 0) -> nn.Module:
    return build_model(name, SHAPES.get(name, (3, 32, 32)), 10, {"projection_dim": projection}, seed=0)


@pytest.mark.parametrize("projection", [0, 8])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_bundled_model_declares_the_head_the_last_linear_rule_found(name: str, projection: int) -> None:
    model = registered(name, projection)
    assert isinstance(model, DeclaresHead)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a declared head: no fallback, no warning
        assert head_name(model) == last_linear(model)
    assert head_size(model).classes == 10


def test_a_declared_head_that_is_not_the_last_linear_is_the_head() -> None:
    model = AuxAfterHead(inputs=5, hidden=3, classes=2)
    assert last_linear(model) == "aux" and head_name(model) == "classifier"
    assert head_size(model) == (2, 3)
    x = torch.randn(4, 5)
    features, logits = forward_with_features(model, x)
    assert torch.equal(features, model.body(x)) and torch.equal(logits, model(x))
    assert head_name(Pair(model)) == "w.classifier"  # the declaration survives wrapping


def test_fedrod_splits_the_declared_head() -> None:
    # The hand-computed step of test_fedrod (a = 1, G = (1, 0), lr 0.6), with an auxiliary layer after the classifier:
    # G is the declared classifier, and P is added to it, not to the auxiliary layer.
    model = AuxAfterHead()
    with torch.no_grad():
        model.body.weight.fill_(1.0)
        model.classifier.weight.copy_(torch.tensor([[1.0], [0.0]]))
        model.aux.weight.fill_(0.5)
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    x, y = torch.ones(3, 1), torch.tensor([0, 0, 1])
    fedrod = FedRoD(model)
    assert fedrod.head == "classifier"
    half = fedrod.client_half()
    reply = client_reply(half, model, LocalSpec(epochs=1, batch_size=8), start, lr=0.6, x=x, y=y, x_eval=x, y_eval=y,
                         state={"fedrod.p.weight": torch.zeros(2, 1)})
    close(reply.uplink.params["classifier.weight"], 0.893217, 0.106783, atol=1e-5)
    close(reply.state["fedrod.p.weight"], -0.0386351, 0.0386351, atol=1e-6)
    saved = personal_model(half, reply.state, reply.uplink.params)
    assert saved is not None
    close(saved["classifier.weight"], 0.854582, 0.145418, atol=1e-5)  # G + P
    assert torch.equal(saved["aux.weight"], reply.uplink.params["aux.weight"])


def test_fedproto_reads_the_declared_head(tmp_path: Path) -> None:
    config = load_config(None, {"dataset.name": "digits", "model.name": "custom", "prototypes": {"method": "fedproto"},
                                "federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 1}, "out_dir": str(tmp_path)})
    exp = build_experiment(config, model=AuxAfterHead(inputs=64, hidden=12, classes=10, bias=True))
    parts = prototype_parts(exp)
    assert parts.heads == (Head("classifier.weight", "classifier.bias"),)
    assert parts.proto_dim == 12  # the classifier's input, not the auxiliary layer's (64)


def test_an_undeclared_model_warns_once_per_class_naming_the_module_picked() -> None:
    with said_once(), head_notes() as messages:  # one call's scope: each message said once in it
        assert head_name(Undeclared()) == "fc"
        assert head_name(Undeclared()) == "fc"
        forward_with_features(Undeclared(), torch.randn(2, 4))
        assert head_name(AlsoUndeclared()) == "fc"
    assert len(messages) == 2
    assert messages[0].startswith(f"{__name__}.Undeclared declares no classifier head; chillfl uses its last nn.Linear, 'fc'")
    assert "head_name()" in messages[0] and "DeclaresHead" in messages[0]
    assert messages[1].startswith(f"{__name__}.AlsoUndeclared declares no classifier head")


@pytest.mark.parametrize(
    ("name", "says"),
    [("nope", "'nope', which is not one of its submodules"), ("body", "'body', a Sequential whose weight (none)"),
     ("conv", "'conv', a Conv2d whose weight ([10, 8, 1, 1]) is not [num_classes, features]"), ("", "must return the dotted name")],
)
def test_a_bad_declaration_is_a_config_error_on_model(name: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        head_name(Declares(name))
    assert err.value.field == "model" and says in err.value.message and "\n" not in str(err.value)


def test_a_run_refuses_a_bad_declaration_before_writing(tmp_path: Path) -> None:
    config = {"dataset": {"name": "digits"}, "executor": "sequential", "device": "cpu", "federation": {"num_clients": 2, "rounds": 1}}
    with pytest.raises(ConfigError, match=r"^model: Declares declares its classifier head 'nope'"):
        chillfl.run(model=Declares("nope"), config=config, out_dir=tmp_path, progress=False)
    small = Declares("fc")
    small.fc = nn.Linear(8, 7)
    with pytest.raises(ConfigError, match=r"^model: Declares's declared classifier head 'fc' has 7 outputs; the data have 10 classes"):
        chillfl.run(model=small, config=config, out_dir=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())


def old_head_keys(model: nn.Module, layers: int) -> list[str]:
    """The split FedPer-style methods made before heads were declared: the last ``layers`` parameterised modules."""
    owners = [(n, m) for n, m in model.named_modules() if any(True for _ in m.parameters(recurse=False))]
    return [f"{n}.{k}" if n else k for n, m in owners[-layers:] for k, _ in (*m.named_parameters(recurse=False), *m.named_buffers(recurse=False))]


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_fedper_style_splits_of_bundled_models_are_unchanged(name: str, layers: int) -> None:
    model = registered(name)
    owners = sum(1 for m in model.modules() if any(True for _ in m.parameters(recurse=False)))
    if owners <= layers:  # e.g. mlp's one hidden layer and its head: nothing left to share
        with pytest.raises(ConfigError, match="leaves no body before it"):
            head_keys(model, layers)
        return
    assert head_keys(model, layers) == old_head_keys(model, layers)


def test_fedper_keeps_the_declared_head_local_not_the_auxiliary_layer() -> None:
    model = AuxAfterHead(inputs=5, hidden=3, classes=2, bias=True)
    assert head_keys(model, 1) == ["classifier.weight", "classifier.bias"]
    assert head_keys(model, 2) == ["body.weight", "classifier.weight", "classifier.bias"]
    keys, _ = fedper_server(model, FedPerOptions())
    assert keys == ["classifier.weight", "classifier.bias"]  # aux.weight is averaged with the body
    model.extra = nn.Linear(5, 2)  # four parameterised modules, but only one before the head
    with pytest.raises(ConfigError, match=r"algorithm.head_layers: AuxAfterHead.s declared head 'classifier' has 1 parameterised module\(s\) before it; a head of 3 needs 2"):
        head_keys(model, 3)


def test_fedper_on_an_undeclared_model_warns_naming_the_modules_kept() -> None:
    with head_notes() as messages:
        assert head_keys(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)), 1) == ["1.weight", "1.bias"]
    assert len(messages) == 1 and messages[0].startswith("torch.nn.modules.container.Sequential declares no classifier head; "
                                                          "chillfl keeps its last 1 parameterised module(s), ['1'], as its head")


@pytest.mark.parametrize(("algorithm", "field"), [("fedper", "head_layers"), ("fedrep", "head_layers"), ("fedbabu", "head_layers"),
                                                  ("lg_fedavg", "global_layers"), ("pfedsim", "head_layers")])
def test_a_head_that_leaves_no_body_is_one_line_naming_the_option(algorithm: str, field: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # mlp (one hidden layer) has two parameterised modules: a head of 2 leaves nothing to share
    code = main(["run", "dataset.name=digits", "model.name=mlp", f"algorithm.name={algorithm}", f"algorithm.{field}=2", "federation.rounds=1",
                 "federation.num_clients=2", "federation.clients_per_round=2", f"out_dir={tmp_path}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith(f"chillfl: error: algorithm.{field}: MLP has 2 parameterised modules; a head of its last 2 leaves no body before it")
    assert not any("Traceback" in line for line in err)
    assert not any(tmp_path.iterdir())


def test_a_one_by_one_conv_head_is_refused_with_the_linear_to_put_in_its_place(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        head_name(Declares("conv"))
    line = str(err.value)
    assert err.value.field == "model" and "\n" not in line
    assert "a 1x1 convolution" in line and "nn.Flatten() and an nn.Linear(8, 10)" in line and "conv.weight.flatten(1)" in line
    config = {"dataset": {"name": "digits"}, "executor": "sequential", "device": "cpu", "federation": {"num_clients": 2, "rounds": 1}}
    with pytest.raises(ConfigError, match=r"^model: Declares declares its classifier head 'conv', a Conv2d .* nn.Linear\(8, 10\)"):
        chillfl.run(model=Declares("conv"), config=config, out_dir=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())


class UndeclaredNet(nn.Module):
    """Digits in, a body and a classifier; no head_name(): chillfl guesses its last nn.Linear, 'fc'."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU())
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x))


def undeclared_warnings(algorithm: str, rounds: int, epochs: int, **extra: Any) -> int:
    """How many 'declares no classifier head' notes a run says."""
    config = {"dataset": {"name": "digits"}, "executor": "sequential", "device": "cpu", "federation": {"num_clients": 3, "clients_per_round": 3, "rounds": rounds},
              "client": {"batch_size": 16, "epochs": epochs}, "algorithm": {"name": algorithm}, **extra}
    with head_notes() as notes:
        chillfl.run(model=UndeclaredNet(), config=config, write=False, progress=False)
    return sum("UndeclaredNet declares no classifier head" in note for note in notes)


@pytest.mark.parametrize("algorithm", ["moon", "fedphp"])
def test_an_undeclared_model_warns_when_the_run_is_built_not_at_every_batch(algorithm: str) -> None:
    once = undeclared_warnings(algorithm, rounds=1, epochs=1)
    assert once == 1  # the run's own lookups (the method's build, the objective's) say it once a call
    assert undeclared_warnings(algorithm, rounds=2, epochs=2) == once  # more rounds, steps and client trainings: no more warnings


def test_an_objective_term_on_the_representation_warns_once_when_the_run_is_built() -> None:
    decorr = {"objective": {"terms": [{"name": "decorr", "beta": 0.3}]}}
    assert undeclared_warnings("fedavg", rounds=1, epochs=1, **decorr) == 1  # no method looks the head up: the run's build does, once
    assert undeclared_warnings("fedavg", rounds=2, epochs=2, **decorr) == 1


def prototype_warnings(rounds: int, method: str = "fedproto") -> int:
    config = {"dataset": {"name": "digits"}, "executor": "sequential", "device": "cpu", "federation": {"num_clients": 2, "clients_per_round": 2, "rounds": rounds},
              "client": {"batch_size": 16}, "prototypes": {"method": method}}
    with head_notes() as notes:
        chillfl.run(model=UndeclaredNet(), config=config, write=False, progress=False)
    return sum("UndeclaredNet declares no classifier head" in note for note in notes)


@pytest.mark.parametrize("method", ["fedproto", "fedhkd"])  # fedhkd: its linear-head check looks the head up too
def test_a_prototype_run_warns_once_when_it_is_built_not_at_every_lookup_batch_or_evaluation(method: str) -> None:
    assert prototype_warnings(1, method) == 1  # the head resolved once per architecture, by the check; the protocol's build does not warn again
    assert prototype_warnings(3, method) == 1
