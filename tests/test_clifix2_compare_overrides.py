"""A command-line override that every run of a comparison replaces (its tuning axis, or every variant's own value) is
refused in one line on its key, as a ``--seed`` is: it ran in none of the runs, yet the comparison's config.toml
recorded it as the base. One that some runs keep stays allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from test_clifix2_datasets import BASE

CMP = BASE.replace('name = "t"', 'name = "c"', 1) + """[eval]
validation = 0.2
[variants."A".temperature]
policy = "fixed"
value = 1.0
[variants."B".temperature]
policy = "fixed"
value = 0.5
[tune]
"client.lr" = [0.01, 0.05]
"""

PLAIN = CMP.split("[variants")[0]


@pytest.fixture()
def cmp(tmp_path: Path) -> Path:
    path = tmp_path / "cmp.toml"
    path.write_text(CMP)
    return path


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: "), err
    return err[0][len("chillfl: error: "):]


def test_an_override_the_tuning_axis_replaces_is_refused(cmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = cmp.parent / "out"
    for argv in (["run", str(cmp), "--dry-run"], ["run", str(cmp), "--out", str(out)], ["compare", str(cmp), "--out", str(out)]):
        assert main([*argv, "client.lr=0.3"]) == 2
        assert _error(capsys) == ("client.lr: every run of c replaces the command line's client.lr=0.3 (the tuning grid's [tune] client.lr), "
                                  "so no run would use it, though the comparison's config.toml would record it; "
                                  "tune it at that value instead: 'tune.client.lr=[0.3]'")
    assert not out.exists()
    assert main(["compare", str(cmp), "--dry-run", "--tune", "client.lr=0.1,0.2", "client.lr=0.3"]) == 2
    assert _error(capsys).endswith("(the tuning grid's --tune client.lr), so no run would use it, though the comparison's config.toml "
                                   "would record it; tune it at that value instead: --tune client.lr=0.3")


def test_an_override_every_variant_replaces_is_refused(cmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(cmp), "--dry-run", "temperature.policy=fixed", "temperature.value=0.2"]) == 2  # the policy: both keep "fixed"
    assert _error(capsys) == ("temperature.value: every run of c replaces the command line's temperature.value=0.2 (the variants 'A', 'B'), "
                              "so no run would use it, though the comparison's config.toml would record it; set it in the variants, or run one "
                              f"variant at it: chillfl run {cmp} --variant LABEL --seed N temperature.value=0.2")
    plain = cmp.parent / "plain.toml"
    plain.write_text(PLAIN)
    assert main(["compare", str(plain), "--dry-run", "--grid", "client.lr=0.1,0.2", "client.lr=0.3"]) == 2
    assert _error(capsys).startswith("client.lr: every run of c replaces the command line's client.lr=0.3 (the --grid rows 'client.lr=0.1', 'client.lr=0.2')")


def test_an_override_some_runs_keep_stays(cmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(cmp), "--dry-run", "temperature.policy=fixed", "temperature.value=1.0", "client.epochs=2"]) == 0  # A runs at T = 1
    assert "lr = 0.3" not in capsys.readouterr().out
    assert main(["run", str(cmp), "--dry-run", "--variant", "B", "--seed", "0", "temperature.value=0.2"]) == 0  # one run: after the variant
    assert "value = 0.2" in capsys.readouterr().out


def test_a_loss_terms_override_the_tuning_axis_replaces_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``objective.terms`` is a list of named tables: the check read no value there and let the override through, recorded
    as the base while every run was at the tuning grid's beta (rev112d 1)."""
    path = tmp_path / "nt.toml"
    path.write_text(PLAIN.replace('[tune]\n"client.lr" = [0.01, 0.05]\n', "") + '[objective]\nterms = [{ name = "ntd", tau = 1.0 }]\n'
                    '[tune]\n"objective.terms.ntd.beta" = [0.3, 1.0]\n')
    assert main(["compare", str(path), "--dry-run", "objective.terms.ntd.beta=3"]) == 2
    assert _error(capsys).startswith("objective.terms.ntd.beta: every run of c replaces the command line's objective.terms.ntd.beta=3.0 (the tuning grid's")
    assert main(["compare", str(path), "--dry-run", "objective.terms.ntd.tau=2"]) == 0  # a term option no run replaces


def test_a_list_missing_its_comma_gets_no_string_quoting_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``[64 32]`` is one string to TOML; quoting it as ``["64 32"]`` (the hint before) was refused again: no example then."""
    path = tmp_path / "p.toml"
    path.write_text(PLAIN)
    assert main(["run", str(path), "--dry-run", "model.hidden=[64 32]"]) == 2
    line = _error(capsys)
    assert "write it as TOML: items between commas" in line and '"64 32"' not in line
