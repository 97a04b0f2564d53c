"""The MLflow store probe (:func:`chillfl.sinks.check_mlflow_store`) on a dry run and beside other threads.

* A dry run writes nothing: asked for an experiment, MLflow creates a ``sqlite:///`` database (its tables) and a
  ``file:`` store's folder. On a dry run only a server is asked; of any other store one line says it was not checked.
* The probe's retry settings (one try, 10 s) are passed to its request: set in ``os.environ`` for up to 10 s, another
  thread's MLflow sink (a parallel comparison's run) would have logged under them.
"""

from __future__ import annotations

import http.server
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

import chillfl.sinks as sinks
from chillfl.cli import main
from chillfl.errors import ConfigError
from test_sinkfix_store import _config_file, skip_without_mlflow_request_helpers

PROBE_KEYS = tuple(sinks.MLFLOW_PROBE_ENV)


def test_a_dry_run_with_a_sqlite_store_creates_no_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    db = tmp_path / "store" / "mlflow.db"
    db.parent.mkdir()
    with caplog.at_level(logging.INFO, logger="chillfl.sinks"):
        assert main(["run", str(_config_file(tmp_path, "sq", f"sqlite:///{db}")), "--dry-run"]) == 0
    assert not db.exists() and list(db.parent.iterdir()) == []  # was made: MLflow's tables, by the probe
    assert not (tmp_path / "out").exists()
    assert any("is not checked on a dry run" in r.getMessage() and str(db) in r.getMessage() for r in caplog.records)


def test_a_dry_run_with_a_file_store_makes_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    sinks.check_mlflow_store(f"file://{tmp_path}/mlruns", "chillfl", dry_run=True)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file://{tmp_path}/env-mlruns")  # the environment's store, no URI in the config
    sinks.check_mlflow_store("", "chillfl", dry_run=True)
    assert list(tmp_path.iterdir()) == []
    sinks.check_mlflow_store(f"file://{tmp_path}/mlruns", "chillfl")  # the run's check opens it, as the sink will
    assert (tmp_path / "mlruns").is_dir()


class Server(http.server.BaseHTTPRequestHandler):
    """An MLflow server's get-by-name: each request's view of the probe's settings in ``os.environ``, then ``status``."""

    seen: list[dict[str, str | None]] = []
    status = 404

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).seen.append({key: os.environ.get(key) for key in PROBE_KEYS})  # the server runs in another thread of this process
        body = json.dumps({"error_code": "RESOURCE_DOES_NOT_EXIST" if self.status == 404 else "TEMPORARILY_UNAVAILABLE", "message": "no"}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Server.seen = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Server)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_the_probe_leaves_os_environ_alone_while_it_asks_and_after(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    for key in PROBE_KEYS:
        monkeypatch.delenv(key, raising=False)
    before = dict(os.environ)
    Server.status = 404  # no such experiment yet: usable, the sink creates it
    sinks.check_mlflow_store(server, "chillfl")
    assert Server.seen == [{key: None for key in PROBE_KEYS}]  # during the request: unset (were "0" and "10")
    assert dict(os.environ) == before


def test_the_probes_one_try_is_passed_to_its_request(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    skip_without_mlflow_request_helpers()  # through MlflowClient, MLflow retries the 503 with back-off for minutes
    for key in PROBE_KEYS:
        monkeypatch.delenv(key, raising=False)
    before = dict(os.environ)
    Server.status = 503  # MLflow retries a 503 (7 tries with back-off by its default)
    with pytest.raises(ConfigError, match="log.mlflow_tracking_uri"):
        sinks.check_mlflow_store(server, "chillfl", dry_run=True)  # a server is asked on a dry run: asking creates nothing
    assert len(Server.seen) == 1 and Server.seen[0] == {key: None for key in PROBE_KEYS}
    assert dict(os.environ) == before


def test_the_request_helpers_are_found_in_the_installed_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """The canary for MLflow's internals: the probe passes its retries through MLflow's request helpers, and an MLflow
    without one of them is asked through its client. Its first assertion pins those internals on purpose (MLflow 3.18's),
    so that their loss fails here, once, while the tests of what the probe passes to them skip
    (:func:`test_sinkfix_store.skip_without_mlflow_request_helpers`)."""
    pytest.importorskip("mlflow")
    import mlflow.utils.rest_utils as rest_utils

    assert sinks._mlflow_request() is not None
    monkeypatch.delattr(rest_utils, "verify_rest_response")
    assert sinks._mlflow_request() is None


def test_without_the_request_helpers_a_server_is_asked_through_mlflows_client(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    import mlflow.tracking

    asked: list[tuple[str, str]] = []

    class Client:
        def __init__(self, tracking_uri: str) -> None:
            self.uri = tracking_uri

        def get_experiment_by_name(self, name: str) -> None:
            asked.append((self.uri, name))

    monkeypatch.setattr(sinks, "_mlflow_request", lambda: None)
    monkeypatch.setattr(mlflow.tracking, "MlflowClient", Client)
    sinks.check_mlflow_store("http://127.0.0.1:9", "exp")  # no refusal: the client answered
    assert asked == [("http://127.0.0.1:9", "exp")]


@pytest.mark.parametrize(("user", "said"), [(None, "no answer within 10 s"), ("2", "no answer within 2 s")])
def test_a_timed_out_probe_names_the_timeout_it_asked_with(monkeypatch: pytest.MonkeyPatch, user: str | None, said: str) -> None:
    # a request that times out never returns: the line names the timeout known before it (the user's, else the probe's)
    pytest.importorskip("mlflow")
    skip_without_mlflow_request_helpers()
    ask = sinks._mlflow_request()
    assert ask is not None
    asked: list[int] = []

    def timed_out(*args: Any, timeout: int, **kwargs: Any) -> None:
        asked.append(timeout)
        raise OSError("Read timed out. (read timeout=%s)" % timeout)

    monkeypatch.setattr(sinks, "_mlflow_request", lambda: ask._replace(http_request=timed_out))
    if user is None:
        monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", user)
    with pytest.raises(ConfigError, match=said):
        sinks.check_mlflow_store("http://127.0.0.1:9", "exp")
    assert asked == [int(user or 10)]
