"""Poisson sampling draws at q = max(1, floor(C N)) / N, not at ``client_fraction`` C: a run says so in one note.

Why: a privacy-amplification study at ``client_fraction = 0.01`` over 4 clients drew at q = 1/4, silently.
"""

from __future__ import annotations

from chillfl.config import FederationConfig, load_config
from chillfl.engine.loop import draw_clients
from chillfl.experiment import run_notes


def _notes(**federation: object) -> list[str]:
    config = load_config(None, {"dataset.name": "digits", "model.name": "mlp", **{f"federation.{k}": v for k, v in federation.items()}})
    return [n for n in run_notes(config, None, executor=False) if "draws each client with q" in n]


def test_a_fraction_below_one_over_n_is_noted() -> None:
    assert _notes(num_clients=4, client_fraction=0.01, sampling="poisson") == [
        "note: federation.sampling = 'poisson' draws each client with q = 1/4 = 0.25, not federation.client_fraction = 0.01: "
        "q is max(1, floor(client_fraction x num_clients)) / num_clients, and the privacy accountant charges that q"]
    # N = 50, C = 0.015: floor(0.75) = 0, so 1 client: q = 1/50 = 0.02
    (note,) = _notes(num_clients=50, client_fraction=0.015, sampling="poisson")
    assert "q = 1/50 = 0.02, not federation.client_fraction = 0.015" in note


def test_the_q_used_is_the_count_over_n() -> None:
    fed = FederationConfig(num_clients=4, client_fraction=0.01, sampling="poisson")
    drawn = [len(draw_clients(0, t, 4, fed.sample_size(), "poisson")) for t in range(400)]
    assert fed.sample_size() == 1 and 300 <= sum(drawn) <= 500  # mean 1 a round (q = 1/4), not 0.04


def test_nothing_is_said_where_q_is_the_fraction_or_a_count_is_set() -> None:
    assert _notes(num_clients=20, client_fraction=0.3, sampling="poisson") == []  # 6 of 20: q = 0.3
    assert _notes(num_clients=100, client_fraction=0.29, sampling="poisson") == []  # 29 of 100 (the 1e-9 nudge)
    assert _notes(num_clients=4, client_fraction=0.01, sampling="fixed") == []
    assert _notes(num_clients=4, clients_per_round=1, sampling="poisson") == []
