"""tests/conftest.py and tests/slow_tests.txt: a listed id that matches no collected test fails a run of the whole of
tests/ (it would drop back into the fast loop unnoticed), and only such a run: one of a file or a test never does."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import conftest

HERE = Path(conftest.__file__).resolve().parent
ROOT = HERE.parent


def fake_config(args: list[str], cwd: Path = ROOT, **options: Any) -> Any:
    reports: list[pytest.CollectReport] = []
    return SimpleNamespace(args=args, invocation_params=SimpleNamespace(dir=cwd), rootpath=ROOT, reports=reports,
                           getoption=lambda name, default=None: options.get(name, default),
                           hook=SimpleNamespace(pytest_collectreport=lambda report: reports.append(report)))


class FakeItem:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.markers: list[str] = []

    def add_marker(self, marker: Any) -> None:
        self.markers.append(marker.name)


@pytest.mark.parametrize(("args", "cwd", "options", "whole"), [
    (["tests"], ROOT, {}, True),  # testpaths: what a bare `pytest` collects
    (["tests/"], ROOT, {}, True),
    (["."], ROOT, {}, True),
    ([str(HERE)], Path("/"), {}, True),
    (["."], HERE, {}, True),
    (["tests/test_extend.py"], ROOT, {}, False),
    (["tests/test_extend.py", "tests/test_ccvr.py"], ROOT, {}, False),
    (["tests::test_x"], ROOT, {}, False),
    (["tests/private_net"], ROOT, {}, False),
    (["tests"], ROOT, {"lf": True}, False),  # --lf skips whole files
    (["tests"], ROOT, {"ignore": ["tests/test_extend.py"]}, False),
    (["tests"], ROOT, {"ignore_glob": ["*_ray.py"]}, False),
    (["tests"], ROOT, {"stepwise": True}, False),  # --sw drops the tests before its last failure, mid-module
    (["tests"], ROOT, {"stepwise_skip": True}, False),
])
def test_only_a_run_of_the_whole_of_tests_checks_the_list(args: list[str], cwd: Path, options: dict[str, Any], whole: bool) -> None:
    assert conftest._collects_all_of_tests(fake_config(args, cwd, **options)) is whole


def test_a_listed_id_is_stale_where_its_module_was_collected_without_it_or_is_gone() -> None:
    items = [FakeItem("tests/test_extend.py::test_a[-c]"), FakeItem("tests/test_extend.py::test_a[stdin]")]
    listed = {
        "tests/test_extend.py::test_a",  # parametrised since: stale
        "tests/test_extend.py::test_a[stdin]",  # collected
        "tests/test_ccvr.py::test_b",  # a module that yielded nothing here (skipped whole, say): not judged
        "tests/test_no_such_module.py::test_c",  # the module is gone: stale
    }
    assert conftest._stale(listed, items, ROOT) == ["tests/test_extend.py::test_a", "tests/test_no_such_module.py::test_c"]  # type: ignore[arg-type]


def test_a_stale_id_is_one_collection_error_of_a_whole_run_and_listed_ids_are_marked_slow(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    listing = tmp_path / "slow_tests.txt"
    listing.write_text("# a comment\ntests/test_extend.py::test_a[stdin]\ntests/test_extend.py::test_gone\n")
    monkeypatch.setattr(conftest, "SLOW_TESTS", listing)
    items = [FakeItem("tests/test_extend.py::test_a[-c]"), FakeItem("tests/test_extend.py::test_a[stdin]")]
    whole = fake_config(["tests"])
    conftest.pytest_collection_modifyitems(whole, items)  # type: ignore[arg-type]
    (report,) = whole.reports
    assert report.failed and report.nodeid.endswith("slow_tests.txt")
    assert "1 id(s) that match no collected test" in str(report.longrepr) and "tests/test_extend.py::test_gone" in str(report.longrepr)
    assert [item.markers for item in items] == [[], ["slow"]]
    one_file = fake_config(["tests/test_extend.py"])
    conftest.pytest_collection_modifyitems(one_file, [FakeItem("tests/test_extend.py::test_a[-c]")])  # type: ignore[arg-type]
    assert one_file.reports == []


def test_the_list_names_no_test_twice() -> None:
    lines = [line.strip() for line in conftest.SLOW_TESTS.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert len(lines) == len(set(lines)) and all(line.startswith("tests/") and "::" in line for line in lines)
