"""A user's dataset given as ``my_module:function`` is summarised in ``chillfl list`` by its docstring's first line: the
listing showed the line of the options it takes (NoOptions': "Options of a part that takes none ..."), not its own."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from chillfl.cli import main

SOURCE = '''
def tiny(opts, data_dir):
    """Four rows of my own, for the docs.

    Not in the summary.
    """
    raise NotImplementedError
'''


def _heading(capsys: pytest.CaptureFixture[str], path: str) -> str:
    assert main(["list", "--options", path]) == 0
    return next(line for line in capsys.readouterr().out.splitlines() if line.startswith(f"### `{path}`"))


def test_a_builder_function_is_summarised_by_its_docstring(user_module: Callable[[str, str], None], capsys: pytest.CaptureFixture[str]) -> None:
    user_module("datafix_user_data", SOURCE)
    assert _heading(capsys, "datafix_user_data:tiny") == "### `datafix_user_data:tiny` — Four rows of my own, for the docs."


def test_a_builder_function_without_a_docstring_has_no_summary(user_module: Callable[[str, str], None], capsys: pytest.CaptureFixture[str]) -> None:
    user_module("datafix_user_data_bare", "def bare(opts, data_dir):\n    raise NotImplementedError\n")
    heading = _heading(capsys, "datafix_user_data_bare:bare")
    assert heading == "### `datafix_user_data_bare:bare`"  # no summary, not NoOptions' "Options of a part that takes none"
