"""A loss term's error in training (:class:`TermError`, :class:`ContextError`) names the config field that put the term in the run.

They said ``terms: ...`` and ``context: ...``, fields of no config: a term of ``[objective] terms`` is now named as
``objective.terms`` (``objective.terms[1]`` among several, as its option errors are), one passed to
``chillfl.run(terms=[...])`` as ``terms[0]``, a method's own term as ``algorithm.name``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError
from chillfl.extend import FedAvg
from chillfl.training.local import LocalSpec
from chillfl.training.terms import ContextError, TermError, apply_term, check_reads

MODULE = '''
import torch
from dataclasses import dataclass

from chillfl.extend import AlgorithmSpec, FedAvg


class Vector:
    """Returns a vector: a forgotten ``.sum()``."""

    reads = ()

    def __call__(self, params, context):
        return torch.zeros(3)


class Missing:
    """Reads a key nothing sends."""

    reads = ("apifix_nothing_sends_this",)

    def __call__(self, params, context):
        return torch.zeros(())


@dataclass(frozen=True)
class NoOptions:
    pass


WITH_VECTOR = AlgorithmSpec(NoOptions, lambda options, context: (FedAvg(), [Vector()]), "FedAvg with a term that returns a vector")
'''

CONFIG: dict[str, Any] = {"federation": {"num_clients": 3, "rounds": 1, "clients_per_round": 2}, "eval": {"clients": "none"}}


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import importlib
    import sys

    (tmp_path / "apifix_term_parts.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("apifix_term_parts")
    sys.modules.pop("apifix_term_parts", None)


def _run(config: dict[str, Any], **kw: Any) -> ConfigError:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(30, 4, generator=g), torch.arange(30) % 3
    with pytest.raises(ConfigError) as info:
        chillfl.run(nn.Linear(4, 3), chillfl.TensorData(x, y, x, y, num_classes=3), {**CONFIG, **config}, progress=False, write=False, **kw)
    assert "\n" not in str(info.value)
    return info.value


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
def test_an_objective_term_among_several_is_named_by_its_entry(user: Any, executor: str) -> None:
    err = _run({"executor": executor, "objective": {"terms": ["proximal", "apifix_term_parts:Vector"]}})
    assert isinstance(err, TermError) and err.field == "objective.terms[1]", str(err)
    assert err.message.startswith("Vector returned a tensor of shape (3,); a loss term returns a scalar"), str(err)


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
def test_a_missing_context_key_names_the_objective_term(user: Any, executor: str) -> None:
    err = _run({"executor": executor, "objective": {"terms": ["apifix_term_parts:Missing"]}})
    assert isinstance(err, ContextError) and err.field == "objective.terms[0]", str(err)
    assert err.message.startswith("Missing reads context key(s) 'apifix_nothing_sends_this'"), str(err)


def test_the_proximal_mu_term_and_then_a_term_by_name_keep_their_own_fields(user: Any) -> None:
    err = _run({"objective": {"proximal_mu": 0.1, "terms": ["apifix_term_parts:Missing"]}})
    assert err.field == "objective.terms[0]", str(err)


def test_a_methods_own_term_is_named_by_algorithm_name(user: Any) -> None:
    err = _run({"algorithm": {"name": "apifix_term_parts:WITH_VECTOR"}})
    assert isinstance(err, TermError) and err.field == "algorithm.name", str(err)


def test_a_term_passed_from_python_is_named_by_its_place_in_terms(user: Any) -> None:
    err = _run({}, aggregator=FedAvg(), terms=[user.Missing()])
    assert isinstance(err, ContextError) and err.field == "terms[0]", str(err)
    err = _run({}, aggregator=FedAvg(), terms=[user.Vector()])
    assert isinstance(err, TermError) and err.field == "terms[0]", str(err)


def test_a_term_a_client_half_adds_past_the_runs_terms_is_the_methods(user: Any) -> None:
    spec = LocalSpec(epochs=1, batch_size=2, terms=(user.Vector(), user.Missing()), term_fields=("objective.terms",), method_field="algorithm.name")
    assert [spec.term_field(i) for i in range(2)] == ["objective.terms", "algorithm.name"]
    with pytest.raises(ContextError) as info:
        check_reads(spec.terms, {}, 0, spec.term_field)
    assert info.value.field == "algorithm.name"


def test_without_fields_the_errors_say_terms_and_context_as_before(user: Any) -> None:
    spec = LocalSpec(epochs=1, batch_size=2, terms=(user.Missing(),))
    with pytest.raises(ContextError) as info:
        check_reads(spec.terms, {}, 0, spec.term_field)
    assert info.value.field == "context"
    with pytest.raises(TermError) as term:
        apply_term(user.Vector(), {}, {}, None, spec.term_field(0))
    assert term.value.field == "terms"
