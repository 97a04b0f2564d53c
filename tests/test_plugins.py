"""Aggregators from outside the package: by import path in the config, and through ``chillfl.plugins`` entry points.

The user code lives in a temporary folder put on ``sys.path`` (or on the subprocess's PYTHONPATH, with a
tiny ``.dist-info`` folder for the entry point): nothing is installed anywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator

import pytest

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.runner import run_experiment

USER_MODULE = '''
from dataclasses import dataclass

import torch

from chillfl.aggregation.base import Downlink, weighted_average


class FirstClient:
    """Takes the lowest client id's model, scaled by ``scale`` (a toy rule with an option)."""

    @dataclass(frozen=True)
    class Options:
        scale: float = 1.0

        def validate(self, section):
            if self.scale <= 0:
                from chillfl.errors import ConfigError
                raise ConfigError(f"{section}.scale", f"must be > 0, got {self.scale}")

    def __init__(self, options):
        self.scale = options.scale

    def downlink(self, client_id, round, global_params):
        return Downlink()

    def aggregate(self, global_params, results, round):
        first = results[0].params
        return {k: v * self.scale if v.is_floating_point() else v for k, v in first.items()}

    def round_metrics(self):
        return {"first": 0}

    def begin_round(self, round, client_ids):
        return None

    def client_half(self):
        return None

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        return None


class NotAnAggregator:
    def aggregate(self, global_params, results, round):
        return global_params
