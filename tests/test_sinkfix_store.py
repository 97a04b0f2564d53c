"""Sinks closed as failed when the run fails after its rounds; an MLflow store that cannot be used refused before the
run folder exists; W&B's offline reason; comparisons told apart across ``out_dir``s; a comparison's logged ``out_dir``.

W&B offline and MLflow on a store in tmp_path (:func:`test_sinkfix_sinks.offline`); nothing reaches the network.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from chillfl import runner
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.runner import run_experiment
from chillfl import sinks
from chillfl.sinks import WandbSink, build_sinks, comparison_name
from chillfl.storage.run_folder import SWEEP_FILE
from test_sinkfix_sinks import of_kind, offline, wandb_runs  # noqa: F401 - offline: a fixture
from test_damaged_files import TINY as FLAT
from test_sinks import TINY


@pytest.fixture
def store(tmp_path: Path, offline: str, monkeypatch: pytest.MonkeyPatch) -> str:  # noqa: F811 - offline: the fixture
    """W&B offline (:func:`test_sinkfix_sinks.offline`) and an MLflow file store in tmp_path, allowed: faster than sqlite."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return f"file://{tmp_path / 'mlruns'}"


def _config_file(tmp_path: Path, name: str, uri: str) -> Path:
    options = {**FLAT, "name": name, "out_dir": str(tmp_path / "out"), "federation.rounds": 1, "log.sinks": ["mlflow"], "log.mlflow_tracking_uri": uri}
    path = tmp_path / f"{name}.toml"
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in options.items()))
    return path


