"""FedRep's and LG-FedAvg's default kept entries under a model attack are refused on ``attack.kind``, as FedBN's and
FedPer's are (test_leftatk_fedbn.py): each averages entries its returning clients train from their own kept values, and
the attack forged them from the sent ones. FedRep's kept, averaged head is ``fc2``; LG-FedAvg keeps the body and
averages it, its first averaged entry ``features.0``. ``global_head = "keep"`` (FedRep) leaves the head out of the
average: then nothing kept is averaged, and the run goes on (test_leadownstart.py)."""

from __future__ import annotations

import pytest

from chillfl.cli import main
from test_leftatk_fedbn import SIGN_FLIP


@pytest.mark.parametrize(("name", "entry"), [("fedrep", "fc2.weight"), ("lg_fedavg", "features.0.weight")])
def test_fedrep_and_lg_fedavg_under_a_model_attack_are_one_line_on_attack_kind(name: str, entry: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", f"algorithm.name={name}", SIGN_FLIP, "--dry-run"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"chillfl: error: attack.kind: 'sign_flip' forges each attacker's upload from its update w - start, and algorithm '{name}' "
                           f"averages entries its returning clients train from their own kept values, not the sent ones (entry '{entry}')")


def test_fedrep_keeping_its_head_out_of_the_average_runs_under_a_model_attack() -> None:
    assert main(["run", "algorithm.name=fedrep", 'algorithm.global_head="keep"', SIGN_FLIP, "--dry-run"]) == 0
