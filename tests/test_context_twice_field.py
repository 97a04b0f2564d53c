"""Two [objective] terms sending one context key (``proximal_mu`` and ``terms = ["proximal"]``) were refused with
"which another [objective] term sends too", naming neither the field that set the first: the user could not tell that
``objective.proximal_mu`` added a proximal term of its own. The refusal names it now."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main


def test_a_term_sent_twice_names_the_field_of_the_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[objective]\nproximal_mu = 0.1\nterms = ["proximal"]\n[federation]\nnum_clients = 2\nrounds = 1\n')
    assert main(["run", str(config), f"out_dir={tmp_path / 'out'}"]) == 2
    assert not (tmp_path / "out").exists()
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("chillfl: error: objective.terms[0]: ")
    assert "sends context key 'mu', which the term of objective.proximal_mu sends too" in lines[0]
