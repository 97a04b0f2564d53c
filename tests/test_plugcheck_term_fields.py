"""A lone ``[objective] terms`` entry is named by its index as every other list field is (``model.assign[0]``,
``model.groups[0]``, ``terms[0]`` from Python): its refusals named ``objective.terms`` (its options
``objective.terms.beta``, read as an option of the list), while the same entry beside another was ``objective.terms[1]``."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.extend import TermSpec

TERM_BAD_OPTS = TermSpec(dict, lambda o: None, "x")  # type: ignore[arg-type,return-value]  # options that are no dataclass

TOML = 'name = "t"\n[federation]\nnum_clients = 3\nrounds = 1\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\n'


@pytest.mark.parametrize(("terms", "line"), [
    ('[{name="decorr",beta=-1}]', "objective.terms[0].beta: must be in [0, 1e6], got -1.0"),
    ('[{name="decorr",bta=1}]', "objective.terms[0].bta: unknown option (did you mean 'beta'?); allowed: beta"),
    ('["bogus"]', "objective.terms[0]: unknown value 'bogus'"),
    (f'["{__name__}:TERM_BAD_OPTS"]', f"objective.terms[0]: '{__name__}:TERM_BAD_OPTS': its TermSpec's options must be a dataclass"),
    (f'["ntd","{__name__}:TERM_BAD_OPTS"]', f"objective.terms[1]: '{__name__}:TERM_BAD_OPTS': its TermSpec's options must be a dataclass"),
], ids=["value", "unknown-option", "unknown-term", "spec-options", "spec-options-second"])
def test_a_lone_term_entry_is_named_by_its_index(tmp_path: Path, capsys: pytest.CaptureFixture[str], terms: str, line: str) -> None:
    (tmp_path / "t.toml").write_text(TOML)
    assert main(["run", str(tmp_path / "t.toml"), f"objective.terms={terms}", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: {line}"), err
