"""Registry loading from two threads: the second waits for the first's walk instead of reading a half-filled
registry (two ``chillfl.run()`` threads lost a figure; ``get`` of an algorithm returned None)."""

from __future__ import annotations

import importlib
import threading
from typing import Callable

import pytest

from chillfl import plugins
from chillfl.plugins import Registry


def _slowed(monkeypatch: pytest.MonkeyPatch, registry: Registry[int]) -> tuple[threading.Event, threading.Event]:
    """Make importing the fake module ``racefix_a`` stop until released; it registers ``a`` then."""
    started, release = threading.Event(), threading.Event()
    real = importlib.import_module

    def import_module(name: str, package: str | None = None) -> object:
        if name == "racefix_a":
            started.set()
            assert release.wait(10)
            registry.register("a", 1)
            return None
        if name == "racefix_b":
            registry.register("b", 2)
            return None
        return real(name, package)

    monkeypatch.setattr(plugins.importlib, "import_module", import_module)
    return started, release


def _race(monkeypatch: pytest.MonkeyPatch, second: Callable[[Registry[int]], object]) -> object:
    registry: Registry[int] = Registry("thing", modules=["racefix_a", "racefix_b"])
    started, release = _slowed(monkeypatch, registry)
    results: dict[str, object] = {}
    first = threading.Thread(target=lambda: results.update(first=registry.specs()))
    first.start()
    assert started.wait(10)
    other = threading.Thread(target=lambda: results.update(second=second(registry)))
    other.start()
    other.join(0.5)  # the old code answers at once (empty); the new one waits for the walk, released here
    release.set()
    other.join(10)
    first.join(10)
    assert results["first"] == {"a": 1, "b": 2}
    return results["second"]


def test_specs_from_a_second_thread_waits_for_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _race(monkeypatch, lambda r: r.specs()) == {"a": 1, "b": 2}


def test_get_from_a_second_thread_waits_for_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _race(monkeypatch, lambda r: r.get("b")) == 2


def test_lookup_during_the_walk_in_the_same_thread_sees_the_partial_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    registry: Registry[int] = Registry("thing", modules=["racefix_c", "racefix_d"])
    seen: list[int | None] = []
    real = importlib.import_module

    def import_module(name: str, package: str | None = None) -> object:
        if name == "racefix_c":
            registry.register("c", 3)
            seen.append(registry.get("d"))  # re-entrant: no deadlock, and no second walk
            return None
        if name == "racefix_d":
            registry.register("d", 4)
            return None
        return real(name, package)

    monkeypatch.setattr(plugins.importlib, "import_module", import_module)
    assert registry.specs() == {"c": 3, "d": 4}
    assert seen == [None]


def test_a_failed_walk_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    registry: Registry[int] = Registry("thing", modules=["racefix_e"])
    calls: list[str] = []
    real = importlib.import_module

    def import_module(name: str, package: str | None = None) -> object:
        if name == "racefix_e":
            calls.append(name)
            raise ImportError("broken")
        return real(name, package)

    monkeypatch.setattr(plugins.importlib, "import_module", import_module)
    for _ in range(2):
        with pytest.raises(ImportError):
            registry.specs()
    assert calls == ["racefix_e", "racefix_e"]
