"""A spec registered again by the module that registered it (a notebook cell run again, ``importlib.reload`` or
``%autoreload`` of a plugin module) replaces the old one, and the classes it makes move with it; a name another module
registered (a built-in's too) stays refused. Before, any second registration raised "registered twice", so only a
kernel restart let an edited plugin run."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

from chillfl.aggregation import registry
from chillfl.aggregation.registry import made_by, registered_algorithms
from chillfl.temperature import registry as policies

PLUGIN = textwrap.dedent('''
    from dataclasses import dataclass
    from chillfl.aggregation.fedavg import FedAvg
    from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm

    @dataclass(frozen=True)
    class MyOpts:
        step: float = {step}

    class MyRule(FedAvg):
        pass

    SPEC = register_algorithm("leakfix_rule", AlgorithmSpec(MyOpts, lambda o, ctx: (MyRule(), []), "a rule", makes=(MyRule,)))
''')


@pytest.fixture(autouse=True)
def _own_registries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registries as they were, after the test (its names gone)."""
    registered_algorithms()
    policies.registered_policies()
    monkeypatch.setattr(registry, "_MADE", dict(registry._MADE))
    for reg in (registry._REGISTRY, policies._REGISTRY):
        monkeypatch.setattr(reg, "_specs", dict(reg._specs))
        monkeypatch.setattr(reg, "_homes", dict(getattr(reg, "_homes", {})), raising=False)


def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, step: float) -> None:
    (tmp_path / f"{name}.py").write_text(PLUGIN.format(step=step))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_a_reloaded_plugin_module_replaces_its_spec_and_its_classes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin(tmp_path, monkeypatch, "leakfix_plugin", 1.0)
    module = importlib.import_module("leakfix_plugin")
    old_rule = module.MyRule
    plugin(tmp_path, monkeypatch, "leakfix_plugin", 2.0)  # edited, then reloaded
    sys.modules["leakfix_plugin"] = module
    importlib.reload(module)
    assert registered_algorithms()["leakfix_rule"] is module.SPEC
    assert module.SPEC.options().step == 2.0
    assert made_by(module.MyRule) == ("leakfix_rule", module.SPEC)
    assert made_by(old_rule) is None  # the old class no longer holds the name


def test_a_notebook_cell_run_twice_registers_again() -> None:
    cell = PLUGIN.format(step=1.0)
    first: dict[str, object] = {"__name__": "__main__"}
    exec(compile(cell, "<cell>", "exec"), first)
    again: dict[str, object] = {"__name__": "__main__"}
    exec(compile(cell, "<cell>", "exec"), again)
    assert registered_algorithms()["leakfix_rule"] is again["SPEC"]
    assert made_by(again["MyRule"]) == ("leakfix_rule", again["SPEC"])  # type: ignore[arg-type]


def test_a_name_another_module_registered_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin(tmp_path, monkeypatch, "leakfix_plugin_a", 1.0)
    importlib.import_module("leakfix_plugin_a")
    plugin(tmp_path, monkeypatch, "leakfix_plugin_b", 1.0)
    with pytest.raises(ValueError, match="'leakfix_rule' is registered twice: by module 'leakfix_plugin_a' and again by module 'leakfix_plugin_b'"):
        importlib.import_module("leakfix_plugin_b")


def test_a_built_in_name_is_refused_from_another_module() -> None:
    spec = registered_algorithms()["fedavg"]
    with pytest.raises(ValueError, match="'fedavg' is registered twice: by module 'chillfl.aggregation.fedavg'"):
        registry.register_algorithm("fedavg", registry.AlgorithmSpec(spec.options, spec.build, "another"))
    fixed = policies.registered_policies()["fixed"]
    with pytest.raises(ValueError, match="registered twice"):
        policies.register_policy("fixed", policies.PolicySpec(fixed.options, fixed.build, "another"))


def test_a_policy_cell_run_twice_registers_again() -> None:
    fixed = policies.registered_policies()["fixed"]
    for _ in range(2):
        spec = policies.PolicySpec(fixed.options, fixed.build, "mine")
        assert policies.register_policy("leakfix_policy", spec) is spec
        assert policies.registered_policies()["leakfix_policy"] is spec


def test_two_plugins_registering_one_name_through_a_helper_module_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The home was the first caller outside the registry: a helper module plugins register through (``mylib.reg``)
    was every plugin's home, and plugin B replaced plugin A's method without a word (rev104b). The home is the module
    whose top-level code registers now."""
    (tmp_path / "leakfix_mylib.py").write_text(textwrap.dedent('''
        from chillfl.aggregation.registry import register_algorithm

        def reg(name, spec):
            return register_algorithm(name, spec)
    '''))
    for name in ("leakfix_via_a", "leakfix_via_b"):
        (tmp_path / f"{name}.py").write_text(PLUGIN.format(step=1.0).replace("SPEC = register_algorithm(", "import leakfix_mylib\nSPEC = leakfix_mylib.reg("))
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "leakfix_mylib", raising=False)
    importlib.import_module("leakfix_via_a")
    with pytest.raises(ValueError, match=r"by module 'leakfix_via_a \(through leakfix_mylib\)' and again by module 'leakfix_via_b \(through leakfix_mylib\)'"):
        importlib.import_module("leakfix_via_b")


def test_two_libraries_install_functions_called_from_one_script_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The module whose top-level code registers is the script for both: alone, it made the second library's method
    replace the first's without a word (rev104c). The caller outside the registry tells them apart."""
    for lib in ("leakfix_lib_a", "leakfix_lib_b"):
        body = PLUGIN.format(step=1.0).replace("SPEC = register_algorithm(", "def install():\n    return register_algorithm(")
        (tmp_path / f"{lib}.py").write_text(body)
        monkeypatch.delitem(sys.modules, lib, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    script = "import leakfix_lib_a, leakfix_lib_b\nleakfix_lib_a.install()\nleakfix_lib_b.install()\n"
    with pytest.raises(ValueError, match=r"by module '__main__ \(through leakfix_lib_a\)' and again by module '__main__ \(through leakfix_lib_b\)'"):
        exec(compile(script, "<script>", "exec"), {"__name__": "__main__"})
    cell = "import leakfix_lib_a\nleakfix_lib_a.install()\n"  # the same library installed again from the script: replaced
    exec(compile(cell, "<script>", "exec"), {"__name__": "__main__"})


def test_a_registration_from_a_thread_is_told_by_its_caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread's stack has no module frame: its home is the caller outside the registry, not ``threading``."""
    import threading

    fixed = policies.registered_policies()["fixed"]
    thread = threading.Thread(target=lambda: policies.register_policy("leakfix_thread", policies.PolicySpec(fixed.options, fixed.build, "mine")))
    thread.start()
    thread.join()
    assert policies._REGISTRY._homes["leakfix_thread"] == __name__


def test_a_subscripted_registry_knows_the_module_that_made_it() -> None:
    """``Registry[T](...)`` is called through typing's alias: its register_* helper's module was recorded as 'typing'
    (rev104d 3; every registry in chillfl is made unsubscripted, so this is for a plugin's own)."""
    from chillfl.plugins import Registry

    assert Registry[int]("thing")._owner == __name__ and Registry("thing")._owner == __name__
