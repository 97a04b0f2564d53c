"""The Ray executor raises the first failing JOB's error, as a serial run and the process pool do (rev116a 1).

A round's clients are dealt to the actors round-robin, so actor 0 may hold a later job than actor 1; the driver took the
lowest actor's error, and so named another client (and exited 1 where a serial run exited 2 on bad input)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from chillfl.errors import ConfigError  # noqa: E402
from chillfl.executors import ray_executor  # noqa: E402
from chillfl.executors.processes import ClientCodeError, WorkerError  # noqa: E402
from chillfl.stop_signals import RaisedLater  # noqa: E402
from test_leftmend2_ray_lines import fake_executor  # noqa: E402
from test_linefix_lines import _task_error  # noqa: E402


def _round(errors: dict[str, BaseException], shares: list[list[int]]) -> BaseException:
    """The round's error where the calls named in ``errors`` raised theirs (the others came back)."""

    class FakeRay:
        exceptions = ray.exceptions

        def wait(self, pending: list[Any], num_returns: int, timeout: float) -> tuple[list[Any], list[Any]]:
            return pending, []

        def get(self, ref: str) -> Any:
            if ref in errors:
                raise errors[ref]
            return ref

    executor = fake_executor()
    executor._ray = FakeRay()
    items = [SimpleNamespace(client_id=c) for c in (10, 11, 12, 13)]
    with pytest.raises((WorkerError, ConfigError)) as info, RaisedLater() as later:
        executor._collect({a: f"ref{a}" for a in range(len(shares))}, items, shares, later)
    return info.value


def test_the_first_failing_jobs_client_is_named_not_the_lowest_actors() -> None:
    # actor 0 holds jobs 1 and 3 (clients 11, 13), actor 1 jobs 0 and 2 (clients 10, 12): client 10's job comes first
    raised = _round({"ref0": _task_error(ray_executor.ClientFailed(13, "RuntimeError: late")),
                     "ref1": _task_error(ray_executor.ClientFailed(10, "RuntimeError: early"))}, [[1, 3], [0, 2]])
    assert type(raised) is ClientCodeError
    assert str(raised) == "Ray worker 1 (client 10): a client update failed: RuntimeError: early"


def test_bad_input_met_first_is_raised_as_itself() -> None:
    refused = ConfigError("objective.terms[0]", "returned a tensor of shape (3,)")
    raised = _round({"ref0": _task_error(ray_executor.ClientFailed(12, "RuntimeError: boom")),
                     "ref1": _task_error(ray_executor.ClientFailed(11, str(refused), refused=refused))}, [[0, 2], [1, 3]])
    assert type(raised) is ConfigError and str(raised) == str(refused)  # job 1 (client 11) before job 2 (client 12): exit 2


def test_a_bare_config_error_is_ordered_by_its_actors_first_job_against_another_actors_client_error() -> None:
    # a ConfigError raised outside client_named (no ClientFailed around it) names no client: it is ordered by its actor's
    # first job. Actor 1 holds jobs 0 and 2, actor 0 jobs 1 and 3 (client 11's failure): job 0 comes first, so exit 2
    refused = ConfigError("dataset.name", "a context key the client cannot read")
    raised = _round({"ref0": _task_error(ray_executor.ClientFailed(11, "RuntimeError: later job")),
                     "ref1": _task_error(refused)}, [[1, 3], [0, 2]])
    assert type(raised) is ConfigError and str(raised) == str(refused)
    # and the other way round: the client's own error in job 0 comes before the bare ConfigError of actor 0 (job 1)
    raised = _round({"ref0": _task_error(refused),
                     "ref1": _task_error(ray_executor.ClientFailed(10, "RuntimeError: first job"))}, [[1, 3], [0, 2]])
    assert type(raised) is ClientCodeError
    assert str(raised) == "Ray worker 1 (client 10): a client update failed: RuntimeError: first job"
