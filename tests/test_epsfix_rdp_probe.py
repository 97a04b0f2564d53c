"""The RDP accountant's planned history is probed before round 1, as the PRV accountant's is (one probe,
:func:`chillfl.privacy.accounting.history_refusal`): a vanishing noise multiplier under ``accountant = "rdp"`` ran on with
every round's epsilon null (sigma 1e-155: an unbounded budget, said nowhere until summary.json) or died after round 1
(sigma 1e-200: Opacus's ZeroDivisionError), where the PRV accountant refused it in one line, exit 2, naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

import chillfl
from chillfl.errors import ConfigError
from test_accountant_limits import run

pytest.importorskip("opacus")


@pytest.mark.parametrize("sigma", ["1e-155", "1e-200"])
def test_a_vanishing_noise_under_rdp_is_one_line_before_the_run(sigma: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(tmp_path, capsys, f'accountant = "rdp"\nnoise_multiplier = {sigma}', rounds=2)
    assert code == 2 and len(err) == 1, err  # 1e-155: exit 0, each round's epsilon null; 1e-200: exit 2 after round 1 had trained
    assert err[0].startswith(f"chillfl: error: privacy.noise_multiplier: the RDP accountant cannot account noise multiplier {float(sigma):.4g} "
                             "at sample rate 1 over 1 steps: below noise multiplier 1e-150")
    assert err[0].endswith("; raise noise_multiplier")  # no "use accountant = 'rdp'": it is the RDP accountant
    assert not (tmp_path / "out").exists()


def test_the_python_api_refuses_it_before_the_run_too() -> None:
    config = {"dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]}, "federation": {"num_clients": 4, "rounds": 2},
              "eval": {"client_split_size": 20}, "privacy": {"mechanism": "dp-fedavg", "noise_multiplier": 1e-155, "accountant": "rdp"}}
    rounds: list[int] = []
    with pytest.raises(ConfigError) as info:
        chillfl.run(config=config, write=False, progress=False, callbacks=[lambda record: rounds.append(record["round"])])
    assert info.value.field == "privacy.noise_multiplier" and "the RDP accountant cannot account" in str(info.value)
    assert rounds == []  # before round 1, not after it