def test_a_failure_after_the_rounds_ends_the_wandb_and_mlflow_runs_failed(tmp_path: Path, store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The figures failing (after the summary and model) left ``sinks.partial`` and exit 1, yet the sinks had been closed
    before: MLflow said FINISHED and W&B exit code 0. The sinks now close once every file is written."""
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    def broken(*args: object) -> None:
        raise RuntimeError("no backend for the figures")

    monkeypatch.setattr(runner, "_plots", broken)
    config = load_config(None, {**TINY, "federation.rounds": 2, "out_dir": str(tmp_path / "results"), "log.sinks": ["wandb", "mlflow"],
                                "log.mlflow_tracking_uri": store})
    with pytest.raises(RuntimeError, match="no backend"):
        run_experiment(config, progress=False)
    folder = tmp_path / "results" / "sinks.partial"
    assert folder.is_dir() and not (tmp_path / "results" / "sinks").exists()
    (logged,) = wandb_runs(folder)
    assert of_kind(logged, "exit").exit_code == 1
    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("chillfl")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FAILED"


def _closed_port() -> int:
    """A loopback port nothing listens on: bound, then let go."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("uri", ["foo://x", "http://127.0.0.1:{port}", "file://{tmp}/mlruns"])
def test_an_mlflow_store_that_cannot_be_used_is_one_line_before_the_folder(uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A scheme MLflow does not know, a server that is down (MLflow retried ~4 minutes) and a file store without
    MLFLOW_ALLOW_FILE_STORE: a 64-138 line traceback, exit 1, and ``NAME.partial`` left behind; now one line, exit 2."""
    pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = uri.format(port=_closed_port(), tmp=tmp_path)
    assert main(["run", "-q", str(_config_file(tmp_path, "m", uri))]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"chillfl: error: log.mlflow_tracking_uri: the MLflow store {uri!r} cannot be used: ") and len(err.splitlines()) == 1, err
    if uri.startswith("file:"):
        assert "MLFLOW_ALLOW_FILE_STORE=true" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert not set(sinks.MLFLOW_PROBE_ENV) & set(os.environ)  # the probe's retry settings taken off again


def test_the_probe_restores_the_users_retry_settings_and_takes_an_allowed_file_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT", raising=False)
    sinks.check_mlflow_store(f"file://{tmp_path}/mlruns", "chillfl")
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "3" and "MLFLOW_HTTP_REQUEST_TIMEOUT" not in os.environ
    with pytest.raises(ConfigError):
        sinks.check_mlflow_store("foo://x", "chillfl")
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "3" and "MLFLOW_HTTP_REQUEST_TIMEOUT" not in os.environ


def test_ctrl_c_while_the_probe_waits_for_a_server_stops_at_once() -> None:
    """A server that takes the connection and never answers: the probe waits (up to its timeout); Ctrl-C during the wait
    is the KeyboardInterrupt the command stops with, not swallowed into a retry or a ConfigError."""
    pytest.importorskip("mlflow")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)  # the kernel completes the connection; nobody reads the request
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                sinks.check_mlflow_store(f"http://127.0.0.1:{server.getsockname()[1]}", "chillfl")
        finally:
            timer.cancel()
            signal.signal(signal.SIGINT, previous)
    assert not set(sinks.MLFLOW_PROBE_ENV) & set(os.environ)


def test_wandb_auto_under_wandb_mode_offline_says_why_not_no_api_key(tmp_path: Path, offline: str, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """With an API key set, ``WANDB_MODE=offline`` was reported as "W&B has no API key (`wandb login`)"."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
    with caplog.at_level(logging.INFO, logger="chillfl.sinks"):
        WandbSink(tmp_path, "w", {}, mode="auto").close()
    (line,) = [r.getMessage() for r in caplog.records if "logging offline" in r.getMessage()]
    assert line.startswith("WANDB_MODE=offline: logging offline into ") and "API key" not in line


def _comparison(out_dir: Path, name: str = "c1-compare.partial") -> Path:
    """A run folder inside a comparison's folder (one with ``sweep.json``) under ``out_dir``."""
    run = out_dir / name / "lr_lo-s0.partial"
    run.mkdir(parents=True)
    (out_dir / name / SWEEP_FILE).write_text("{}")
    return run


def test_two_comparisons_of_one_name_in_two_out_dirs_are_told_apart(tmp_path: Path) -> None:
    """Both were W&B group and MLflow ``chillfl.comparison`` ``c1-compare``; the failed comparison keeps its label's hash."""
    first, second = comparison_name(_comparison(tmp_path / "results")), comparison_name(_comparison(tmp_path / "results2"))
    assert first is not None and second is not None and first != second
    assert first.startswith("c1-compare@") and second.startswith("c1-compare@")
    assert sinks.comparison_label(tmp_path / "results" / "c1-compare.failed").split("@")[1] == first.split("@")[1]
    assert first == "c1-compare@" + hashlib.sha256(str((tmp_path / "results").resolve()).encode()).hexdigest()[:8]


def test_a_comparisons_run_logs_the_final_out_dir(tmp_path: Path, store: str) -> None:
    """The run's ``out_dir`` is ``NAME-compare.partial`` while it runs; its config.toml is rewritten to the final folder,
    but W&B's config and MLflow's params kept the ``.partial`` one."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    run = _comparison(tmp_path / "results")
    partial = str(tmp_path / "results" / "c1-compare.partial")
    assert sinks.logged_config({"out_dir": partial, "seed": 1}, run) == {"out_dir": str(tmp_path / "results" / "c1-compare"), "seed": 1}
    alone = tmp_path / "alone.partial"
    alone.mkdir()
    assert sinks.logged_config({"out_dir": "x.partial"}, alone) == {"out_dir": "x.partial"}  # not a comparison's run: as it is
    (sink,) = build_sinks(["mlflow"], run, "lr_lo-s0", {"out_dir": partial}, mlflow_tracking_uri=store)
    sink.close()
    (logged,) = MlflowClient(tracking_uri=store).search_runs([MlflowClient(tracking_uri=store).get_experiment_by_name("chillfl").experiment_id])
    assert logged.data.params["out_dir"] == str(tmp_path / "results" / "c1-compare")
    assert logged.data.tags["chillfl.comparison"] == sinks.comparison_label(tmp_path / "results" / "c1-compare")


def test_a_dry_run_at_mlflows_default_store_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """MLflow's default store (no URI, no MLFLOW_TRACKING_URI) is a local sqlite file the run makes where it runs: asked
    before the folder, a dry run left ./mlflow.db behind."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(_config_file(tmp_path, "dflt", "")), "--dry-run"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dflt.toml"]


def skip_without_mlflow_request_helpers() -> None:
    """Skip a test of what the probe passes to MLflow's internal request helpers (:func:`chillfl.sinks._mlflow_request`).

    Why: an MLflow without them (a release after 3.18 may move them) is asked through ``MlflowClient``, with MLflow's
    own retries (a 503 is retried with back-off for minutes), so these tests would hang, then fail on a fallback that
    works. test_leftout_mlflow_probe's helper-presence canary is the one test that fails then, and says so."""
    if sinks._mlflow_request() is None:
        pytest.skip("this MLflow lacks the request helpers: the probe asks through MlflowClient")


def test_the_probe_asks_under_the_users_own_retry_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """A timeout or retry count the user set is the probe's too: a server known to answer in 11 s was refused under a
    forced 10 s (rev116d 4); unset, the probe's own one try of 10 s. Both passed to the request, not set in os.environ."""
    rest_utils = pytest.importorskip("mlflow.utils.rest_utils")
    skip_without_mlflow_request_helpers()
    seen: list[tuple[Any, Any]] = []

    def request(*args: Any, max_retries: Any = None, timeout: Any = None, **kwargs: Any) -> None:
        seen.append((timeout, max_retries))
        raise OSError("stop here")

    monkeypatch.setattr(rest_utils, "http_request", request)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "120")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    with pytest.raises(ConfigError):
        sinks.check_mlflow_store("http://127.0.0.1:1", "chillfl")
    assert seen == [(120, 0)] and os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "120" and "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ
