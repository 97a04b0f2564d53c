"""An aggregator built in Python is bound to the run as its spec's builder builds the config's method
(:attr:`chillfl.aggregation.registry.AlgorithmSpec.bind`): what the builder takes from the run (``client.momentum``,
the ``[objective]`` proximal mu, ``num_clients``, ``rounds``, warm-up, client-size alphas) the instance takes where its
constructor left None, and a value that disagrees is the config's refusal, on ``aggregator.options.<option>`` or
``aggregator.<argument>``."""

from __future__ import annotations

import logging
from typing import Any, Callable

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError

torch.manual_seed(0)
X = torch.randn(30, 4, dtype=torch.float64)
Y = (X[:, 0] + 0.3 * X[:, 1] > 0).long()


class Net(nn.Module):
    """A float64 MLP with a linear head (the methods that read the representation find it)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 5), nn.Tanh())
        self.head = nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))

    def head_name(self) -> str:
        return "head"


def model() -> nn.Module:
    torch.manual_seed(1)
    return Net().double()


def config(algorithm: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A 3-client, 3-round config; ``extra``: dotted keys (``client.momentum``) set on it."""
    out: dict[str, Any] = {"algorithm": algorithm, "federation": {"num_clients": 3, "rounds": 3},
                           "client": {"lr": 0.1, "batch_size": 4, "epochs": 1}, "eval": {"clients": "none", "client_split": "none"}, "seed": 3}
    for key, value in (extra or {}).items():
        section, option = key.split(".", 1)
        out.setdefault(section, {})[option] = value
    return out


