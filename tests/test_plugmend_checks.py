"""Mends from report-rev109 (the plugin checks of a0eba0ff/8af16a22): a decorated hook short of an argument is one line
again, a proxy aggregator or policy passed from Python is refused (its class is what every check reads), PA3Fed's
combined client half checks each part's hooks, a function or class term is checked as any term."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from torch import nn

import chillfl
from chillfl.aggregation.dnc import DnC, DnCOptions
from chillfl.aggregation.scaffold import Scaffold
from chillfl.errors import ConfigError
from chillfl.extend import (Accounting, AroundAggregator, Capabilities, Charge, ConstantTemperature, FedAvg, MechanismSpec, PolicySpec, PrivateAggregation,
                            TermSpec)
from test_apifix_hook_calls import CONFIG, _data


def _run(config: dict[str, Any] = CONFIG, **parts: Any) -> Any:
    return chillfl.run(model=nn.Linear(8, 3), data=_data(), config=config, write=False, progress=False, **parts)


def _refused(tmp_path: Path, config: dict[str, Any] = CONFIG, **parts: Any) -> ConfigError:
    """The ConfigError a run on ``parts`` ends with, having written nothing (no NAME.partial folder)."""
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=nn.Linear(8, 3), data=_data(), config=config, out_dir=tmp_path, name="r", progress=False, **parts)
    assert list(tmp_path.iterdir()) == []
    return err.value


# finding 2: a decorated hook that needs an argument nobody supplies

class NoGradExtra(FedAvg):
    @torch.no_grad()
    def aggregate(self, global_params: Any, results: Any, round: int, extra: Any) -> Any:  # type: ignore[override]
        return dict(global_params)


def _named_first(f: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(f)
    def wrapped(self: Any, global_params: Any, *args: Any, **kwargs: Any) -> Any:
        return f(self, global_params, *args, **kwargs)
    return wrapped


class NamedFirstNoRound(FedAvg):
    @_named_first
    def aggregate(self, global_params: Any, results: Any) -> Any:  # type: ignore[override]  # no `round`
        return dict(global_params)


def test_a_no_grad_hook_short_of_an_argument_is_one_line(tmp_path: Path) -> None:
    """torch.no_grad()'s wrapper supplies nothing: the hook is checked as the function it wraps (it was a TypeError at round 1)."""
    err = _refused(tmp_path, aggregator=NoGradExtra())
    assert err.field == "aggregator"
    assert "NoGradExtra.aggregate(global_params, results, round, extra) cannot be called as aggregate(global_params, results, round)" in err.message


def test_a_wrapper_with_a_named_parameter_hides_no_missing_round(tmp_path: Path) -> None:
    err = _refused(tmp_path, aggregator=NamedFirstNoRound())
    assert "NamedFirstNoRound.aggregate(global_params, results) cannot be called as aggregate(global_params, results, round)" in err.message


class NoGradOK(FedAvg):
    @torch.no_grad()
    def aggregate(self, global_params: Any, results: Any, round: int) -> Any:
        return dict(global_params)


def test_a_no_grad_hook_that_takes_the_call_still_runs() -> None:
    assert _run(aggregator=NoGradOK()) is not None


# findings 1 and 5: a proxy passed from Python hides the rule it runs from every check that reads its class

class Proxy:
    """Forwards every hook to an inner rule (to log calls, say), guarded so that copy.deepcopy survives it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class NaiveProxy:
    """The textbook proxy: copy.deepcopy recursed in its __getattr__ (RecursionError)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class HooksInInit:
    """Its hooks set on the instance: its class declares and is made by nothing, whatever rule the hooks run."""

    def __init__(self, inner: Any) -> None:
        for hook in ("downlink", "aggregate", "round_metrics", "begin_round", "client_half", "state_dict", "load_state_dict"):
            setattr(self, hook, getattr(inner, hook))


class Ident(AroundAggregator):
    """A user's identity wrapper: forwards every hook, and the run checks its base."""


