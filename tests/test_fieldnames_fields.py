"""Each refusal names the field the user actually set.

A checkpointed part's ``state_dict()`` that the format cannot hold named ``algorithm.name`` / ``temperature.policy``
even for an aggregator or a policy passed from Python (``aggregator`` / ``policy``, as their other refusals say); a
distillation phase's base loss named ``algorithm.name`` (:meth:`~chillfl.training.local.LocalSpec.phase` dropped the
method's field, which the soft-label run did not hold either), not ``distillation.method``; and a batch term refused
by a method with a forward of its own named ``objective.terms``, not the offending term's ``objective.terms[i]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import pytest
import torch

from plugin_modules import plugin_module
from test_qa_plugin_returns import BASE

import chillfl
from chillfl.cli import main
from chillfl.errors import ConfigError
from chillfl.extend import ConstantTemperature, FedAvg
from chillfl.training.local import LocalSpec, refuse_representation_readers

UNSTORABLE = "its state_dict() cannot be checkpointed: state key 1 at protocol.{part} is not a string"

PARTS = '''
from dataclasses import dataclass

from chillfl.extend import ConstantTemperature, FedAvg, PrototypeHooks, PrototypeSpec, SoftLabelMethod, SoftLabelSpec


class IntKeyRule(FedAvg):
    def state_dict(self):
        return {1: 2}


class IntKeyPolicy(ConstantTemperature):
    def state_dict(self):
        return {1: 2}


def context_loss(logits, y, temperature):
    return logits.sum()


context_loss.uses_context = True  # declared, but its signature takes no context


@dataclass(frozen=True)
class Options:
    k: int = 1


class ContextLossMethod(SoftLabelMethod):
    def distill_loss(self):
        return context_loss


BAD_DISTILL_LOSS = SoftLabelSpec("bad_distill_loss", Options, ContextLossMethod)


class ContextLossHooks(PrototypeHooks):
    def loss(self, head):
        return context_loss


BAD_PROTOTYPE_LOSS = PrototypeSpec("bad_prototype_loss", Options, ContextLossHooks)
'''


class IntKeyRule(FedAvg):
    """A state the checkpoint cannot hold: an int key."""

    def state_dict(self) -> dict[Any, Any]:
        return {1: 2}


class IntKeyPolicy(ConstantTemperature):
    """The same, a policy's."""

    def state_dict(self) -> dict[Any, Any]:
        return {1: 2}


CHECKPOINTED: dict[str, Any] = {**BASE, "checkpoint": {"every": 1}}


@pytest.mark.parametrize("passed,field,part", [({"aggregator": IntKeyRule()}, "aggregator", "aggregator"),
                                               ({"policy": IntKeyPolicy(1.0)}, "policy", "policy")])
def test_an_unstorable_state_of_a_part_passed_from_python_names_the_argument(tmp_path: Path, passed: dict[str, Any], field: str, part: str) -> None:
    err = pytest.raises(ConfigError, chillfl.run, config=CHECKPOINTED, out_dir=tmp_path, progress=False, **passed)
    assert err.value.field == field and err.value.message.startswith(UNSTORABLE.format(part=part))


def test_by_import_path_an_unstorable_state_names_the_config_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with plugin_module(tmp_path, monkeypatch, "fieldnames_parts", PARTS):
        for table, field, part in [({"algorithm": {"name": "fieldnames_parts:IntKeyRule"}}, "algorithm.name", "aggregator"),
                                   ({"temperature": {"policy": "fieldnames_parts:IntKeyPolicy"}}, "temperature.policy", "policy")]:
            err = pytest.raises(ConfigError, chillfl.run, config={**CHECKPOINTED, **table}, out_dir=tmp_path / part, progress=False)
            assert err.value.field == field and err.value.message.startswith(UNSTORABLE.format(part=part)), (table, err.value)


def _context_loss(logits: torch.Tensor, y: torch.Tensor, temperature: float) -> torch.Tensor:
    return logits.sum()


_context_loss.uses_context = True  # type: ignore[attr-defined]


@pytest.mark.parametrize("field", ["distillation.method", "aggregator"])
def test_a_phase_keeps_the_method_field_for_its_base_loss(field: str) -> None:
    spec = LocalSpec(1, 8, method_field=field, policy_field="policy")
    err = pytest.raises(ConfigError, spec.phase, 1, 8, _context_loss)
    assert err.value.field == field and "the base loss _context_loss is called as loss(logits, y, temperature, context=...)" in err.value.message
    kept = spec.phase(1, 8)
    assert (kept.method_field, kept.policy_field, kept.terms, kept.term_fields) == (field, "policy", (), ())


def test_a_distillation_methods_bad_distill_loss_is_refused_on_distillation_method(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = {**BASE, "distillation": {"method": "fieldnames_parts:BAD_DISTILL_LOSS", "public_size": 60, "subset_size": 20}}
    with plugin_module(tmp_path, monkeypatch, "fieldnames_parts", PARTS):
        err = pytest.raises(ConfigError, chillfl.run, config=config, write=False, progress=False)
    assert err.value.field == "distillation.method" and "the base loss context_loss is called as loss(logits, y, temperature, context=...)" in err.value.message


def test_a_prototype_methods_bad_loss_is_refused_on_prototypes_method(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A [prototypes] method's loss is its base loss: a refusal of it names ``prototypes.method``, not ``algorithm.name``."""
    config = {**BASE, "prototypes": {"method": "fieldnames_parts:BAD_PROTOTYPE_LOSS"}}
    with plugin_module(tmp_path, monkeypatch, "fieldnames_parts", PARTS):
        err = pytest.raises(ConfigError, chillfl.run, config=config, write=False, progress=False)
    assert err.value.field == "prototypes.method" and "the base loss context_loss is called as loss(logits, y, temperature, context=...)" in err.value.message


class Proximal:
    """A parameter term (reads no batch)."""

    reads = ("anchor",)

    def __call__(self, params: Mapping[str, torch.Tensor], context: Any) -> torch.Tensor:
        return torch.zeros(())


class Decorr:
    """A batch term."""

    per_batch = True
    captures = ()
    reads = ()

    def __call__(self, params: Mapping[str, torch.Tensor], context: Any, step: Any) -> torch.Tensor:
        return torch.zeros(())


@pytest.mark.parametrize("fields,field", [(("objective.terms[0]", "objective.terms[1]", "objective.terms[2]"), "objective.terms[1]"),
                                          (("terms[0]", "terms[1]", "terms[2]"), "terms[1]"),
                                          ((), "objective.terms")])  # no field known for it: the table's
def test_a_refused_batch_term_is_named_by_its_index(fields: tuple[str, ...], field: str) -> None:
    spec = LocalSpec(1, 8, terms=(Proximal(), Decorr(), Decorr()), term_fields=fields)
    err = pytest.raises(ConfigError, refuse_representation_readers, spec, "its forward is its own")
    assert err.value.field == field and err.value.message == "its forward is its own; a batch term (one that reads the batch's representation) does not compose with it"


def test_a_refused_batch_term_from_the_config_is_one_line_on_its_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run.toml"
    run.write_text(f'out_dir = "{tmp_path / "results"}"\ndevice = "cpu"\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\n'
                   '[algorithm]\nname = "fml"\n[objective]\nterms = ["proximal", {name = "decorr"}]\n', encoding="utf-8")
    assert main(["run", str(run), "federation.rounds=1", "federation.num_clients=4", "federation.clients_per_round=2"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "chillfl: error: objective.terms[1]: FML's forward is the pair's stacked logits; a batch term (one that reads the batch's representation) does not compose with it"]
    assert not any((tmp_path / "results").glob("*"))
