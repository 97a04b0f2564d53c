""""no round trained" names ``federation.dropout`` (and dropped stragglers) when the records show dropped clients.

Why: with every sampled client dropped by ``dropout = 0.9`` the warning advised only ``clients_per_round`` and
``min_clients``, neither of which touches the cause.
"""

from __future__ import annotations

from typing import Any

import pytest

from chillfl.config import load_config
from chillfl.runner import run_experiment
from test_poisson_sampling import BASE

FIXED = {**BASE, "federation.sampling": "fixed", "federation.clients_per_round": 1, "federation.rounds": 2, "eval.clients": "none"}


def _warning(caplog: pytest.LogCaptureFixture, **extra: Any) -> tuple[list[dict[str, Any]], str]:
    config = load_config(None, {**FIXED, **extra})
    with caplog.at_level("WARNING", logger="chillfl.runner"):
        out = run_experiment(config, write=False, progress=False)
    said = [m for m in caplog.messages if m.startswith("no round trained")]
    assert len(said) == 1, caplog.messages
    return out.records, said[0]


def test_dropout_is_named_when_it_dropped_every_sampled_client(caplog: pytest.LogCaptureFixture) -> None:
    records, said = _warning(caplog, **{"federation.dropout": 0.999})
    assert all(r["skipped"] and r["dropped"] == r["sampled"] for r in records)
    # min_clients = 1 cannot be lowered: not advised
    assert said.endswith("(sampled clients were dropped: lower federation.dropout = 0.999, or raise federation.clients_per_round)"), said


def test_dropped_stragglers_are_named(caplog: pytest.LogCaptureFixture) -> None:
    _, said = _warning(caplog, **{"federation.stragglers": 0.999, "federation.straggler_policy": "drop"})
    assert "lower federation.stragglers = 0.999 (straggler_policy = 'drop'), or raise federation.clients_per_round" in said, said


def test_without_dropout_the_count_is_advised() -> None:
    from chillfl.runner import no_round_remedy

    # too few sampled for min_clients (an older record listing them as dropped), and no dropout or dropped straggler configured
    config = load_config(None, {**FIXED, "federation.sampling": "poisson", "federation.clients_per_round": 2, "federation.min_clients": 2})
    assert no_round_remedy(config, [{"round": 1, "sampled": [1], "dropped": [1], "skipped": True}]) == (
        "too few clients with training rows sampled for federation.min_clients = 2: raise federation.clients_per_round or lower federation.min_clients")
    # the fraction sets the count where no clients_per_round is given: it is the option named
    config = load_config(None, {**FIXED, "federation.clients_per_round": None, "federation.client_fraction": 0.25, "federation.dropout": 0.5})
    assert no_round_remedy(config, [{"round": 1, "sampled": [], "dropped": [], "skipped": True}]) == (
        "too few clients with training rows sampled for federation.min_clients = 1: raise federation.client_fraction")
