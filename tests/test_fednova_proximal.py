"""FedNova under a proximal term (objective.proximal_mu / a ``proximal`` term): a_i is the shrunk step count.

The term mu/2 ||w - x||^2 pulls each local step towards x, so x - y_i is sum_k (1 - lr mu)^k steps' worth of gradient
with plain SGD (Wang et al., Sec. 4, FedProx's case), not tau_i; FedNova refused the term before, having no normaliser.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from chillfl.aggregation.base import ClientResult
from chillfl.aggregation.fednova import FedNova, FedNovaOptions, effective_steps
from chillfl.aggregation.registry import make_aggregator
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import check_config
from chillfl.models import build_model
from chillfl.training.terms import configured_terms

BASE: dict[str, Any] = {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 4, "federation.clients_per_round": 2}


def _result(cid: int, steps: int, lr: float, w: float) -> ClientResult:
    return ClientResult(cid, {"w": torch.tensor([w])}, num_samples=10, num_steps=steps, lr=lr, temperature=1.0, train_loss=0.0)


def test_effective_steps_with_a_proximal_term_by_hand() -> None:
    # plain SGD, lr mu = 0.1: a <- a (1 - 0.1) + 1: 1, 1.9, 2.71 (= 1 + 0.9 + 0.81)
    assert effective_steps(3, 0.0, 0.1) == pytest.approx(2.71)
    # momentum 0.5, unit gradients, the proximal gradient -lr mu a in the buffer:
    # b = 1, a = 1; b = 0.5 + 1 - 0.1 = 1.4, a = 2.4; b = 0.7 + 1 - 0.24 = 1.46, a = 3.86
    assert effective_steps(3, 0.5, 0.1) == pytest.approx(3.86)
    assert effective_steps(3, 0.5, 0.0) == pytest.approx(4.25)  # no term: the closed form, unchanged


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_effective_steps_is_what_the_local_optimiser_moves_on_unit_gradients(momentum: float) -> None:
    """torch.optim.SGD (chillfl's local SGD, dampening 0) on c.w + mu/2 ||w - x||^2: x - y = lr a c for each coordinate."""
    lr, mu, steps = 0.05, 0.3, 25
    x = torch.zeros(3, dtype=torch.float64)
    c = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    w = x.clone().requires_grad_(True)
    opt = torch.optim.SGD([w], lr=lr, momentum=momentum)
    for _ in range(steps):
        opt.zero_grad()
        (c @ w + mu / 2 * ((w - x) ** 2).sum()).backward()
        opt.step()
    a = effective_steps(steps, momentum, lr * mu)
    torch.testing.assert_close((x - w.detach()) / (lr * c), torch.full((3,), a, dtype=torch.float64), rtol=1e-12, atol=0.0)
    assert a < effective_steps(steps, momentum)  # the term shrinks the work


def test_fednova_normalises_by_the_shrunk_steps_and_tau_eff_reads_the_option() -> None:
    # x = 0, lr 0.1, mu 1 (lr mu = 0.1); client 0: 1 step to -1 (a = 1); client 1: 3 steps to -2.71 (a = 2.71); p = (0.5, 0.5)
    # d = (1, 1). tau_eff "normaliser": 0.5 * 1 + 0.5 * 2.71 = 1.855, x <- -1.855; "steps": 0.5 * 1 + 0.5 * 3 = 2, x <- -2
    # (without the term: d = (1, 0.9033), tau_eff = 2, x = -1.9033)
    res = [_result(0, 1, 0.1, -1.0), _result(1, 3, 0.1, -2.71)]
    for tau_eff, want in (("normaliser", -1.855), ("steps", -2.0)):
        agg = FedNova(FedNovaOptions(proximal_mu=1.0, tau_eff=tau_eff))
        out = agg.aggregate({"w": torch.tensor([0.0])}, res, 0)
        assert out["w"].item() == pytest.approx(want), tau_eff
        assert agg.round_metrics()["tau_eff"] == pytest.approx(-want)
    assert FedNova().aggregate({"w": torch.tensor([0.0])}, res, 0)["w"].item() == pytest.approx(-2 * (0.5 + 0.5 * 2.71 / 3))


@pytest.mark.parametrize(("over", "mu"), [
    ({"objective.proximal_mu": 0.1}, 0.1),
    ({"objective.terms": ["proximal"]}, 0.01),
    ({"objective.terms": [{"name": "proximal", "mu": 0.3}]}, 0.3),
    ({}, 0.0),
])
@pytest.mark.parametrize("algorithm", [{"algorithm.name": "fednova"}, {"algorithm.name": "pa3fed", "algorithm.base": "fednova"}], ids=["fednova", "pa3fed-over-it"])
def test_a_runs_proximal_term_reaches_fednovas_normaliser(over: dict[str, Any], mu: float, algorithm: dict[str, Any]) -> None:
    config = load_config(None, {**BASE, **algorithm, **over})
    check_config(config)  # refused before ("a proximal term's normaliser ... is not implemented")
    name, options = config.component(config.algorithm)
    agg, _ = make_aggregator(name, options, num_clients=4, model=build_model("mlp", (1, 8, 8), 10), seed=0,
                             objective_terms=configured_terms(config.objective))
    nova = agg if isinstance(agg, FedNova) else agg.base  # type: ignore[attr-defined]
    assert isinstance(nova, FedNova) and nova.proximal_mu == mu


def test_an_explicit_proximal_mu_must_be_the_runs() -> None:
    model = build_model("mlp", (1, 8, 8), 10)
    config = load_config(None, {**BASE, "algorithm.name": "fednova", "objective.proximal_mu": 0.1})
    for given, terms in ((0.2, configured_terms(config.objective)), (0.1, [])):  # another mu; a mu where the clients have no term
        with pytest.raises(ConfigError) as err:
            make_aggregator("fednova", {"proximal_mu": given}, num_clients=4, model=model, seed=0, objective_terms=terms)
        assert err.value.field == "algorithm.proximal_mu"
    agg, _ = make_aggregator("fednova", {"proximal_mu": 0.1}, num_clients=4, model=model, seed=0, objective_terms=configured_terms(config.objective))
    assert isinstance(agg, FedNova) and agg.proximal_mu == 0.1
    agg, _ = make_aggregator("fednova", {"proximal_mu": 0.5}, num_clients=4, model=model, seed=0)  # outside a config: the option says it
    assert isinstance(agg, FedNova) and agg.proximal_mu == 0.5
    with pytest.raises(ConfigError) as err:
        check_config(load_config(None, {**BASE, "algorithm.name": "fednova", "algorithm.tau_eff": "mean"}))
    assert err.value.field == "algorithm.tau_eff"
