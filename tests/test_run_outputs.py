"""Outputs people can reuse (issue 25): a model file any safetensors reader loads, a record of what the run ran on,
a warning when a resume runs elsewhere."""

from __future__ import annotations

import json
import logging
import os
from chillfl.config import tomllib  # tomli on Python 3.10
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch
from torch import nn

import chillfl
from chillfl.analysis.replay import load_model_state
from chillfl.errors import ConfigError
from chillfl.storage.checkpoint import read_state, write_state
from chillfl.storage.model_file import read_client_models, write_client_models
from chillfl.environment import COMPARED, KERNEL_CAPS, as_comment, code_sha256, differences, environment
from chillfl.resolve import partition_table


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 16)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


@pytest.fixture(scope="module")
def digits() -> chillfl.TensorData:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    return chillfl.TensorData(x[:1400], y[:1400], x[1400:], y[1400:], num_classes=10)


def run(tmp_path: Path, data: chillfl.TensorData, **overrides: object) -> chillfl.Result:
    config = {"federation": {"num_clients": 4, "rounds": 2}, "eval": {"client_split_size": 20}}
    return chillfl.run(Net(), data, config, out_dir=tmp_path / "out", progress=False, **overrides)


def test_model_file_loads_with_plain_safetensors_into_the_model_class(tmp_path: Path, digits: chillfl.TensorData) -> None:
    result = run(tmp_path, digits)
    assert result.folder is not None and result.model is not None
    tensors = safetensors.torch.load_file(str(result.folder / "model.safetensors"))
    assert set(tensors) == set(Net().state_dict())  # fc1.weight, bn.running_mean, ...
    fresh = Net()
    fresh.load_state_dict(tensors, strict=True)
    for name, value in result.model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], value), name
    # chillfl's own reader (replay, calibration) reads the same file
    assert all(torch.equal(load_model_state(result.folder)[k], v) for k, v in tensors.items())


def test_files_of_the_older_layout_are_still_read(tmp_path: Path) -> None:
    state = {"fc1.weight": torch.randn(3, 2), "fc1.bias": torch.randn(3)}
    write_state(tmp_path / "model.safetensors", state)  # the state-tree layout of earlier versions
    loaded = load_model_state(tmp_path)
    assert set(loaded) == set(state) and all(torch.equal(loaded[k], v) for k, v in state.items())


def test_client_models_are_plain_tensors_named_by_client_and_parameter(tmp_path: Path) -> None:
    clients = {10: {"fc.weight": torch.randn(2, 3), "fc.bias": torch.zeros(2)}, 2: {"fc.weight": torch.ones(2, 3), "fc.bias": torch.ones(2)}}
    write_client_models(tmp_path / "client_models.safetensors", clients)
    plain = safetensors.torch.load_file(str(tmp_path / "client_models.safetensors"))  # any reader: no chillfl needed
    assert set(plain) == {"2/fc.weight", "2/fc.bias", "10/fc.weight", "10/fc.bias"}
    assert torch.equal(plain["10/fc.weight"], clients[10]["fc.weight"])
    back = read_client_models(tmp_path / "client_models.safetensors")
    assert set(back) == {2, 10} and all(torch.equal(back[c][k], v) for c, m in clients.items() for k, v in m.items())
    write_state(tmp_path / "older.safetensors", {str(c): m for c, m in clients.items()})  # the state-tree layout of earlier versions
    older = read_client_models(tmp_path / "older.safetensors")
    assert set(older) == {2, 10} and all(torch.equal(older[c][k], v) for c, m in clients.items() for k, v in m.items())
    safetensors.torch.save_file({"fc.weight": torch.ones(1)}, str(tmp_path / "model.safetensors"))  # a global model, not per client
    with pytest.raises(ConfigError, match="'fc.weight' is not named '<client id>/<name>'") as err:
        read_client_models(tmp_path / "model.safetensors")
    assert err.value.field == "checkpoint.client_models"


def test_summary_and_saved_config_record_the_environment(tmp_path: Path, digits: chillfl.TensorData) -> None:
    result = run(tmp_path, digits, threads=1)
    assert result.folder is not None
    env = json.loads((result.folder / "summary.json").read_text())["environment"]
    assert env["torch"] == torch.__version__ and env["chillfl"] == chillfl.__version__
    assert env["threads"] == 1 and env["device"].startswith("cpu") and env["python"].count(".") == 2
    assert {"numpy", "interop_threads", "cpu_capability", "git_commit"} <= set(env)
    assert env["git_commit"] is None or len(env["git_commit"].removesuffix("+dirty")) == 40  # a checkout: its commit
    text = (result.folder / "config.toml").read_text()
    assert text.startswith("# ran with: chillfl ") and f"torch {torch.__version__}" in text.splitlines()[0]
    assert tomllib.loads(text)["federation"]["rounds"] == 2  # still a loadable config


