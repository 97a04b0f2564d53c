"""``chillfl data download`` where stderr is no terminal: a line per file as it starts and as it is checked, and one as
the dataset is unpacked (it said nothing for the whole download); ``-q``: nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chillfl.cli import main
from fake_datasets import GENERATORS, ServerState, manifest, publish, serve


@pytest.mark.parametrize("quiet", [False, True])
def test_a_download_logs_each_file_when_stderr_is_no_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str], quiet: bool) -> None:
    files = GENERATORS["cifar10"]()
    (tmp_path / "sums").write_text(manifest("cifar10", files))
    state = ServerState()
    publish(state, "cifar10", files)
    with serve(state) as base:
        args = ["data", "download", "cifar10", "--data-dir", str(tmp_path / "data"), "--mirror", base, "--checksums", str(tmp_path / "sums")]
        assert main([*args, *(["-q"] if quiet else [])]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    if quiet:
        assert err == ""
        return
    (name, data), = files.items()
    size = len(data)
    shown = f"{size} B" if size < 1024 else f"{size / 1024:.1f} KiB" if size < 1024**2 else f"{size / 1024**2:.1f} MiB"
    lines = err.splitlines()
    assert f"chillfl: fetching {name} ({shown}) from {base}/cifar10/{name}" in lines, lines
    assert f"chillfl: {name}: checksum verified" in lines
    assert re.search(r"^chillfl: cifar10 unpacked into .*cifar-10-batches-py$", err, re.M), lines
