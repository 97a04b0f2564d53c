"""A method whose clients change their start inside their own training (``Capabilities.trains_from_own_start``) is
refused with a model attack before the run, on ``attack.kind`` (rev116c 1, 2): the attack forges from w - start with
the start the server sent, so FedFomo's, FedALA's and APPLE's attackers forged other uploads with no word, and FedAMP,
caught by the clients' start check, stopped in round 2 with round 1 on disk."""

from __future__ import annotations

import pytest

from chillfl.capabilities import Capabilities
from chillfl.cli import main

SIGN_FLIP = 'attack={kind="sign_flip", clients=[0]}'


@pytest.mark.parametrize("name", ["fedamp", "fedala", "fedfomo", "apple", "pfedsim"])
def test_a_model_attack_on_a_method_training_from_its_own_start_is_one_line_before_the_run(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", f"algorithm.name={name}", SIGN_FLIP, "--dry-run"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"chillfl: error: attack.kind: 'sign_flip' forges each attacker's upload from its update w - start, and algorithm '{name}' "
                           "trains from a start the server does not know (")


@pytest.mark.parametrize("args", [["algorithm.name=fedala", 'attack={kind="label_flip", clients=[0]}'],  # poisons rows: no start read
                                  ["algorithm.name=ifca", SIGN_FLIP],  # reports the start it chose (ChoosesStart)
                                  ["algorithm.name=fedrep", 'algorithm.global_head="keep"', SIGN_FLIP]])  # its kept head not averaged
def test_a_data_attack_and_a_method_whose_start_the_server_knows_run(args: list[str]) -> None:
    assert main(["run", *args, "--dry-run"]) == 0


def test_a_wrapper_inherits_it() -> None:
    base = Capabilities(trains_from_own_start="each client trains from its own model")
    assert Capabilities().wrapping(base).trains_from_own_start == "each client trains from its own model"
    assert Capabilities().wrapping(Capabilities()).trains_from_own_start is None