def test_a_proxy_of_scaffold_with_adam_is_refused(tmp_path: Path) -> None:
    """Scaffold(2) alone is refused with Adam (plain-SGD limit); behind a proxy it ran with Adam."""
    adam = {**CONFIG, "client": {"optimizer": "adam"}}
    for aggregator in (Proxy(Scaffold(2)), HooksInInit(Scaffold(2)), Ident(Proxy(Scaffold(2)))):
        err = _refused(tmp_path, config=adam, aggregator=aggregator)
        assert err.field == "aggregator"
        assert "on the instance only" in err.message and "subclass chillfl.extend.AroundAggregator" in err.message
    assert "Proxy holds downlink, aggregate" in _refused(tmp_path, aggregator=Proxy(DnC(options=DnCOptions(f=5)))).message
    assert "HooksInInit holds downlink" in _refused(tmp_path, aggregator=HooksInInit(FedAvg())).message
    err = _refused(tmp_path, config=adam, aggregator=Ident(Scaffold(2)))  # the sound way to wrap: its base's limit holds
    assert err.field == "client.optimizer"


def test_a_naive_proxy_is_one_line_not_a_recursion_error(tmp_path: Path) -> None:
    err = _refused(tmp_path, aggregator=NaiveProxy(FedAvg()))
    assert err.field == "aggregator" and "NaiveProxy holds" in err.message
    err = _refused(tmp_path, aggregator=FedAvg(), policy=NaiveProxy(ConstantTemperature(0.5)))
    assert err.field == "policy" and "NaiveProxy holds temperature, observe" in err.message


class MyConstant(ConstantTemperature):
    """Subclasses the policy it changes: its class is what the run reads."""


def test_a_policy_subclass_still_runs() -> None:
    out = _run(aggregator=FedAvg(), policy=MyConstant(0.5))
    assert out.records[-1]["temperature_mean"] == 0.5


# findings 3 and 6: PA3Fed's combined client half checks each part's hooks by its class, as a half alone is

class HalfNoFinish:
    def prepare(self, state: Any, start: Any, context: Any) -> Any:
        return start, context


class WeightedNoFinish(FedAvg):
    capabilities = Capabilities(takes_weights=True)

    def client_half(self) -> Any:
        return HalfNoFinish()


class Half:
    def prepare(self, state: Any, start: Any, context: Any) -> Any:
        return start, context

    def finish(self, model: Any, state: Any, trained: Any) -> Any:
        return {}, {}


class ProxyHalfWeighted(FedAvg):
    capabilities = Capabilities(takes_weights=True)

    def client_half(self) -> Any:
        return Proxy(Half())


def _under_pa3fed(base: str) -> dict[str, Any]:
    return {**CONFIG, "algorithm": {"name": "pa3fed", "base": f"{__name__}:{base}"}}


def test_pa3fed_refuses_a_base_half_without_finish(tmp_path: Path) -> None:
    """Only the combined half (which has every hook) was asked: an AttributeError at the first client, NAME.partial left."""
    err = _refused(tmp_path, config=_under_pa3fed("WeightedNoFinish"))
    assert "client half HalfNoFinish lacks finish: a ClientHalf needs prepare and finish" in err.message
    assert "client half HalfNoFinish lacks finish: " in _refused(tmp_path, aggregator=WeightedNoFinish()).message  # alone, as before


def test_a_proxy_half_is_refused_alone_and_under_pa3fed_alike(tmp_path: Path) -> None:
    """Alone it was refused ('lacks prepare, finish'), under PA3Fed it ran: one rule, which says why."""
    says = "client half Proxy lacks prepare, finish on its class (prepare, finish only on the instance"
    assert says in _refused(tmp_path, aggregator=ProxyHalfWeighted()).message
    assert says in _refused(tmp_path, config=_under_pa3fed("ProxyHalfWeighted")).message


class WeightedHalf(FedAvg):
    capabilities = Capabilities(takes_weights=True)

    def client_half(self) -> Any:
        return Half()


def test_pa3fed_over_a_base_with_a_whole_half_runs() -> None:
    assert _run(config=_under_pa3fed("WeightedHalf")) is not None


# finding 4: a function term, or a TermSpec whose build returns a class

@dataclass(frozen=True)
class NoOpts:
    pass


def fn_term_wrong(params: Any) -> torch.Tensor:  # no `context`
    return torch.zeros(())


fn_term_wrong.reads = ()  # type: ignore[attr-defined]


