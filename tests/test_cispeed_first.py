"""tests/conftest.py's FIRST (the longest tests, started first, in its order) and tests/test_private_net.py's parts (one
namespace per file of tests/private_net/, or per part of a split one): a renamed long test is a collection error of a
whole run, never a silently lost early start, and the parts of a split file select each of its tests once."""

from __future__ import annotations

from pathlib import Path

import pytest

import conftest
import test_private_net
from test_testfix_slow_list import FakeItem, fake_config


def test_first_orders_the_listed_tests_first_and_a_whole_run_refuses_one_that_matches_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    listing = tmp_path / "slow_tests.txt"
    listing.write_text("# nothing listed\n")
    monkeypatch.setattr(conftest, "SLOW_TESTS", listing)
    monkeypatch.setattr(conftest, "FIRST", ("tests/test_extend.py::test_b", "tests/test_extend.py::test_gone", "tests/test_extend.py::test_a"))
    names = ["tests/test_extend.py::test_a", "tests/test_extend.py::test_c", "tests/test_extend.py::test_b", "tests/test_extend.py::test_d"]
    items = [FakeItem(n) for n in names]
    whole = fake_config(["tests"])
    conftest.pytest_collection_modifyitems(whole, items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [names[2], names[0], names[1], names[3]]  # FIRST's order, then collection order
    (report,) = whole.reports
    assert report.failed and report.nodeid == "tests/conftest.py"
    assert "FIRST names 1 id(s)" in str(report.longrepr) and "tests/test_extend.py::test_gone" in str(report.longrepr)
    one_file = fake_config(["tests/test_extend.py"])
    conftest.pytest_collection_modifyitems(one_file, [FakeItem(names[0])])  # type: ignore[arg-type]
    assert one_file.reports == []


def test_every_file_of_the_private_suite_is_one_test_or_parts_that_together_select_all_of_it() -> None:
    files = sorted(p.name for p in (Path(test_private_net.__file__).parent / "private_net").glob("test_*.py"))
    suites = [p.values for p in test_private_net._suites()]
    assert sorted({suite for suite, _ in suites}) == files
    for name in files:
        expressions = [e for suite, e in suites if suite == name]
        parts = [e for _, e in test_private_net.SPLIT.get(name, ())]
        # a whole file: no -k; a split one: each part's expression, then every test none of them selects
        assert expressions == ([*parts, f"not ({' or '.join(f'({e})' for e in parts)})"] if parts else [""])
