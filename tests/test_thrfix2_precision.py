"""Runs in threads of one process share torch's precision settings: a refused run names the other run's precision."""

from __future__ import annotations

import torch

from chillfl.errors import ConfigError
from chillfl.training.local import run_precision
from test_thrfix2_dtype import _in_thread


def test_the_precision_refusal_names_the_other_threads_differing_precision() -> None:
    cpu = torch.device("cpu")
    with run_precision("tf32", cpu), run_precision("fp32", cpu):  # an fp32 run nested in a tf32 one (its callback)
        exc = _in_thread(lambda: run_precision("fp32", cpu))
    assert isinstance(exc, ConfigError) and exc.field == "precision"
    assert "computes in 'tf32'" in str(exc)
