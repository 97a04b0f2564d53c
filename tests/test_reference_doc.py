"""docs/reference.md shows every enumerated option's allowed values and the shared [distillation] options.

The checks walk the code (every options dataclass, every registry), not the
document, so a new Literal option or a new registered name that the generator
fails to show is caught.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest

from chillfl.cli import main
from chillfl.config import EXECUTORS, RunConfig
from chillfl.report.reference import _registries, enumerated_options, render_reference
from chillfl.options import OwnTable
from chillfl.settings.distillation import DistillationOptions
from chillfl.settings.privacy import PrivacyOptions

DOC = Path(__file__).resolve().parents[1] / "docs" / "reference.md"


def test_committed_reference_is_the_generators_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--options"]) == 0
    out = capsys.readouterr().out
    assert DOC.read_text(encoding="utf-8") == out, "regenerate: chillfl list --options > docs/reference.md"


def _sections() -> list[tuple[str, str, type]]:
    """(heading that starts its part of the document, field prefix, options dataclass) for every table of options."""
    hints = typing.get_type_hints(RunConfig)
    own = [f.name for f in dataclasses.fields(RunConfig) if isinstance(hints[f.name], type) and issubclass(hints[f.name], OwnTable)]
    out = [(f"## [{f.name}]", f.name, hints[f.name]) for f in dataclasses.fields(RunConfig) if dataclasses.is_dataclass(hints[f.name]) and f.name not in own]
    out.append(("### Shared options (every method)", "distillation", DistillationOptions))
    out.append(("### Shared options (every mechanism)", "privacy", PrivacyOptions))  # a table that parses itself is a part: its shared options
    for section, _key, registry in _registries():
        out += [(f"### `{name}`", f"{section}.{name}", spec.options) for name, spec in sorted(registry.items())]
    return out


def _block(text: str, heading: str, after: str = "") -> str:
    """The lines of ``text`` from ``heading`` (found after ``after``) to the next heading."""
    start = text.index(heading, text.index(after) if after else 0)
    rest = text[start + len(heading):]
    ends = [i for i in (rest.find("\n## "), rest.find("\n### ")) if i >= 0]
    return rest[: min(ends)] if ends else rest


def _literal_values(tp: Any) -> tuple[Any, ...] | None:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return args
    if origin in (list, tuple, typing.Union) or str(origin) == "<class 'types.UnionType'>":
        for arg in args:
            found = _literal_values(arg)
            if found:
                return found
    return None


def test_every_literal_option_lists_all_its_values() -> None:
    text = render_reference()
    checked = 0
    for heading, prefix, cls in _sections():
        after = f"## [{prefix.split('.')[0]}]" if heading.startswith("### `") else ""
        block = _block(text, heading, after)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            values = _literal_values(hints[f.name])
            if not values:
                continue
            row = next(line for line in block.splitlines() if line.startswith(f"| `{f.name}` |"))
            allowed = row.rsplit("|", 2)[-2]
            assert [v.strip().strip("`") for v in allowed.replace("any of", "").replace("(or none)", "").split(",")] == [str(v) for v in values], (prefix, f.name, row)
            checked += 1
    assert checked >= 15  # eval.clients, federation.on_too_few, log.sinks, cifar100.labels, the distillation stores, ...


def test_every_registered_name_and_enumerated_string_option_is_shown() -> None:
    text = render_reference()
    for section, key, registry in _registries():
        line = f"`{key}`: one of " + ", ".join(f"`{n}`" for n in sorted(registry)) + "."
        assert line in " ".join(_block(text, f"## [{section}] {key} = ...").split())  # one paragraph, wrapped
    assert "| `executor` | `str` | `\"sequential\"` | " + ", ".join(f"`{e}`" for e in EXECUTORS) + " |" in text
    enumerated = enumerated_options()
    assert {"temperature.fedchill.measure", "algorithm.pa3fed.base"} <= set(enumerated)  # declared on their specs
    for where, takes in enumerated.items():
        names = takes.names
        assert names(), where  # every registry behind a string option resolves to names
        *section, option = where.split(".")
        if not section:
            heading = "## Top-level options"
        elif section == ["distillation"]:
            heading = "### Shared options (every method)"
        elif len(section) == 1:
            heading = f"## [{section[0]}]"
        else:
            heading = f"### `{section[1]}`"
        after = f"## [{section[0]}]" if len(section) == 2 else ""
        row = next(line for line in _block(text, heading, after).splitlines() if line.startswith(f"| `{option}` |"))
        assert all(f"`{n}`" in row for n in names()), (where, row)


def test_shared_distillation_options_are_shown_once_with_every_field() -> None:
    block = _block(render_reference(), "### Shared options (every method)")
    rows = [line.split("|")[1].strip().strip("`") for line in block.splitlines() if line.startswith("| `")]
    assert rows == [f.name for f in dataclasses.fields(DistillationOptions) if f.init]


def test_cells_with_a_pipe_are_escaped() -> None:
    text = render_reference()
    assert "| `clients_per_round` | `int \\| None` | `unset` |  |" in text
    for line in text.splitlines():
        if line.startswith("| `"):
            assert line.replace("\\|", "").count("|") == 5, line  # four cells


def test_the_options_every_model_takes_are_shown() -> None:
    """``[model] projection_dim`` (MOON's head, any model) was nowhere in the reference, which configuration.md
    calls the list of every option: methods.md and moon-fedalign-fedgen.md send readers to it."""
    from chillfl.models.projection import PROJECTION_OPTION

    text = render_reference()
    model = text[text.index("## [model] name = ...") : text.index("## [temperature]")]
    assert "### Shared options (every model)" in model
    assert f"| `{PROJECTION_OPTION}` | `int` | `0` |" in _block(model, "### Shared options (every model)")


def test_a_partition_read_from_a_file_is_shown() -> None:
    """``[partition] from`` (docs/data.md, configuration.md) was missing from the list of every option."""
    text = render_reference()
    partition = text[text.index("## [partition] name = ...") :].split("\n### ", 1)[0]
    assert '`from = "results/RUN/partition.json"` alone' in partition


def test_the_reference_shows_no_rest_role() -> None:
    """Docstrings cross-reference with reST roles (:func:`x`); the page is Markdown (and ``chillfl list`` prints it), so
    the summaries and first paragraphs show them as literals. test_reference_doc keeps the page equal to the command's
    output, so this reads the page."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "reference.md").read_text(encoding="utf-8")
    assert not re.findall(r":(?:mod|func|data|class|meth|attr|exc|obj|const):`", text)
