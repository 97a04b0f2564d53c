"""The Python API's flag and path keywords are type-checked where they enter: ``progress="no"`` was truthy (a bar),
``write="False"`` wrote, ``out_dir=5`` became a folder named "5". Each is one ConfigError naming the keyword."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

import chillfl

CONFIG: dict[str, Any] = {"dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]},
                          "federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 1}, "eval": {"clients": "none"}}


def _run(**kwargs: Any) -> Any:
    return chillfl.run(config=CONFIG, **kwargs)


def _compare(**kwargs: Any) -> Any:
    return chillfl.compare(config=CONFIG, grid={"client.lr": [0.1]}, **kwargs)


def _resume(**kwargs: Any) -> Any:
    return chillfl.resume(**{"folder": "nowhere", **kwargs})


def _reproduce(**kwargs: Any) -> Any:
    return chillfl.reproduce_paper("flexchill", **kwargs)


CASES: list[tuple[Callable[..., Any], str, Any]] = [
    (_run, "progress", "no"),
    (_run, "progress", 0),
    (_run, "write", "False"),
    (_run, "out_dir", 5),
    (_run, "out_dir", b"bytes"),
    (_compare, "progress", "no"),
    (_compare, "write", None),
    (_compare, "controls", "yes"),
    (_compare, "out_dir", 5.0),
    (_resume, "progress", "no"),
    (_resume, "force", 1),
    (_resume, "folder", 5),
    (_reproduce, "resume", "no"),
    (_reproduce, "progress", "no"),
    (_reproduce, "out_dir", 5),
]


@pytest.mark.parametrize(("call", "keyword", "value"), CASES, ids=[f"{c.__name__[1:]}-{k}-{v!r}" for c, k, v in CASES])
def test_a_wrong_type_is_one_line_naming_the_keyword(call: Callable[..., Any], keyword: str, value: Any, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # nothing may be written, not even a folder named "5"
    with pytest.raises(chillfl.ConfigError) as err:
        call(**{keyword: value})
    assert err.value.field == keyword and "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_the_progress_modes_and_path_like_folders_are_accepted(tmp_path: Path) -> None:
    assert _run(progress="off", write=False).records
    result = _run(progress=False, out_dir=tmp_path / "out")
    assert result.folder is not None and result.folder.parent == tmp_path / "out"
