"""Mends from report-rev109b 1 and 2: check_calls reads what Python calls. A term instance whose ``__call__`` is a
staticmethod, or that carries ``__wrapped__`` (a class-based decorator using functools.update_wrapper), was refused
with the wrong signature though it ran; an adapter decorator whose named parameters take the whole call (it drops
``round`` before calling the wrapped hook) was refused with a false "cannot be called as" line."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable

import torch

from chillfl.extend import FedAvg
from test_plugmend_checks import _refused, _run


def l2(params: Any, context: Any) -> torch.Tensor:
    return sum((p ** 2).sum() for p in params.values()) * 1e-2  # type: ignore[return-value]


l2.reads = ()  # type: ignore[attr-defined]


class StaticAssigned:
    reads = ()
    __call__ = staticmethod(l2)


class StaticDecorated:
    reads = ()

    @staticmethod
    def __call__(params: Any, context: Any) -> torch.Tensor:
        return l2(params, context)


class weighted:
    """A class-based decorator: the term it returns copies the function's name and ``__wrapped__`` onto itself."""

    def __init__(self, w: float) -> None:
        self.w = w

    def __call__(self, fn: Callable[[Any], torch.Tensor]) -> Any:
        w = self.w

        class Weighted:
            reads = ()

            def __init__(self) -> None:
                functools.update_wrapper(self, fn)

            def __call__(self, params: Any, context: Any, *rest: Any) -> torch.Tensor:
                return w * fn(params)

        return Weighted()


@weighted(1e-2)
def l2_params(params: Any) -> torch.Tensor:  # the wrapped function takes `params` only: the instance's __call__ takes the call
    return sum((p ** 2).sum() for p in params.values())  # type: ignore[return-value]


def _loss(aggregator: Any = None, **parts: Any) -> float:
    """The final train loss from one seeded model (the run keeps the model it is given: unseeded, two runs differ)."""
    torch.manual_seed(0)
    return float(_run(aggregator=aggregator or FedAvg(), **parts).summary["final_train_loss"])


def test_a_staticmethod_call_term_runs_as_the_function() -> None:
    """inspect.signature(instance) drops a staticmethod __call__'s first parameter: it read (context) and refused both."""
    plain = _loss(terms=[l2])
    assert _loss(terms=[StaticAssigned()]) == plain
    assert _loss(terms=[StaticDecorated()]) == plain


def test_an_update_wrapper_term_is_read_by_its_call() -> None:
    """inspect.signature followed the instance's __wrapped__ to l2_params(params) and refused it."""
    assert _loss(terms=[l2_params]) == _loss(terms=[l2])


def test_a_staticmethod_call_term_short_of_an_argument_is_still_one_line(tmp_path: Path) -> None:
    class StaticShort:
        reads = ()

        @staticmethod
        def __call__(params: Any) -> torch.Tensor:
            return torch.zeros(())

    err = _refused(tmp_path, aggregator=FedAvg(), terms=[StaticShort()])
    assert err.field == "terms[0]" and "StaticShort.__call__(params) cannot be called as __call__(params, context)" in err.message


def logs_round(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An adapter: takes the run's call by name, hands the hook it wraps all but `round`."""
    @functools.wraps(fn)
    def adapter(self: Any, global_params: Any, results: Any, round: int) -> Any:
        return fn(self, global_params, results)
    return adapter


class RoundLogged(FedAvg):
    @logs_round
    def aggregate(self, global_params: Any, results: Any) -> Any:  # type: ignore[override]
        return FedAvg.aggregate(self, global_params, results, 0)


def test_an_adapter_decorator_that_consumes_round_runs() -> None:
    """Its own parameters bind the run's call with nothing handed on through *args: what it passes on is its own."""
    assert _loss(RoundLogged()) == _loss(FedAvg())


def hands_on(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(self: Any, global_params: Any, results: Any, *args: Any) -> Any:
        return fn(self, global_params, results, *args)
    return wrapper


class HandsOnNoRound(FedAvg):
    @hands_on
    def aggregate(self, global_params: Any, results: Any) -> Any:  # type: ignore[override]  # `round` reaches it through *args
        return dict(global_params)


def test_a_wrapper_handing_round_on_to_a_hook_without_it_is_refused(tmp_path: Path) -> None:
    err = _refused(tmp_path, aggregator=HandsOnNoRound())
    assert err.field == "aggregator"
    assert "HandsOnNoRound.aggregate(global_params, results) cannot be called as aggregate(global_params, results, round)" in err.message
