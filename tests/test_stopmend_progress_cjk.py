"""A wide-character (CJK) run name is shortened by screen columns, not characters: cut to a third of 80 in characters
it took 53 columns and left no room for any field."""

from __future__ import annotations

from test_outfix_progress_width import _line, _shown
from tqdm.utils import disp_len

from chillfl.progress import ELLIPSIS, shortened

CJK = "実験の名前がとても長いですね実験の名前がとても長いですね"  # 28 characters, 56 columns


def test_a_cjk_name_at_80_columns_leaves_the_room_an_ascii_name_as_wide_leaves() -> None:
    line = _line(CJK, 80)
    name = line.split(": ")[0]
    assert disp_len(line) <= 80 and " 1/3" in line, line
    assert ELLIPSIS in name and disp_len(name) <= 80 // 3, line  # was 53 columns
    assert name.startswith("実験の名前") and name.endswith("長いですね"), line
    assert _shown(line)[:1] == ["global_acc=0.2663"], line  # was no field at all
    assert _shown(line) == _shown(_line("n" * disp_len(CJK), 80))  # the fields of an ASCII name of the same 56 columns


def test_shortened_counts_columns() -> None:
    assert shortened(CJK, 11) == "実験" + ELLIPSIS + "すね"  # 5 columns a side: 2 characters of 2 columns each
    assert shortened("abcdefghij", 7) == "abc~hij"  # ASCII: as before, one column a character
    assert shortened("漢字", 4) == "漢字" and disp_len(shortened(CJK, 1)) <= 1
