"""Every docs page's python blocks run as a reader meets them: top to bottom, one namespace per page.

The pages' own tests run their examples by name; a block that uses a name only a later block defines would pass
them and fail a reader. Here each page runs in a fresh interpreter (``tests/docs_pages.py``) in a scratch folder.
A block that cannot run here is marked ``<!-- not run: REASON -->`` on the page and listed in ``NOT_RUN`` below;
nothing is skipped silently. The signatures the pages show (``chillfl.run(model=None, ...)``) are checked
against the functions themselves.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from docs_pages import blocks, not_run, runs

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
RUNNER = Path(__file__).resolve().parent / "docs_pages.py"

# Every python block marked not run, (page, reason): a new one is added here on purpose, never by accident.
NOT_RUN = {
    ("python-api.md", "a long run: the paper's claims at three seeds, about 5 minutes of one core (tests/test_reproduce_resume.py runs reproduce_paper on small claims)"),
    ("flower.md", "reads your own my-fedchill.toml and starts Flower's simulation engine on Ray (tests/private_net/test_flower.py runs run_simulation, in a private network namespace)"),
    ("flower.md", "the block above's config, under Flower's simulation engine on Ray (chillfl.flower.run_simulation calls it so, and tests/private_net/test_flower.py runs that)"),
    ("flower.md", "Flower's simulation engine on Ray (tests/private_net/test_flower.py runs this SCARLET simulation, in a private network namespace)"),
}
SLOW: set[str] = set()  # pages whose in-order run takes over a minute (none yet; the slowest, python-api.md, ~20 s)


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _with_blocks_to_run() -> list[Any]:
    return [pytest.param(p, id=p.name, marks=[pytest.mark.slow] if p.name in SLOW else []) for p in PAGES if any(runs(b) for b in blocks(_text(p)))]


@pytest.mark.parametrize("page", _with_blocks_to_run())
def test_the_page_runs_top_to_bottom(page: Path, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(RUNNER), str(page)], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{page.name}, run in page order:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    ran = sum(runs(b) for b in blocks(_text(page)))
    assert done.stdout.count(f"{page.name}:") == ran + len(not_run(_text(page)))  # every block was met


def test_the_blocks_not_run_are_marked_with_a_reason_and_listed() -> None:
    marked = {(p.name, reason) for p in PAGES for _, reason in not_run(_text(p))}
    assert marked == NOT_RUN
    for page in PAGES:
        text = _text(page)
        markers = len(re.findall(r"^<!-- not run:", text, flags=re.M))  # a marker is a line of its own
        assert markers == len(not_run(text)), f"{page.name}: a not-run marker that is not right before a fence"
        assert all(b.language == "python" for b in blocks(text) if b.kind == "not run"), f"{page.name}: only python blocks are run or not run"


def test_every_fence_is_closed() -> None:
    """A stray fence (install.md had one under its title) turns the rest of the page into one code block, on GitHub too."""
    for page in PAGES:
        fences = re.findall(r"^```", _text(page), flags=re.M)
        assert len(fences) % 2 == 0, f"{page.name}: {len(fences)} fences, one is not closed"


def test_the_page_order_is_what_a_reader_meets() -> None:
    """python-api.md's random-transforms example subclasses the Digits of the public-set example: that one comes first."""
    text = _text(ROOT / "docs" / "python-api.md")
    assert text.index("<!-- example: dataset-public -->") < text.index("<!-- example: random-transforms -->")


SHOWN = re.compile(r"`chillfl\.([\w.]+)\(([^`]*=None[^`]*)\)`")


def _shown(obj: Any) -> str:
    """``inspect.signature(obj)`` as the pages write it: no annotations, strings in double quotes."""
    parts: list[str] = []
    star = False
    for p in inspect.signature(obj).parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            star = True
            parts.append(f"*{p.name}")
            continue
        if p.kind is p.KEYWORD_ONLY and not star:
            star = True
            parts.append("*")
        if p.kind is p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        elif p.default is p.empty:
            parts.append(p.name)
        else:
            parts.append(f"{p.name}={json.dumps(p.default) if isinstance(p.default, str) else repr(p.default)}")
    return ", ".join(parts)


