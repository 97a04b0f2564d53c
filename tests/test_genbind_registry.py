"""A subclass's own AttributeError, raised in a method it defines that a base's bind calls (FedGen's bind draws a
generator read before the run with the subclass's ``draw_generator``), was turned into the "call FedGen's __init__"
refusal with no traceback (rev103e): it is raised as it is; one raised in what the subclass inherits (its options
without the base's fields) is still that refusal, chained to the AttributeError."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from chillfl.errors import ConfigError
from chillfl.training.fedgen import FeatureGenerator
from test_genbind_fedgen import OPTS, Spy, first_weights


class Sized(Spy):
    """Calls FedGen's __init__ and keeps its options; its generator's width is the round's client count (a FedGen by
    way of the test's spy, which records its first weights)."""

    per_round: int

    def begin_round(self, round: int, client_ids: list[int]) -> None:
        self.per_round = len(client_ids)
        super().begin_round(round, client_ids)

    def draw_generator(self, seed: int) -> None:
        self.generator = FeatureGenerator(self.num_classes, self.options.noise_dim, self.options.hidden * self.per_round, self.feature_dim)
        self.params = {k: v.detach().clone() for k, v in self.generator.named_parameters()}


@dataclass(frozen=True)
class Narrow:
    """Options without FedGen's fields."""

    hidden: int = 8


class NarrowGen(Spy):
    """Its own options lack ``noise_dim``, which FedGen's drawing (through ``super().draw_generator``) reads."""

    def draw_generator(self, seed: int) -> None:
        super().draw_generator(seed)


def test_a_subclass_s_own_attribute_error_in_the_bind_is_raised_as_it_is() -> None:
    first_weights(Sized(OPTS, "head", 2, 5))  # not read before the run: its lazy draw runs after begin_round
    g = Sized(OPTS, "head", 2, 5)
    g.begin_round(0, [0, 1, 2])
    _ = g.params  # read before the run: the bind draws it again
    del g.per_round
    with pytest.raises(AttributeError, match="per_round"):
        first_weights(g)


def test_what_a_subclass_inherits_lacking_a_field_is_still_the_refusal() -> None:
    g = NarrowGen(OPTS, "head", 2, 5)
    _ = g.params
    g.options = Narrow()  # type: ignore[assignment]
    with pytest.raises(ConfigError) as err:
        first_weights(g)
    assert err.value.field == "aggregator" and "call FedGen's __init__ (super().__init__)" in err.value.message
    assert isinstance(err.value.__cause__, AttributeError) and "noise_dim" in str(err.value.__cause__)
