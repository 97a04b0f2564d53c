"""PA3Fed's FGN weights m_i (Eq. 5): over the round's sampled clients (default) or over all clients' data (the paper's
"proportion of the total data held by client C_i", ``algorithm.fgn_weights = "total"``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import FedAvg
from chillfl.aggregation.pa3fed import PA3Fed, PA3FedOptions
from chillfl.aggregation.registry import make_aggregator
from chillfl.errors import ConfigError
from chillfl.metrics.fgn import federated_gradient_norm
from test_pa3fed import result, scored

# Three clients holding 10, 30 and 60 of 100 rows; a round samples clients 0 and 1 (10 + 30 rows).
SIZES = (10, 30, 60)


def test_fgn_of_both_readings_by_hand() -> None:
    # gradient norms 1 and 2, eta = 0.1 each
    # sampled: m = (10/40, 30/40) = (0.25, 0.75) -> 0.1 * (0.25 * 1 + 0.75 * 4) = 0.1 * 3.25 = 0.325
    assert federated_gradient_norm([1.0, 2.0], [10, 30], [0.1, 0.1]) == pytest.approx(0.325, rel=1e-12)
    # total: m = (10/100, 30/100) = (0.1, 0.3), summing to 0.4 -> 0.1 * (0.1 * 1 + 0.3 * 4) = 0.1 * 1.3 = 0.13
    assert federated_gradient_norm([1.0, 2.0], [10, 30], [0.1, 0.1], total=100) == pytest.approx(0.13, rel=1e-12)
    # without eta: 3.25 and 1.3
    assert federated_gradient_norm([1.0, 2.0], [10, 30], scale_by_lr=False, total=100) == pytest.approx(1.3, rel=1e-12)
    with pytest.raises(ValueError, match="every client"):  # fewer rows in all than in the round: not a total
        federated_gradient_norm([1.0, 2.0], [10, 30], [0.1, 0.1], total=39)


def rounds(agg: PA3Fed) -> list[tuple[float, bool]]:
    """(FGN, CLP) of two rounds: clients 0 and 1 (10 + 30 rows, norms 1), then client 2 alone (60 rows, norm 0.9)."""
    g = {"w": torch.zeros(1)}
    out = []
    for t, res in enumerate([[result(0, 10, 0.0, score=1.0, grad_norm=1.0), result(1, 30, 1.0, score=1.0, grad_norm=1.0)],
                             [result(2, 60, 2.0, score=1.0, grad_norm=0.9)]]):
        scored(agg).aggregate(g, res, t)
        m = agg.round_metrics()
        out.append((float(m["fgn"]), bool(m["clp"])))  # type: ignore[arg-type]
    return out


def test_the_reading_decides_the_period() -> None:
    # sampled: round 0 FGN = 0.1 * 1 = 0.1 (weights sum to 1); round 1 = 0.1 * 0.81 = 0.081, a fall: outside the CLP
    (f0, c0), (f1, c1) = rounds(PA3Fed(FedAvg()))
    assert (f0, f1) == (pytest.approx(0.1), pytest.approx(0.081)) and (c0, c1) == (False, False)
    # total: round 0 = 0.1 * 0.4 * 1 = 0.04; round 1 = 0.1 * 0.6 * 0.81 = 0.0486, a rise of 21.5% > delta = 0.01: a CLP round
    (f0, c0), (f1, c1) = rounds(PA3Fed(FedAvg(), PA3FedOptions(fgn_weights="total"), total_samples=100))
    assert (f0, f1) == (pytest.approx(0.04), pytest.approx(0.0486)) and (c0, c1) == (False, True)


def test_total_takes_every_clients_rows_from_the_build_context() -> None:
    model = nn.Linear(2, 2)
    built, _ = make_aggregator("pa3fed", {"fgn_weights": "total"}, num_clients=3, model=model, seed=0, client_sizes=SIZES)
    assert isinstance(built, PA3Fed) and built.total_samples == 100
    default, _ = make_aggregator("pa3fed", {}, num_clients=3, model=model, seed=0, client_sizes=SIZES)
    assert isinstance(default, PA3Fed) and default.options.fgn_weights == "sampled" and default.total_samples is None
    with pytest.raises(ConfigError) as exc:  # built outside a run: the rows are unknown
        make_aggregator("pa3fed", {"fgn_weights": "total"}, num_clients=3, model=model, seed=0)
    assert exc.value.field == "algorithm.fgn_weights"
    with pytest.raises(ConfigError) as exc:
        make_aggregator("pa3fed", {"fgn_weights": "all"}, num_clients=3, model=model, seed=0, client_sizes=SIZES)
    assert exc.value.field == "algorithm.fgn_weights"
    with pytest.raises(ValueError, match="total_samples"):
        PA3Fed(FedAvg(), PA3FedOptions(fgn_weights="total"))


def test_a_run_divides_by_its_partitions_rows() -> None:
    """Through a real run: "total" FGN = "sampled" FGN x the round's share of all rows (same clients, same models)."""
    from methods_e2e import config, protocol_rounds

    over = {"algorithm.name": "pa3fed", "model.name": "mlp"}
    exp, _, done = protocol_rounds(config(**over, **{"algorithm.fgn_weights": "total"}), rounds=2)
    _, _, plain = protocol_rounds(config(**over), rounds=2)
    sizes = exp.data.train_sizes()
    assert isinstance(exp.aggregator, PA3Fed) and exp.aggregator.total_samples == int(sizes.sum())
    for rec, ref in zip(done, plain):
        share = sum(int(sizes[c]) for c in rec["clients"]) / int(sizes.sum())
        assert 0 < share < 1
        assert rec["agg_fgn"] == pytest.approx(ref["agg_fgn"] * share, rel=1e-9)


def test_a_bad_reading_is_one_line_on_its_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from methods_e2e import cli_option_error

    code, err, written = cli_option_error(tmp_path, capsys, "pa3fed", "algorithm.fgn_weights=everyone")
    assert code == 2 and len(err) == 1 and "algorithm.fgn_weights" in err[0] and not written
