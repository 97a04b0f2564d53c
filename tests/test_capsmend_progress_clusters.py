"""The progress bar's name, cut in the middle, split what reads as one character: an accent from its letter (a lone
U+0301 drawn on the ``~``), a ZWJ emoji (``👩‍💻`` left as ``👩`` and a dangling ZWJ), a flag's regional indicators. The
cut now moves off such a cluster, to the side that keeps within the columns (widths as before: tqdm's ``disp_len``)."""

from __future__ import annotations

import unicodedata

import pytest
from test_outfix_progress_width import _line
from tqdm.utils import disp_len

from chillfl.progress import ELLIPSIS, shortened

ACUTE = "\u0301"  # combining acute accent
ZWJ = "\u200d"
CODER = "\U0001F469" + ZWJ + "\U0001F4BB"  # woman technologist: woman (2 columns), ZWJ (1), laptop (2)
THUMB = "\U0001F44D\U0001F3FD"  # thumbs up (2 columns) and a medium skin tone (2): the tone is category Sk, not a mark
ENGLAND = "\U0001F3F4" + "".join(chr(c) for c in (0xE0067, 0xE0062, 0xE0065, 0xE006E, 0xE0067, 0xE007F))  # a black flag and tags (Cf)
FR, DE = "\U0001F1EB\U0001F1F7", "\U0001F1E9\U0001F1EA"  # flags: two regional indicators each (1 column each)


@pytest.mark.parametrize(("name", "columns", "cut"), [
    ("abcde" + ACUTE + "fghijklmnop", 10, "abcd~mnop"),  # was abcde~mnop: the e kept, its accent cut off
    ("abcdefghije" + ACUTE + "xyz", 10, "abcde~xyz"),  # was abcde~\u0301xyz: the accent alone after the ~
    ("ab" + CODER + "cdefghijkl", 8, "ab~jkl"),  # was ab👩~jkl: the woman without her laptop
    ("ab" + CODER + "cdefghijkl", 10, "ab~ijkl"),  # was ab👩\u200d~ijkl: a ZWJ at the cut
    ("abcdefghij" + CODER + "xy", 9, "abcd~xy"),  # was abcd~💻xy: the laptop without the woman
    ("abcd\u2764\ufe0fefghij", 10, "abcd~ghij"),  # was abcd❤~ghij: the heart without its emoji selector
    ("abc" + FR + DE + "defghij", 8, "abc~hij"),  # was abc🇫~hij: half a flag
    ("abc" + FR + DE + "defghij", 10, "abc" + FR + "~ghij"),  # between two flags: a cut as good as any
    ("ab" + THUMB + "cdefghijkl", 8, "ab~jkl"),  # not ab👍~jkl: the thumb without its skin tone
    ("abcdefghij" + THUMB + "xy", 9, "abcd~xy"),  # not abcd~\U0001F3FDxy: the skin tone alone after the ~
    ("ab" + ENGLAND + "cdefghijkl", 10, "ab~ijkl"),  # not ab🏴\U000E0067~ijkl: the flag cut inside its tags
    ("abcdefghij" + ENGLAND + "xy", 9, "abcd~xy"),  # not abcd~\U000E0067\U000E007Fxy: tags without their flag
    ("abcd\u0915\u093fefghij", 10, "abcd~ghij"),  # a Devanagari vowel sign: a spacing mark, whose combining class is 0
    ("abcdefghij", 7, "abc~hij"),  # no cluster: as before
])
def test_the_cut_keeps_clusters_whole_and_within_the_columns(name: str, columns: int, cut: str) -> None:
    said = shortened(name, columns)
    assert said == cut
    assert disp_len(said) <= columns
    head, _, tail = said.partition(ELLIPSIS)
    for edge in (head[-1:], tail[:1]):  # no mark, ZWJ, selector, skin tone or tag at either side of the ~
        assert edge not in (ZWJ, "\ufe0f") and not unicodedata.combining(edge or "a"), said
        assert not 0x1F3FB <= ord(edge or "a") <= 0x1F3FF and not 0xE0020 <= ord(edge or "a") <= 0xE007F, said


def test_the_bar_draws_a_name_of_accents_cut_between_letters() -> None:
    name = "expe" + ACUTE + "rience-" * 4 + "re" + ACUTE + "sume" + ACUTE + "-seed-01"  # the last 9 columns began with the accent
    line = _line(name, 60)
    shown = line.split(": ")[0]
    assert ELLIPSIS in shown and disp_len(line) <= 60 and " 1/3" in line, line
    head, _, tail = shown.partition(ELLIPSIS)
    assert not unicodedata.combining(tail[0]) and not unicodedata.combining(name[len(head)]), line