def state(algorithm: dict[str, Any], extra: dict[str, Any] | None = None, **python: Any) -> dict[str, torch.Tensor]:
    """The final global state of the run: ``algorithm`` as the config's table, or ``python``'s aggregator (and terms)."""
    logging.disable(logging.WARNING)
    try:
        run = chillfl.run(model=model(), data=chillfl.TensorData(X, Y, X, Y, num_classes=2), config=config(algorithm, extra),
                          write=False, progress=False, **python)
    finally:
        logging.disable(logging.NOTSET)
    return {k: v.detach().clone() for k, v in run.state.items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def refusal(make: Callable[[], Any], extra: dict[str, Any] | None = None, **python: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        state({"name": "fedavg"}, extra, aggregator=make(), **python)
    return info.value


def _scaffold() -> Any:
    from chillfl.aggregation.scaffold import Scaffold

    return Scaffold(3)


def _vrl() -> Any:
    from chillfl.aggregation.vrl_sgd import VRLSGD

    return VRLSGD()


def _fednova() -> Any:
    from chillfl.aggregation.fednova import FedNova

    return FedNova()


def _pa3fed_scaffold() -> Any:
    from chillfl.aggregation.pa3fed import PA3Fed

    return PA3Fed(_scaffold())


RUN_SETTINGS = [
    ("scaffold", {"name": "scaffold"}, _scaffold, {"client.momentum": 0.9}),
    ("vrl_sgd", {"name": "vrl_sgd"}, _vrl, {"client.momentum": 0.9}),
    ("fednova-momentum", {"name": "fednova"}, _fednova, {"client.momentum": 0.9}),
    ("fednova-proximal", {"name": "fednova"}, _fednova, {"objective.proximal_mu": 0.5}),
    ("pa3fed-scaffold", {"name": "pa3fed", "base": "scaffold"}, _pa3fed_scaffold, {"client.momentum": 0.9}),
]


@pytest.mark.parametrize(("table", "make", "extra"), [c[1:] for c in RUN_SETTINGS], ids=[c[0] for c in RUN_SETTINGS])
def test_unset_option_takes_the_runs_value(table: dict[str, Any], make: Callable[[], Any], extra: dict[str, Any]) -> None:
    """Finding 1: ``Scaffold(3)`` under ``client.momentum = 0.9`` ran with momentum 0 (FedNova also without the run's
    proximal mu): bitwise the config's run now."""
    assert same(state({"name": "fedavg"}, extra, aggregator=make()), state(table, extra))


def test_explicit_conflicting_option_gets_the_configs_refusal() -> None:
    """Finding 1: an explicit value the config refuses (``algorithm.momentum``) ran from Python."""
    from chillfl.aggregation.fednova import FedNova, FedNovaOptions
    from chillfl.aggregation.pa3fed import PA3Fed
    from chillfl.aggregation.scaffold import Scaffold, ScaffoldOptions
    from chillfl.aggregation.vrl_sgd import VRLSGD, VRLSGDOptions

    err = refusal(lambda: Scaffold(3, ScaffoldOptions(momentum=0.5)), {"client.momentum": 0.9})
    assert err.field == "aggregator.options.momentum" and "must equal client.momentum = 0.9" in err.message
    assert refusal(lambda: VRLSGD(VRLSGDOptions(momentum=0.5)), {"client.momentum": 0.9}).field == "aggregator.options.momentum"
    err = refusal(lambda: FedNova(FedNovaOptions(proximal_mu=0.3)), {"objective.proximal_mu": 0.5})
    assert err.field == "aggregator.options.proximal_mu" and "mu = 0.5" in err.message
    err = refusal(lambda: PA3Fed(Scaffold(3, ScaffoldOptions(momentum=0.5))), {"client.momentum": 0.9})
    assert err.field == "aggregator.base.options.momentum"
    # the run's own value, given explicitly, runs as unset
    assert same(state({"name": "fedavg"}, {"client.momentum": 0.9}, aggregator=Scaffold(3, ScaffoldOptions(momentum=0.9))),
                state({"name": "scaffold"}, {"client.momentum": 0.9}))


def test_the_callers_instance_is_left_as_given() -> None:
    """The run binds its own copy: the caller's instance keeps its None (another run fills it again)."""
    aggregator = _fednova()
    state({"name": "fedavg"}, {"client.momentum": 0.9}, aggregator=aggregator)
    assert aggregator.options.momentum is None and aggregator.momentum == 0.0


@pytest.mark.parametrize("clients", [2, 5])
def test_num_clients_must_be_the_runs(clients: int) -> None:
    """Finding 4b: ``Scaffold(5)`` / ``FedDyn(2)`` in a 3-client run ran with the wrong |S| / N (h's 1 / m)."""
    from chillfl.aggregation.feddyn import FedDyn
    from chillfl.aggregation.scaffold import Scaffold

    err = refusal(lambda: Scaffold(clients))
    assert err.field == "aggregator.num_clients" and "federation.num_clients = 3" in err.message
    assert refusal(lambda: FedDyn(clients)).field == "aggregator.num_clients"


def test_feddyn_client_size_alphas_from_the_run() -> None:
    """Finding 4b: ``alpha_scaling = "client_size"`` without ``alphas`` ran with the plain alpha for every client."""
    from chillfl.aggregation.feddyn import FedDyn, FedDynOptions

    options = FedDynOptions(alpha=0.5, alpha_scaling="client_size")
    assert same(state({"name": "fedavg"}, aggregator=FedDyn(3, options)),
                state({"name": "feddyn", "alpha": 0.5, "alpha_scaling": "client_size"}))
    assert refusal(lambda: FedDyn(3, options, alphas=(1.0, 1.0, 1.0))).field == "aggregator.alphas"
    assert refusal(lambda: FedDyn(3, FedDynOptions(alpha=0.5), alphas=(1.0, 1.0, 1.0))).field == "aggregator.alphas"


def _pfedsim(warmup: int | None, share: float) -> Any:
    from chillfl.aggregation.pfedsim import PFedSim, PFedSimOptions

    keys = list(model().state_dict())
    return PFedSim(3, keys, ["head.weight", "head.bias"], "head.weight", warmup, PFedSimOptions(warmup=share))


def test_pfedsim_checks_the_warmup_it_runs() -> None:
    """Finding 4a: ``warmup = 5`` (its constructor's) ran a 3-round run as FedAvg. A count its options do not say (1 with
    share 1.0) is refused with the options that say it (bindfix #2: it ran under a record of the other warm-up)."""
    err = refusal(lambda: _pfedsim(5, 0.5))
    assert err.field == "aggregator.warmup" and "federation.rounds = 3" in err.message
    err = refusal(lambda: _pfedsim(1, 1.0))
    assert err.field == "aggregator.warmup" and "PFedSimOptions(warmup=0.5)" in err.message
    assert same(state({"name": "fedavg"}, aggregator=_pfedsim(1, 0.5)), state({"name": "pfedsim", "warmup": 0.5, "similarity": "rows"}))
    assert same(state({"name": "fedavg"}, aggregator=_pfedsim(None, 0.5)), state({"name": "pfedsim", "warmup": 0.5}))


def test_pfedsim_warmup_option_round_trips() -> None:
    from chillfl.aggregation.pfedsim import warmup_option, warmup_rounds

    assert all(warmup_rounds(warmup_option(count, rounds), rounds) == count for rounds in range(2, 200) for count in range(rounds))


def test_ccvr_rounds_from_the_run() -> None:
    """Finding 4c: ``CCVR(model)`` failed in round 0 (ValueError, a run.partial left); ``rounds=5`` in a 3-round run
    never calibrated."""
    from chillfl.aggregation.ccvr import CCVR

    configured = state({"name": "ccvr"})
    assert same(state({"name": "fedavg"}, aggregator=CCVR(model(), seed=3)), configured)
    assert not same(configured, state({"name": "fedavg"}))
    err = refusal(lambda: CCVR(model(), rounds=5, seed=3))
    assert err.field == "aggregator.rounds" and "federation.rounds = 3" in err.message


def test_apple_rounds_and_sizes_from_the_run() -> None:
    """Finding 4c: ``APPLE(3, model)`` failed in round 0 (its scheduler had no rounds)."""
    from chillfl.aggregation.apple import APPLE

    assert same(state({"name": "fedavg"}, aggregator=APPLE(3, model(), seed=3)), state({"name": "apple"}))
    assert refusal(lambda: APPLE(3, model(), rounds=5)).field == "aggregator.rounds"
    assert refusal(lambda: APPLE(4, model())).field == "aggregator.num_clients"


def test_fedphp_horizon_is_the_one_its_options_say() -> None:
    """FedPHP(5) in a run whose options leave H to the run (3 participations) ran H = 5 under a record that reruns H = 3.
    bindfix #4: options that leave H unset take the instance's (recorded), so FedPHP(5) runs H = 5 as ``horizon = 5``;
    options that say another H are refused."""
    from chillfl.aggregation.fedphp import FedPHP, FedPHPOptions

    assert same(state({"name": "fedavg"}, aggregator=FedPHP(3)), state({"name": "fedphp"}))
    assert same(state({"name": "fedavg"}, aggregator=FedPHP(5)), state({"name": "fedphp", "horizon": 5}))
    err = refusal(lambda: FedPHP(5, FedPHPOptions(horizon=3)))
    assert err.field == "aggregator.horizon" and "= 3" in err.message and "FedPHPOptions(horizon=5)" in err.message
    assert same(state({"name": "fedavg"}, aggregator=FedPHP(5, FedPHPOptions(horizon=5))), state({"name": "fedphp", "horizon": 5}))
