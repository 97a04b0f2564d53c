"""A round's ``dropped`` lists exactly the clients a dropout draw removed (the last draw's under ``retry``), ``attempts``
the draws made, and "no round trained" blames ``federation.dropout`` only where a draw left a big enough sample short.

Why: the too-few paths listed every sampled client as dropped (too few sampled, no draw made, ``dropout = 0``; the
one draw under ``skip``; every attempt under ``retry``), and the end-of-run line then told the user to lower a dropout
that had dropped nobody.
"""

from __future__ import annotations

import pytest

from chillfl.config import FederationConfig, load_config
from chillfl.engine.loop import availability
from chillfl.runner import no_round_remedy, run_experiment
from test_poisson_sampling import BASE


def test_too_few_sampled_makes_no_draw_and_drops_nobody() -> None:
    # seed 1, Poisson at q = 2/6: rounds draw [0, 1, 5], [1], nobody (test_poisson_sampling.BASE); min_clients 2, dropout 0
    records = run_experiment(load_config(None, {**BASE, "federation.min_clients": 2}), write=False, progress=False).records
    assert [r["clients"] for r in records] == [[0, 1, 5], [], []]
    assert records[0]["dropped"] == [] and records[0]["attempts"] == 1  # 3 sampled: one draw, at dropout 0 nobody drops
    assert {k: records[1][k] for k in ("sampled", "dropped", "skipped", "attempts")} == {
        "sampled": [1], "dropped": [], "skipped": True, "attempts": 0}  # was dropped [1], attempts 1
    assert {k: records[2][k] for k in ("sampled", "dropped", "skipped", "attempts")} == {
        "sampled": [], "dropped": [], "skipped": True, "attempts": 0}


def test_skip_lists_only_the_draws_drops() -> None:
    # seed 0, round 6, clients 0-3: the availability stream's first uniforms are 0.362 0.253 0.488 0.712; at dropout 0.5
    # clients 0, 1 and 2 drop and 3 alone reports, below min_clients 2: skipped, with 3 available (it was listed too)
    rules = FederationConfig(num_clients=4, clients_per_round=4, min_clients=2, dropout=0.5, on_too_few="skip")
    skipped = availability(0, 6, [0, 1, 2, 3], rules)
    assert skipped.skipped and skipped.dropped == [0, 1, 2] and skipped.attempts == 1


def test_retry_exhausted_lists_the_last_draws_drops() -> None:
    # seed 0, round 0, clients 0-2, dropout 0.8, min_clients 3: every one of the 11 draws drops someone; the 11th
    # (attempt 10) draws 0.273 0.813 0.084, so it drops 0 and 2 and keeps 1 (it listed all three)
    rules = FederationConfig(num_clients=5, clients_per_round=3, dropout=0.8, min_clients=3, on_too_few="retry")
    out = availability(0, 0, [0, 1, 2], rules)
    assert out.skipped and out.attempts == 11 and out.dropped == [0, 2]


def test_the_warning_names_too_few_sampled_not_dropout(caplog: pytest.LogCaptureFixture) -> None:
    # seed 37, 5 clients at q = 2/5: round 1 draws [0] alone, round 2 nobody; min_clients 2, so no draw is made in either,
    # and dropout 0.1 dropped nobody (the line said "sampled clients were dropped: lower federation.dropout = 0.1")
    over = {**BASE, "seed": 37, "federation.num_clients": 5, "federation.rounds": 2, "federation.min_clients": 2, "federation.dropout": 0.1}
    with caplog.at_level("WARNING", logger="chillfl.runner"):
        records = run_experiment(load_config(None, over), write=False, progress=False).records
    assert [(r["sampled"], r["dropped"], r["attempts"]) for r in records] == [([0], [], 0), ([], [], 0)]
    said = [m for m in caplog.messages if m.startswith("no round trained")]
    assert len(said) == 1 and said[0].endswith(
        "(too few clients with training rows sampled for federation.min_clients = 2: raise federation.clients_per_round or lower federation.min_clients)"), said


def test_dropout_is_blamed_only_where_the_sample_was_big_enough() -> None:
    config = load_config(None, {**BASE, "federation.min_clients": 2, "federation.dropout": 0.5})
    dropout = "sampled clients were dropped: lower federation.dropout = 0.5, or raise federation.clients_per_round or lower federation.min_clients"
    count = "too few clients with training rows sampled for federation.min_clients = 2: raise federation.clients_per_round or lower federation.min_clients"
    # two sampled, one dropped: the draw left the round short
    assert no_round_remedy(config, [{"round": 1, "sampled": [1, 4], "dropped": [4], "skipped": True}]) == dropout
    # one sampled (a released round draws even then) and dropped: too few sampled whatever the draw did
    assert no_round_remedy(config, [{"round": 1, "sampled": [1], "dropped": [1], "nobody_reported": True}]) == count
    # two sampled, one without training rows, the other dropped: too few could report
    assert no_round_remedy(config, [{"round": 1, "sampled": [1, 4], "dropped": [4], "no_data": [1], "skipped": True}]) == count
