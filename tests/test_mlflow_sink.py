"""Tracking that reaches the user: the MLflow sink (a local store, never the network) and W&B's mode.

The MLflow runs go into a ``file://`` store under tmp_path, which writes MLflow's run folder
(``mlruns/<experiment>/<run>/``: ``meta.yaml``, ``params/``, ``metrics/``, ``artifacts/``). MLflow 3.x
keeps that store in maintenance mode and refuses it unless ``MLFLOW_ALLOW_FILE_STORE=true``; the
sink itself only speaks MLflow's client API, so a server or ``sqlite:///`` store gets the same calls.
Each number is read back through MLflow's client and compared with ``metrics.jsonl``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chillfl.config import load_config
from chillfl.runner import RunOutput, run_experiment
from chillfl.sinks import ARTIFACT_MAX_BYTES, MLFLOW_PARAM_MAX, NOT_ARTIFACTS, MlflowSink, flat_params, scalars, wandb_logged_in, wandb_mode
from procs import InterruptAt
from test_sinks import TINY


@pytest.fixture
def file_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A local MLflow file store under tmp_path; its URI."""
    pytest.importorskip("mlflow")  # the `test` extra installs it; a bare core install skips
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return (tmp_path / "mlruns").as_uri()


def test_flat_params_spell_the_config_as_strings() -> None:
    config = {"name": "x", "client": {"lr": 0.05, "nesterov": False, "decay": None}, "model": {"hidden": [100, 100]}, "variants": {}, "long": "a" * 7000}
    assert flat_params(config) == {
        "name": "x", "client.lr": "0.05", "client.nesterov": "false", "client.decay": "null", "model.hidden": "[100, 100]",
        "long": "a" * (MLFLOW_PARAM_MAX - 3) + "...",  # cut to MLflow's 6000 characters
    }


def test_an_mlflow_run_holds_the_config_every_round_and_the_folder(tmp_path: Path, file_store: str) -> None:
    import mlflow.artifacts
    from mlflow.tracking import MlflowClient

    config = load_config(None, {**TINY, "out_dir": str(tmp_path / "results"), "log.sinks": ["mlflow"], "log.mlflow_tracking_uri": file_store,
                                "log.mlflow_experiment": "tiny"})
    out = run_experiment(config, progress=False)
    assert out.folder is not None
    records = [json.loads(line) for line in (out.folder / "metrics.jsonl").read_text().splitlines()]

    client = MlflowClient(tracking_uri=file_store)
    experiment = client.get_experiment_by_name("tiny")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert (tmp_path / "mlruns" / experiment.experiment_id / run.info.run_id / "meta.yaml").is_file()  # MLflow's run folder
    assert run.info.run_name == "sinks" and run.info.status == "FINISHED"
    assert run.data.tags["chillfl.folder"] == str(out.folder.resolve())  # where it is once finished (not sinks.partial, gone by then)

    # Params: the resolved config as the result folder saved it, flattened.
    saved = load_config(out.folder / "config.toml").to_dict()
    assert run.data.params == flat_params(saved)
    assert run.data.params["client.lr"] == "0.05" and run.data.params["federation.rounds"] == "3" and run.data.params["log.sinks"] == '["mlflow"]'

    # Metrics: every scalar of every round, at step = round, value for value.
    expected = {r["round"]: scalars(r) for r in records}
    keys = sorted({k for row in expected.values() for k in row})
    assert set(run.data.metrics) == set(keys)
    for key in keys:
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        assert history == [(rnd, row[key]) for rnd, row in sorted(expected.items()) if key in row], key
    assert "global_acc" in expected[2] and "global_acc" not in expected[1]  # eval.every = 2: a key that starts late

    # Artefacts: the final folder's files (small ones; no checkpoint), byte for byte.
    names = sorted(a.path for a in client.list_artifacts(run.info.run_id))
    files = sorted(p.name for p in out.folder.iterdir() if p.is_file() and p.name not in NOT_ARTIFACTS and p.stat().st_size <= ARTIFACT_MAX_BYTES)
    assert names == files and {"config.toml", "metrics.jsonl", "summary.json"} <= set(names)
    # Fetched from the run's own artifact URI: MLflow 3.0.0's client.download_artifacts(run_id, ...) looks the run
    # up in the default store, not in the client's tracking URI, and fails with "Run ... not found".
    stored = Path(mlflow.artifacts.download_artifacts(artifact_uri=f"{run.info.artifact_uri}/metrics.jsonl", dst_path=str(tmp_path / "down")))
    assert stored.read_bytes() == (out.folder / "metrics.jsonl").read_bytes()


