"""A download with its byte bar off (``progress`` False, "off" or "lines") starts no tqdm monitor thread:
``tqdm(disable=True)`` started one, which outlived the download (served by the loopback server of tests/fake_datasets.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from chillfl.data.download import download_dataset, read_checksums
from fake_datasets import GENERATORS, ServerState, manifest, publish, serve


@pytest.mark.parametrize("progress", [False, "off", "lines"])
def test_a_download_without_a_bar_starts_no_monitor_thread(tmp_path: Path, progress: Any) -> None:
    from tqdm import tqdm
    from tqdm._monitor import TMonitor

    if tqdm.monitor is not None:  # an earlier bar's: ours would reuse it, so start from none
        tqdm.monitor.exit()
        tqdm.monitor = None
    files = GENERATORS["mnist"]()
    state = ServerState()
    publish(state, "mnist", files)
    (tmp_path / "mnist.sha256").write_text(manifest("mnist", files, "sha256"))
    with serve(state) as base:
        before = {t.ident for t in threading.enumerate()}
        download_dataset("mnist", tmp_path / "data", mirror=base, checksums=read_checksums(tmp_path / "mnist.sha256"), timeout=10, progress=progress)
        started = [t for t in threading.enumerate() if t.is_alive() and t.ident not in before]
    assert tqdm.monitor is None
    # no tqdm monitor among the threads started meanwhile (a leftover thread of an earlier test in this worker may start
    # its own: comparing every thread made the test fail by chance under xdist)
    assert not [t for t in started if isinstance(t, TMonitor)], started
