"""Warnings said once a top-level call: a comparison builds many runs from one config, and ``chillfl list`` asks each
part for its plugins, so the same advice would otherwise print once a run or once a part.

The scope is one call (:func:`said_once`): ``chillfl.run`` / ``compare`` / ``resume`` / ``resume_compare`` /
``reproduce_paper`` / ``available`` and each ``chillfl`` command enter it, and a comparison's runs inside it share
what was said. Not the process: a notebook's second ``chillfl.run`` of the same config says its notes again.
``build_experiment``, ``run_experiment`` and ``resume_experiment`` called alone are scopes too; outside any scope
(a part checked directly) every warning is said. Keyed by the logger's name and the message, or by a
key the caller gives when the advice is the same but its numbers differ from run to run.
"""

from __future__ import annotations

import functools
import logging
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator, TypeVar

_SAID: ContextVar[set[tuple[str, str]] | None] = ContextVar("chillfl_said_once", default=None)

F = TypeVar("F", bound=Callable[..., Any])

@contextmanager
def said_once() -> Iterator[None]:
    """One call's scope: a fresh record of what was said, or the enclosing call's (a run inside a comparison)."""
    if _SAID.get() is not None:
        yield
        return
    token = _SAID.set(set())
    try:
        yield
    finally:
        _SAID.reset(token)


class _Everything(set[tuple[str, str]]):
    """A record that holds every warning: :func:`hushed`'s."""

    def __contains__(self, item: object) -> bool:
        return True


@contextmanager
def hushed() -> Iterator[None]:
    """Nothing :func:`warn_once` says is said inside: options tried, not run (a refusal asking a declaration again under
    another value), whose warnings would read as the run's ("this run ignores it")."""
    token = _SAID.set(_Everything())
    try:
        yield
    finally:
        _SAID.reset(token)


def once_per_call(fn: F) -> F:
    """``fn`` inside :func:`said_once`: an API entry point, or a step a caller may take alone (``build_experiment``,
    ``run_experiment``), whose parts would otherwise repeat one another's warnings (an option checked at each build)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with said_once():
            return fn(*args, **kwargs)

    return call  # type: ignore[return-value]


def warn_once(log: logging.Logger, message: str, key: str | None = None, level: int = logging.WARNING) -> bool:
    """``message`` as a warning (or at ``level``) on ``log`` the first time this call says it (or anything under ``key``); whether it did."""
    said = (log.name, message if key is None else key)
    scope = _SAID.get()
    if scope is not None:
        if said in scope:
            return False
        scope.add(said)
    log.log(level, "%s", message)
    return True


def forget() -> None:
    """Nothing said yet: what a test sees on stderr must not depend on which tests ran before it in the process."""
    scope = _SAID.get()
    if scope is not None:
        scope.clear()