def test_differences_name_what_changed() -> None:
    now = environment(torch.device("cpu"))
    assert differences(now, now) == []
    assert differences({**now, "torch": "1.0.0", "threads": 99}, now) == [f"torch 1.0.0 -> {now['torch']}", f"threads 99 -> {now['threads']}"]
    assert differences({}, now) == []  # a checkpoint from before the record: nothing to compare
    assert set(COMPARED) <= set(now)
    assert differences({**now, "cores": 99}, now) == [] and differences({**now, "cores": 99}, now, ("cores",)) == [f"cores 99 -> {now['cores']}"]


def _stopped_after_round_2(tmp_path: Path, executor: str = "sequential") -> Path:
    """A 3-round run killed after its round-2 checkpoint: its ``.partial`` folder."""
    from chillfl.cli import main

    config = tmp_path / "c.toml"
    config.write_text(
        f'name = "r"\nout_dir = "{tmp_path / "out"}"\nexecutor = "{executor}"\ndevice = "cpu"\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\n'
        '[federation]\nnum_clients = 4\nrounds = 3\n[eval]\nclient_split_size = 20\n[checkpoint]\nevery = 1\n'
    )
    import chillfl.runner as runner

    real_checkpoint = runner._checkpoint

    def stop_after_round_2(writer: Any, protocol: Any, done: int, *args: Any) -> None:
        if done == 3:  # killed in round 3, before its checkpoint: the folder's checkpoint is round 2's, round 3 is left
            raise KeyboardInterrupt
        real_checkpoint(writer, protocol, done, *args)

    runner._checkpoint = stop_after_round_2  # type: ignore[assignment]
    try:
        assert main(["run", str(config), "-q"]) == 130
    finally:
        runner._checkpoint = real_checkpoint  # type: ignore[assignment]
    assert read_state(tmp_path / "out" / "r.partial" / "checkpoint.safetensors")["round"] == 2
    return tmp_path / "out" / "r.partial"


