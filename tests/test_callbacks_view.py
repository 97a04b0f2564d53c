"""Callbacks that see the run (issue 25): read-only copies of the global and client models, a custom metric,
early stopping that leaves a complete, resumable run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import chillfl
from chillfl.cli import main
from digits_net import Net

SMALL = {"federation": {"num_clients": 4, "rounds": 4}, "client": {"lr": 0.05, "batch_size": 32}, "eval": {"client_split_size": 20}}



@pytest.fixture(scope="module")
def data() -> chillfl.TensorData:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    return chillfl.TensorData(x[:1400], y[:1400], x[1400:], y[1400:], num_classes=10)


def test_a_custom_metric_on_the_global_model_and_copies_that_cannot_change_the_run(data: chillfl.TensorData) -> None:
    torch.manual_seed(0)
    model = Net()
    plain = chillfl.run(model, data, SMALL, write=False, progress=False)
    measured: list[float] = []

    def accuracy(record: dict[str, Any], run: Any) -> None:
        net = run.global_model()
        assert isinstance(net, Net) and not net.training
        with torch.no_grad():
            measured.append(float((net(data.x_test).argmax(1) == data.y_test).float().mean()))
            for p in net.parameters():  # vandalise the copy: the run must not notice
                p.zero_()
        state = run.global_state()
        for v in state.values():
            v.zero_()
        assert run.round == record["round"] and run.client_states() == {}  # FedAvg keeps no client models

    seen = chillfl.run(model, data, SMALL, callbacks=[accuracy], write=False, progress=False)
    assert seen.records == plain.records  # bitwise: hooks see copies only
    # the user's metric agrees with chillfl's global_acc on the same test set (argmax may differ at most on a float tie)
    assert all(abs(m - r["global_acc"]) <= 1 / len(data.y_test) for m, r in zip(measured, seen.records, strict=True))


def test_client_models_where_the_protocol_keeps_them(data: chillfl.TensorData) -> None:
    images = chillfl.TensorData(data.x_train, data.y_train, data.x_test, data.y_test, num_classes=10)
    sizes: list[int] = []

    def clients(record: dict[str, Any], run: Any) -> None:
        states = run.client_states()
        sizes.append(len(states))
        assert all(set(s) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"} for s in states.values())

    config = {**SMALL, "federation": {"num_clients": 4, "rounds": 2}, "distillation": {"method": "individual"}}
    chillfl.run(Net(), images, config, callbacks=[clients], write=False, progress=False)
    assert sizes == [4, 4]


def test_a_personalised_methods_personal_models_whatever_checkpoint_client_models(data: chillfl.TensorData) -> None:
    # docs/python-api.md: run.client_states() holds each client's personal model for a method that keeps one (Ditto's v_k),
    # without checkpoint.client_models; Result.client_states only with it
    kept: list[dict[int, dict[str, torch.Tensor]]] = []

    def clients(record: dict[str, Any], run: Any) -> None:
        kept.append(run.client_states())

    config = {**SMALL, "federation": {"num_clients": 4, "rounds": 2}, "algorithm": {"name": "ditto"}}
    torch.manual_seed(0)
    result = chillfl.run(Net(), data, config, callbacks=[clients], write=False, progress=False)
    assert [sorted(k) for k in kept] == [[0, 1, 2, 3]] * 2 and not result.client_states
    assert all(set(s) == set(result.state) for s in kept[-1].values())
    assert any(not torch.equal(kept[-1][0][k], result.state[k]) for k in result.state)  # v_k, not the global model


def test_early_stopping_leaves_a_complete_resumable_run(tmp_path: Path) -> None:
    config = {
        "name": "es", "out_dir": str(tmp_path / "out"), "dataset": {"name": "digits"}, "model": {"name": "mlp"},
        "federation": {"num_clients": 4, "rounds": 5}, "eval": {"client_split_size": 20}, "checkpoint": {"every": 0},
    }
    full = chillfl.run(config={**config, "name": "full"}, progress=False)

    def stop_after_round_2(record: dict[str, Any], run: Any) -> None:
        if record["round"] == 2:
            run.stop("no improvement for 2 rounds")

    stopped = chillfl.run(config=config, callbacks=[stop_after_round_2], progress=False)
    assert stopped.folder is not None and stopped.folder.name == "es"  # complete, not .partial
    assert len(stopped.records) == 2 and stopped.summary["stopped"] == {"round": 2, "reason": "no improvement for 2 rounds"}
    assert json.loads((stopped.folder / "summary.json").read_text())["stopped"]["round"] == 2
    assert (stopped.folder / "checkpoint.safetensors").is_file() and (stopped.folder / "model.safetensors").is_file()
    assert stopped.records == full.records[:2]

    assert main(["resume", str(stopped.folder), "-q"]) == 0
    assert (stopped.folder / "metrics.jsonl").read_text() == (full.folder / "metrics.jsonl").read_text()  # type: ignore[union-attr]
    summary = json.loads((stopped.folder / "summary.json").read_text())
    assert "stopped" not in summary and not (stopped.folder / "checkpoint.safetensors").exists()


def test_a_callback_that_takes_nothing_is_refused(data: chillfl.TensorData) -> None:
    with pytest.raises(chillfl.ConfigError, match=r"^callbacks\[0\]: on_round must take"):
        chillfl.run(Net(), data, SMALL, callbacks=[lambda: None], write=False, progress=False)


def test_a_stopped_run_resumes_in_place_holding_its_lock_and_checked_against_its_checkpoint(tmp_path: Path) -> None:
    """The merge of issues 25 and 27: a complete (stopped) folder goes through the same lock and checksums as a .partial."""
    import hashlib

    from chillfl.storage.checkpoint import read_checkpoint
    from chillfl.storage.results import RunLock
    from chillfl.errors import ConfigError
    from chillfl.runner import resume_experiment

    config = {
        "name": "st", "out_dir": str(tmp_path / "out"), "dataset": {"name": "digits"}, "model": {"name": "mlp"},
        "federation": {"num_clients": 4, "rounds": 4}, "eval": {"client_split_size": 20}, "checkpoint": {"every": 0},
    }

    def stop_at_2(record: dict[str, Any], run: Any) -> None:
        if record["round"] == 2:
            run.stop("enough")

    folder = chillfl.run(config=config, callbacks=[stop_at_2], progress=False).folder
    assert folder is not None and folder.name == "st"
    text = (folder / "config.toml").read_bytes()
    assert text.startswith(b"#")  # the environment header is part of the bytes the checkpoint vouches for
    _, run = read_checkpoint(folder / "checkpoint.safetensors")
    assert run["config_sha256"] == hashlib.sha256(text).hexdigest()

    (folder / "config.toml").write_bytes(text + b"# edited\n")
    with pytest.raises(ConfigError, match="changed since the checkpoint of round 2") as edited:
        resume_experiment(folder, progress=False)
    assert edited.value.field == "config.toml"
    (folder / "config.toml").write_bytes(text)

    rounds: list[int] = []

    def folder_is_locked(record: dict[str, Any], view: Any) -> None:
        with pytest.raises(ConfigError, match="in use by another chillfl process"):
            RunLock(folder)
        rounds.append(record["round"])

    out = resume_experiment(folder, progress=False, hooks=[folder_is_locked])
    assert out.folder == folder and rounds == [3, 4]  # in place: no st-2
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["st"]
    RunLock(folder).release()  # released once the run finished
    assert "stopped" not in json.loads((folder / "summary.json").read_text())
    with pytest.raises(ConfigError, match="is a finished run"):
        resume_experiment(folder, progress=False)
