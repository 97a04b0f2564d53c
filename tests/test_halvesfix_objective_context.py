"""An ``[objective]`` term's context key that the aggregator's downlink sends too is refused, naming the term's field.

Before, the parameter-sharing server merged the downlink's context under ``[objective]``'s numbers, so a method whose
downlink sent ``mu = 0.123`` had its own term read the proximal term's ``mu`` (0.01) silently.
"""

from __future__ import annotations

from typing import Any, Mapping

import pytest
import torch

import chillfl
from chillfl.config import ObjectiveConfig
from chillfl.errors import ConfigError
from chillfl.extend import Downlink, FedAvg, read_number
from chillfl.training.terms import context_fields

SEEN: list[float] = []
CONFIG: dict[str, Any] = {"dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]},
                          "federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 1}, "client": {"lr": 0.05}}


class MuTerm:
    """The method's own term, reading the ``mu`` its downlink sends."""

    reads = ("mu",)

    def __call__(self, params: Mapping[str, torch.Tensor], context: Any) -> torch.Tensor:
        mu = read_number(context, "mu")
        SEEN.append(float(mu))
        return sum((p ** 2).sum() for p in params.values()) * 0 * mu


class SendsMu(FedAvg):
    def downlink(self, client_id: int, round: int, global_params: Any) -> Downlink:
        return Downlink(context={"mu": 0.123})


class SendsStart(FedAvg):
    """Sends the round's start model under the proximal term's anchor: the very value the term reads, no clash."""

    def downlink(self, client_id: int, round: int, global_params: Any) -> Downlink:
        return Downlink(context={"global_params": global_params})


class SendsOwnAnchor(FedAvg):
    """Sends another model under ``global_params``: the proximal term's anchor would replace it."""

    def downlink(self, client_id: int, round: int, global_params: Any) -> Downlink:
        return Downlink(context={"global_params": {k: v.clone() for k, v in global_params.items()}})


def test_a_downlink_key_an_objective_term_sends_too_is_refused() -> None:
    SEEN.clear()
    chillfl.run(config=CONFIG, aggregator=SendsMu(), terms=[MuTerm()], write=False, progress=False)
    assert set(SEEN) == {0.123}
    with pytest.raises(ConfigError, match=r"^objective\.terms\[0\]: term 'proximal' sends context key 'mu', which SendsMu\.downlink\(\) sends too"):
        chillfl.run(config={**CONFIG, "objective": {"terms": ["proximal"]}}, aggregator=SendsMu(), terms=[MuTerm()], write=False, progress=False)


def test_the_field_is_the_one_that_added_the_term() -> None:
    with pytest.raises(ConfigError, match=r"^objective\.proximal_mu: term 'proximal' sends context key 'mu'"):
        chillfl.run(config={**CONFIG, "objective": {"proximal_mu": 0.01}}, aggregator=SendsMu(), terms=[MuTerm()], write=False, progress=False)


def test_an_anchor_sent_as_another_model_is_refused_the_start_model_passes() -> None:
    config = {**CONFIG, "objective": {"proximal_mu": 0.01}}
    chillfl.run(config=config, aggregator=SendsStart(), write=False, progress=False)
    with pytest.raises(ConfigError, match=r"^objective\.proximal_mu: term 'proximal' sends context key 'global_params'"):
        chillfl.run(config=config, aggregator=SendsOwnAnchor(), write=False, progress=False)


def test_context_fields_names_each_key_once() -> None:
    fields = context_fields(ObjectiveConfig(proximal_mu=0.1, terms=({"name": "ntd", "beta": 1.0},)))
    assert fields["mu"] == ("objective.proximal_mu", "proximal")
    assert fields["global_params"] == ("objective.proximal_mu", "proximal")  # the first term that anchors it
    assert fields["ntd_beta"][1] == "ntd"
