"""A mistyped flag, and a config option typed as a flag (review cliux, finding 1): every other slip in chillfl was named
with a suggestion, ``--sed 1`` and ``--rounds 5`` only "unrecognized arguments"."""

from __future__ import annotations

import pytest

from test_clifix_flat_keys import _code, _error


# ---------------------------------------------------------------- 1: a mistyped flag, a config option typed as a flag


@pytest.mark.parametrize(("argv", "said"), [
    (["run", "demo", "--sed", "1"], "unrecognized arguments: --sed 1 (did you mean '--seed'?); `chillfl run --help` shows the usage"),
    (["run", "demo", "--dryrun"], "(did you mean '--dry-run'?)"),
    (["compare", "demo", "--grids", "client.lr=1,2"], "(did you mean '--grid'?)"),
    (["run", "demo", "--out-dir", "x"], "(did you mean '--out'?)"),  # the flag whose value is out_dir, not --data-dir
    (["run", "-seed", "3"], "(did you mean '--seed'?)"),
    (["data", "show", "demo", "--variants", "A"], "(did you mean '--variant'?)"),
    (["resume", "x.partial", "--forse"], "(did you mean '--force'?)"),
])
def test_a_mistyped_flag_is_named_with_the_flag_meant(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _code(argv) == 2
    assert said in _error(capsys)


@pytest.mark.parametrize(("argv", "said"), [
    (["run", "demo", "--rounds", "5"], "--rounds 5 (config options are overrides: federation.rounds=5); `chillfl run --help`"),
    (["run", "demo", "--lr", "0.1"], "(config options are overrides: client.lr=0.1)"),
    (["compare", "demo", "--lr=0.1"], "(config options are overrides: client.lr=0.1)"),
    (["run", "demo", "--policy", "fixed"], "(config options are overrides: temperature.policy=fixed)"),
    (["run", "demo", "--algorithm", "fedprox"], "(config options are overrides: algorithm.name=fedprox)"),
    (["run", "demo", "--method", "fedprox"], "(config options are overrides: algorithm.name=fedprox)"),
    (["run", "demo", "--threads", "2"], "(config options are overrides: threads=2)"),
    (["run", "demo", "--epochs"], "(config options are overrides: client.epochs=VALUE)"),
    (["run", "demo", "--name", "my run"], "(config options are overrides: name='my run')"),
    (["run", "demo", "--sed", "1", "--rounds", "5"], "(--sed: did you mean '--seed'?) (--rounds: config options are overrides: federation.rounds=5)"),
    # rev102b: an override after a switch is no value of it; a fixed T is two keys; a switch alone is =true; a negative
    # value is a value; --outfile is --output's (difflib's measure found --title closer)
    (["run", "demo", "--deterministic", "federation.rounds=2"], "(config options are overrides: deterministic=true)"),
    (["run", "demo", "--temperature", "2"], "(config options are overrides: temperature.policy=fixed temperature.value=2)"),
    (["run", "demo", "--compile"], "(config options are overrides: compile=true)"),
    (["run", "demo", "--lr", "-0.1"], "(config options are overrides: client.lr=-0.1)"),
    (["report", "x", "--outfile", "r.html"], "(did you mean '--output'?)"),
    # rev102c: a config option that starts like a flag is the option, not that flag (--data-dir, --strict, --out took the
    # value when pasted); --temperature NAME is a policy; --clients N the clients' number; --data the dataset
    (["run", "demo", "--dataset", "cifar10"], "(config options are overrides: dataset.name=cifar10)"),
    (["compare", "demo", "--dataset", "cifar10"], "(config options are overrides: dataset.name=cifar10)"),
    (["run", "demo", "--stragglers", "0.2"], "(config options are overrides: federation.stragglers=0.2)"),
    (["run", "demo", "--dropout", "0.1"], "(config options are overrides: federation.dropout=0.1)"),
    (["run", "demo", "--straggler-policy", "drop"], "(config options are overrides: federation.straggler_policy=drop)"),
    (["run", "demo", "--temperature", "fedchill"], "(config options are overrides: temperature.policy=fedchill)"),
    (["run", "demo", "--clients", "20"], "(config options are overrides: federation.num_clients=20)"),
    (["run", "demo", "--clients", "all"], "(config options are overrides: eval.clients=all)"),
    (["run", "demo", "--data", "cifar10", "--dry-run"], "(config options are overrides: dataset.name=cifar10; or did you mean '--data-dir'?)"),
    (["run", "--rounds", "5", "demo"], "(config options are overrides: federation.rounds=5; '5' was read as the config)"),
    (["run", "demo", "--seeds", "3", "--rounds", "5"], "(--rounds: config options are overrides: federation.rounds=5); --seeds is chillfl compare's"),
])
def test_a_config_option_typed_as_a_flag_is_shown_as_its_override(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _code(argv) == 2
    assert said in _error(capsys)


def test_a_flag_nothing_resembles_keeps_the_plain_line_and_compare_flags_their_own_hint(capsys: pytest.CaptureFixture[str]) -> None:
    assert _code(["run", "demo", "--xyzzy", "3"]) == 2
    assert _error(capsys) == "chillfl run: error: unrecognized arguments: --xyzzy 3; `chillfl run --help` shows the usage"
    assert _code(["run", "demo", "--seeds", "0,1"]) == 2  # compare's flag, not a typo of --seed
    line = _error(capsys)
    assert "--seeds is chillfl compare's" in line and "did you mean" not in line
    assert _code(["resume", "x.partial", "--rounds", "3"]) == 2  # resume takes no overrides: no override is offered
    assert "overrides" not in _error(capsys)
