"""A noise multiplier so small that Opacus's RDP series is no number (below ``RDP_MIN_SIGMA``) is an AccountantError
from the ledger, under either accountant: it was a ZeroDivisionError (sigma^2 = 0), an infinite epsilon, or a loop
without end (sigma 1e-155 at q < 1: the fractional orders' terms overflow to NaN, which its end test never passes),
and the PRV plan's probe, which sizes its grid by the RDP accountant, hung before round 1. ``history_refusal`` is the plan's
probe of a unit's planned history, for either accountant."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.privacy.accounting import RDP_MIN_SIGMA, AccountantError, Ledger, history_refusal

pytest.importorskip("opacus")


@pytest.mark.parametrize("kind", ["rdp", "prv"])
@pytest.mark.parametrize("sigma,rate", [(1e-155, 0.5), (1e-200, 1.0), (1e-160, 1.0)])
def test_a_noise_below_the_rdp_series_is_an_accountant_error(kind: str, sigma: float, rate: float, guard: None) -> None:
    # 1e-155 at q = 0.5 looped for ever; 1e-200 at q = 1 divided by zero; 1e-160 at q = 1 was an infinite epsilon (RDP)
    ledger = Ledger(1e-5, kind)
    ledger.spend("unit", sigma, rate, 2)
    with pytest.raises(AccountantError, match=f"cannot account noise multiplier {sigma:.4g} at sample rate {rate:.4g} over 2 steps: below noise multiplier 1e-150"):
        ledger.epsilon()


def test_the_smallest_noise_still_gives_a_finite_rdp_epsilon(guard: None) -> None:
    for rate in (1.0, 0.5):
        ledger = Ledger(1e-5, "rdp", "extended")
        ledger.spend("unit", RDP_MIN_SIGMA, rate, 3)
        assert 1e299 < ledger.epsilon() < float("inf")


def test_refusal_probes_either_accountant(guard: None) -> None:
    assert history_refusal(1e-5, 0.5, 1.0, 3, "rdp") is None
    assert history_refusal(1e-5, 1e-6, 1.0, 3, "rdp") is None  # 1.65e12: a bound, stated
    below = history_refusal(1e-5, 1e-155, 0.5, 3, "rdp")
    assert below is not None and below.startswith("the RDP accountant cannot account noise multiplier 1e-155 at sample rate 0.5 over 1 steps")
    assert history_refusal(1e-5, 1e-150, 1.0, 10**9, "rdp") == ("the RDP accountant gives no finite epsilon for noise multiplier 1e-150 at sample rate 1 "
                                                        "over 1000000000 steps (its RDP overflows a float)")


RUN = """name = "tiny"
seed = 0
threads = 1
device = "cpu"
out_dir = "{out}"
[federation]
num_clients = 4
clients_per_round = 2
rounds = 1
[client]
batch_size = 32
[eval]
client_split_size = 20
[dataset]
name = "digits"
[model]
name = "mlp"
hidden = [8]
[privacy]
mechanism = "dp-fedavg"
accountant = "prv"
noise_multiplier = 1e-155
"""


def test_the_prv_probe_refuses_a_vanishing_noise_at_q_below_one_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], guard: None) -> None:
    # q = 2 / 4: the probe's grid sizing ran Opacus's fractional-order series, which never ended at sigma 1e-155
    path = tmp_path / "run.toml"
    path.write_text(RUN.format(out=tmp_path / "out"), encoding="utf-8")
    code = main(["run", str(path), "--quiet"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("chillfl: error: privacy.noise_multiplier: the PRV accountant cannot account noise multiplier 1e-155 at sample rate 0.5 over 1 steps")
    assert not (tmp_path / "out").exists()
