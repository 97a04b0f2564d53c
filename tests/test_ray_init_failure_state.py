"""Whatever ends ``ray.init`` (a timeout or an interrupt, not only the connection errors chillfl words), the driver's
environment is given back and a local Ray's temp folder removed: ``PYTHONBREAKPOINT`` stayed pointed at Ray's
debugger and ``RAY_USAGE_STATS_ENABLED=0`` stayed set when anything else was raised."""

from __future__ import annotations

import os
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from chillfl.config import RayConfig  # noqa: E402
from chillfl.executors import ray_executor  # noqa: E402
from chillfl.executors.processes import WorkerError  # noqa: E402


@pytest.mark.parametrize("error", [TimeoutError("slow"), KeyboardInterrupt(), ConnectionError("refused")])
def test_the_driver_state_is_given_back_whatever_ray_init_raises(error: BaseException, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.delenv("PYTHONBREAKPOINT", raising=False)
    monkeypatch.delenv("RAY_USAGE_STATS_ENABLED", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    folder = tmp_path / "ray"
    folder.mkdir()
    monkeypatch.setattr(ray_executor, "local_ray_folder", lambda: str(folder))
    monkeypatch.setattr(ray, "is_initialized", lambda: False)

    def init(**_: Any) -> None:
        os.environ["PYTHONBREAKPOINT"] = "ray.util.rpdb.set_trace"
        raise error

    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(WorkerError if isinstance(error, ConnectionError) else type(error)):
        ray_executor.RayWorkers(RayConfig())
    assert os.environ.get("PYTHONBREAKPOINT") is None and os.environ.get("RAY_USAGE_STATS_ENABLED") is None
    assert not folder.exists()
