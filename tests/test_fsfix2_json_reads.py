"""Every JSON file a user or a damaged folder supplies is read with ``errors.json_loads``: nesting too deep for Python's
parser is a damaged file (a one-line refusal, or the file skipped), never a RecursionError traceback (fsfault finding 2).

Read so: ``partition.from``, FEMNIST's LEAF ``*.json``, an array-cache entry's ``meta.json``, an older comparison's
``table.json`` (PA3Fed's figure) and a run folder's MLflow runs record."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import chillfl.plots.pa3fed as pa3fed
from chillfl.data.arraycache import CACHE_DIR, cached
from chillfl.data.loaders import read_leaf_json
from chillfl.errors import ConfigError
from chillfl.sinks import MLFLOW_RUNS, read_mlflow_runs

from received_folder import DEEP
from test_cache_superseded import _decoded, _entries, _source, _write
from test_damaged_files import _one_line_error, _run_from


def test_a_deep_partition_from_file_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    assert _run_from(deep, tmp_path) == 2
    _one_line_error(capsys, "partition.from", "deep.json", "nested too deeply")


def test_a_deep_leaf_json_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(DEEP)
    with pytest.raises(ConfigError, match="a.json.*nested too deeply"):
        read_leaf_json(tmp_path)


def test_a_deep_cache_meta_json_is_a_damaged_entry(tmp_path: Path) -> None:
    entry = _write(tmp_path)
    (tmp_path / CACHE_DIR / entry / "meta.json").write_text(DEEP)
    with pytest.raises(ConfigError, match="unreadable.*nested too deeply"):
        cached("toy", {}, _source(tmp_path), tmp_path, _decoded, output_version=1)


def test_the_cache_sweep_keeps_an_entry_with_a_deep_meta_json(tmp_path: Path) -> None:
    """An entry whose meta.json cannot be read is not known to be the one superseded: kept, as any damaged entry."""
    old = _write(tmp_path, version=1)
    (tmp_path / CACHE_DIR / old / "meta.json").write_text(DEEP)
    new = _write(tmp_path, version=2)
    assert _entries(tmp_path) == {old, new}


def test_pa3fed_reads_past_a_deep_table_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "table.json").write_text(DEEP)
    monkeypatch.setattr(pa3fed, "run_folders", lambda folder: [])
    with pytest.raises(ConfigError, match="no PA3Fed run"):
        pa3fed.clp_groups(tmp_path)


def test_a_deep_mlflow_runs_record_is_not_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / MLFLOW_RUNS).write_text(DEEP)
    with caplog.at_level(logging.WARNING):
        assert read_mlflow_runs(tmp_path) is None
    assert "nested too deeply" in caplog.text


NOT_FILES = {
    "errors.py": "json_loads itself",
    "report/html.py": "re-reads metrics.jsonl lines that read_metrics (json_loads) already parsed, to name the bad one",
    "protocols/softlabels/public.py": "options chillfl itself serialised as a cache key",
    "sweeps/record.py": "a JSON round trip of a record in memory",
}


def test_every_json_read_of_a_file_goes_through_json_loads() -> None:
    """A plain ``json.load(s)`` is allowed only where no file is read (the list above, with why)."""
    import re

    import chillfl

    root = Path(chillfl.__file__).parent
    plain = {p.relative_to(root).as_posix() for p in root.rglob("*.py") if re.search(r"\bjson\.loads?\(", p.read_text(encoding="utf-8"))}
    assert plain <= set(NOT_FILES), sorted(plain - set(NOT_FILES))