def _resolve(dotted: str) -> Any:
    module, _, name = f"chillfl.{dotted}".rpartition(".")
    while True:
        try:
            obj: Any = importlib.import_module(module)
            break
        except ModuleNotFoundError:
            module, _, outer = module.rpartition(".")
            name = f"{outer}.{name}"
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def test_the_signatures_shown_are_the_real_ones() -> None:
    shown = [(page.name, m.group(1), m.group(2)) for page in PAGES for m in SHOWN.finditer(_text(page))]
    assert {name for _, name, _ in shown} >= {"run", "compare", "reproduce_paper", "TensorData", "DatasetData"}
    for page, name, arguments in shown:
        assert arguments == _shown(_resolve(name)), f"{page}: chillfl.{name}({arguments}) is not the signature"


def test_the_configuration_pages_options_block_names_every_top_level_option() -> None:
    """configuration.md's TOML block is where the README sends a reader for every option: a new section or
    top-level key must appear there (it lacked [privacy], [attack], [ray] and strict, and 15 algorithm names)."""
    import dataclasses

    from chillfl.aggregation.registry import registered_algorithms
    from chillfl.config import RunConfig, tomllib

    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    block = page.split("```toml", 1)[1].split("```", 1)[0]
    assert set(tomllib.loads(block)) == {f.name for f in dataclasses.fields(RunConfig)}
    algorithm = block.split("[algorithm]", 1)[1].split("\n[", 1)[0]
    assert [name for name in registered_algorithms() if not re.search(rf"\b{name}\b", algorithm)] == []


