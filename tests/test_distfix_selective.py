"""Selective-FD's round diagnostics are the round's own (distbase finding 3, and a stale value found beside it)."""

from __future__ import annotations

import pytest
import torch

from test_distillation_protocol import method_for, uplinks


def test_server_kept_counts_both_filters_and_is_not_carried_into_a_round_without_an_aggregate() -> None:
    # indices [0, 1, 2]; client 0 keeps 0 and 1, client 1 keeps 1; nobody keeps 2. tau_server = 2.0: the L1 selector is off.
    # selective_client_kept = mean(2/3, 1/3) = 1/2; selective_server_kept = 2/3 (sample 2 dropped by the clients' filter)
    ups = uplinks([[[0.9, 0.1], [0.5, 0.5]], [[0.7, 0.3]]], [[0, 1], [1]])
    method = method_for("selective_fd", public_size=10, subset_size=3, tau_server=2.0)
    method.aggregate(1, torch.tensor([0, 1, 2]), ups)
    first = method.round_metrics()
    assert first["selective_client_kept"] == pytest.approx(0.5)
    assert first["selective_server_kept"] == pytest.approx(2 / 3)
    # a round whose draw the cache serves whole calls no aggregate: it used to report the 2/3 of the round before
    assert method.round_metrics() == {"selective_client_kept": None, "selective_server_kept": None}
