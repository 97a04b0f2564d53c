"""scripts/griffe_roles.py, the griffe extension mkdocs.yml loads: the docstrings' reST roles become Markdown references.

The API reference showed ":class:TensorData" (mkdocstrings' sphinx style parses :param: fields, not inline roles) and
linked nothing. Checked here on sample docstrings, without building the site (CI's ``mkdocs build --strict`` builds it).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

griffe = pytest.importorskip("griffe")  # the docs extra (CI installs it with the test extra)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "griffe_roles.py"


def _extension() -> ModuleType:
    spec = importlib.util.spec_from_file_location("griffe_roles_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None, f"{SCRIPT} is missing"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mkdocs_loads_the_extension_by_that_path():
    assert "extensions: [scripts/griffe_roles.py]" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


KNOWN = {"TensorData": "chillfl.api.TensorData", "chillfl.data.ArrayDataset": "chillfl.data.ArrayDataset", "Result.model": "chillfl.api.Result.model",
         "chillfl.extend": "chillfl.extend", "run": "chillfl.api.run"}


def _link(path: str, shown: str) -> str:
    return f'<autoref identifier="{path}" optional>`{shown}`</autoref>'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":class:`TensorData`", _link("chillfl.api.TensorData", "TensorData")),
        (":class:`~chillfl.data.ArrayDataset`", _link("chillfl.data.ArrayDataset", "ArrayDataset")),  # ~: the last part shown
        (":class:`chillfl.data.ArrayDataset`", _link("chillfl.data.ArrayDataset", "chillfl.data.ArrayDataset")),
        (":attr:`Result.model`", _link("chillfl.api.Result.model", "Result.model")),
        (":func:`run()`", _link("chillfl.api.run", "run()")),
        (":py:mod:`chillfl.extend`", _link("chillfl.extend", "chillfl.extend")),
        (":func:`the runner <run>`", _link("chillfl.api.run", "the runner")),
        (":func:`!run`", "`run`"),  # ! : never a link
        (":data:`_MADE`", "`_MADE`"),  # a name nothing resolves: plain inline code, no reference for --strict to miss
        (":exc:`~chillfl.nowhere.Error`", "`Error`"),
    ],
)
def test_each_role_becomes_a_reference_or_inline_code(text, expected):
    assert _extension().rewrite(text, KNOWN.get) == expected


def test_the_rest_of_a_docstring_is_untouched():
    rewrite = _extension().rewrite
    text = "Run it.\n\n:param data: a :class:`TensorData` or ``x``.\n\n```python\n# :class:`TensorData` shown as written\n```\n:returns: a :attr:`Result.model`"
    out = rewrite(text, KNOWN.get)
    assert out == (
        "Run it.\n\n:param data: a " + _link("chillfl.api.TensorData", "TensorData") + " or ``x``.\n\n```python\n# :class:`TensorData` shown as written\n```\n"
        ":returns: a " + _link("chillfl.api.Result.model", "Result.model")
    )


SAMPLE = {
    "__init__.py": '"""Package: see :mod:`pkg.core`."""\nfrom pkg.core import Thing\n',
    "core.py": (
        '"""Core: :class:`Thing` and :func:`~pkg.util.helper`."""\n'
        "from pkg.util import helper\n\n"
        "class Thing:\n"
        '    """A thing; :meth:`go` calls :func:`helper`, as :class:`~pkg.Thing` says; not :class:`torch.Tensor`."""\n\n'
        "    def go(self):\n"
        '        """Go: :attr:`Thing.size` and :meth:`go` again."""\n\n'
        "    size: int = 1\n"
        '    """Its size (:data:`LIMIT`, defined later)."""\n\n'
        "LIMIT = 3\n"
    ),
    "util.py": 'def helper():\n    """Help :class:`pkg.core.Thing`."""\n',
}


def test_names_resolve_through_scopes_and_imports_once_the_package_is_loaded():
    extensions = griffe.load_extensions(str(SCRIPT))
    with griffe.temporary_visited_package("pkg", SAMPLE, extensions=extensions) as pkg:
        docs = {path: pkg[path].docstring.value for path in ("core", "core.Thing", "core.Thing.go", "core.Thing.size", "util.helper")}
        assert pkg.docstring.value == "Package: see " + _link("pkg.core", "pkg.core") + "."
    assert docs == {
        "core": "Core: " + _link("pkg.core.Thing", "Thing") + " and " + _link("pkg.util.helper", "helper") + ".",
        # the method by the class's scope, the helper by core's import, pkg.Thing through the package's re-export;
        # a third-party name is not in the loaded tree: inline code
        "core.Thing": "A thing; " + _link("pkg.core.Thing.go", "go") + " calls " + _link("pkg.util.helper", "helper") + ", as "
        + _link("pkg.Thing", "Thing") + " says; not `torch.Tensor`.",
        "core.Thing.go": "Go: " + _link("pkg.core.Thing.size", "Thing.size") + " and " + _link("pkg.core.Thing.go", "go") + " again.",
        "core.Thing.size": "Its size (" + _link("pkg.core.LIMIT", "LIMIT") + ", defined later).",
        "util.helper": "Help " + _link("pkg.core.Thing", "pkg.core.Thing") + ".",
    }
