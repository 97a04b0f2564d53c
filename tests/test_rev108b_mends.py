"""Mends from the review of the plugin checks (report-rev108b): a user's wrapper keeps its base's limits, PA3Fed's
combined half checks its base's hooks, a proxy's or a decorated hook is not refused, a module term's forward is checked."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from torch import nn

import chillfl
from chillfl.aggregation.scaffold import Scaffold
from chillfl.errors import ConfigError
from chillfl.extend import AlgorithmSpec, AroundAggregator, Capabilities, FedAvg
from test_apifix_hook_calls import CONFIG, HalfWrong, _data


class MyScaffold(Scaffold):
    """Declares nothing: keeps Scaffold's plain_sgd limit."""


class Ident(AroundAggregator):
    """A user's identity wrapper, which no spec builds."""


def _run(config: dict[str, Any] = CONFIG, **parts: Any) -> Any:
    return chillfl.run(model=nn.Linear(8, 3), data=_data(), config=config, write=False, progress=False, **parts)


def test_a_users_wrapper_keeps_its_bases_plain_sgd_limit() -> None:
    """Ident(MyScaffold(2)) ran with Adam, while MyScaffold(2) alone is refused (experiment checked the wrapper's own)."""
    for aggregator in (MyScaffold(2), Ident(MyScaffold(2))):
        with pytest.raises(ConfigError) as err:
            _run(aggregator=aggregator, **{"client.optimizer": "adam"})
        assert "sgd" in err.value.message.lower(), err.value


class WeightedWrongHalf(FedAvg):
    capabilities = Capabilities(takes_weights=True)

    def client_half(self) -> Any:
        return HalfWrong()


def test_pa3fed_checks_its_bases_client_half_hooks(tmp_path: Path) -> None:
    """Under PA3Fed the combined half forwarded to the base's prepare: a TypeError at round 1 (alone: one line)."""
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=nn.Linear(8, 3), data=_data(), out_dir=tmp_path, name="r", progress=False,
                    config={**CONFIG, "algorithm": {"name": "pa3fed", "base": f"{__name__}:WeightedWrongHalf"}})
    assert "HalfWrong.prepare(state, start) cannot be called as prepare(state, start, context)" in err.value.message
    assert list(tmp_path.iterdir()) == []


class Proxy:
    """Forwards every hook to an inner rule (to log calls, say): an aggregator by what it does, not by its class."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "inner":  # copy.deepcopy asks before inner is set
            raise AttributeError(name)
        return getattr(self.inner, name)


@dataclass(frozen=True)
class NoOptions:
    pass


PROXIED = AlgorithmSpec(NoOptions, lambda options, ctx: (Proxy(FedAvg()), []), "FedAvg behind a proxy")


def test_a_proxy_aggregator_runs_as_before() -> None:
    """The check read the class's methods and refused it, listing none as missing; by instance and by spec."""
    assert _run(config={**CONFIG, "algorithm": {"name": f"{__name__}:PROXIED"}}) is not None
    assert _run(aggregator=Proxy(FedAvg())) is not None


def _with_clock(f: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(f)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        return f(self, *args, clock=time.monotonic(), **kwargs)
    return wrapped


class Timed(FedAvg):
    @_with_clock
    def begin_round(self, round: int, client_ids: Any, clock: float) -> None:
        self.started = clock


def test_a_decorated_hook_that_supplies_an_argument_runs_as_before() -> None:
    assert _run(aggregator=Timed()) is not None


class ModuleTermWrong(nn.Module):
    reads = ()

    def forward(self, params: Any) -> torch.Tensor:  # no `context`
        return torch.zeros(())


def test_a_module_terms_forward_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=nn.Linear(8, 3), data=_data(), config=CONFIG, out_dir=tmp_path, name="r", progress=False, aggregator=FedAvg(),
                    terms=[ModuleTermWrong()])
    assert err.value.field == "terms[0]" and "ModuleTermWrong.forward(params) cannot be called as forward(params, context)" in err.value.message
    assert list(tmp_path.iterdir()) == []
