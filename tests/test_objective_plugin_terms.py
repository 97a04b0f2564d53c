"""``[objective] terms``: a registered or imported loss term added to any parameter-sharing method from a config."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
import torch

from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.runner import run_experiment
from chillfl.training.local import LocalSpec, train_client
from chillfl.training.objective import ProximalTerm
from chillfl.training.terms import registered_terms

BASE = {
    "dataset.name": "digits",
    "model.name": "mlp",
    "federation.num_clients": 4,
    "federation.rounds": 2,
    "client.batch_size": 32,
    "client.lr": 0.1,
    "eval.client_split_size": 20,
}

PLUGIN = '''
from dataclasses import dataclass


class L2:
    """weight * sum_k ||w_k||^2: reads nothing from the context."""

    @dataclass(frozen=True)
    class Options:
        weight: float = 0.1

    reads = ()

    def __init__(self, options):
        self.weight = options.weight

    def __call__(self, params, context):
        return self.weight * sum((p ** 2).sum() for p in params.values())
'''


@pytest.fixture
def plugin(user_module: Callable[[str, str], None]) -> str:
    user_module("ext_term_plugin", PLUGIN)
    return "ext_term_plugin:L2"


def test_a_plugin_term_from_the_config_is_added_to_fedavg_and_changes_the_loss_as_hand_computed(plugin: str) -> None:
    exp = build_experiment(load_config(None, {**BASE, "objective.terms": [{"name": plugin, "weight": 0.5}]}))
    (term,) = [t for t in exp.spec.terms if type(t).__name__ == "L2"]
    assert term.weight == 0.5
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    x, y, lr = torch.randn(4, 3), torch.tensor([0, 1, 0, 1]), 0.1
    spec = LocalSpec(epochs=1, batch_size=4, terms=tuple(exp.spec.terms))
    out = train_client(model, start, x, y, spec=spec, lr=lr, temperature=1.0, context={}, generator=torch.Generator().manual_seed(0))
    w = {k: v.clone().requires_grad_(True) for k, v in start.items()}
    ce = torch.nn.functional.cross_entropy(torch.func.functional_call(model, w, (x,)), y)
    expected_loss = ce + 0.5 * sum((v**2).sum() for v in w.values())
    assert out.mean_loss == pytest.approx(float(expected_loss.detach()), rel=1e-6)
    grads = torch.autograd.grad(ce, list(w.values()))
    for (k, v), g in zip(start.items(), grads):
        torch.testing.assert_close(out.params[k], v - lr * (g + 2 * 0.5 * v))
    plain = run_experiment(load_config(None, BASE), write=False, progress=False).records
    added = run_experiment(load_config(None, {**BASE, "objective.terms": [{"name": plugin, "weight": 0.5}]}), write=False, progress=False).records
    assert added[0]["train_loss"] > plain[0]["train_loss"]


def test_the_registered_proximal_term_is_proximal_mu_bit_for_bit() -> None:
    assert "proximal" in registered_terms()
    by_mu = run_experiment(load_config(None, {**BASE, "objective.proximal_mu": 0.5}), write=False, progress=False).records
    by_name = run_experiment(load_config(None, {**BASE, "objective.terms": [{"name": "proximal", "mu": 0.5}]}), write=False, progress=False).records
    assert by_name == by_mu
    exp = build_experiment(load_config(None, {**BASE, "objective.terms": ["proximal"]}))
    assert ProximalTerm() in exp.spec.terms


@pytest.mark.parametrize(
    "over",
    [
        {"objective.terms": ["nope"]},  # neither registered nor an import path
        {"objective.terms": [{"name": "proximal", "muu": 1.0}]},  # an unknown option
        {"objective.terms": [{"name": "proximal", "mu": -1.0}]},  # a bad value
        {"objective.terms": [{"mu": 1.0}]},  # no name
        {"objective.terms": ["proximal"], "objective.proximal_mu": 0.1},  # both send mu
        {"objective.terms": ["proximal"], "algorithm.name": "fedprox"},  # the method adds it already
        {"objective.terms": ["proximal"], "distillation.method": "dsfl", "distillation.public_size": 100, "distillation.subset_size": 20},
    ],
)
def test_refusals_name_objective_terms(over: dict) -> None:
    with pytest.raises(ConfigError) as info:
        build_experiment(load_config(None, {**BASE, **over}))
    assert info.value.field.startswith("objective.terms")


def test_an_object_that_is_no_term_is_one_plain_line() -> None:
    """The refusal printed reST markup (``reads``) on the command line, where it is read as typed."""
    with pytest.raises(ConfigError) as info:
        build_experiment(load_config(None, {**BASE, "objective.terms": ["collections:OrderedDict"]}))
    assert info.value.field == "objective.terms[0]"
    assert str(info.value).endswith("'collections:OrderedDict' is not a loss term: give a TermSpec, or a class with a `reads` tuple and __call__ "
                                    "(see chillfl.extend.LossTerm, BatchTerm)")


def test_the_saved_config_keeps_the_terms_and_reruns_them(tmp_path: Path) -> None:
    cfg = load_config(None, {**BASE, "federation.rounds": 1, "out_dir": str(tmp_path), "objective.terms": [{"name": "proximal", "mu": 0.5}]})
    first = run_experiment(cfg, progress=False)
    assert first.folder is not None
    again = load_config(str(first.folder / "config.toml"))
    assert again.objective.terms == ({"name": "proximal", "mu": 0.5},)
    assert run_experiment(again, write=False, progress=False).records == first.records
