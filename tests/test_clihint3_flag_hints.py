"""A config option typed as a flag (review rev102c, findings 1, 3 and 6): the hint names the option, not a flag that
starts alike (``--dataset``: ``--data-dir``, which pasted ran with ``data_dir = "cifar10"``), and every override it
names is read when pasted; argparse's abbreviations are off (``--data cifar10`` was ``--data-dir cifar10``)."""

from __future__ import annotations

import argparse
import re

import pytest

from chillfl import cli
from chillfl.config import RunConfig
from chillfl.options import flat_key_fields
from test_clifix_flat_keys import _code, _error


def _offered(line: str) -> list[list[str]]:
    """The overrides a hint line offers, each alternative (``A or B``) as the words to paste."""
    found = re.search(r"config options are overrides: ([^;)]*)", line)
    assert found, line
    return [alternative.split() for alternative in found[1].split(" or ")]


@pytest.mark.parametrize("argv", [
    ["run", "demo", "--dataset", "cifar10"],
    ["run", "demo", "--stragglers", "0.2"],
    ["run", "demo", "--dropout", "0.1"],
    ["run", "demo", "--straggler-fraction", "0.1"],
    ["run", "demo", "--straggler-policy", "drop"],
    ["run", "demo", "--straggler-work", "fixed"],
    ["run", "demo", "--temperature", "fedchill"],
    ["run", "demo", "--temperature", "2"],
    ["run", "demo", "--clients", "20"],
    ["run", "demo", "--clients", "all"],
    ["run", "demo", "--data", "cifar10"],
    ["run", "--rounds", "5", "demo"],
    ["run", "demo", "--seeds", "3", "--rounds", "5"],
], ids=lambda argv: " ".join(argv[1:]))
def test_every_override_a_flag_hint_names_is_read_when_pasted(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert _code([*argv, "--dry-run"]) == 2  # --dry-run: the code before this took `--data` as --data-dir and ran the demo
    line = _error(capsys)
    assert "--help'" not in line and "--strict'" not in line and "--out'" not in line
    for words in _offered(line):
        one = ["--variant", "T=1", "--seed", "0"] if words[0].startswith("temperature.") else []  # every demo row sets T: one row's run reads it
        assert _code(["run", "demo", *one, *words, "--dry-run"]) == 0, (line, words, capsys.readouterr().err)
        capsys.readouterr()


def test_a_flag_given_a_value_is_not_told_it_meant_a_flag_that_takes_none(capsys: pytest.CaptureFixture[str]) -> None:
    assert _code(["run", "demo", "--held", "5"]) == 2  # `held` is [attack]'s bookkeeping, no option: --help was the guess
    assert _error(capsys) == "chillfl run: error: unrecognized arguments: --held 5; `chillfl run --help` shows the usage"
    assert flat_key_fields(RunConfig, "held") == [] and flat_key_fields(RunConfig, "options") == []
    assert _code(["run", "demo", "--dryrun"]) == 2  # a switch typed alone is still guessed
    assert "(did you mean '--dry-run'?)" in _error(capsys)


def test_an_abbreviated_flag_is_refused_not_taken_as_the_flag_it_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert _code(["run", "demo", "--data", "cifar10", "--dry-run"]) == 2  # was read as --data-dir cifar10, exit 0
    assert "dataset.name=cifar10" in _error(capsys)
    assert _code(["run", "demo", "--dry", "federation.rounds=1"]) == 2
    assert "(did you mean '--dry-run'?)" in _error(capsys)

    def parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
        subs = [p for a in parser._actions if isinstance(a, argparse._SubParsersAction) for p in a.choices.values()]
        return [parser, *(q for p in subs for q in parsers(p))]

    every = parsers(cli.build_parser(analyses=True))
    assert len(every) > 10 and not [p.prog for p in every if p.allow_abbrev]


def test_an_option_is_offered_only_where_its_type_takes_the_value() -> None:
    from chillfl.options import option_takes  # new with this check: the other tests here run against the code before it

    assert not option_takes(RunConfig, "eval.clients", 3) and option_takes(RunConfig, "eval.clients", "all")
    assert not option_takes(RunConfig, "attack.clients", 3) and option_takes(RunConfig, "attack.clients", [1, 2])  # [attack]'s shared options
    assert option_takes(RunConfig, "federation.num_clients", 3) and option_takes(RunConfig, "algorithm.mu", "x")  # a part's own: not known here
    assert cli._option_override("--clients", None) == (
        "config options are overrides: attack.clients=VALUE or eval.clients=VALUE or federation.num_clients=VALUE")
