"""A redraw loop that has not met ``min_size`` after a few draws says so, once, with what it will still do.

At 10,000 clients ``dirichlet_balanced`` draws for 0.13 s each, up to 1,000 times: two minutes in silence before its
error. No cheap test tells that no draw will meet the bound (it is a matter of chance, not of the counts), so the loop
notes, once, after 20 draws, how close it came and how many draws are left.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from chillfl.data.partition import REDRAW_NOTE_AFTER, partition
from chillfl.errors import ConfigError

LABELS = np.repeat(np.arange(10), 30)
"""300 samples of 10 classes."""


def test_the_loop_notes_once_that_it_is_still_drawing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="chillfl"), pytest.raises(ConfigError, match="in 30 tries"):
        partition("dirichlet_balanced", LABELS, 30, np.random.default_rng(0), {"alpha": 0.01, "min_size": 10, "max_retries": 30})
    notes = [r.getMessage() for r in caplog.records if "drawing up to" in r.getMessage()]
    assert notes == [notes[0]] and len(notes) == 1
    assert notes[0].startswith(f"partition.min_size: {REDRAW_NOTE_AFTER} draws left a client under 10 samples")
    assert "up to 10 more" in notes[0] and "raise alpha" in notes[0]


def test_a_short_loop_or_a_draw_that_fits_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="chillfl"):
        with pytest.raises(ConfigError):
            partition("dirichlet_balanced", LABELS, 30, np.random.default_rng(0), {"alpha": 0.01, "min_size": 10, "max_retries": REDRAW_NOTE_AFTER})
        partition("dirichlet_balanced", LABELS, 10, np.random.default_rng(0), {"alpha": 100.0, "min_size": 5})
    assert not [r for r in caplog.records if "drawing up to" in r.getMessage()]
