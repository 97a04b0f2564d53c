"""The core runs without the optional packages; a missing extra is one line naming it.

Each check runs in a fresh interpreter whose imports of the optional packages
(matplotlib, scipy, scikit-learn, mnist1d, tensorboard, wandb, mlflow) fail as if they
were not installed: ``sys.modules[name] = None`` makes ``import name`` (and
``import name.sub``) raise ``ModuleNotFoundError``, exactly as a missing
package does.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chillfl.errors import ConfigError, MissingExtra
from chillfl.extras import need

OPTIONAL = ("matplotlib", "scipy", "sklearn", "mnist1d", "tensorboard", "wandb", "mlflow")

BLOCK = f"""
import sys
for name in {OPTIONAL!r}:
    sys.modules[name] = None
"""

TINY = """
name = "tiny"
seed = 1
[federation]
num_clients = 4
rounds = 2
[client]
batch_size = 16
lr = 0.05
[dataset]
name = "synthetic"
num_clients = 4
dim = 10
num_classes = 3
size_log_mean = 1.0
size_log_sigma = 0.5
min_samples = 20
[partition]
name = "natural"
[model]
name = "mlp"
[eval]
client_split = "natural"
"""


def blocked(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with the optional packages blocked."""
    script = BLOCK + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_blocker_really_blocks(tmp_path: Path) -> None:
    # Guards the other tests: if the blocker let matplotlib through, they would prove nothing.
    out = blocked("import matplotlib\n", tmp_path)
    assert out.returncode != 0 and "ModuleNotFoundError" in out.stderr


def test_core_imports_and_runs_a_tiny_experiment_without_extras(tmp_path: Path) -> None:
    (tmp_path / "tiny.toml").write_text(TINY, encoding="utf-8")
    out = blocked(
        f"""
        import logging, sys
        logging.basicConfig(level=logging.INFO, format="LOG %(name)s %(message)s")
        import chillfl, chillfl.api, chillfl.cli, chillfl.config, chillfl.runner, chillfl.experiment, chillfl.report.compare, chillfl.sweeps.run
        from chillfl.config import load_config
        from chillfl.runner import run_experiment
        config = load_config("tiny.toml", {{"out_dir": {str(tmp_path / "results")!r}}})
        output = run_experiment(config, progress=False)
        print("FOLDER", output.folder)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {OPTIONAL!r} and sys.modules[m] is not None)
        print("LOADED", loaded)
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "LOADED []" in out.stdout
    folder = tmp_path / "results" / "tiny"
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [1, 2]
    assert (folder / "summary.json").is_file() and (folder / "config.toml").is_file()
    assert not list(folder.glob("*.png"))
    skipped = [line for line in out.stderr.splitlines() if "figures skipped" in line]
    assert skipped == ['LOG chillfl.runner matplotlib is needed for plots: pip install "chillfl[plots]"; figures skipped']


def test_cli_run_without_extras_writes_metrics(tmp_path: Path) -> None:
    (tmp_path / "tiny.toml").write_text(TINY, encoding="utf-8")
    out = blocked("from chillfl.cli import main\nsys.exit(main(['run', 'tiny.toml', '--out', 'res']))\n", tmp_path)
    assert out.returncode == 0, out.stderr
    progress = [line for line in out.stderr.splitlines() if line.startswith("chillfl: tiny round ")]  # stderr is no terminal: plain lines
    assert progress and progress[-1].startswith("chillfl: tiny round 2/2 ")
    lines = [line for line in out.stderr.splitlines() if line.startswith("chillfl:") and line not in progress]
    assert lines == ['chillfl: matplotlib is needed for plots: pip install "chillfl[plots]"; figures skipped']
    assert "Traceback" not in out.stderr
    assert (tmp_path / "res" / "tiny" / "metrics.jsonl").is_file()


STOPPED = [
    (["run", "--out", "res"], 'chillfl: scikit-learn is needed for the digits data: pip install "chillfl[datasets]"'),  # the demo
    (["compare", "digits.toml", "--grid", "client.lr=0.1,0.2", "--out", "res"], 'chillfl: scikit-learn is needed for the digits data: pip install "chillfl[datasets]"'),
    (["run", "digits.toml", "--out", "res"], 'chillfl: scikit-learn is needed for the digits data: pip install "chillfl[datasets]"'),
    (["run", "mnist1d.toml", "--out", "res"], 'chillfl: mnist1d is needed for the mnist1d data: pip install "chillfl[datasets]"'),
    (["data", "show", "tiny.toml", "-o", "res/heat.png"], 'chillfl: matplotlib is needed for heat maps: pip install "chillfl[plots]"'),
    (["analyze", "cache-ratio"], 'chillfl: matplotlib is needed for plots: pip install "chillfl[analysis]"'),
    (["analyze", "temperature-sweep", "tiny.toml", "out_dir=res"], 'chillfl: scipy is needed for correlations: pip install "chillfl[analysis]"'),
]


def test_a_missing_extra_that_stops_a_command_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "tiny.toml").write_text(TINY, encoding="utf-8")
    for name in ("digits", "mnist1d"):
        (tmp_path / f"{name}.toml").write_text(f'[federation]\nrounds = 1\n[dataset]\nname = "{name}"\n[model]\nname = "mlp"\n', encoding="utf-8")
    # One interpreter for every command (torch is imported once); each command's stderr is captured on its own.
    out = blocked(
        f"""
        import contextlib, io, json
        from chillfl.cli import main
        for argv in {[argv for argv, _ in STOPPED]!r}:
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                code = main(argv)
            print(json.dumps([code, err.getvalue()]))
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    results = [json.loads(line) for line in out.stdout.splitlines()]
    assert results == [[2, line + "\n"] for _, line in STOPPED]
    assert not (tmp_path / "res").exists() or not any((tmp_path / "res").iterdir())


def test_need_names_the_extra_and_is_a_config_error() -> None:
    with pytest.raises(MissingExtra) as info:
        need("chillfl_no_such_package_xyz", "plots", "plots")
    assert str(info.value) == 'chillfl_no_such_package_xyz is needed for plots: pip install "chillfl[plots]"'
    assert isinstance(info.value, ConfigError) and info.value.field == "plots"


def test_need_does_not_hide_a_broken_installed_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A package that is present but fails on one of *its own* imports is a real error, not a missing extra.
    (tmp_path / "chillfl_broken_pkg.py").write_text("import chillfl_missing_dependency_xyz\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError):
        need("chillfl_broken_pkg", "plots", "plots")


def test_need_leaves_the_root_logger_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # opacus (the privacy extra) calls logging.basicConfig on import: its root handler printed every chillfl log line
    # of a private run twice, the second time as "MM/DD/YYYY HH:MM:SS:INFO:...".
    (tmp_path / "chillfl_configures_logging.py").write_text("import logging\nlogging.basicConfig()\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # as in the CLI: no root handler (pytest's own would make basicConfig a no-op)
    need("chillfl_configures_logging", "privacy", "[privacy]")
    assert root.handlers == []
