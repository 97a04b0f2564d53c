"""An exception group's traceback (Python 3.11+) prints its frames boxed (``  |   File "..."``) and each sub-exception
in a box inside (``  +-+---- 1 ----``, ``    | ValueError: boom``): ``failure_line`` found no frame of the group's
own, and a Flower node's reason holding one said ``+------------------------------------``. The line now is the
first sub-exception's, through nested groups. The tracebacks here are Python's own (``traceback.format_exception``)."""

from __future__ import annotations

import sys
import textwrap
import traceback
from collections.abc import Callable

import pytest

from chillfl.errors import failure_line, framed

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="ExceptionGroup is Python 3.11+")


class ClientAppException(Exception):
    """Named as Flower's wrapper (``flwr.clientapp.client_app.ClientAppException``): the text names it by its module."""


def _boom() -> None:
    raise ValueError("boom")


def _group() -> None:
    raise ExceptionGroup("unhandled errors in a TaskGroup", [ValueError("boom"), KeyError("k")])  # noqa: F821


def _raised_group() -> None:
    try:
        _boom()
    except ValueError as exc:  # the sub-exception has a traceback of its own, and the group a context
        raise ExceptionGroup("outer", [exc, KeyError("k")]) from None  # noqa: F821


def _nested() -> None:
    try:
        _raised_group()
    except Exception as inner:  # a group inside a group, behind a plain TypeError
        raise ExceptionGroup("top", [inner, TypeError("t")])  # noqa: F821


def _first_plain() -> None:
    try:
        _raised_group()
    except Exception as inner:
        raise ExceptionGroup("top", [TypeError("t"), inner])  # noqa: F821


def _chained_into_group() -> None:
    try:
        _boom()
    except ValueError:  # "During handling ...": the plain traceback first, the group last
        raise ExceptionGroup("g", [KeyError("x")])  # noqa: F821


def _wrapped() -> None:
    try:
        _nested()
    except Exception as exc:
        raise RuntimeError("wrapped") from exc


def _text(raise_it: Callable[[], None]) -> str:
    try:
        raise_it()
    except Exception as exc:
        return "".join(traceback.format_exception(exc))
    raise AssertionError("nothing raised")


def _ray(text: str) -> str:
    """As ``RayTaskError.__str__`` writes a task's traceback: stripped, its ``Traceback`` lines the task's name."""
    return "\n".join("ray::ClientAppActor.run() (pid=1)" if line.startswith("Traceback ") else line for line in text.strip().split("\n"))


@pytest.mark.parametrize(("raise_it", "said"), [
    (_group, "ValueError: boom"),
    (_raised_group, "ValueError: boom"),
    (_nested, "ValueError: boom"),  # group -> group -> its first, a ValueError
    (_first_plain, "TypeError: t"),
    (_chained_into_group, "KeyError: 'x'"),  # the group was raised last: its sub-exception, not the context's ValueError
    (_wrapped, "RuntimeError: wrapped"),  # a plain exception raised last, from a group: its own line
])
def test_an_exception_groups_traceback_says_its_first_sub_exception(raise_it: Callable[[], None], said: str) -> None:
    text = _text(raise_it)
    assert failure_line(text) == said
    assert failure_line(_ray(text)) == said  # its first line stripped by Ray
    assert failure_line(textwrap.dedent(text)) == said  # every line's indent taken off


def test_the_groups_line_where_its_sub_exceptions_are_not_shown() -> None:
    try:
        raise ExceptionGroup("top", [ExceptionGroup("inner", [ValueError("boom")]), TypeError("t")])  # noqa: F821
    except Exception as exc:
        text = "".join(traceback.TracebackException.from_exception(exc, max_group_depth=1).format())
    assert "    | ... (max_group_depth is 1)" in text  # the inner group is not shown
    assert failure_line(text) == "ExceptionGroup: top (2 sub-exceptions)"


def test_a_group_in_a_flower_reason_is_said_by_its_first_sub_exception() -> None:
    """Flower's simulation wraps a node's exception (``ClientAppException(str(ex)) from ex``) and replies with Ray's
    text of it: the node's own part, a group's boxed traceback, was read as a message and its last line said."""
    pytest.importorskip("flwr")
    from chillfl.flower.apps import error_line

    def node() -> None:
        try:
            _nested()
        except Exception as exc:
            raise ClientAppException("\nException ClientAppException occurred. Message: top (2 sub-exceptions)") from exc

    reason = f"<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'{_ray(_text(node))}\n'>"
    assert "+------------------------------------" in reason
    assert error_line(reason) == "ValueError: boom"


def test_a_boxed_frame_is_a_frame() -> None:
    assert framed(['  |   File "a.py", line 1, in f']) and framed(['      |   File "a.py", line 1, in f']) and framed(['  File "a.py", line 1'])
    assert not framed(["  | ValueError: boom", "    +---------------- 2 ----------------"])
