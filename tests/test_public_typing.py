"""Every callback form docs/python-api.md documents type-checks against ``chillfl.run``/``chillfl.resume`` (mypy).

The signatures said ``Callback | Callable[[dict], Any]``: a user's mypy refused a ``(record, run)`` function, a class
with ``on_round`` only or ``on_end`` only, and any ``on_round(self, record: dict)`` (the protocol's takes a Mapping),
all of which the runtime accepts. Slow: mypy reads chillfl's types (seconds from the repository's ``.mypy_cache``, which
``.ci/run``'s ``mypy src/chillfl`` fills; a minute or two cold)."""

from __future__ import annotations

from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[1]

USER_CODE = '''
from typing import Any

import chillfl
from chillfl.engine.view import RunView
from chillfl.runner import RunOutput


def plain(record: dict[str, Any]) -> None: ...


def with_view(record: dict[str, Any], run: RunView) -> None: ...


class RoundOnly:
    def on_round(self, record: dict[str, Any]) -> None: ...


class SeesTheRun:
    def on_round(self, record: dict[str, Any], run: RunView) -> None: ...
    def on_end(self, output: RunOutput) -> None: ...


class EndOnly:
    def on_end(self, output: RunOutput) -> None: ...


chillfl.run(config="demo", callbacks=[plain, with_view, RoundOnly(), SeesTheRun(), EndOnly(), lambda r: None])
chillfl.resume("x", callbacks=[plain, with_view, EndOnly()])
chillfl.run(config="demo", callbacks=[42])  # the one error
'''


@pytest.mark.slow
def test_every_documented_callback_form_type_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = tmp_path / "user_callbacks.py"
    user.write_text(USER_CODE)
    monkeypatch.chdir(ROOT)  # mypy's config (pyproject.toml) and its cache
    out, err, status = api.run(["--no-error-summary", "--hide-error-context", str(user)])
    errors = [line for line in out.splitlines() if ": error:" in line]
    bad = 1 + USER_CODE.splitlines().index('chillfl.run(config="demo", callbacks=[42])  # the one error')
    assert status == 1 and not err, (out, err)
    # the file's own name and line: mypy's cache may replay the error under the path an earlier run had for the module
    assert len(errors) == 1 and errors[0].split("/")[-1].startswith(f"{user.name}:{bad}: error: List item 0 has incompatible type \"int\""), out
