"""The Python API used over and over in one process (a notebook): each call stands alone.

Notes are said once a call, not once a process; a run inside inference mode is refused up front; ``chillfl.cli.main``
leaves the chillfl logger as it found it.
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path

import pytest
import torch

import chillfl
from tiny_user_run import tiny_data, tiny_net
from chillfl.cli import main

DIGITS = {"federation": {"num_clients": 4, "rounds": 1}, "model": {"name": "mlp"}, "dataset": {"name": "digits"}}




SMALL = {"federation": {"num_clients": 3, "rounds": 1}, "client": {"batch_size": 16}}


def test_a_second_call_says_its_notes_again_and_a_comparisons_runs_share_them(caplog: pytest.LogCaptureFixture) -> None:
    config = dict(SMALL, algorithm={"name": "krum"}, attack={"kind": "sign_flip", "fraction": 0.34})
    calls = [lambda: chillfl.run(model=tiny_net(), data=tiny_data(), config=config, write=False, progress=False)] * 2
    calls.append(lambda: chillfl.compare(model=tiny_net(), data=tiny_data(), config=config, grid={"client.lr": [0.01, 0.02]}, write=False, progress=False))
    counts = []
    for call in calls:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="chillfl"):
            call()
        counts.append(sum("tolerates" in r.getMessage() for r in caplog.records))
    assert counts[0] >= 1 and counts == [counts[0]] * 3, counts  # the comparison's two runs: said once


def test_cli_main_in_process_leaves_the_chillfl_logger_as_it_was() -> None:
    logger = logging.getLogger("chillfl")
    before = logger.level, list(logger.handlers)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["list", "-v"]) == 0
        assert (logger.level, list(logger.handlers)) == before
    finally:
        logger.setLevel(before[0])
        logger.handlers[:] = before[1]


@pytest.mark.parametrize("own", [True, False], ids=["own-model", "registered-model"])
def test_a_run_inside_inference_mode_is_one_config_error_before_any_folder(own: bool, tmp_path: Path) -> None:
    with torch.inference_mode(), pytest.raises(chillfl.ConfigError) as err:
        if own:
            chillfl.run(model=tiny_net(), data=tiny_data(), config=SMALL, out_dir=tmp_path, progress=False)
        else:
            chillfl.run(config=DIGITS, out_dir=tmp_path, progress=False)
    assert err.value.field == "torch.inference_mode" and "inference mode" in str(err.value)
    assert list(tmp_path.iterdir()) == []
