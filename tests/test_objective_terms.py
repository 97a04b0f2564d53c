"""``[objective]``: local-objective terms that compose with any parameter-sharing aggregator.

FedProx's proximal term from ``[objective] proximal_mu`` must be *exactly*
FedProx when added to FedAvg, must compose with SCAFFOLD's correction, and must
be refused where the maths does not allow it.
"""

from __future__ import annotations

import pytest
import torch

from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.runner import run_experiment
from chillfl.training.local import LocalSpec, train_client
from chillfl.training.objective import ProximalTerm

BASE = {
    "dataset.name": "digits",
    "model.name": "mlp",
    "federation.num_clients": 4,
    "federation.rounds": 2,
    "client.batch_size": 32,
    "client.lr": 0.1,
    "eval.client_split_size": 20,
}


def _records(**over: object) -> list[dict]:
    return run_experiment(load_config(None, {**BASE, **over}), write=False, progress=False).records


def test_fedavg_plus_objective_proximal_term_is_fedprox_bit_for_bit() -> None:
    prox = _records(**{"algorithm.name": "fedprox", "algorithm.mu": 0.5})
    composed = _records(**{"objective.proximal_mu": 0.5})
    assert composed == prox
    assert composed != _records()  # and the term does something


def test_scaffold_with_a_proximal_term_uses_both_terms() -> None:
    cfg = load_config(None, {**BASE, "algorithm.name": "scaffold", "objective.proximal_mu": 0.3})
    exp = build_experiment(cfg)
    kinds = sorted(type(t).__name__ for t in exp.spec.terms)
    assert kinds == ["LinearCorrectionTerm", "ProximalTerm"]
    both = _records(**{"algorithm.name": "scaffold", "objective.proximal_mu": 0.3})
    alone = _records(**{"algorithm.name": "scaffold"})
    assert both[-1]["global_acc"] != alone[-1]["global_acc"] or both[-1]["train_loss"] != alone[-1]["train_loss"]


def test_the_composed_gradient_is_the_sum_of_both_terms() -> None:
    """One SGD step on w with loss CE + <w, c> + mu/2 ||w - a||^2 moves w by lr * (g_CE + c + mu (w - a))."""
    from chillfl.aggregation.scaffold import LinearCorrectionTerm

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    anchor = {k: v + 0.5 for k, v in start.items()}
    correction = {k: torch.full_like(v, 0.25) for k, v in start.items()}
    x, y = torch.randn(4, 3), torch.tensor([0, 1, 0, 1])
    mu, lr = 0.2, 0.1
    spec = LocalSpec(epochs=1, batch_size=4, terms=(LinearCorrectionTerm(), ProximalTerm()))
    out = train_client(model, start, x, y, spec=spec, lr=lr, temperature=1.0, context={"correction": correction, "mu": mu, "global_params": anchor}, generator=torch.Generator().manual_seed(0))
    w = {k: v.clone().requires_grad_(True) for k, v in start.items()}
    ce = torch.nn.functional.cross_entropy(torch.func.functional_call(model, w, (x,)), y)
    grads = torch.autograd.grad(ce, list(w.values()))
    for (k, v), g in zip(start.items(), grads):
        expected = v - lr * (g + correction[k] + mu * (v - anchor[k]))
        torch.testing.assert_close(out.params[k], expected)


def test_vectorized_runs_the_composed_objective() -> None:
    over = {"algorithm.name": "scaffold", "objective.proximal_mu": 0.3}
    seq = _records(**over)
    vec = _records(executor="vectorized", **over)
    assert vec[-1]["train_loss"] == pytest.approx(seq[-1]["train_loss"], rel=1e-4)


@pytest.mark.parametrize(
    "over",
    [
        {"algorithm.name": "fedprox", "objective.proximal_mu": 0.1},
        {"algorithm.name": "pa3fed", "algorithm.base": "fedprox", "objective.proximal_mu": 0.1},
        {"distillation.method": "dsfl", "distillation.public_size": 100, "distillation.subset_size": 20, "objective.proximal_mu": 0.1},
    ],
)
def test_refused_where_the_maths_does_not_allow(over: dict) -> None:
    with pytest.raises(ConfigError) as info:
        build_experiment(load_config(None, {**BASE, **over}))
    assert info.value.field == "objective.proximal_mu"


@pytest.mark.parametrize("value", [-0.1, float("inf"), float("nan")])
def test_bad_values_name_the_field(value: float) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, {**BASE, "objective.proximal_mu": value})
    assert info.value.field == "objective.proximal_mu"


@pytest.mark.parametrize("value", [-0.1, 2e6])
def test_fedprox_mu_has_the_proximal_terms_range(value: float) -> None:
    """``algorithm.mu`` of fedprox and ``objective.proximal_mu`` are one term's mu: both refuse outside [0, 1e6]
    (fedprox's took 1e300, and the run diverged instead of stopping at start-up)."""
    for key in ("objective.proximal_mu", "algorithm.mu"):
        over = {**BASE, key: value, **({"algorithm.name": "fedprox"} if key == "algorithm.mu" else {})}
        with pytest.raises(ConfigError) as info:
            build_experiment(load_config(None, over))  # a part's options are read when it is built
        assert info.value.field == key
