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
from chillfl.extend import AlgorithmSpec, AroundAggregator, Capabilities, ConstantTemperature, FedAvg, PolicySpec
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
    """The check read the class's methods and refused it, listing none as missing; built by a spec, which the run checks.
    One passed from Python is refused by name: its class hides the rule it runs (report-rev109 1, test_plugmend_checks)."""
    assert _run(config={**CONFIG, "algorithm": {"name": f"{__name__}:PROXIED"}}) is not None


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


# report-rev108c: the mends' own gaps

CLASS_BUILT = AlgorithmSpec(NoOptions, lambda options, ctx: (FedAvg, []), "returns the class, not an instance")


def test_a_builder_returning_a_class_is_one_line() -> None:
    """A class's hooks are callable, so the instance test let it through to a TypeError in check_declarations."""
    with pytest.raises(ConfigError) as err:
        _run(config={**CONFIG, "algorithm": {"name": f"{__name__}:CLASS_BUILT"}})
    assert "a class, not an instance: call it" in err.value.message


class NoGradNoRound(FedAvg):
    @torch.no_grad()
    def aggregate(self, global_params: Any, results: Any) -> Any:  # type: ignore[override]  # no `round`, behind a pass-through decorator
        return dict(global_params)


def test_a_pass_through_decorator_hides_no_missing_argument(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=nn.Linear(8, 3), data=_data(), config=CONFIG, out_dir=tmp_path, name="r", progress=False, aggregator=NoGradNoRound())
    assert "aggregate(global_params, results) cannot be called as aggregate(global_params, results, round)" in err.value.message
    assert list(tmp_path.iterdir()) == []


class CalledTerm(nn.Module):
    """Overrides __call__ (the term) and keeps an unrelated forward: called as any term, as before."""

    reads = ()

    def __call__(self, params: Any, context: Any) -> torch.Tensor:  # type: ignore[override]
        return torch.zeros(())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_a_module_term_that_overrides_call_runs_as_before() -> None:
    assert _run(aggregator=FedAvg(), terms=[CalledTerm()]) is not None


PROXIED_POLICY = PolicySpec(NoOptions, lambda options, counts: Proxy(ConstantTemperature(0.5)), "a fixed T behind a proxy")


def test_a_proxy_policy_built_by_a_spec_runs() -> None:
    out = _run(config={**CONFIG, "temperature": {"policy": f"{__name__}:PROXIED_POLICY"}})
    assert out.records[-1]["temperature_mean"] == 0.5