def test_a_checkpoint_of_the_last_round_resumed_elsewhere_is_not_said_to_span_two_setups(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A run killed after its last round's checkpoint (before its results were written) ran every round on its first
    setup: resumed with other code or torch, it said "not bitwise what an uninterrupted run gives" and its summary
    recorded a resume across setups (report-compat 2), though no round ran on the second."""
    from chillfl.cli import main
    import chillfl.runner as runner

    config = tmp_path / "c.toml"
    config.write_text(
        f'name = "r"\nout_dir = "{tmp_path / "out"}"\ndevice = "cpu"\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\n'
        '[federation]\nnum_clients = 4\nrounds = 2\n[eval]\nclient_split_size = 20\n[checkpoint]\nevery = 1\n'
    )
    real_finish = runner.finish_run

    def killed_before_the_results(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    runner.finish_run = killed_before_the_results  # type: ignore[assignment]
    try:
        assert main(["run", str(config), "-q"]) == 130
    finally:
        runner.finish_run = real_finish  # type: ignore[assignment]
    partial = tmp_path / "out" / "r.partial"
    assert read_state(partial / "checkpoint.safetensors")["round"] == 2
    assert _setup_warnings(partial, caplog, torch="0.0.1") == []
    summary = json.loads((tmp_path / "out" / "r" / "summary.json").read_text())
    assert not summary.get("resumed")


def _setup_warnings(partial: Path, caplog: pytest.LogCaptureFixture, **saved: Any) -> list[str]:
    """Resume ``partial`` after writing ``saved`` into its checkpoint's environment record: the setup warnings."""
    from chillfl.cli import main

    state = read_state(partial / "checkpoint.safetensors")
    state["environment"].update(saved)
    write_state(partial / "checkpoint.safetensors", state)
    with caplog.at_level(logging.WARNING, logger="chillfl"):
        assert main(["resume", str(partial), "-q"]) == 0
    return [r.getMessage() for r in caplog.records if "another setup" in r.getMessage()]


def test_resume_warns_in_one_line_when_the_setup_changed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    partial = _stopped_after_round_2(tmp_path)
    assert read_state(partial / "checkpoint.safetensors")["environment"]["torch"] == torch.__version__
    lines = _setup_warnings(partial, caplog, torch="0.0.1")
    assert len(lines) == 1 and f"torch 0.0.1 -> {torch.__version__}" in lines[0] and "\n" not in lines[0]


def test_the_record_names_the_kernel_caps_that_cpu_capability_does_not_show(monkeypatch: pytest.MonkeyPatch) -> None:
    """ONEDNN_MAX_CPU_ISA=AVX2 (convolutions) and MKL_ENABLE_INSTRUCTIONS=AVX2 (matmuls) each gave a CNN run on digits
    other bits on an AVX-512 Xeon, while ``cpu_capability`` (ATen's own kernels) still read AVX512: a run resumed
    under them was not bitwise the uninterrupted one, and neither its record nor the resume said so."""
    for name in KERNEL_CAPS:
        monkeypatch.delenv(name, raising=False)
    assert environment(torch.device("cpu"))["kernel_caps"] is None
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    now = environment(torch.device("cpu"))
    assert now["kernel_caps"] == "ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2"
    assert differences({**now, "kernel_caps": None}, now) == ["kernel_caps None -> ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2"]
    assert "kernel_caps ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2, " in as_comment(now)


def test_resume_warns_when_the_code_changed_without_a_git_checkout(tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed chillfl has no git commit and keeps its version string (0.1.0) across changes: a run resumed by
    other code (a default changed, a fix of a method) said nothing, though the rest of it may differ."""
    import chillfl.environment as recorded

    monkeypatch.setattr(recorded, "git_commit", lambda: None)
    partial = _stopped_after_round_2(tmp_path)
    state = read_state(partial / "checkpoint.safetensors")
    assert state["environment"]["git_commit"] is None and state["environment"]["code"] == code_sha256()[:16]
    lines = _setup_warnings(partial, caplog, code="0" * 16)
    assert lines == [f"resuming on another setup than the checkpoint's (code {'0' * 16} -> {code_sha256()[:16]}): the rounds left may not be bitwise what an uninterrupted run gives"]


@pytest.mark.parametrize(("executor", "warned"), [("vectorized", True), ("auto", True), ("sequential", False), ("processes", False)])
def test_resume_warns_of_other_cores_where_they_chunk_the_clients(executor: str, warned: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The vectorised executor chunks a round's clients for its cores // threads worker threads, and a grouped
    convolution over another number of clients rounds differently (``auto`` picks by the cores too): its run resumed
    with other cores (a cluster job's allocation, ``taskset``) is not bitwise the uninterrupted one, which the
    resume said nothing of. The others train client by client: there another core count changes no bit."""
    partial = _stopped_after_round_2(tmp_path, executor)
    cores = len(os.sched_getaffinity(0))
    assert read_state(partial / "checkpoint.safetensors")["environment"]["cores"] == cores
    lines = _setup_warnings(partial, caplog, cores=cores + 3)
    assert lines == ([f"resuming on another setup than the checkpoint's (cores {cores + 3} -> {cores}): the rounds left may not be bitwise what an uninterrupted run gives"] if warned else [])


def test_the_partition_is_saved_and_reloads_with_partition_from(tmp_path: Path, digits: chillfl.TensorData) -> None:
    first = run(tmp_path, digits, **{"partition.alpha": 0.2})
    assert first.folder is not None
    saved = json.loads((first.folder / "partition.json").read_text())
    assert len(saved["clients"]) == 4 and saved["partition"] == partition_table({"name": "dirichlet", "alpha": 0.2})
    assert sorted(i for c in saved["clients"] for i in c) == list(range(1400))  # every training sample, once
    path = str(first.folder / "partition.json")
    # another seed would draw another split: from the file, the clients are the same ones
    again = run(tmp_path, digits, seed=5, **{"partition.from": path})
    assert again.folder is not None and again.config.partition == {"name": "file", "from": path}
    assert json.loads((again.folder / "partition.json").read_text())["clients"] == saved["clients"]
    with pytest.raises(chillfl.ConfigError, match="partition.from: .* has 4 clients; federation.num_clients is 3"):
        run(tmp_path, digits, **{"partition.from": path, "federation.num_clients": 3})
    with pytest.raises(chillfl.ConfigError, match="partition.from: cannot read"):
        run(tmp_path, digits, **{"partition.from": str(tmp_path / "nope.json")})


def test_the_checkpoint_config_names_the_file_the_runner_writes() -> None:
    from chillfl.config import CheckpointConfig
    from chillfl.runner import CHECKPOINT

    assert CheckpointConfig.__doc__ is not None and f"``{CHECKPOINT}``" in CheckpointConfig.__doc__
