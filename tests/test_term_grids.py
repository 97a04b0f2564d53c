"""A tuning grid over a loss term's option: ``objective.terms.<term name>.<option>`` (e.g. ``objective.terms.ntd.beta``).

``[objective] terms`` is a list, so a dotted grid key could not reach a term's options ("'terms' is a value, not a
table"): FedNTD's beta and tau ran at their defaults while every other hyperparameter was tuned on validation. The key
addresses the term by the name its entry gives it, in a comparison's ``[tune]`` grid, a variant's own grid and
TOML's unquoted dotted form alike; a key that cannot be set is one ConfigError naming it, before anything runs.
"""

from __future__ import annotations

from chillfl.config import tomllib  # tomli on Python 3.10
from pathlib import Path
from typing import Any

import pytest

from chillfl.cli import main
from chillfl.config import config_from_dict, load_config
from chillfl.errors import ConfigError
from chillfl.sweeps.plan import plan_runs
from chillfl.sweeps.run import run_compare
from chillfl.training.terms import configured_terms

BETA = "objective.terms.ntd.beta"


def _config(tmp_path: Path, **tables: Any) -> dict[str, Any]:
    return {
        "name": "tg", "out_dir": str(tmp_path / "out"), "device": "cpu", "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]},
        "federation": {"num_clients": 4, "rounds": 2}, "eval": {"client_split_size": 20, "validation": 0.2}, "client": {"lr": 0.2},
        **tables,
    }


def _ntd(config: Any) -> Any:
    """The options the run's ``ntd`` term is built with."""
    (term,) = [t for t in configured_terms(config.objective) if "not-true" in t.spec.summary]
    return term.options


def test_a_shared_grid_over_a_terms_option_gives_runs_carrying_each_value(tmp_path: Path) -> None:
    config = _config(tmp_path, objective={"terms": [{"name": "ntd", "tau": 2.0}, "proximal"]}, tune={BETA: [0.3, 1.0, 3.0]})
    plan = plan_runs(config_from_dict(config), [])
    assert plan.points == [{BETA: 0.3}, {BETA: 1.0}, {BETA: 3.0}]
    assert [c.config.objective.terms for c in plan.cells] == [({"name": "ntd", "tau": 2.0, "beta": b}, "proximal") for b in (0.3, 1.0, 3.0)]
    assert [(_ntd(c.config).beta, _ntd(c.config).tau) for c in plan.cells] == [(0.3, 2.0), (1.0, 2.0), (3.0, 2.0)]  # the other option kept
    assert [c.config.name for c in plan.cells] == ["tg-beta0.3-s0", "tg-beta1-s0", "tg-beta3-s0"]


def test_a_variants_own_grid_over_a_terms_option_and_toml_dotted_keys(tmp_path: Path) -> None:
    """In a variant's own ``tune`` table, as a ``tune.x.y`` key of the variant, and written with TOML's unquoted dotted keys."""
    head = (f'name = "tg"\nout_dir = "{tmp_path / "out"}"\n[dataset]\nname = "digits"\n[federation]\nnum_clients = 4\nrounds = 2\n'
            '[eval]\nvalidation = 0.2\n[tune]\n"client.lr" = [0.05, 0.2]\n[variants.FedAvg]\n[variants.FedNTD]\nobjective.terms = ["ntd"]\n')
    forms = [
        head + '[variants.FedNTD.tune]\n"objective.terms.ntd.beta" = [0.3, 3.0]\n',
        head + "tune.objective.terms.ntd.beta = [0.3, 3.0]\n",
        head + '"tune.objective.terms.ntd.beta" = [0.3, 3.0]\n',
    ]
    plans = []
    for i, text in enumerate(forms):
        path = tmp_path / f"c{i}.toml"
        path.write_text(text)
        plan = plan_runs(load_config(path), [])
        plans.append([(c.key, c.config.client.lr, c.config.objective.terms) for c in plan.cells])
    assert plans[0] == plans[1] == plans[2]
    fedntd = [(lr, terms) for (label, _, _), lr, terms in plans[0] if label == "FedNTD"]
    assert fedntd == [(lr, ({"name": "ntd", "beta": b},)) for lr in (0.05, 0.2) for b in (0.3, 3.0)]
    assert all(terms == () for (label, _, _), _, terms in plans[0] if label == "FedAvg")  # the variant's own grid: for it alone


def test_a_variants_unquoted_dotted_override_of_a_terms_option(tmp_path: Path) -> None:
    """``objective.terms.ntd.beta = 3.0`` in a variant (TOML nests it: {objective: {terms: {ntd: {beta: 3.0}}}}) sets that
    term's option, as the quoted key does; it was refused as "expected a list" (a table in place of the terms)."""
    head = (f'name = "tg"\nout_dir = "{tmp_path / "out"}"\n[dataset]\nname = "digits"\n[federation]\nnum_clients = 4\nrounds = 2\n'
            '[objective]\nterms = [{ name = "ntd", tau = 2.0 }]\n[variants.A]\n')
    cells = []
    for i, line in enumerate(["objective.terms.ntd.beta = 3.0\n", '"objective.terms.ntd.beta" = 3.0\n']):
        path = tmp_path / f"v{i}.toml"
        path.write_text(head + line)
        (cell,) = plan_runs(load_config(path), []).cells
        cells.append(cell.config.objective.terms)
    assert cells[0] == cells[1] == ({"name": "ntd", "tau": 2.0, "beta": 3.0},)
    path = tmp_path / "bad.toml"
    path.write_text(head + "objective.terms.ntd = 3.0\n")
    with pytest.raises(ConfigError) as err:
        plan_runs(load_config(path), [])
    assert "objective.terms.<term name>.<option>" in err.value.message


