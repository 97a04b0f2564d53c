"""A griffe extension for the API reference (mkdocs.yml): the docstrings' reST roles (:class:`X`) as Markdown.

chillfl's docstrings cross-reference with Sphinx roles (``:class:`~chillfl.data.ArrayDataset```), read as they are in an
editor and by ``help()``. mkdocstrings' sphinx style parses the ``:param:`` fields but leaves inline roles as text, so
docs/api.md showed ":class:TensorData" hundreds of times and linked none. This rewrites each role, once the package is
loaded (names resolve against the whole tree, imports included), into an mkdocs-autorefs *optional* reference:

* a name griffe resolves becomes ``<autoref identifier="full.path" optional>`shown`</autoref>``: a link where the site
  renders that object (autorefs knows, at build time, which anchors exist) and inline code with the path as its tooltip
  where it does not (a private helper, a module the page leaves out), with no warning, so ``mkdocs build --strict``
  holds whichever way the page's member lists change;
* a name it cannot resolve (a typo, a private name of another scope) becomes plain inline code.

``shown`` follows Sphinx: ``~a.b.C`` shows ``C``, ``a.b.C`` shows ``a.b.C``, ``title <target>`` shows ``title``, and
``!name`` is never linked. Not part of the package: mkdocs loads it by path (``extensions: [scripts/griffe_roles.py]``).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import griffe

ROLES = ("class", "func", "meth", "attr", "data", "mod", "exc", "obj", "const")
"""The Python-domain roles the docstrings use (``:py:class:`` spelt in full too)."""

ROLE = re.compile(r":(?:py:)?(?P<role>" + "|".join(ROLES) + r"):`(?P<body>[^`]+)`")
TITLED = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")
DOTTED = re.compile(r"^[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*$")

Resolve = Callable[[str], "str | None"]
"""A dotted name as written in a docstring -> the full path it names, None where it names nothing known."""


def rewrite(text: str, resolve: Resolve) -> str:
    """``text`` with every role replaced as the module docstring says; the rest untouched (fenced code included)."""
    parts = re.split(r"(^\s*```.*?^\s*```[^\n]*$)", text, flags=re.MULTILINE | re.DOTALL)  # roles shown in a code block stay as written
    return "".join(part if index % 2 else ROLE.sub(lambda m: _reference(m["body"], resolve), part) for index, part in enumerate(parts))


def _reference(body: str, resolve: Resolve) -> str:
    """One role's body (``~a.b.C``, ``!x``, ``title <a.b>``, ``f()``) as Markdown."""
    titled = TITLED.match(body.strip())
    target = (titled["target"] if titled else body).strip()
    link = not target.startswith("!")
    target = target.lstrip("!")
    short = target.startswith("~")
    target = target.lstrip("~.")
    name = target.removesuffix("()")
    shown = titled["title"] if titled else (name.rsplit(".", 1)[-1] if short else name) + target[len(name):]
    path = resolve(name) if link and DOTTED.match(name) else None
    code = f"`{shown}`" if "`" not in shown else shown
    return code if path is None else f'<autoref identifier="{path}" optional>{code}</autoref>'


def resolver(obj: griffe.Object | griffe.Alias) -> Resolve:
    """Names as Python reads them from ``obj``'s docstring: its own members, then its parents' scopes and imports;
    a dotted name by its first part (``Result.model``), an absolute one (``chillfl.data.X``) through the root package."""

    def resolve(name: str) -> str | None:
        first, _, rest = name.partition(".")
        head: str | None
        try:
            head = obj.resolve(first)
        except griffe.NameResolutionError:
            head = first if rest and first == obj.package.name else None  # chillfl.x.Y: absolute from the package root
        if head is None:
            return None
        path = f"{head}.{rest}" if rest else head
        try:
            obj.modules_collection.get_member(path)
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None  # not in the loaded tree (a third-party name, a typo): autorefs could not link it either
        return path

    return resolve


class ReSTRoles(griffe.Extension):
    """Rewrites every docstring of a loaded package once its tree is complete (so later definitions and imports resolve)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        """Walk the package; aliases are skipped, their targets' docstrings are rewritten where they are defined."""
        seen: set[int] = set()
        todo: list[griffe.Object] = [pkg]
        while todo:
            obj = todo.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if obj.docstring is not None and ":" in obj.docstring.value:
                obj.docstring.value = rewrite(obj.docstring.value, resolver(obj))
            todo.extend(member for member in obj.members.values() if not member.is_alias and isinstance(member, griffe.Object))
