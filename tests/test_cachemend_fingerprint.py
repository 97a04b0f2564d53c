"""The data cache's key (:func:`chillfl.data.arraycache.fingerprint`) covers what the readers read: files under a
linked subfolder (the readers follow it; a changed file there was served the old arrays), each real folder once (a
link back up does not loop), and a dangling link without a traceback (its ``stat`` raised FileNotFoundError)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chillfl.data.arraycache import fingerprint


def test_a_changed_file_under_a_linked_subfolder_changes_the_key(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.csv").write_text("1\n")
    source = tmp_path / "source"
    source.mkdir()
    (source / "part").symlink_to(other, target_is_directory=True)
    before = fingerprint(source)
    (other / "a.csv").write_text("1\n2\n")
    assert fingerprint(source) != before


def test_a_link_back_up_is_walked_once_and_a_dangling_link_is_keyed_by_its_target(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (source / "x.csv").write_text("1\n")
    (source / "loop").symlink_to(source, target_is_directory=True)
    (source / "README.md").symlink_to(tmp_path / "nowhere")
    key = fingerprint(source)
    os.remove(source / "README.md")
    (source / "README.md").symlink_to(tmp_path / "elsewhere")
    assert fingerprint(source) != key


def test_a_link_to_itself_is_keyed_by_its_target_not_a_traceback(tmp_path: Path) -> None:
    """``stat`` of a link pointing at itself raises ELOOP (an OSError that is no FileNotFoundError): it was a traceback."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "x.csv").write_text("1\n")
    (source / "self.csv").symlink_to("self.csv")
    key = fingerprint(source)
    os.remove(source / "self.csv")
    (source / "self.csv").symlink_to("other.csv")
    assert fingerprint(source) != key


def test_an_unreadable_regular_file_is_an_error_not_keyed_as_a_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a link's ``stat`` failure is keyed by its target: one of a regular file (EACCES under a folder the user may
    not search) is raised, not hashed as ``->`` of a readlink that itself fails. Faked, as root reads any folder."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "x.csv").write_text("1\n")
    real_stat = Path.stat

    def stat(self: Path, *, follow_symlinks: bool = True) -> os.stat_result:
        if self.name == "x.csv" and follow_symlinks:
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(Path, "stat", stat)
    with pytest.raises(PermissionError):
        fingerprint(source)
