"""Of several ``[objective] terms`` entries, an option or name error names the entry by its index
(``objective.terms[1].beta``), as docs/extending.md promises and configured_terms does: resolving the config named
``objective.terms.beta`` for every entry, ambiguous when two terms (ntd, decorr) both take ``beta``."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main

TOML = 'name = "t"\n[federation]\nnum_clients = 3\nrounds = 1\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\n'


@pytest.mark.parametrize(("terms", "line"), [
    ('[{name="ntd"},{name="decorr",beta=-1}]', "objective.terms[1].beta: must be in [0, 1e6], got -1.0"),
    ('[{name="ntd"},{name="decorr",bta=1}]', "objective.terms[1].bta: unknown option (did you mean 'beta'?); allowed: beta"),
    ('["ntd","bogus"]', "objective.terms[1]: unknown value 'bogus'"),
    ('[{name="decorr",beta=-1}]', "objective.terms[0].beta: must be in [0, 1e6], got -1.0"),  # one entry: its index too
])
def test_a_term_entry_error_names_its_index(tmp_path: Path, capsys: pytest.CaptureFixture[str], terms: str, line: str) -> None:
    (tmp_path / "t.toml").write_text(TOML)
    assert main(["run", str(tmp_path / "t.toml"), f"objective.terms={terms}", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: {line}")
