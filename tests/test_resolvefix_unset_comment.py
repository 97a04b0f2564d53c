"""A run folder's config.toml names the options left unset (derived at run time), as ``--dry-run`` does.

Before: ``--dry-run`` opened with ``# unset (derived at run time; TOML has no null): ...``, but the result folder's
config.toml had only the ``# ran with:`` line, so e.g. SCARLET's ``cache_duration`` (derived from ``subset_size``)
appeared nowhere in the folder. The comment changes nothing: the file reruns the same config.
"""

from __future__ import annotations

from chillfl.config import tomllib  # tomli on Python 3.10
from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.config import load_config, parse_overrides
from chillfl.resolve import resolved

UNSET_COMMENT = "# unset (derived at run time; TOML has no null): "  # as --dry-run has opened it

TINY_TOML = """[dataset]
name = "digits"
[partition]
name = "dirichlet"
alpha = 0.3
[federation]
rounds = 1
num_clients = 3
[model]
name = "mlp"
"""


def _leading_comments(text: str) -> list[str]:
    lines = text.splitlines()
    return [line for line in lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))]]


SCARLET = ["distillation.method=scarlet", "distillation.public_size=200", "distillation.subset_size=50"]


def test_a_run_folders_config_names_its_unset_options_and_reruns_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.toml").write_text(TINY_TOML)
    assert main(["run", "tiny.toml", "--dry-run", *SCARLET]) == 0
    dry = capsys.readouterr().out
    assert main(["run", "tiny.toml", "-q", "device=cpu", *SCARLET]) == 0
    capsys.readouterr()
    path = tmp_path / "results" / "tiny" / "config.toml"
    text = path.read_text()
    header = _leading_comments(text)
    assert header[0].startswith("# ran with: ")
    assert header[1:] == _leading_comments(dry)  # the dry run's comment, word for word (one function writes both)
    assert header[1].startswith(UNSET_COMMENT) and "distillation.cache_duration" in " ".join(header[1:])  # SCARLET's D, derived at run time
    assert "cache_duration" not in tomllib.loads(text)["distillation"]  # TOML has no null: still left out
    # the folder's file reruns the same config: the comment changes nothing
    original = resolved(load_config(tmp_path / "tiny.toml", parse_overrides([*SCARLET, "device=cpu"])))
    again = resolved(load_config(path))
    assert again.to_dict() == original.to_dict()
    assert main(["run", str(path), "--dry-run"]) == 0
    assert _leading_comments(capsys.readouterr().out) == header[1:]


def test_the_unset_comment_is_comment_lines_only() -> None:
    from chillfl.storage.results import unset_comment

    assert unset_comment({"name": "x", "client": {"lr": 0.1}}) == ""  # nothing unset: nothing said
    names = {f"section{i}": {"a_rather_long_option_name_" + "x" * (i * 9): None} for i in range(12)}
    text = unset_comment({**names, "variants": {"a": None}})  # a comparison's own tables name no run option
    assert text.endswith("\n") and all(line.startswith("#") for line in text.splitlines())
    assert "variants" not in text and all(name in text.replace("\n#   ", " ") for name in (f"section{i}.{next(iter(t))}" for i, t in enumerate(names.values())))
