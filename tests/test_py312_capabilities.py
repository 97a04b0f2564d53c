"""A wrapped server protocol's capabilities under Python 3.12's ``isinstance`` (:func:`chillfl.engine.protocol.capability`).

From Python 3.12 an ``isinstance`` check against a runtime-checkable Protocol looks members up with
``inspect.getattr_static``, which never calls ``__getattr__``; 3.10 and 3.11 used ``hasattr``, which does. An
:class:`~chillfl.engine.protocol.AroundProtocol` (``[privacy]``'s accountant, ``[attack]``'s record) forwards every
attribute to its inner protocol through ``__getattr__``, so on 3.12 an ``isinstance`` capability check on it read
False: DP-FedAvg's rounds nobody reported were skipped, not released (no noise, no epsilon), and pFedMe's
``train = "all"`` ran as ``"sampled"``. This venv is 3.11, so the fixture ``py312`` gives isinstance 3.12's rule.
"""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import pytest

from chillfl.config import load_config
from chillfl.engine import protocol as seam
from chillfl.engine.protocol import (AroundProtocol, KeepsClientStates, MeasuresNow, ObservesSkippedRounds, ReleasesEmptyRounds, TrainsUnreported,
                                     capability)
from chillfl.runner import run_experiment
from methods_e2e import records
from test_trainall_pfedme import N, S, pfedme


def _protocol_attrs(cls: type) -> Any:
    """The members typing checks (3.12's ``__protocol_attrs__``; before, computed each check)."""
    return cls.__dict__.get("__protocol_attrs__") or typing._get_protocol_attrs(cls)  # type: ignore[attr-defined]


def _instancecheck_312(cls: type, instance: object) -> bool:
    """``isinstance(instance, cls)`` for a runtime-checkable Protocol as Python 3.12's ``_ProtocolMeta.__instancecheck__``
    decides it: a nominal subclass, else every member found by ``inspect.getattr_static`` (a method's not None)."""
    if type.__instancecheck__(cls, instance):
        return True
    for name in _protocol_attrs(cls):
        try:
            found = inspect.getattr_static(instance, name)
        except AttributeError:
            return False
        if found is None and callable(getattr(cls, name, None)):
            return False
    return True


