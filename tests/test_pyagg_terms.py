"""The terms an aggregator needs, from Python and by config: a caller's own term on the needed term's context keys
stands for it (not run beside it: the correction applied twice), and a plugin builder that leaves a declared needed
term out gets it, as the instance passed from Python does."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import pytest
import torch

from chillfl.aggregation.base import with_needed_terms
from chillfl.aggregation.registry import AlgorithmSpec, make_aggregator
from chillfl.aggregation.scaffold import LinearCorrectionTerm, Scaffold
from chillfl.extend import Downlink, FedAvg
from chillfl.training.objective import ProximalTerm
from test_pyagg_bind import model, same, state


class MyCorrection:
    """A caller's own term on SCAFFOLD's ``correction`` key (how SCAFFOLD ran from Python before the aggregator added its own)."""

    reads = ("correction",)

    def __call__(self, params: Mapping[str, torch.Tensor], context: Mapping[str, Any]) -> torch.Tensor:
        c = context["correction"]
        return torch.stack([(params[k] * c[k].detach()).sum() for k in params if k in c]).sum()


def test_own_term_on_the_needed_keys_stands_for_it() -> None:
    """Finding 2: ``terms=[MyCorrection()]`` ran beside the added LinearCorrectionTerm (the correction twice)."""
    assert [type(t) for t in with_needed_terms(Scaffold(3), [MyCorrection()])] == [MyCorrection]
    assert same(state({"name": "fedavg"}, aggregator=Scaffold(3), terms=[MyCorrection()]), state({"name": "scaffold"}))


def test_a_term_on_other_keys_is_another_term() -> None:
    terms = with_needed_terms(Scaffold(3), [LinearCorrectionTerm("feddyn_linear")])
    assert [t.reads for t in terms] == [("feddyn_linear",), ("correction",)]


class ReadsNothing:
    reads: tuple[str, ...] = ()

    def __call__(self, params: Mapping[str, torch.Tensor], context: Mapping[str, Any]) -> torch.Tensor:
        return torch.zeros(())


class NeedsNothingKeyed(FedAvg):
    """A rule whose needed term reads no context key: another term reading none is not it."""

    def needed_terms(self) -> list[Any]:
        return [ReadsNothing()]


def test_a_term_reading_nothing_is_matched_by_class() -> None:
    class Other(ReadsNothing):
        pass

    class Unrelated:
        reads: tuple[str, ...] = ()

    assert [type(t) for t in with_needed_terms(NeedsNothingKeyed(), [Unrelated()])] == [Unrelated, ReadsNothing]
    assert [type(t) for t in with_needed_terms(NeedsNothingKeyed(), [Other()])] == [Other]


class Nudged(FedAvg):
    """A plugin rule that feeds a proximal term and declares it (docs/extending.md)."""

    def downlink(self, client_id: int, round: int, global_params: dict[str, torch.Tensor]) -> Downlink:
        return Downlink(context={"mu": 0.5, "global_params": global_params}, local=("global_params",))

    def needed_terms(self) -> list[ProximalTerm]:
        return [ProximalTerm()]


@dataclasses.dataclass(frozen=True)
class NudgedOptions:
    """Takes none."""


def test_plugin_builder_gets_the_declared_terms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 8: a plugin spec whose builder returns ``(Nudged(), [])`` ran without the term by config, with it from
    Python: the two paths now run the same terms."""
    from chillfl.aggregation import registry

    spec = AlgorithmSpec(NudgedOptions, lambda o, ctx: (Nudged(), []), "a plugin spec whose builder forgot the term")
    original = registry.algorithm_spec
    monkeypatch.setattr(registry, "algorithm_spec", lambda name, section="algorithm", field=None: spec if name == "nudged" else original(name, section, field))
    _, terms = make_aggregator("nudged", {}, num_clients=3, model=model(), seed=0)
    assert [type(t) for t in terms] == [ProximalTerm]
