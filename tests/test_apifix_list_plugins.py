"""``chillfl list`` names every installed ``chillfl.plugins`` entry point that no part can use, with why, and exits 0.

An entry point whose object no part takes (``= "mod:NUMBER"``) was left out of the listing without a word, and one whose
module fails to import was said only in a warning on stderr: its author looked for the name in vain. ``chillfl run``
naming it is still one error line with the reason. The distribution is a ``.dist-info`` folder on ``sys.path``:
nothing is installed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.plugins import reading_data

ENTRY_POINTS = """[chillfl.plugins]
apifix_weird = apifix_list_eps:NOT_A_SPEC
apifix_broken = apifix_list_broken:Rule
apifix_missing = apifix_list_eps:Nope
apifix_rule = apifix_list_eps:Rule
"""

GOOD = '''
from chillfl.extend import FedAvg

NOT_A_SPEC = 3


class Rule(FedAvg):
    """FedAvg under another name."""
'''


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "apifix_list_eps.py").write_text(GOOD)
    (tmp_path / "apifix_list_broken.py").write_text("import apifix_no_such_module_xyz\n")
    info = tmp_path / "apifix_list_eps-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: apifix-list-eps\nVersion: 0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    os.utime(tmp_path, ns=(0, 0))  # the entry points are cached per state of the import path: this folder's is new
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _section(out: str) -> list[str]:
    """The lines under the ``unusable plugins`` header (none without it)."""
    lines = out.splitlines()
    header = "unusable plugins (chillfl.plugins entry points that no part can use, and why):"
    if header not in lines:
        return []
    rest = lines[lines.index(header) + 1:]
    return rest[: next((i for i, line in enumerate(rest) if not line.startswith("  ")), len(rest))]


def test_list_names_each_unusable_entry_point_with_why(installed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    algorithms = out[out.index("algorithms:"):out.index("distillation methods:")]
    assert "apifix_rule" in algorithms and "apifix_rule" not in "\n".join(_section(out))  # a usable one: under its part only
    assert _section(out) == [
        "  apifix_broken: cannot import module 'apifix_list_broken' of 'apifix_list_broken:Rule' "
        "(ModuleNotFoundError: No module named 'apifix_no_such_module_xyz')",
        "  apifix_missing: module 'apifix_list_eps' has no attribute 'Nope'",
        "  apifix_weird: apifix_list_eps:NOT_A_SPEC is 3 (int), which no part takes: name a spec of chillfl.extend, "
        "or a class or builder of a part (docs/extending.md)",
    ]
    assert out.index("unusable plugins") < out.index("experiments (")


@pytest.mark.parametrize(("name", "reason"), [("apifix_broken", "cannot import module 'apifix_list_broken'"),
                                              ("apifix_weird", "'apifix_weird' must name an aggregator class or an AlgorithmSpec, got int")])
def test_run_naming_an_unusable_entry_point_is_one_error_line(installed: Path, capsys: pytest.CaptureFixture[str], name: str, reason: str) -> None:
    assert main(["run", "--dry-run", f"algorithm.name={name}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("chillfl: error: algorithm.name: ") and reason in err, err


def test_no_unusable_section_without_such_entry_points(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    assert "unusable plugins" not in capsys.readouterr().out


def test_nothing_is_imported_while_a_folder_is_read_as_data(installed: Path) -> None:
    from chillfl.plugins import unusable_plugins

    with reading_data("chillfl report"):
        assert unusable_plugins(set()) == []
    assert [name for name, _ in unusable_plugins({"apifix_rule", "apifix_weird"})] == ["apifix_broken", "apifix_missing"]