@pytest.fixture
def py312(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """isinstance against any runtime-checkable Protocol with Python 3.12's static lookup, for the test's duration."""
    meta: Any = typing._ProtocolMeta  # type: ignore[attr-defined]
    original = meta.__instancecheck__

    def check(cls: Any, instance: object) -> bool:
        if not cls.__dict__.get("_is_runtime_protocol", False):
            return bool(original(cls, instance))
        return _instancecheck_312(cls, instance)

    monkeypatch.setattr(meta, "__instancecheck__", check)
    yield


class Inner:
    """A protocol with every capability of the seam, and a client store."""

    def __init__(self) -> None:
        self.store: Any = "store"
        self.unreported: list[int] = []

    def releases_empty_rounds(self) -> bool:
        return True

    def skipped_round(self, round: int) -> Mapping[str, Any]:
        return {"inner": round}

    def measure_now(self) -> Mapping[str, Any]:
        return {"measured": 1}

    def trains_unreported(self) -> bool:
        return True

    def configure_unreported(self, round: int, clients: Sequence[int]) -> list[Any]:
        return []

    def receive_unreported(self, round: int, tasks: Sequence[Any], replies: Sequence[Any]) -> None:
        self.unreported.append(round)


class Receiving(AroundProtocol):
    """A wrapper that overrides one member of :class:`TrainsUnreported` and forwards the two others."""

    OWN = frozenset({"received"})

    def __init__(self, protocol: Any) -> None:
        super().__init__(protocol, client=protocol)
        self.received = 0

    def receive_unreported(self, round: int, tasks: Sequence[Any], replies: Sequence[Any]) -> None:
        self.received += 1


def test_the_emulation_is_python_312s(py312: None) -> None:
    """The fixture does what 3.12 does: a wrapper's forwarded capability is invisible to isinstance; the plain one's is not."""
    wrapped = AroundProtocol(Inner(), client=Inner())  # type: ignore[arg-type]
    assert not isinstance(wrapped, ReleasesEmptyRounds) and not isinstance(wrapped, TrainsUnreported)
    assert isinstance(Inner(), ReleasesEmptyRounds) and isinstance(Inner(), TrainsUnreported)


@pytest.mark.parametrize("emulated", [False, True])
def test_capability_sees_through_wrappers_on_every_python(request: pytest.FixtureRequest, emulated: bool) -> None:
    if emulated:
        request.getfixturevalue("py312")
    inner = Inner()
    wrapped = AroundProtocol(AroundProtocol(inner, client=inner), client=inner)  # type: ignore[arg-type]
    for kind in (ReleasesEmptyRounds, ObservesSkippedRounds, MeasuresNow, TrainsUnreported, KeepsClientStates):
        assert capability(wrapped, kind) is wrapped, kind  # type: ignore[arg-type]
    lacking = AroundProtocol(object(), client=inner)  # type: ignore[arg-type]
    assert capability(lacking, TrainsUnreported) is None and capability(lacking, KeepsClientStates) is None  # type: ignore[arg-type]
    # a wrapper's own override is the one called, the members it lacks are its inner's (as 3.11's isinstance had it)
    receiving = Receiving(inner)
    found = capability(receiving, TrainsUnreported)  # type: ignore[arg-type]
    assert found is receiving and found.trains_unreported()
    found.receive_unreported(0, [], [])
    assert receiving.received == 1 and inner.unreported == []


def test_a_method_set_to_none_is_no_capability() -> None:
    inner = Inner()
    inner.releases_empty_rounds = None  # type: ignore[assignment,method-assign]
    assert capability(AroundProtocol(inner, client=inner), ReleasesEmptyRounds) is None  # type: ignore[arg-type]


# ---------------------------------------------------------------- whole runs under 3.12's rule

def test_dp_fedavg_releases_and_charges_a_round_nobody_reported(py312: None) -> None:
    pytest.importorskip("opacus")
    from test_privacy_empty_rounds import TINY

    config = load_config(None, {**TINY, "federation.sampling": "fixed", "federation.dropout": 0.5})
    done = run_experiment(config, write=False, progress=False).records
    empty = [r for r in done if not r["clients"]]
    assert empty, "the seed draws a round nobody reports"
    assert all(r.get("nobody_reported") is True and "skipped" not in r and r.get("epsilon") is not None for r in empty)


@pytest.mark.parametrize("wrapper", [{"attack.kind": "sign_flip", "attack.fraction": 0.5}, {"privacy.mechanism": "dp-fedavg", "privacy.noise_multiplier": 1.0}])
def test_pfedme_train_all_trains_every_client_under_a_wrapper(py312: None, wrapper: dict[str, Any]) -> None:
    if "privacy.mechanism" in wrapper:
        pytest.importorskip("opacus")
    (every,) = records(pfedme(**wrapper, **{"algorithm.train": "all"}))
    (sampled,) = records(pfedme(**wrapper))
    assert every["local_clients"] == N and sampled["local_clients"] == S
    assert every["bytes_down"] == N // S * sampled["bytes_down"] and every["bytes_up"] == sampled["bytes_up"]  # N models down, S up


def test_flower_swaps_a_wrapped_protocols_store(py312: None) -> None:
    from chillfl.flower.apps import NodeStore, keep_client_state_on_nodes

    class Store:
        closed = False

        def close(self) -> None:
            self.closed = True

    inner, old = Inner(), Store()
    inner.store = old
    keep_client_state_on_nodes(AroundProtocol(inner, client=inner))  # type: ignore[arg-type]
    assert old.closed and isinstance(inner.store, NodeStore)


# ---------------------------------------------------------------- the rule, statically

SRC = Path(seam.__file__).resolve().parents[1]
CAPABILITIES = re.findall(r"@runtime_checkable\nclass (\w+)\(", Path(seam.__file__).read_text())


def test_no_core_file_asks_a_protocol_capability_with_isinstance() -> None:
    """Every server-protocol capability is asked through capability(): an isinstance of one is False on 3.12 for a wrapper."""
    assert {"TrainsUnreported", "ReleasesEmptyRounds", "KeepsClientStates", "MeasuresNow"} <= set(CAPABILITIES)
    pattern = re.compile(r"isinstance\([^()]*,\s*\(?[^()]*\b(" + "|".join(CAPABILITIES) + r")\b")
    found = [f"{path.relative_to(SRC)}:{n}" for path in sorted(SRC.rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
