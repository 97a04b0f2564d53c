"""A run name ending in ``.partial`` or ``.failed`` is refused (apifix2, pyapi #6): the finished run's folder
``x.partial`` read as a run stopped before its end (``chillfl status``, ``resume``), and a later run named ``x`` moved
to ``x-2``. A config file or variant label of that form is made a valid name, as other invalid stems are."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.config import load_config, safe_name
from chillfl.errors import ConfigError


@pytest.mark.parametrize("name", ["x.partial", "x.failed"])
def test_a_name_ending_in_a_folder_state_suffix_is_refused(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, {"name": name})
    assert info.value.field == "name" and "must not end in" in info.value.message and "\n" not in str(info.value)


def test_a_file_or_label_of_that_form_gets_a_valid_name(tmp_path: Path) -> None:
    path = tmp_path / "x.partial.toml"
    path.write_text("", encoding="utf-8")
    assert load_config(path).name == "x_partial"
    assert safe_name("a.failed") == "a_failed" and safe_name("x.partially") == "x.partially"
    assert load_config(None, {"name": "x.partially"}).name == "x.partially"
