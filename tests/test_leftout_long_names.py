"""A result folder whose name is over the file-name limit (255 bytes with the ``.partial`` it is made as) is refused
before any folder is made: the claim made ``out_dir``'s missing folders first, then its rename onto the name failed
(ENAMETOOLONG), and those folders were left behind, empty."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.errors import ConfigError
from chillfl.paths import PARTIAL
from chillfl.storage.results import ResultWriter, claim_dir


def test_a_name_over_the_limit_with_partial_leaves_no_folder(tmp_path: Path) -> None:
    name = "a" * (255 - len(PARTIAL) + 1)  # fits alone, not as NAME.partial
    out = tmp_path / "out" / "deeper"
    with pytest.raises(ConfigError) as exc:
        ResultWriter(out, name)
    assert exc.value.field == "name" and "longer than 255 bytes (with the .partial chillfl adds)" in str(exc.value)
    assert list(tmp_path.iterdir()) == []  # was: out/deeper, empty
    with pytest.raises(ConfigError):
        claim_dir(out, name + "-compare", lambda made: (made / "x").write_text("x"))
    assert list(tmp_path.iterdir()) == []


def test_a_name_at_the_limit_is_claimed(tmp_path: Path) -> None:
    name = "a" * (255 - len(PARTIAL))
    final, partial, lock = claim_dir(tmp_path / "out", name, lambda made: (made / "x").write_text("x"))
    try:
        assert partial == tmp_path / "out" / f"{name}{PARTIAL}" and partial.is_dir() and final.name == name
    finally:
        lock.release()
