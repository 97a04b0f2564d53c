"""Who owns a context key, checked where it was missed.

* A client half whose ``prepare`` replaces (adds, drops) a key an ``[objective]`` term sends is refused on the term's
  field: before, ``{**context, "mu": 5.0}`` silently replaced ``proximal_mu`` (any value gave mu = 5's numbers).
* ``Halves`` passes each part a copy of the context: a part editing it in place (``context["k"] = 2.0``) set a key
  another part owns without the refusal firing, since the "before" it compared with had changed too.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import chillfl
from chillfl.errors import ConfigError
from chillfl.extend import Capabilities, FedAvg, Stateless, combine

CONFIG: dict[str, Any] = {"executor": "sequential", "device": "cpu", "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]},
                          "federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 1}, "client": {"lr": 0.05}}


class SetsMu(Stateless):
    """Completes the context on the client with a mu of its own: the proximal term's key."""

    def prepare(self, state: Any, start: Any, context: Any) -> Any:
        return start, {**context, "mu": 5.0}


class DropsMu(Stateless):
    def prepare(self, state: Any, start: Any, context: Any) -> Any:
        return start, {k: v for k, v in context.items() if k != "mu"}


class EditsMu(Stateless):
    """Sets mu by editing the dict it was given in place."""

    def prepare(self, state: Any, start: Any, context: Any) -> Any:
        context["mu"] = 5.0
        return start, context


class CopiesAnchor(Stateless):
    """Passes the anchor on as another dict of the same tensors: another object, so not the term's value as sent."""

    def prepare(self, state: Any, start: Any, context: Any) -> Any:
        return start, {**context, "global_params": dict(context["global_params"])}


class PassesOn(Stateless):
    """Adds a key of its own and passes the term's keys on as they came."""

    def prepare(self, state: Any, start: Any, context: Any) -> Any:
        return start, {**context, "mine": 1.0}


def _method(half: Any) -> FedAvg:
    class WithHalf(FedAvg):
        capabilities = Capabilities(takes_weights=True)

        def client_half(self) -> Any:
            return half

    return WithHalf()


def _run(half: Any, objective: dict[str, Any]) -> Any:
    return chillfl.run(config={**CONFIG, "objective": objective}, aggregator=_method(half), write=False, progress=False)


@pytest.mark.parametrize(("half", "did"), [(SetsMu(), "replaces"), (EditsMu(), "replaces"), (DropsMu(), "drops")])
def test_a_half_rewriting_the_objectives_key_is_refused_on_the_terms_field(half: Any, did: str) -> None:
    with pytest.raises(ConfigError) as err:
        _run(half, {"proximal_mu": 0.0001})
    assert err.value.field == "objective.proximal_mu"
    assert f"term 'proximal' sends context key 'mu', which {type(half).__name__}.prepare() {did} on the client" in err.value.message


def test_a_half_replacing_the_anchor_is_refused_on_the_field_that_named_the_term() -> None:
    with pytest.raises(ConfigError) as err:
        _run(CopiesAnchor(), {"terms": ["proximal"]})
    assert err.value.field == "objective.terms[0]" and "context key 'global_params'" in err.value.message


def test_a_combined_half_is_named_by_its_parts() -> None:
    with pytest.raises(ConfigError) as err:
        _run(combine(PassesOn(), SetsMu()), {"proximal_mu": 0.01})
    assert "(PassesOn + SetsMu).prepare() replaces" in err.value.message


def test_a_half_passing_the_terms_keys_on_runs_and_without_the_term_sets_its_own() -> None:
    assert _run(PassesOn(), {"proximal_mu": 0.01}).records
    assert _run(SetsMu(), {}).records  # no [objective] term sends mu: the half's own key


class AddsK(Stateless):
    def prepare(self, state: Any, start: Any, context: Any) -> Any:
        return start, {**context, "k": 1.0}


class EditsK(Stateless):
    """Sets ``k`` by editing the dict it was given, and returns it."""

    def prepare(self, state: Any, start: Any, context: Any) -> Any:
        context["k"] = 2.0
        return start, context


def test_halves_refuse_a_part_that_sets_anothers_key_in_place() -> None:
    half = combine(AddsK(), EditsK())
    assert half is not None
    with pytest.raises(ConfigError, match=r"^algorithm\.name: client halves AddsK and EditsK both set context key 'k'"):
        half.prepare({}, {}, {"x": torch.zeros(1)})


def test_halves_give_each_part_a_copy_and_the_caller_keeps_its_context() -> None:
    sent: dict[str, Any] = {"x": torch.zeros(1)}
    half = combine(EditsK(), PassesOn())
    assert half is not None
    _, context = half.prepare({}, {}, sent)
    assert context == {"x": sent["x"], "k": 2.0, "mine": 1.0} and sent == {"x": sent["x"]}