def test_on_end_of_a_run_not_written_logs_no_artefact(tmp_path: Path, file_store: str) -> None:
    """``on_end`` reads the output's ``folder`` (a :class:`RunOutput` is the sink's ``Finished``): None logs nothing."""
    from mlflow.tracking import MlflowClient

    sink = MlflowSink(tmp_path, "unwritten", {"seed": 0}, experiment="none", tracking_uri=file_store)
    sink.on_end(RunOutput(None, [], {}))
    sink.close()
    assert MlflowClient(tracking_uri=file_store).list_artifacts(sink.run_id) == []


def test_an_interrupted_run_is_killed_not_finished(tmp_path: Path, file_store: str) -> None:
    from mlflow.tracking import MlflowClient

    config = load_config(None, {**TINY, "out_dir": str(tmp_path / "results"), "log.sinks": ["mlflow"], "log.mlflow_tracking_uri": file_store})
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, progress=False, callbacks=[InterruptAt(2)])
    client = MlflowClient(tracking_uri=file_store)
    experiment = client.get_experiment_by_name("chillfl")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "KILLED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train_loss")] == [1]  # round 2 stopped before the sinks saw it


@pytest.mark.parametrize(
    ("setting", "env", "logged_in", "mode"),
    [
        ("auto", {}, True, None),  # logged in: W&B's own default (online)
        ("auto", {}, False, "offline"),  # no API key: offline, not a login prompt in the middle of a run
        ("auto", {"WANDB_MODE": "disabled"}, False, "disabled"),  # what the user told W&B, passed on
        ("auto", {"WANDB_MODE": "offline"}, True, "offline"),
        ("online", {}, False, "online"),
        ("offline", {}, True, "offline"),
    ],
)
def test_wandb_mode(setting: str, env: dict[str, str], logged_in: bool, mode: str | None) -> None:
    assert wandb_mode(setting, env, logged_in) == mode  # type: ignore[arg-type]


def test_wandb_login_is_read_from_the_key_or_netrc(tmp_path: Path) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n")
    netrc.chmod(0o600)
    empty = tmp_path / "empty"
    empty.write_text("")
    assert wandb_logged_in({"WANDB_API_KEY": "k", "NETRC": str(empty)})
    assert wandb_logged_in({"NETRC": str(netrc)})
    assert not wandb_logged_in({"NETRC": str(empty)})
    assert not wandb_logged_in({"NETRC": str(netrc), "WANDB_BASE_URL": "https://wandb.example.org"})  # a key for another host
    assert not wandb_logged_in({"NETRC": str(tmp_path / "missing")})


def test_wandb_without_a_key_logs_offline_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("wandb")
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR", "WANDB_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / var.lower()))
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    config = load_config(None, {**TINY, "out_dir": str(tmp_path / "results"), "log.sinks": ["wandb"]})
    with caplog.at_level("INFO", logger="chillfl"):
        out = run_experiment(config, progress=False)
    assert out.folder is not None and len(list((out.folder / "wandb").glob("offline-run-*/run-*.wandb"))) == 1
    lines = [r.getMessage() for r in caplog.records if "W&B" in r.getMessage()]
    # it named the .partial folder, gone once the run completes: the sync command names the finished one
    final = tmp_path / "results" / "sinks" / "wandb"
    assert lines == [f"W&B has no API key (`wandb login`): logging offline into {final} (under {tmp_path / 'results' / 'sinks.partial'} "
                     f"until the run completes); `wandb sync {final}/offline-run-*` uploads it"]
    assert out.folder / "wandb" == final
