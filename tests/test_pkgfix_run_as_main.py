"""A module run with ``python -m pkg.mod`` registers under its real name: ``python -m chillfl.plots.pa3fed`` (the
command docs/pa3fed.md gives) always failed, even ``--help``, with "figure 'clp' is registered twice" (its top level
registered as ``__main__``, the built-ins' walk imported it again as ``chillfl.plots.pa3fed``); and without
matplotlib it is one line and exit 2, not a traceback."""

from __future__ import annotations

import importlib
import json
import runpy
import subprocess
import sys
import types
from pathlib import Path

import pytest

from chillfl.plugins import Registry

PROG = "python -m chillfl.plots.pa3fed"


def test_a_module_run_as_main_then_imported_registers_under_one_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run as ``-m`` (runpy: ``__name__ == "__main__"``, ``__spec__.name`` the real name), then imported by name: the
    same code registering its name again replaces it; it was refused as another module's ("__main__")."""
    holder = types.ModuleType("pkgfix_probe_holder")
    registry: Registry[object] = Registry("probe")
    holder.REGISTRY = registry  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pkgfix_probe_holder", holder)
    (tmp_path / "pkgfix_probe_plugin.py").write_text("import pkgfix_probe_holder\npkgfix_probe_holder.REGISTRY.register('x', object())\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pkgfix_probe_plugin", raising=False)  # undone: the import below is taken out again
    runpy.run_module("pkgfix_probe_plugin", run_name="__main__")
    assert registry._homes["x"] == "pkgfix_probe_plugin"
    importlib.import_module("pkgfix_probe_plugin")  # raised ValueError: registered twice
    assert registry._homes["x"] == "pkgfix_probe_plugin"


def test_a_script_run_as_main_keeps_the_main_home(tmp_path: Path) -> None:
    """A script or notebook (no ``__spec__``) is still ``__main__``: nothing else can be its name."""
    registry: Registry[object] = Registry("probe")
    code = compile("registry.register('y', object())\n", str(tmp_path / "script.py"), "exec")
    exec(code, {"__name__": "__main__", "__spec__": None, "registry": registry})
    assert registry._homes["y"] == "__main__"


def run_main(*args: str, no_matplotlib: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m chillfl.plots.pa3fed ARGS``; with ``no_matplotlib``, as runpy runs ``-m`` with matplotlib made
    unimportable (``sys.modules["matplotlib"] = None``, as a venv without the ``plots`` extra)."""
    if not no_matplotlib:
        return subprocess.run([sys.executable, "-m", "chillfl.plots.pa3fed", *args], capture_output=True, text=True, timeout=120)
    code = ("import runpy, sys; sys.modules['matplotlib'] = None; sys.argv[0] = 'pa3fed'; "
            "runpy.run_module('chillfl.plots.pa3fed', run_name='__main__', alter_sys=True)")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_help_works() -> None:
    pytest.importorskip("matplotlib")
    proc = run_main("--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: {PROG} [-h] folder") and proc.stderr == ""


def test_the_documented_command_draws_the_figure(tmp_path: Path) -> None:
    """docs/pa3fed.md's ``python -m chillfl.plots.pa3fed FOLDER`` on a comparison folder of one PA3Fed run."""
    pytest.importorskip("matplotlib")
    run = tmp_path / "cmp" / "PA3Fed"
    run.mkdir(parents=True)
    records = [{"round": r, "global_acc": 0.1 * r, "agg_clp": r == 2, "agg_adapted": r == 2, "agg_fgn": 1.0} for r in (1, 2, 3)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    proc = run_main(str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(tmp_path / "cmp" / "clp_curves.png")
    assert (tmp_path / "cmp" / "clp_curves.png").stat().st_size > 0


@pytest.mark.parametrize("args", [("--help",), ("some-folder",)])
def test_without_matplotlib_it_is_one_line_and_exit_2(args: tuple[str, ...]) -> None:
    proc = run_main(*args, no_matplotlib=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f'{PROG}: error: matplotlib is needed for plots: pip install "chillfl[plots]"\n'
