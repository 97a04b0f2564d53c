"""Halves: two client halves that set the same context, state or report key are refused, naming both and the key.

Before, ``Halves`` merged its parts' context, state and report with ``dict.update``: PA3Fed's ``score`` replaced a base's
own ``score``, and the base's server read PA3Fed's number with no error.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import Halves, Trained
from chillfl.aggregation.pa3fed import PA3Fed
from chillfl.errors import ConfigError
from chillfl.extend import Capabilities, FedAvg, Stateless


@dataclass(frozen=True)
class Reporter(Stateless):
    def finish(self, model: nn.Module, state: Any, trained: Trained) -> tuple[Any, Any]:
        return {}, {"my_steps": float(trained.num_steps)}


@dataclass(frozen=True)
class Scorer(Stateless):
    """A base's half reporting its own ``score`` and keeping ``mine`` (the key PA3Fed reports too)."""

    def finish(self, model: nn.Module, state: Any, trained: Trained) -> tuple[Any, Any]:
        return {"mine": torch.zeros(1)}, {"score": 123.0}


@dataclass(frozen=True)
class Keeper(Stateless):
    def finish(self, model: nn.Module, state: Any, trained: Trained) -> tuple[Any, Any]:
        return {"mine": torch.ones(1)}, {}


@dataclass(frozen=True)
class Sender(Stateless):
    """Adds a context key of its own."""

    value: float = 1.0

    def prepare(self, state: Any, start: Any, context: Any) -> tuple[Any, Any]:
        return start, {**context, "shared_key": self.value}


class ScoredMean(FedAvg):
    capabilities = Capabilities(takes_weights=True, reports="a client score")

    def client_half(self) -> Any:
        return Scorer()


def _trained() -> Trained:
    x, y = torch.zeros(2, 3), torch.zeros(2, dtype=torch.long)
    return Trained(0, x, y, {}, {}, {}, 0.1, 1.0, {}, 1)


def test_two_halves_reporting_one_key_are_refused() -> None:
    half = PA3Fed(ScoredMean()).client_half()  # the base's Scorer, then PA3Fed's own score
    model = nn.Linear(3, 2)
    trained = replace(_trained(), params=dict(model.state_dict()))
    with pytest.raises(ConfigError, match=r"^algorithm\.name: client halves Scorer and PA3FedClient both set report key 'score'"):
        half.finish(model, {}, trained)


def test_two_halves_keeping_one_state_key_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"^algorithm\.name: client halves Scorer and Keeper both set state key 'mine'"):
        Halves((Scorer(), Keeper())).finish(nn.Linear(3, 2), {}, _trained())


def test_two_halves_setting_one_context_key_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"^algorithm\.name: client halves Sender and Sender both set context key 'shared_key'"):
        Halves((Sender(1.0), Sender(2.0))).prepare({}, {}, {"mu": 0.1})


def test_halves_that_pass_each_others_keys_on_are_not_refused() -> None:
    """Passing on what came in (the downlink's keys, another part's) is no claim; only what a part sets is."""
    start, context = Halves((Sender(), Stateless(), Reporter())).prepare({}, {}, {"mu": 0.1})
    assert context == {"mu": 0.1, "shared_key": 1.0}
    state, report = Halves((Scorer(), Reporter())).finish(nn.Linear(3, 2), {}, _trained())
    assert set(state) == {"mine"} and report == {"score": 123.0, "my_steps": 1.0}
