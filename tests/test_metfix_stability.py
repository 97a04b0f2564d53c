"""PA3Fed Table 1's stability summary averages every measure over the same clients: those with at least 2 values (Fig. 5's
rule). A client that trained once used to add std = MAD = range = 0 while being left out of the max change rate, so thin
participation looked stable in three columns and not the other two."""

from __future__ import annotations

import pytest

from chillfl.metrics.stability import format_stability_table, stability_summary

TWICE = [
    {"round": 1, "client_train_loss": {"0": 1.0}},
    {"round": 2, "client_train_loss": {"0": 3.0}},
    {"round": 3, "client_train_loss": {"0": 1.0}},
]
ONCE_MORE = [dict(TWICE[0], client_train_loss={"0": 1.0, "1": 5.0}), *TWICE[1:]]  # client 1 trained once


def test_a_client_that_trained_once_changes_no_column() -> None:
    alone, with_once = stability_summary(TWICE, window=2), stability_summary(ONCE_MORE, window=2)
    assert alone is not None and with_once is not None
    # client 0: (1, 3, 1): std sqrt(8/9), MAD 8/9, range 2, max change 2, moving std (window 2) (1 + 1) / 2
    want = {"std": (8 / 9) ** 0.5, "mad": 8 / 9, "range": 2.0, "max_change_rate": 2.0, "moving_std": 1.0}
    assert alone["table1"] == pytest.approx(want) and with_once["table1"] == pytest.approx(want)
    assert with_once["clients"] == 2  # every client with a trajectory
    assert with_once["table1_clients"] == {"std": 1, "moving_std": 1, "mad": 1, "range": 1, "max_change_rate": 1}


def test_each_measure_says_how_many_clients_it_rests_on() -> None:
    records = [{"round": r, "client_train_loss": {"0": float(r), **({"1": 2.0 * r} if r <= 2 else {})}} for r in range(1, 6)]
    s = stability_summary(records, window=5)  # client 0 has 5 values, client 1 has 2: the moving std rests on client 0
    assert s is not None and s["table1_clients"] == {"std": 2, "moving_std": 1, "mad": 2, "range": 2, "max_change_rate": 2}
    table = format_stability_table({"run": s})
    assert "clients (moving_std)" in table.splitlines()[0] and "| 2 of 2 (1) |" in table


def test_no_client_with_two_values_leaves_table1_undefined() -> None:
    s = stability_summary([{"round": 1, "client_train_loss": {"0": 1.0, "1": 2.0}}])
    assert s is not None and set(s["table1"].values()) == {None} and set(s["table1_clients"].values()) == {0}
    assert "| 0 of 2 (0) |" in format_stability_table({"run": s})
