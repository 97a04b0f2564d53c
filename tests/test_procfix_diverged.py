"""A diverged run made from Python on the user's own model: resume's advice is the Python call, not `chillfl run`
of its config.toml (which refuses a custom model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import chillfl
from tiny_user_run import tiny_data, tiny_net
from chillfl.errors import Diverged




def _failed(tmp_path: Path) -> Path:
    config = {"federation": {"num_clients": 3, "rounds": 3}, "client": {"lr": 1e12, "batch_size": 16}, "checkpoint": {"every": 1}}
    with pytest.raises(Diverged):
        chillfl.run(model=tiny_net(), data=tiny_data(), config=config, out_dir=tmp_path, name="py", progress=False, strict=True)
    (failed,) = tmp_path.glob("*.failed")
    return failed


def test_resume_of_a_diverged_python_run_before_its_checkpoint_says_the_python_call(tmp_path: Path) -> None:
    failed = _failed(tmp_path)
    assert not (failed / "checkpoint.safetensors").is_file()  # diverged in round 1
    for force in (False, True):
        with pytest.raises(chillfl.ConfigError) as err:
            chillfl.resume(failed, model=tiny_net(), data=tiny_data(), force=force)
        assert "it ran on your own model and data from Python: start it again with chillfl.run(...)" in err.value.message, err.value.message
        assert "chillfl run " not in err.value.message


def test_resume_of_a_diverged_python_run_after_its_checkpoint_says_the_python_call(tmp_path: Path) -> None:
    def stop(record: dict[str, object], run: object) -> None:
        if record["round"] == 2:
            run.stop("as if round 3 had diverged")  # type: ignore[attr-defined]

    config = {"federation": {"num_clients": 3, "rounds": 3}, "client": {"batch_size": 16}, "checkpoint": {"every": 1}}
    partial = chillfl.run(model=tiny_net(), data=tiny_data(), config=config, out_dir=tmp_path, name="py", progress=False, callbacks=[stop]).folder
    assert partial is not None and (partial / "checkpoint.safetensors").is_file()
    failed = partial.rename(partial.with_suffix(".failed"))
    (failed / "failure.json").write_text(json.dumps({"round": 3, "reason": "training loss is nan"}))
    with pytest.raises(chillfl.ConfigError) as err:
        chillfl.resume(failed, model=tiny_net(), data=tiny_data())
    assert "chillfl.resume(..., force=True) with your own model and data" in err.value.message, err.value.message
    assert "`chillfl" not in err.value.message


def test_resume_of_a_diverged_run_on_an_aggregator_from_python_says_the_python_call(tmp_path: Path) -> None:
    """A registered model and dataset, but the user's own aggregator instance: `chillfl run` of its config.toml refuses
    ``algorithm.name = "custom"``, yet resume's advice named it."""
    from chillfl.extend import FedAvg

    config = {"dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]}, "federation": {"num_clients": 3, "rounds": 3},
              "client": {"lr": 1e12, "batch_size": 16}, "eval": {"client_split_size": 10}}
    with pytest.raises(Diverged):
        chillfl.run(config=config, aggregator=FedAvg(), out_dir=tmp_path, name="agg", progress=False, strict=True)
    (failed,) = tmp_path.glob("*.failed")
    with pytest.raises(chillfl.ConfigError) as err:
        chillfl.resume(failed, aggregator=FedAvg())
    assert "it ran on your own aggregator from Python: start it again with chillfl.run(...)" in err.value.message, err.value.message