'''

BASE = {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 4, "federation.rounds": 1, "client.batch_size": 32}


@pytest.fixture()
def user_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "my_fl_rules.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("my_fl_rules", None)


def test_import_path_runs_with_its_options_validated(user_code: Path) -> None:
    cfg = load_config(None, {**BASE, "algorithm": {"name": "my_fl_rules:FirstClient", "scale": 1.0}})
    records = run_experiment(cfg, write=False, progress=False).records
    assert records[0]["agg_first"] == 0 and 0 <= records[0]["global_acc"] <= 1
    exp = build_experiment(cfg.with_overrides({"algorithm": {"name": "my_fl_rules:FirstClient", "scale": 2.0}}))
    assert type(exp.aggregator).__name__ == "FirstClient" and exp.aggregator.scale == 2.0  # type: ignore[attr-defined]


@pytest.mark.parametrize("table,field,words", [
    ({"name": "my_fl_rules:FirstClient", "scale": -1.0}, "algorithm.scale", "must be > 0"),
    ({"name": "my_fl_rules:FirstClient", "sacle": 1.0}, "algorithm", "sacle"),
    ({"name": "my_fl_rules:NotAnAggregator"}, "algorithm.name", "lacks downlink"),
    ({"name": "my_fl_rules:Missing"}, "algorithm.name", "no attribute"),
    ({"name": "no_such_module_xyz:Rule"}, "algorithm.name", "cannot import module"),
    ({"name": "bad path:Rule"}, "algorithm.name", "not an import path"),
])
def test_bad_import_paths_and_options_are_config_errors(user_code: Path, table: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(load_config(None, {**BASE, "algorithm": table}))
    assert err.value.field.startswith(field) and words in str(err.value)


def test_a_typo_in_an_import_paths_name_suggests_the_whole_path(user_code: Path) -> None:
    """``my_fl_rules:FirstClinet`` said only "has no attribute": the module's own names give the fix, pasted back whole."""
    messages = {}
    for typed in ("FirstClinet", "firstclient", "Zzzzzz", "_private_thing"):
        with pytest.raises(ConfigError) as err:
            build_experiment(load_config(None, {**BASE, "algorithm": {"name": f"my_fl_rules:{typed}"}}))
        assert err.value.field == "algorithm.name"
        messages[typed] = str(err.value)
    assert messages["FirstClinet"].endswith("module 'my_fl_rules' has no attribute 'FirstClinet' (did you mean 'my_fl_rules:FirstClient'?)")
    assert messages["firstclient"].endswith("(did you mean 'my_fl_rules:FirstClient'?)")  # another case first
    assert messages["Zzzzzz"].endswith("has no attribute 'Zzzzzz'")  # nothing close: no guess
    assert "did you mean" not in messages["_private_thing"]


def test_cli_names_a_bad_import_path_in_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["run", "src/chillfl/experiments/demo.toml", "algorithm.name=no_such_module_xyz:Rule", f"out_dir={tmp_path}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "algorithm.name" in err[0] and "cannot import" in err[0]
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("layout", ["module", "package"])
def test_a_module_in_the_working_directory_off_the_import_path_is_named_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    """The ``chillfl`` script's ``sys.path`` lacks the working directory (``python -m chillfl``'s has it): a plugin
    beside the config failed with a bare ModuleNotFoundError, the file plainly there."""
    if layout == "module":
        (tmp_path / "here_rules_xyz.py").write_text(USER_MODULE)
    else:
        (tmp_path / "here_rules_xyz").mkdir()
        (tmp_path / "here_rules_xyz" / "__init__.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    with pytest.raises(ConfigError) as err:
        build_experiment(load_config(None, {**BASE, "algorithm": {"name": "here_rules_xyz:FirstClient"}}))
    assert err.value.message.endswith("'here_rules_xyz' is in the working directory, which is not on the import path: "
                                      "run PYTHONPATH=. chillfl ... (only in a folder of your own: its every module then imports first)"), err.value
    with pytest.raises(ConfigError) as err:  # elsewhere: no hint
        build_experiment(load_config(None, {**BASE, "algorithm": {"name": "no_such_module_xyz:Rule"}}))
    assert err.value.message.endswith("(ModuleNotFoundError: No module named 'no_such_module_xyz')"), err.value


def test_entry_point_plugin_appears_in_list_and_runs(tmp_path: Path) -> None:
    """A tiny distribution on PYTHONPATH (its .dist-info with an entry_points.txt), in a subprocess: nothing installed."""
    (tmp_path / "my_fl_rules.py").write_text(USER_MODULE)
    info = tmp_path / "chillfl_myrule-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: chillfl-myrule\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[chillfl.plugins]\nfirst_client = my_fl_rules:FirstClient\n")
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(src)])}
    script = textwrap.dedent(f"""
        from chillfl.cli import main
        from chillfl.config import load_config
        from chillfl.runner import run_experiment
        assert main(["list"]) == 0
        cfg = load_config(None, {BASE!r} | {{"algorithm": {{"name": "first_client", "scale": 1.0}}}})
        print("first round", run_experiment(cfg, write=False, progress=False).records[0]["agg_first"])
    """)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "first_client" in out.stdout and "first round 0" in out.stdout
    # without the distribution on the path the name is unknown here: nothing was registered globally
    from chillfl.aggregation.registry import algorithm_names

    assert "first_client" not in algorithm_names() and "median" in algorithm_names()


def test_an_entry_point_installed_or_removed_while_the_process_runs_is_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry points are cached per state of the import path (scanning every distribution took 22 ms a lookup, and
    validating a config looks up once per option table): a ``.dist-info`` added to or removed from a folder already on
    the path changes that folder's state, so the next lookup sees it."""
    import shutil

    from chillfl import plugins

    monkeypatch.syspath_prepend(str(tmp_path))
    os.utime(tmp_path, ns=(0, 0))  # an old modification time: the added folder below sets a new one
    assert "late_rule" not in plugins.entry_points()
    info = tmp_path / "late_rules-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: late-rules\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[chillfl.plugins]\nlate_rule = late_rules:Rule\n")
    assert plugins.entry_points()["late_rule"] == "late_rules:Rule"
    os.utime(tmp_path, ns=(0, 0))
    shutil.rmtree(info)
    assert "late_rule" not in plugins.entry_points()


def test_a_hook_is_checked_the_same_whether_or_not_it_can_be_cached() -> None:
    """Hook signatures are checked once per hook (cached); an unhashable callable is checked every time, alike."""
    from chillfl.plugins import check_hooks

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self, options: object) -> None:
            pass

    def one(options: object) -> None:
        pass

    for hook in (one, Unhashable()):
        check_hooks("x", [("check", hook, ("options",))], "algorithm.name")
        with pytest.raises(ConfigError, match=r"'x': its spec's check is called as check\(options, config\), which .*\(options: 'object'\) -> 'None' does not take"):
            check_hooks("x", [("check", hook, ("options", "config"))], "algorithm.name")


def test_an_entry_point_named_like_a_built_in_is_warned_about_not_silently_dropped(user_code: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A built-in name is looked up first, so an entry point ``median`` (an aggregator) never runs: the lookup and
    ``chillfl list`` say so once, naming the key and the entry point. One of another part (an aggregator called
    ``dsfl``, a built-in soft-label method's name) clashes with nothing and is not warned about."""
    import logging

    from chillfl import once
    from chillfl.aggregation.registry import algorithm_names, algorithm_spec, registered_algorithms
    from chillfl.settings import distillation

    info = user_code / "shadow_rules-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: shadow-rules\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[chillfl.plugins]\nmedian = my_fl_rules:FirstClient\ndsfl = my_fl_rules:FirstClient\n")
    os.utime(user_code, ns=(0, 0))  # the entry points are cached per state of the import path: make this one new
    with caplog.at_level(logging.WARNING, logger="chillfl.plugins"), once.said_once():  # one call's scope, as `chillfl list` or a run
        assert algorithm_spec("median") is registered_algorithms()["median"]  # the built-in still answers to its name
        algorithm_spec("median")
        assert algorithm_names().count("median") == 1
        distillation.FAMILY.spec("dsfl")
    warned = [r.getMessage() for r in caplog.records if r.name == "chillfl.plugins"]
    assert warned == ["algorithm.name: chillfl.plugins entry point 'median' (my_fl_rules:FirstClient) has the name of a built-in, "
                      "which 'median' keeps meaning: the entry point is never used; give it another name"]
