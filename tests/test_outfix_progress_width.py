"""The terminal's progress bar fits its width by leaving out whole parts: tqdm cut the line at the width, mid-number
(``local_acc=0.4`` for 0.4700 at 80 columns), and at 40 columns a long run name was all that showed."""

from __future__ import annotations

import io
import re
import sys
from typing import Any

import pytest
from tqdm.utils import disp_len

from chillfl.progress import ELLIPSIS, make_bar
from chillfl.runner import _postfix

RECORD = {"round": 1, "global_acc": 0.2663, "local_acc": 0.47, "global_loss": 2.1234}
LONG = "a_really_long_run_name_for_the_progress_display_test3"


def _line(name: str, width: int) -> str:
    """The bar's line after round 1 of 3 in a terminal ``width`` columns wide, with the runner's postfix."""
    bar: Any = make_bar("bar", 3, 0, name)
    try:
        bar.dynamic_ncols = lambda fp: (width, None)  # the terminal's width, as tqdm reads it on each redraw
        bar.set_postfix(_postfix(RECORD), refresh=False)
        bar.update(1)
        return str(bar)
    finally:
        bar.close()


def _shown(line: str) -> list[str]:
    """The postfix fields in ``line``, each whole or not there at all (never cut), in the runner's order."""
    fields = [f"{key}={value}" for key, value in _postfix(RECORD).items()]
    for field in fields:
        key = field.split("=")[0]
        assert field in line or key not in line, (field, line)
    shown = [field for field in fields if field in line]
    assert shown == fields[:len(shown)], line  # the least important left out first
    return shown


@pytest.mark.parametrize(("name", "width"), [("tty80", 40), (LONG, 40), ("tty80", 80), ("[3/6] FedProx_mu0.1-s0", 80), (LONG, 80), ("tty80", 200), (LONG, 200)])
def test_the_line_fits_the_width_with_the_round_count_and_no_number_cut(name: str, width: int) -> None:
    line = _line(name, width)
    assert disp_len(line) <= width, line
    assert " 1/3" in line, line
    _shown(line)


def test_at_80_columns_the_accuracies_show_whole() -> None:
    """``local_acc=0.4`` for 0.4700 before."""
    line = _line("tty80", 80)
    assert _shown(line)[:2] == ["global_acc=0.2663", "local_acc=0.4700"], line
    assert line.startswith("tty80: ")


def test_at_200_columns_everything_shows_as_tqdm_draws_it() -> None:
    line = _line("tty80", 200)
    assert _shown(line) == ["global_acc=0.2663", "local_acc=0.4700", "global_loss=2.1234"], line
    assert line.startswith("tty80:  33%|") and "| 1/3 [" in line and "round" in line, line  # tqdm's own line: bar, rate


def test_at_40_columns_a_long_name_is_shortened_and_the_count_still_shows() -> None:
    """Only the cut name showed: no round count, no numbers, for the whole run."""
    line = _line(LONG, 40)
    name = line.split(": ")[0]
    assert ELLIPSIS in name and name.startswith("a_real") and name.endswith("test3"), line
    assert " 1/3" in line and disp_len(line) <= 40, line


def test_the_mark_where_a_name_is_cut_is_ascii() -> None:
    """The mark where a name is cut is ASCII: an ellipsis raised UnicodeEncodeError on a Python caller's ASCII stderr."""
    assert ELLIPSIS.isascii()


def test_a_shortened_name_is_drawn_on_an_ascii_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    monkeypatch.setattr(sys, "stderr", stream)
    bar: Any = make_bar("bar", 3, 0, LONG)
    try:
        bar.dynamic_ncols = lambda fp: (40, None)
        bar.update(1)
        bar.refresh()  # drawn now, whatever tqdm's interval: the shortened name goes to the ASCII stream
    finally:
        bar.close()
    stream.flush()
    assert b"a_real~_test3: 1/3" in raw.getvalue(), raw.getvalue()


def test_the_time_then_the_fields_go_before_the_bar() -> None:
    """What shows, in this order while it fits: the time, the fields (most important first), then the bar."""
    fields = [f"{key}={value}" for key, value in _postfix(RECORD).items()]
    line = _line("tty80", 70)  # room for the time and two fields, not for a bar as well
    assert _shown(line) == fields[:2] and "%|" not in line and re.search(r" 1/3 \[\d\d:\d\d<", line), line
    line = _line("tty80", 40)  # room for the time (and rate), not for a bar
    assert "%|" not in line and re.search(r" 1/3 \[\d\d:\d\d<", line), line