def test_the_configuration_pages_options_block_names_every_registered_part() -> None:
    """Each part's table in configuration.md's block lists the names it takes: it lacked FedDistill under
    [prototypes] and the ipm, min_max, min_sum and dba attacks, all of which `chillfl list` names."""
    from chillfl.data import dataset_names, partitioner_names
    from chillfl.settings.attack import kind_names
    from chillfl.settings.distillation import method_names
    from chillfl.settings.privacy import mechanism_names
    from chillfl.settings.prototypes import method_names as prototype_method_names
    from chillfl.temperature import policy_names
    from chillfl.training.terms import term_names

    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    block = page.split("```toml", 1)[1].split("```", 1)[0]
    parts = {"[dataset]": dataset_names(), "[partition]": partitioner_names(), "[temperature]": policy_names(), "[objective]": term_names(),
             "[distillation]": method_names(), "[prototypes]": prototype_method_names(), "[attack]": kind_names(), "[privacy]": mechanism_names()}
    for header, names in parts.items():
        table = block.split(f"\n{header}", 1)[1].split("\n[", 1)[0]
        assert [name for name in names if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", table)] == [], header


# The TOML blocks that `chillfl run FILE --dry-run` refuses as they stand, (page, field named) -> why: a fragment of a
# larger config, or one that names the reader's own files or module. Any other refusal is a block a reader cannot use.
TOML_REFUSED = {
    ("baselines.md", "model.groups"): "a [model] fragment: per-client architectures need a soft-label or prototype protocol, as the page says",
    ("comparisons.md", "eval.validation"): "a [tune] fragment: tuning needs the validation split of the page's earlier block",
    ("configuration.md", "eval.validation"): "every key at its default, and the optional [tune] beside eval.validation's default 0",
    ("data.md", "dataset.path"): "the reader's own Hugging Face folder, and flwr_femnist's files (HF_HUB_OFFLINE: no hub here)",
    ("data.md", "partition.from"): "the partition.json of the reader's earlier run",
    ("python-api.md", "model.name"): "a saved config of a run on the reader's own nn.Module: refused on purpose, as the page says",
    ("python-api.md", "algorithm.name"): "the reader's own module my_rules",
}


def _config_blocks() -> list[Any]:
    """Every TOML block of the pages that is a chillfl config (not a pyproject.toml, not Flower's own config)."""
    from chillfl.config import RunConfig, tomllib
    import dataclasses

    fields = {f.name for f in dataclasses.fields(RunConfig)} | {"extends"}
    found = []
    for page in PAGES:
        for block in blocks(_text(page)):
            if block.language == "toml" and block.kind != "file" and set(tomllib.loads(block.source)) & fields:
                found.append(pytest.param(page, block.source, id=f"{page.name}:{block.line}"))
    return found


@pytest.mark.parametrize(("page", "source"), _config_blocks())
def test_each_toml_block_passes_the_dry_run(page: Path, source: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A TOML block a reader copies into a file passes ``chillfl run FILE --dry-run``, or is refused for a reason listed above."""
    from chillfl.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # flwr_femnist would try the hub
    (tmp_path / "snippet.toml").write_text(source, encoding="utf-8")
    rc = main(["run", "snippet.toml", "--dry-run", "-q"])
    err = capsys.readouterr().err
    if rc == 0:
        return
    found = re.match(r"chillfl: error: ([\w.]+):", err)
    assert rc == 2 and found is not None and (page.name, found.group(1)) in TOML_REFUSED, f"{page.name}: {err}"


def test_every_listed_toml_refusal_is_still_met() -> None:
    """An entry of TOML_REFUSED whose page no longer has such a block would hide the next one."""
    pages_with_blocks = {p.values[0].name for p in _config_blocks()}
    assert {page for page, _ in TOML_REFUSED} <= pages_with_blocks


# Commands of the pages on a bundled experiment that `--dry-run` refuses on purpose: (command, field named).
COMMAND_REFUSED = {("chillfl run demo temperature.value=0.5", "temperature.value")}  # configuration.md: the error it shows


def _bundled_commands() -> list[Any]:
    """The pages' `chillfl run|compare NAME ...` lines (shell blocks and inline code) on a bundled experiment with
    overrides or flags: the name alone is checked by the bundled configs' own tests, not what the page adds to it
    (ray.md's `variants={}` left `[compare] baseline` naming a variant it removed)."""
    import shlex

    from chillfl.experiments import bundled_experiments

    names = set(bundled_experiments()) | {"demo"}
    lines: list[tuple[str, str]] = []
    for page in PAGES:
        text = _text(page)
        for block in blocks(text):
            if block.language in ("bash", "sh"):
                lines += [(page.name, line.split("#", 1)[0]) for line in block.source.replace("\\\n", " ").splitlines()]
        lines += [(page.name, " ".join(m.group(1).split())) for m in re.finditer(r"`(chillfl (?:run|compare) [^`]+)`", text)]
    found = {}
    for page, line in lines:
        argv = shlex.split(line) if re.match(r"\s*chillfl (run|compare) ", line) else []
        if len(argv) > 3 and argv[2] in names and "cuda" not in line and "..." not in line:
            found[" ".join(argv)] = page
    return [pytest.param(command, id=f"{page}: {command}") for command, page in found.items()]


@pytest.mark.parametrize("command", _bundled_commands())
def test_each_command_on_a_bundled_experiment_passes_the_dry_run(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from chillfl.cli import main

    monkeypatch.chdir(tmp_path)
    rc = main([*command.split()[1:], "--dry-run", "-q"])
    err = capsys.readouterr().err
    found = re.match(r"chillfl: error: ([\w.]+):", err)
    assert rc == 0 or (rc == 2 and found is not None and (command, found.group(1)) in COMMAND_REFUSED), f"{command}: {err}"


def test_the_commands_checked_include_ray_md_and_the_listed_refusal() -> None:
    commands = {p.values[0] for p in _bundled_commands()}
    assert any(c.startswith("chillfl run fedchill/table2-digits variants={}") for c in commands)
    assert {c for c, _ in COMMAND_REFUSED} <= commands


def test_install_pages_extras_table_names_every_extra() -> None:
    """install.md's table is where a reader looks an extra up: it lacked `privacy` (inside its `all`), `dev` and `docs`."""
    from chillfl.config import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    table = re.findall(r"^\| `([\w-]+)` \|", _text(ROOT / "docs" / "install.md"), flags=re.M)
    assert sorted(table) == sorted(extras)


def _datasets_named(text: str) -> set[str]:
    """The datasets a table row names: a span ``NAME`` of a built-in dataset, or ``dataset.name = "NAME"``."""
    from chillfl.data.datasets import DATASETS

    spans = [m.group(1) or m.group(2) for m in re.finditer(r"``([^`]+)``|`([^`]+)`", text)]
    named = {m.group(1) for span in spans if (m := re.fullmatch(r'dataset\.name = "(\w+)"', span))}
    return named | {span for span in spans if span in DATASETS}


def test_extras_docstring_table_names_every_run_time_extra_as_install_md_does() -> None:
    """chillfl/extras.py's table lacked `ray` and `flower`, and it and install.md's did not say that `flwr_femnist` and
    `flwr_shakespeare` need `hf` (pyarrow reads their LEAF parquet files; its message names `hf`): every extra a
    run-time message names is in it, and each row names the datasets install.md's row does."""
    import chillfl.extras
    from chillfl.config import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    doc = chillfl.extras.__doc__ or ""
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^([\w-]+) {2,}\S.*? {2,}(.*)$", doc, flags=re.M) if m.group(1) != "extra"}
    install = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([\w-]+)` \| [^|]* \| (.*) \|$", _text(ROOT / "docs" / "install.md"), flags=re.M)}
    said = set()  # need(module, EXTRA, ...) and "chillfl[EXTRA]" in the package's messages
    for path in (ROOT / "src" / "chillfl").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        said |= set(re.findall(r'need\(\s*"[\w.]+",\s*"([\w-]+)"', text)) | set(re.findall(r"chillfl\[([a-z][\w-]*)\]", text))
    said.discard("extra")  # need's docstring: pip install "chillfl[extra]"
    assert said <= set(rows) == set(extras) - {"all", "test", "dev", "docs"}, sorted(said - set(rows))
    assert {extra: _datasets_named(row) for extra, row in rows.items()} == {extra: _datasets_named(install[extra]) for extra in rows}
    assert {"flwr_femnist", "flwr_shakespeare"} <= _datasets_named(rows["hf"])


def test_the_index_lists_every_page() -> None:
    """The README calls docs/index.md the list of every page: reproducibility.md and api.md were missing."""
    listed = set(re.findall(r"\]\(([\w-]+\.md)\)", _text(ROOT / "docs" / "index.md")))
    assert sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name != "index.md" and p.name not in listed) == []


def _error_sessions() -> list[Any]:
    """The pages' text blocks that show a command and the one error line it prints: ``$ [PYTHONPATH=. ]chillfl ...``
    then ``chillfl: error: ...`` (data.md's showed the line without the "did you mean" the command adds)."""
    found = []
    for page in PAGES:
        for block in blocks(_text(page)):
            lines = block.source.strip().splitlines()
            if block.language == "text" and len(lines) == 2 and re.match(r"\$ (PYTHONPATH=\. )?chillfl ", lines[0]) and lines[1].startswith("chillfl: error: "):
                found.append(pytest.param(page, lines[0], lines[1], id=f"{page.name}:{block.line}"))
    return found


@pytest.mark.parametrize(("page", "command", "line"), _error_sessions())
def test_each_error_line_shown_is_the_one_the_command_prints(page: Path, command: str, line: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in a folder holding the page's files (``<!-- file: NAME -->``), on the import path as ``PYTHONPATH=.`` puts it."""
    import shlex

    from chillfl.cli import main

    written: dict[str, str] = {}
    for block in blocks(_text(page)):
        if block.kind == "file" and block.value is not None:
            written[block.value] = written.get(block.value, "") + block.source + "\n"
    for name, source in written.items():
        (tmp_path / name).write_text(source, encoding="utf-8")
        monkeypatch.delitem(sys.modules, Path(name).stem, raising=False)  # the page's module, not another page's of that name
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = shlex.split(command.removeprefix("$ ").removeprefix("PYTHONPATH=. "))[1:]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [line]
    assert not (tmp_path / "results").exists()  # nothing written


def test_the_error_lines_checked_include_data_md_and_extending_md() -> None:
    assert {p.values[0].name for p in _error_sessions()} >= {"data.md", "extending.md"}


def test_the_metrics_table_names_every_method_with_an_averaged_local_eval() -> None:
    """usage.md's `local_acc` row names the methods whose `local_eval = "averaged"` measures it on the server: it named
    FedPer, FedRep and LG-FedAvg, not FedDBE, FedCAC and FedCP, which take the option too."""
    import dataclasses

    from chillfl.aggregation.registry import registered_algorithms

    taking = {name.replace("_", "") for name, spec in registered_algorithms().items() if "local_eval" in {f.name for f in dataclasses.fields(spec.options)}}
    row = next(line for line in _text(ROOT / "docs" / "usage.md").splitlines() if line.startswith("| `local_acc`"))
    listed = re.search(r'`local_eval = "averaged"` \(([^)]*)\)', row)
    assert listed is not None, row
    assert {name.strip().lower().replace("-", "") for name in listed.group(1).split(",")} == taking


def test_python_api_names_every_method_whose_clients_keep_a_personal_model() -> None:
    """python-api.md's `client_states` list is where a reader learns which methods return per-client models: it lacked
    APPLE and FedCP, which declare `personal_model` (and return them)."""
    from chillfl.aggregation.registry import registered_algorithms

    keeping = {name.replace("_", "") for name, spec in registered_algorithms().items() if spec.declared(spec.options()).personal_model}
    text = " ".join(_text(ROOT / "docs" / "python-api.md").split())
    listed = re.search(r"the personal models of the methods that keep one: ([^;]*);", text)
    assert listed is not None
    assert {name.strip().lower().replace("-", "") for name in listed.group(1).split(",")} == keeping


def test_extending_names_every_method_that_declares_a_linear_head() -> None:
    """extending.md says which methods apply the head as an `nn.Linear` (and so declare `linear_head`): it lacked FedCP."""
    from chillfl.aggregation.registry import registered_algorithms
    from chillfl.settings.prototypes import built_in_names, method_spec

    declaring = {name.replace("_", "") for name, spec in registered_algorithms().items() if spec.capabilities.linear_head}
    declaring |= {name for name in built_in_names() if method_spec(name).capabilities.linear_head}
    text = " ".join(_text(ROOT / "docs" / "extending.md").split())
    sentence = re.search(r"the FedPer-style splits only read its input or keep, share or replace its parameters; (.*?) apply its `weight`", text)
    assert sentence is not None
    assert {name.lower().replace("-", "") for name in re.findall(r"([\w-]+)'s", sentence.group(1))} == declaring


def test_privacy_pages_composition_table_names_each_capabilitys_methods() -> None:
    """privacy.md's "Which mechanisms compose with what" rows name the methods of each capability (what decides the
    refusals): the `reports` row lacked APPLE and FedCP, `private_steps` FedPHP and FML, "no weights" nine rules."""
    from chillfl.aggregation.registry import registered_algorithms

    alias = {"geometricmedian": "geomed", "centeredclipping": "centeredclip", "normbounding": "normbound"}
    rows = {"plain_sgd": "(`plain_sgd`)", "no weights": "(no weights)", "private_steps": "(`private_steps`", "reports": "(`reports`"}
    table = _text(ROOT / "docs" / "privacy.md").split("## Which mechanisms compose with what", 1)[1]
    named: dict[str, set[str]] = {}
    for row, marker in rows.items():
        cell = next(line for line in table.splitlines() if line.startswith("| ") and marker in line)[2:].split(marker)[0]
        names = {name.strip().lower().replace("-", "").replace(" ", "") for name in cell.split(",")}
        named[row] = {alias.get(name, name) for name in names}
    declared: dict[str, set[str]] = {row: set() for row in rows}
    for name, spec in registered_algorithms().items():
        c = spec.declared(spec.options())
        row = "reports" if c.reports else "plain_sgd" if c.plain_sgd else "no weights" if not c.takes_weights else "private_steps" if c.private_steps else None
        if row is not None:
            declared[row].add(name.replace("_", ""))
    assert named == declared


def test_the_configuration_block_names_every_method_weighting_uniformly_by_default() -> None:
    """configuration.md's `weighting` comment lists the methods whose default is "uniform": it lacked fedexp."""
    import dataclasses

    from chillfl.aggregation.registry import registered_algorithms

    uniform = {name for name, spec in registered_algorithms().items()
               if any(f.name == "weighting" and f.default == "uniform" for f in dataclasses.fields(spec.options))}
    text = " ".join(line.split("#", 1)[-1] for line in _text(ROOT / "docs" / "configuration.md").splitlines() if "#" in line)
    listed = re.search(r'((?:\w+, )+\w+) and (\w+) default to "uniform"', text)
    assert listed is not None
    assert {*listed.group(1).split(", "), listed.group(2)} == uniform
