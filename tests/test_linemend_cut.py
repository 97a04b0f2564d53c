"""A failure line cut at its limit keeps what it can of a long token (a path, a repr, text without spaces): cut at a
word alone, ``FileNotFoundError: [Errno 2] No such file or directory: '/data/...'`` kept nothing of the path."""

from __future__ import annotations

from chillfl.errors import CUT, cut_line, failure_line


def test_a_long_path_is_cut_inside_it_not_dropped() -> None:
    path = "/data/" + "x" * 400
    said = failure_line(FileNotFoundError(2, "No such file or directory", path), 120)
    assert said == f"FileNotFoundError: [Errno 2] No such file or directory: '{path}"[:118] + f" {CUT}", said
    assert len(said) <= 120


def test_text_without_spaces_is_cut_at_the_limit() -> None:
    text = "\u6587" * 50
    assert cut_line(text, 20) == "\u6587" * 18 + f" {CUT}"


def test_a_cut_between_words_still_ends_on_a_word() -> None:
    assert cut_line("alpha beta gamma delta epsilon", 20) == f"alpha beta gamma {CUT}"
