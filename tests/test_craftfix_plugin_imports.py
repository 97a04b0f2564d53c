"""Parsing a saved ``config.toml`` imports no ``chillfl.plugins`` entry point, nor does ``chillfl.load_run`` of a plain
fedavg folder. A saved config's ``[privacy]`` / ``[attack]`` tables list their options while off, whose owners were
looked up among every spec: that imported every installed entry point's module, and with the working directory on
the import path (``python -m``, a notebook) one a received folder ships beside itself in a ``.dist-info``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import chillfl
from chillfl.config import load_config
from chillfl.plugins import plugin_names
from test_revbfix_load_run import CONFIG, DATA, Watched


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished fedavg run folder (its config.toml lists [privacy] and [attack] keys while both are off)."""
    folder = chillfl.run(model=Watched(), data=DATA, config=CONFIG, out_dir=tmp_path_factory.mktemp("runs"), name="r", progress=False).folder
    assert folder is not None
    text = (folder / "config.toml").read_text()
    assert "[privacy]" in text and "clip_norm" in text  # what made the parse look at every mechanism
    return folder


def installed(folder: Path, monkeypatch: pytest.MonkeyPatch, module: str, name: str = "geomed") -> Path:
    """A fake distribution in ``folder`` on the import path: entry point ``name`` names ``module``, which writes the
    returned marker file when imported."""
    marker = folder / f"{module}.imported"
    (folder / f"{module}.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('x')\nGM = 1\n")
    info = folder / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[chillfl.plugins]\n{name} = {module}:GM\n")
    os.utime(folder, ns=(0, 0))  # the entry points are cached per state of the import path: this folder's is new
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, module, raising=False)
    return marker


def test_the_fake_entry_point_is_imported_when_parts_are_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: listing the parts imports it (chillfl list), so the tests below would see an import."""
    marker = installed(tmp_path, monkeypatch, "craftfix_control")
    plugin_names(lambda obj: False)
    assert marker.is_file()


@pytest.mark.parametrize("name", ["geomed", "dp-fedavg"])
def test_parsing_a_saved_config_imports_no_plugin(plain: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Also one named like a built-in mechanism the off table's options are looked up in (it shadows nothing used)."""
    marker = installed(tmp_path, monkeypatch, f"craftfix_parse_{name.replace('-', '_')}", name)
    config = load_config(plain / "config.toml")
    assert config.privacy.mechanism == "none"
    assert not marker.exists()


@pytest.mark.parametrize("name", ["geomed", "dirichlet", "dp-fedavg"])
def test_load_run_of_a_plain_folder_imports_no_plugin(plain: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Also one named like a built-in the folder uses (its partitioner, dirichlet) or lists (the mechanism dp-fedavg):
    checking whether it shadows the built-in imported it; load_run reads a folder that names no plugin as data
    (reading_data), as report and status do."""
    marker = installed(tmp_path, monkeypatch, f"craftfix_load_{name.replace('-', '_')}", name)
    saved = chillfl.load_run(plain, model=Watched(), data=DATA)
    assert saved.model is not None
    assert not marker.exists()


def test_a_held_option_no_built_in_takes_is_still_refused_naming_it(plain: Path, tmp_path: Path) -> None:
    """The plugins are asked only for a key no built-in takes; one that none takes is the same one-line error."""
    text = (plain / "config.toml").read_text().replace("[privacy]\n", "[privacy]\nnot_an_option_xyz = 1\n", 1)
    (tmp_path / "config.toml").write_text(text)
    with pytest.raises(chillfl.ConfigError, match="not_an_option_xyz"):
        load_config(tmp_path / "config.toml")


def test_load_run_of_a_folder_that_names_a_plugin_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder whose config names a plugin part (an aggregator by entry point) is still read back, not refused as
    report refuses it: the aggregator is not needed to rebuild the model and data, so it is not imported either."""
    marker = tmp_path / "craftfix_rule.imported"
    (tmp_path / "craftfix_rule.py").write_text(f"from pathlib import Path\nfrom chillfl.extend import FedAvg\nPath({str(marker)!r}).write_text('x')\n\n\n"
                                               "class Rule(FedAvg):\n    pass\n")
    info = tmp_path / "craftfix_rule-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: craftfix_rule\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[chillfl.plugins]\ncraftfix_rule = craftfix_rule:Rule\n")
    os.utime(tmp_path, ns=(0, 0))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "craftfix_rule", raising=False)
    config = {**CONFIG, "algorithm": {"name": "craftfix_rule"}}
    folder = chillfl.run(model=Watched(), data=DATA, config=config, out_dir=tmp_path / "runs", name="r", progress=False).folder
    assert folder is not None
    marker.unlink()
    monkeypatch.delitem(sys.modules, "craftfix_rule", raising=False)
    saved = chillfl.load_run(folder, model=Watched(), data=DATA)
    assert saved.model is not None and saved.config.algorithm["name"] == "craftfix_rule"
    assert not marker.exists()
