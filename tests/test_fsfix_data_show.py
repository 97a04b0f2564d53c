"""``chillfl data show`` writes its heat map as every chillfl figure is written (``plots.figure.save_figure``): never
through a link planted at its name, and a full disk is one line (exit 1), not a traceback."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from chillfl.cli import main
from test_fsfix_wording import needs_links

pytest.importorskip("matplotlib")

TINY = ["federation.num_clients=4", "federation.clients_per_round=2"]


@needs_links
def test_data_show_replaces_a_link_at_its_heat_map_and_leaves_its_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted ``demo-partition.png -> ../precious.txt`` was opened by ``savefig`` and the target overwritten with the PNG."""
    monkeypatch.chdir(tmp_path)
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    (tmp_path / "out" / "data-show").mkdir(parents=True)
    link = tmp_path / "out" / "data-show" / "demo-partition.png"
    link.symlink_to(Path("..", "..", "precious.txt"))
    assert main(["data", "show", "demo", *TINY, "--out", "out"]) == 0
    assert precious.read_text() == "precious\n"
    assert not link.is_symlink() and link.read_bytes().startswith(b"\x89PNG")


def test_data_show_on_a_full_disk_is_one_line_naming_the_heat_map(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """ENOSPC while the heat map is written: a two-part traceback ending in ``OSError: [Errno 28]`` (exit 1); now one line
    naming the file, exit 1, and no ``.tmp`` left beside it."""
    monkeypatch.chdir(tmp_path)
    real_open, real_write = os.open, os.write
    full: set[int] = set()

    def opened(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, flags, *args, **kwargs)
        if str(path).endswith(".png.tmp"):
            full.add(fd)
        return fd

    def written(fd: int, data: Any) -> int:
        if fd in full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "open", opened)
    monkeypatch.setattr(os, "write", written)
    monkeypatch.setattr("builtins.open", _full_for_png(open))  # the old code's savefig opened the file itself
    assert main(["data", "show", "demo", *TINY, "--out", "out"]) == 1
    err = capsys.readouterr().err
    heat = Path("out", "data-show", "demo-partition.png")
    assert err == f"chillfl: error: cannot write {heat}: no space left on the device\n"
    assert list((tmp_path / "out" / "data-show").iterdir()) == []


def _full_for_png(real: Any) -> Any:
    """``open`` that fails with ENOSPC for a ``.png`` opened for writing, as a full disk does."""

    def fake(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, os.PathLike)) and str(file).endswith(".png") and "w" in mode:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(file))
        return real(file, mode, *args, **kwargs)

    return fake