@pytest.mark.parametrize(("tables", "field", "words"), [
    # a shared grid over a term that a variant does not run: which terms it has, and where such a grid belongs
    ({"tune": {BETA: [0.3]}, "variants": {"FedAvg": {"client.momentum": 0.0}, "FedNTD": {"objective.terms": ["ntd"]}}},
     f"tune.{BETA}", "no term 'ntd' in this run's objective.terms (it has: none)"),
    ({"objective": {"terms": ["ntd", "proximal"]}, "tune": {"objective.terms.ndt.beta": [0.3]}},
     "tune.objective.terms.ndt.beta", "no term 'ndt' in this run's objective.terms (did you mean 'ntd'?) (it has: ntd, proximal)"),
    ({"objective": {"proximal_mu": 0.1}, "tune": {"objective.terms.proximal.mu": [0.3]}},
     "tune.objective.terms.proximal.mu", "proximal_mu is the proximal term's mu: give objective.proximal_mu"),
    # listed twice: the name does not tell which to set
    ({"objective": {"terms": ["ntd", {"name": "ntd", "tau": 2.0}]}, "tune": {BETA: [0.3]}},
     f"tune.{BETA}", "ambiguous: objective.terms lists 'ntd' 2 times (entries 0, 1)"),
    # an option the term does not take: its options listed
    ({"objective": {"terms": ["ntd"]}, "tune": {"objective.terms.ntd.mu": [0.3]}},
     "tune.objective.terms.ntd.mu", "unknown option; allowed: beta, tau, tau_squared"),
    # a value the term's own validation refuses, and one of the wrong type
    ({"objective": {"terms": ["ntd"]}, "tune": {"objective.terms.ntd.tau": [1.0, 0.0]}}, "tune.objective.terms.ntd.tau", "must be in [1e-4, 1e4]"),
    ({"objective": {"terms": ["ntd"]}, "tune": {BETA: [1.0, -0.5]}}, f"tune.{BETA}", "must be in [0, 1e6], got -0.5"),
    ({"objective": {"terms": ["ntd"]}, "tune": {BETA: ["big"]}}, f"tune.{BETA}", "expected a number, got 'big'"),
    # the index form: refused, naming the term at that place
    ({"objective": {"terms": ["proximal", "ntd"]}, "tune": {"objective.terms.1.beta": [0.3]}},
     "tune.objective.terms.1.beta", "addressed by its name, not its place in the list: give objective.terms.ntd.beta"),
    ({"objective": {"terms": ["ntd"]}, "tune": {"objective.terms.ntd": [0.3]}}, "tune.objective.terms.ntd", "objective.terms.<term name>.<option>"),
    ({"objective": {"terms": ["ntd"]}, "tune": {"objective.terms.ntd.name": ["proximal"]}}, "tune.objective.terms.ntd.name", "a term's name is not one of its options"),
    # in a variant's own grid: the error names the variant
    ({"variants": {"FedNTD": {"objective.terms": ["ntd"], "tune": {"objective.terms.ntd.tau": [0.0]}}}},
     "variants.FedNTD.tune.objective.terms.ntd.tau", "must be in [1e-4, 1e4]"),
])
def test_a_key_that_cannot_be_set_is_one_line_naming_it(tmp_path: Path, tables: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        plan_runs(config_from_dict(_config(tmp_path, **tables)), [])
    assert err.value.field == field and words in err.value.message, err.value
    assert "\n" not in str(err.value)
    assert ("(for variant FedAvg)" in err.value.message) == ("FedAvg" in tables.get("variants", {}))


def test_the_cli_refuses_a_bad_term_key_with_exit_2_and_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'out_dir = "{tmp_path / "out"}"\n[eval]\nvalidation = 0.2\n[objective]\nterms = ["ntd"]\n[tune]\nobjective.terms.ntd.mu = [0.1]\n')
    assert main(["compare", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("chillfl: error: tune.objective.terms.ntd.mu: unknown option; allowed: beta, tau, tau_squared")
    assert main(["run", str(path), "--dry-run", "objective.terms.ntd.tau=0"]) == 2  # an override is the same key
    said = capsys.readouterr().err.strip()
    assert len(said.splitlines()) == 1 and said.startswith("chillfl: error: objective.terms.ntd.tau: must be in [1e-4, 1e4]") and said.endswith("got 0.0")
    assert not (tmp_path / "out").exists()


def test_a_term_grid_is_tuned_on_validation_and_recorded(tmp_path: Path) -> None:
    """A tiny comparison: the point kept is the one with the best validation score (here the second, not the first), the table
    names it and every point's score, and each run's saved config carries its beta."""
    config = _config(tmp_path, objective={"terms": [{"name": "ntd", "tau": 2.0}]}, tune={BETA: [30.0, 0.0]})
    result = run_compare(config_from_dict(config), [], progress=False)
    (row,) = result.rows
    scores = row["validation_scores"]
    assert len(scores) == 2 and scores[1] > scores[0]  # beta 30 distils the start model hard: the term really is on
    assert row["tuned"] == {BETA: 0.0}
    table = result.table.splitlines()
    assert any(line.startswith("tuned per variant") and line.endswith(f"{BETA} in {{30.0, 0.0}}") for line in table)
    assert any(line.startswith(f"| tg | {BETA}=0.0 |") for line in table)
    assert f"| variant | {BETA}=30.0 | {BETA}=0.0 |" in table
    folder = tmp_path / "out" / "tg-compare"
    for name, beta in (("tg-beta30-s0", 30.0), ("tg-beta0-s0", 0.0)):
        saved = tomllib.loads((folder / name / "config.toml").read_text())
        assert saved["objective"]["terms"] == [{"name": "ntd", "beta": beta, "tau": 2.0, "tau_squared": True}]  # every option, defaults too
