"""A results folder is data: ``chillfl report``, ``status`` and the run-folder analyses import no plugin module its saved
config names (``"pkg.mod:Name"`` or an entry point). Under ``python -m chillfl`` the working directory, often that folder,
is on the import path, so such a module shipped beside the results ran when the folder was read: ``[privacy] mechanism``,
``[attack] kind``, ``[distillation] method`` and ``[prototypes] method`` were resolved (their modules imported) by merely
loading config.toml, and the analyses built the whole run. ``run`` and ``resume`` still import them: the user asked to run it.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from chillfl import runner
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.runner import run_experiment
from chillfl.storage.results import to_toml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PLUGIN = "folder_marker_plugin"
SOURCE = """
from pathlib import Path
Path(__file__).with_name("IMPORTED").write_text("a results folder ran this module")
from chillfl.aggregation.fedavg import SPEC as ALG
from chillfl.attacks.kinds.sign_flip import SPEC as ATT
from chillfl.distillation.methods.dsfl import SPEC as DISTILL
from chillfl.privacy.mechanisms.dp_fedavg import SPEC as PRIV
from chillfl.prototypes.methods.fedproto import SPEC as PROTO
from chillfl.temperature.base import FIXED as POL
"""
ENTRY_POINTS = f"[chillfl.plugins]\nsneaky = {PLUGIN}:ATT\n"
TINY: dict[str, Any] = {
    "name": "plain", "device": "cpu", "dataset.name": "digits", "model.name": "mlp", "model.hidden": [16], "federation.num_clients": 4,
    "federation.clients_per_round": 2, "federation.rounds": 2, "client.batch_size": 32, "eval.client_split_size": 20,
}
EDITS: dict[str, dict[str, Any]] = {  # the saved config's tables, as a run on the plugin wrote them
    "parameters": {"algorithm": {"name": f"{PLUGIN}:ALG", "weighting": "samples"}, "temperature": {"policy": f"{PLUGIN}:POL", "value": 0.5},
                   "privacy": {"mechanism": f"{PLUGIN}:PRIV", "clip_lr": 0.3}, "attack": {"kind": f"{PLUGIN}:ATT", "fraction": 0.25}},
    "entry-point": {"attack": {"kind": "sneaky"}},
    "soft-labels": {"distillation": {"method": f"{PLUGIN}:DISTILL", "public_size": 60, "subset_size": 20}},
    "prototypes": {"prototypes": {"method": f"{PLUGIN}:PROTO"}},
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run (no plugin), whose config.toml each test rewrites."""
    root = tmp_path_factory.mktemp("plain")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "_plots", lambda *args: None)
        folder = run_experiment(load_config(None, {**TINY, "out_dir": str(root)}), progress=False).folder
    assert folder is not None
    return folder


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The working directory as ``python -m chillfl`` has it, on the import path, holding the plugin module and an entry point."""
    (tmp_path / f"{PLUGIN}.py").write_text(SOURCE)
    info = tmp_path / "folder_marker-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: folder-marker\nVersion: 0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop(PLUGIN, None)


def folder_naming(finished: Path, here: Path, case: str, calibration: bool = True) -> Path:
    """A copy of the finished run whose config.toml names the plugin as ``case`` writes it (and, ``calibration=False``, whose
    summary lacks the saved reliability bins, as an older folder's: the report then evaluates its model)."""
    folder = here / "results" / case
    shutil.copytree(finished, folder)
    data = tomllib.loads((folder / "config.toml").read_text())
    data.update(EDITS[case])
    (folder / "config.toml").write_text(to_toml(data))
    if not calibration:
        summary = json.loads((folder / "summary.json").read_text())
        summary.pop("calibration")
        (folder / "summary.json").write_text(json.dumps(summary))
    return folder


@pytest.mark.parametrize("case", sorted(EDITS))
def test_report_and_status_import_no_plugin_a_folder_names(
    case: str, finished: Path, here: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    folder = folder_naming(finished, here, case, calibration=case != "parameters")
    capsys.readouterr()
    assert main(["status", str(folder)]) == 0
    assert "| finished | 2/2 |" in capsys.readouterr().out
    assert main(["report", str(folder), "-o", str(here / "r.html")]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == f"report: {here / 'r.html'}"
    if case == "soft-labels":  # the partition needs the method's public pool: left out, in one note
        assert err.strip().splitlines() == [
            "chillfl: note: the report imports no plugin code that a results folder names; left out, as only that code could draw them: "
            f"the partition of {TINY['name']} (distillation.method = '{PLUGIN}:DISTILL')"]
    else:  # the tables as written, the figures from the model and data: nothing left out
        assert err == ""
        assert case != "parameters" or 'alt="reliability' in (here / "r.html").read_text()
    assert not (here / "IMPORTED").exists() and PLUGIN not in sys.modules


def test_the_page_shows_a_plugins_table_as_written(finished: Path, here: Path) -> None:
    from chillfl.report.html import render

    page = render([folder_naming(finished, here, "parameters")], models=False, partitions=False)
    assert f"mechanism = &quot;{PLUGIN}:PRIV&quot;" in page and "clip_lr = 0.3" in page and "fraction = 0.25" in page
    assert not (here / "IMPORTED").exists()


def test_an_analysis_evaluates_without_the_plugin_and_refuses_a_replay_in_one_line(
    finished: Path, here: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    folder = folder_naming(finished, here, "parameters")
    assert main(["analyze", "calibration", str(folder), "--out", str(here / "cal")]) == 0  # the model and data: no method needed
    capsys.readouterr()
    assert main(["analyze", "cka", str(folder), "--out", str(here / "cka")]) == 2  # a replayed round runs the method: refused
    err = capsys.readouterr().err.strip().splitlines()
    # the first part asked: the method's capabilities (a personal-model run is refused before any run is built)
    assert len(err) == 1 and err[0].startswith("chillfl: error: algorithm.name: ") and "--import-plugins" in err[0], err
    assert not (here / "IMPORTED").exists() and not (here / "cka").exists()


def test_a_config_the_user_runs_still_imports_its_plugin(here: Path) -> None:
    """What reads a folder as data leaves the rest alone: a config the user runs (``run``, ``resume``) imports its plugin."""
    assert load_config(None, {"attack.kind": f"{PLUGIN}:ATT"}).attack.enabled
    assert (here / "IMPORTED").exists()
