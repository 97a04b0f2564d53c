"""rev111 3: scarlet-deficit blames ``--drift-executor`` exactly when the drift arm builds under the config's executor and
not under the flag's. Picked by the refused field, the refusals of ``compile``, ``cuda_graphs`` and ``batched_conv`` (an
executor that does not vectorise has none of them) came out on the config's field alone, with an executor the config did
not set."""

from __future__ import annotations

import pytest

from chillfl.cli import main
from chillfl.config import RunConfig
from chillfl.errors import ConfigError

DRIFT = ["analyze", "scarlet-deficit", "--rounds", "2", "--seeds", "0", "--parts", "d,drift", "--durations", "0",
         "--subset-sizes", "", "--betas", "1"]


def test_compile_refused_under_the_drift_executor_names_the_flag(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The config runs vectorised and compiled; --drift-executor sequential is what cannot compile (refused by the arm's
    config itself, so the build, which would load the data, is faked)."""
    import chillfl.experiment

    monkeypatch.setattr(chillfl.experiment, "build_experiment", lambda config: None)
    assert main([*DRIFT, "--drift-executor", "sequential", "compile=true", "executor=vectorized"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == ("chillfl: error: --drift-executor: 'sequential': compile: compiles the vectorised executor's step; "
                                 "executor 'sequential' has none: use 'vectorized' or 'auto'\n"), (out, err)


def _refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], everywhere: bool) -> str:
    """The run's build faked: the first planned arm builds; then the drift arm is refused on client.lr under vectorized
    (the flag's), and under sequential (the config's) as well where ``everywhere``. stderr; the exit status must be 2."""
    import chillfl.experiment

    built: list[str] = []

    def build(config: RunConfig) -> None:
        built.append(config.executor)
        if len(built) > 1 and (everywhere or config.executor == "vectorized"):
            raise ConfigError("client.lr", "too large for this arm")

    monkeypatch.setattr(chillfl.experiment, "build_experiment", build)
    assert main([*DRIFT, "--drift-executor", "vectorized", "--quiet"]) == 2
    out, err = capsys.readouterr()
    assert out == "", out
    return err


def test_a_refusal_only_the_drift_executor_gets_names_the_flag(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert _refused(monkeypatch, capsys, everywhere=False) == "chillfl: error: --drift-executor: 'vectorized': client.lr: too large for this arm\n"


def test_a_refusal_the_configs_executor_gets_too_is_the_configs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert _refused(monkeypatch, capsys, everywhere=True) == "chillfl: error: client.lr: too large for this arm\n"