def fn_term(params: Any, context: Any) -> torch.Tensor:
    return torch.zeros(())


fn_term.reads = ()  # type: ignore[attr-defined]


class ModTerm(nn.Module):
    reads = ()

    def forward(self, params: Any, context: Any) -> torch.Tensor:
        return torch.zeros(())


FN_TERM = TermSpec(NoOpts, lambda o: fn_term_wrong, "a function term without context")
CLASS_MODTERM = TermSpec(NoOpts, lambda o: ModTerm, "returns the class, not an instance")


def _with_term(name: str) -> dict[str, Any]:
    return {**CONFIG, "objective": {"terms": [f"{__name__}:{name}"]}}


def test_a_function_terms_parameters_are_checked(tmp_path: Path) -> None:
    """A function's __call__ is a method-wrapper taking anything: a TypeError at the first step, NAME.partial left."""
    err = _refused(tmp_path, aggregator=FedAvg(), terms=[fn_term_wrong])
    assert err.field == "terms[0]" and "fn_term_wrong(params) cannot be called as __call__(params, context)" in err.message
    err = _refused(tmp_path, config=_with_term("FN_TERM"))
    assert err.field.startswith("objective.terms") and "fn_term_wrong(params) cannot be called" in err.message


def test_a_function_term_that_takes_the_call_runs() -> None:
    partial = functools.partial(fn_term)
    partial.reads = ()  # type: ignore[attr-defined]
    assert _run(aggregator=FedAvg(), terms=[fn_term, partial]) is not None


def test_a_term_spec_returning_a_class_is_one_line(tmp_path: Path) -> None:
    err = _refused(tmp_path, config=_with_term("CLASS_MODTERM"))
    assert err.field.startswith("objective.terms") and "its TermSpec's build returned the class ModTerm, not an instance: call it" in err.message


# finding 7: an nn.Module term without forward

class ModTermNoForward(nn.Module):
    reads = ()


def test_a_module_term_without_forward_is_one_line(tmp_path: Path) -> None:
    err = _refused(tmp_path, aggregator=FedAvg(), terms=[ModTermNoForward()])
    assert err.field == "terms[0]" and "ModTermNoForward is an nn.Module term without forward: define forward(params, context)" in err.message


# finding 8: a PolicySpec, or a mechanism's aggregator hook, that returns a class says so (it said "got type")

CLASS_POLICY = PolicySpec(NoOpts, lambda o, counts: ConstantTemperature, "returns the class, not an instance")


def _accounts(options: Any, sizes: Any) -> Accounting:
    return Accounting(((1.0, sizes.rounds),))


def _charges(options: Any, sizes: Any, participants: Any) -> list[Charge]:
    return [Charge(f"client {p.client_id}", 1.0) for p in participants]


CLASS_MECHANISM = MechanismSpec("m", NoOpts, accounts=_accounts, charges=_charges, aggregator=lambda o, noise, base: PrivateAggregation,
                                adjacency="replace", subsampled=False)


def test_a_builder_returning_a_class_says_so(tmp_path: Path) -> None:
    err = _refused(tmp_path, config={**CONFIG, "temperature": {"policy": f"{__name__}:CLASS_POLICY"}})
    assert err.field == "temperature.policy" and err.message.endswith("got the class ConstantTemperature, not an instance: call it")
    privacy = {"mechanism": f"{__name__}:CLASS_MECHANISM", "clip_norm": 1.0, "noise_multiplier": 1.0, "delta": 1e-3}
    err = _refused(tmp_path, config={**CONFIG, "privacy": privacy})
    assert err.field == "privacy.mechanism" and err.message.endswith("got the class PrivateAggregation, not an instance: call it")


class NoGradTermWrong:
    reads = ()

    @torch.no_grad()
    def __call__(self, params: Any, context: Any, extra: Any) -> torch.Tensor:  # `extra`, which a decorator that supplies nothing leaves out
        return torch.zeros(())


def test_a_no_grad_term_short_of_an_argument_is_one_line(tmp_path: Path) -> None:
    err = _refused(tmp_path, aggregator=FedAvg(), terms=[NoGradTermWrong()])
    assert err.field == "terms[0]" and "NoGradTermWrong.__call__(params, context, extra) cannot be called as __call__(params, context)" in err.message
