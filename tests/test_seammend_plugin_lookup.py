"""A method named by import path (``"pkg.mod:Name"``) is looked up without importing every built-in module.

Before, the registry's lookup of a ``:`` name missed its table and walked all of ``chillfl.aggregation`` (~50 modules,
0.3 s a process) though no built-in can hold such a name. The shadowing rules still hold: a plugin that registers a
built-in's name is refused (it loads the built-ins then), and a ``:`` name a plugin registered is still found.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chillfl.plugins import Registry, package_modules

PLUGIN = """
import dataclasses
from chillfl.aggregation import fedavg
from chillfl.aggregation.fedavg import FedAvg

class Rule(FedAvg):
    pass

SPEC = dataclasses.replace(fedavg.SPEC, summary="a plugin's copy of fedavg")
"""

CHILD = """
import json, sys
import seammend_plug
from chillfl.config import config_from_dict
from chillfl.experiment import check_config

def loaded():
    return {m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("chillfl.aggregation.")}

before = loaded()
for name in ("seammend_plug:Rule", "seammend_plug:SPEC"):
    check_config(config_from_dict({"algorithm": {"name": name}}))
print(json.dumps({"before": sorted(before), "new": sorted(loaded() - before)}))
"""


def test_a_plugin_named_by_path_imports_no_other_built_in(tmp_path: Path) -> None:
    (tmp_path / "seammend_plug.py").write_text(PLUGIN)
    env_path = [str(tmp_path), *sys.path]
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, check=True,
                         env={**os.environ, "PYTHONPATH": ":".join(p for p in env_path if p)}).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["new"] == [], seen  # every aggregation module the run needs came with the plugin's own imports
    assert "fedavg" in seen["before"] and "ditto" not in seen["before"] and "fedopt" not in seen["before"], seen
    assert len(seen["before"]) < len(package_modules("chillfl.aggregation")) // 2, seen


def test_a_colon_name_is_looked_up_among_what_plugins_registered() -> None:
    registry: Registry[str] = Registry("seammend thing", package="chillfl.aggregation")
    assert registry.get("pkg.mod:Name") is None
    assert not registry._loaded  # no walk of the built-in modules for a name none of them can hold
    registry._loaded = True  # as after a walk: a plugin registers without loading again
    registry.register("pkg.mod:Name", "the plugin's")
    assert registry.get("pkg.mod:Name") == "the plugin's"


def test_chillfl_code_may_not_register_a_colon_name() -> None:
    registry: Registry[str] = Registry("seammend thing", modules=())
    code = compile("REGISTRY.register('a.b:C', 'built-in')", "<seammend>", "exec")
    with pytest.raises(ValueError, match="holds no ':'"):
        exec(code, {"__name__": "chillfl.seammend_fake", "REGISTRY": registry})  # noqa: S102 - a module of chillfl's registering
