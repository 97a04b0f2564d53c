"""``[attack]`` is a spec family: a user's attack, named by import path, comes in exactly as a built-in does.

A user's module (written to a folder on ``sys.path``, as a plugin author's would be) defines an attack
with its own option; it runs end to end under the serial and the processes executors and does what it
says; its mistakes are one ConfigError each, naming the field; where it runs follows from its hooks, and
the refusal says so. Core code names no attack.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from chillfl import plugins
from chillfl.attacks.build import check_attack
from chillfl.attacks.spec import AttackSpec
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.report.reference import render_reference
from chillfl.resolve import resolved
from chillfl.runner import run_experiment
from chillfl.settings.attack import FAMILY, AttackConfig, kind_names
from test_attack_runs import DIGITS
from test_attack_runs import records as run_records
from user_modules import install

USER_ATTACK = '''
"""Attackers that send only a share ``keep`` of their update: w + keep * (w_i - w) (0: the global model back)."""

from dataclasses import dataclass

from chillfl.extend import AttackSpec, ConfigError, require


@dataclass(frozen=True)
class ShrinkOptions:
    keep: float = 0.0

    def validate(self, section):
        require(0.0 <= self.keep <= 1.0, f"{section}.keep", f"must be in [0, 1], got {self.keep}")


def forge_models(options, round):
    w = round.global_params
    return {
        r.client_id: {k: w[k] + options.keep * (v - w[k]) if v.is_floating_point() else v for k, v in r.params.items()}
        for r in round.bad
    }


def check(options, config):
    if config.federation.rounds < 2:
        raise ConfigError("federation.rounds", "a shrunk update shows from the second round on; run at least 2")


SPEC = AttackSpec("shrink", ShrinkOptions, summary="the attackers send a share keep of their update", forge_models=forge_models, check=check)

NOT_A_SPEC = ShrinkOptions()
'''

SHRINK = "my_attack:SPEC"

BASE: dict[str, Any] = {
    **DIGITS,
    "model.hidden": [16],
    "federation.num_clients": 4,
    "federation.clients_per_round": 4,
    "federation.rounds": 2,
    "client.batch_size": 32,
    "algorithm.name": "median",  # the median of equal models is that model, bit for bit
}
ALL = {"attack.kind": SHRINK, "attack.clients": [0, 1, 2, 3], "attack.keep": 0.0}
"""Every client attacks and sends the global model back: the model never moves."""


@pytest.fixture(autouse=True)
def user_attack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return install(tmp_path, monkeypatch, "my_attack", USER_ATTACK)


def records(tmp_path: Path, name: str, **overrides: Any) -> list[dict[str, Any]]:
    return run_records(tmp_path, name, BASE, **overrides)


# ---------------------------------------------------------------- a user's attack, end to end


def test_a_user_attack_runs_and_does_what_it_says_under_both_executors(tmp_path: Path) -> None:
    clean = records(tmp_path, "clean")
    seq = records(tmp_path, "seq", **ALL)
    procs = records(tmp_path, "procs", **ALL, executor="processes")
    assert clean[0]["global_loss"] != clean[1]["global_loss"]  # without the attack the model moves
    assert [r["attackers"] for r in seq] == [[0, 1, 2, 3]] * 2
    # every upload is the global model itself: the model of round 2 is round 1's, so is its evaluation
    assert seq[0]["global_loss"] == seq[1]["global_loss"] and seq[0]["global_acc"] == seq[1]["global_acc"]
    assert procs == seq  # forged in the driver: the executor changes nothing


def test_the_resolved_config_records_the_kinds_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = resolved(load_config(None, {**BASE, "attack.kind": SHRINK}))
    assert config.attack.options.keep == 0.0
    assert config.to_dict()["attack"] == {"kind": SHRINK, "fraction": 0.2, "clients": (), "local_dp": "comply", "keep": 0.0}
    assert load_config(None, {"attack": config.to_dict()["attack"]}).attack == config.attack  # read back: equal
    assert main(["run", "src/chillfl/experiments/demo.toml", f"out_dir={tmp_path}", "attack.kind=scaling", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert '[attack]\nkind = "scaling"\nfraction = 0.2\nclients = []\nlocal_dp = "comply"\nfactor = 0.0\n' in out  # scaling's own default, filled in


def test_another_kind_drops_the_old_kinds_options() -> None:
    """A variant or override that picks another kind starts from the shared options: a resolved table holds the old kind's defaults."""
    base = load_config(None, {"attack.kind": "gaussian", "attack.sigma": 0.5, "attack.fraction": 0.3})
    lie = base.with_overrides({"attack.kind": "lie"})
    assert lie.attack.kind == "lie" and lie.attack.fraction == 0.3 and lie.attack.options.z == 0.0
    assert base.with_overrides({"attack.sigma": 2.0}).attack.options.sigma == 2.0


def test_an_off_table_holds_options_for_the_kind_a_variant_switches_on() -> None:
    """While off, the table may hold the options of the kinds its variants turn on (checked as their owners check them)."""
    base = load_config(None, {"attack.sigma": 0.5, "variants": {"clean": {}, "noise": {"attack": {"kind": "gaussian"}}}})
    assert not base.attack.enabled and base.to_dict()["attack"]["sigma"] == 0.5  # kept in the resolved table
    assert base.with_overrides({"attack.kind": "gaussian"}).attack.options.sigma == 0.5  # switched on: it takes it
    with pytest.raises(ConfigError) as err:
        base.with_overrides({"attack.kind": "lie"})  # a kind that does not take it says whose it is
    assert err.value.field == "attack.sigma" and "'sigma' is an option of gaussian" in err.value.message
    with pytest.raises(ConfigError) as err:
        load_config(None, {"attack.kind": "none", "attack.sigma": -1.0})
    assert err.value.field == "attack.sigma" and "must be > 0" in err.value.message


def test_a_variant_refused_an_option_the_base_table_holds_is_told_where_it_came_from() -> None:
    """Before, ``variants.lie.attack.sigma: unknown option`` named an option the variant never wrote; now the line says the
    base table holds it (and for a grid's variant, too). A variant that writes the option itself gets no such note."""
    variants = {"clean": {}, "noise": {"attack": {"kind": "gaussian"}}, "lie": {"attack": {"kind": "lie"}}}
    with pytest.raises(ConfigError) as err:
        load_config(None, {"attack.sigma": 0.5, "variants": variants})
    assert err.value.field == "variants.lie.attack.sigma"
    assert err.value.message.endswith("'sigma' is an option of gaussian (set attack.kind); this variant takes attack.sigma from the base config's "
                                      "[attack] table, which holds it for the variants that switch its owner on: set it in those variants' own tables instead")
    with pytest.raises(ConfigError) as err:
        load_config(None, {"variants": {"lie": {"attack": {"kind": "lie", "sigma": 0.5}}}})
    assert err.value.field == "variants.lie.attack.sigma" and "base config" not in err.value.message
    with pytest.raises(ConfigError) as err:  # a part's table in a variant replaces the base's whole: not the base's doing
        load_config(None, {"algorithm.name": "fedprox", "variants": {"b": {"algorithm": {"mu": 0.0}}}})
    assert err.value.field.startswith("variants.b.algorithm") and "base config" not in err.value.message


# ---------------------------------------------------------------- its mistakes


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"attack.kep": 0.5}, "attack.kep", "did you mean 'keep'?"),  # its unknown option
        ({"attack.keep": 2.0}, "attack.keep", "must be in [0, 1]"),  # its own validate
        ({"attack.sigma": 0.5}, "attack.sigma", "'sigma' is an option of gaussian (set attack.kind)"),  # a sibling's option
        ({"attack.kind": "my_attack:NOT_A_SPEC"}, "attack.kind", "must name a chillfl.extend.AttackSpec"),
        ({"attack.kind": "my_attack:Missing"}, "attack.kind", "no attribute"),
    ],
)
def test_mistakes_are_one_config_error_naming_the_field(overrides: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, {**BASE, "attack.kind": SHRINK, **overrides})
    assert err.value.field == field and words in err.value.message


def test_a_built_in_kind_refuses_a_siblings_option_naming_its_owners() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, {"attack.kind": "gaussian", "attack.factor": 2.0})
    assert err.value.field == "attack.factor" and "'factor' is an option of scaling, sign_flip (set attack.kind)" in err.value.message


def test_its_run_check_refuses_before_anything_is_written(tmp_path: Path) -> None:
    out = tmp_path / "results"
    config = load_config(None, {**BASE, **ALL, "out_dir": str(out), "federation.rounds": 1})
    with pytest.raises(ConfigError) as err:
        run_experiment(config, progress=False)
    assert err.value.field == "federation.rounds"
    assert not out.exists()


SPLIT_ATTACK = '''
"""A trigger in ``pieces`` parts, one per round at least; ``pieces`` unset: one per attacker (as dba's ``parts``)."""

import dataclasses
from dataclasses import dataclass

from chillfl.extend import AttackSpec, ConfigError


@dataclass(frozen=True)
class SplitOptions:
    pieces: int | None = None


def resolve(options, attackers):
    return options if options.pieces is not None else dataclasses.replace(options, pieces=len(attackers))


def check(options, config):
    if options.pieces > config.federation.rounds:
        raise ConfigError("attack.pieces", f"{options.pieces} pieces need {options.pieces} rounds, the run has {config.federation.rounds}")


def poison(options, data, attackers, seed):
    return data


SPEC = AttackSpec("split", SplitOptions, poison=poison, check=check, resolve=resolve)
'''


def test_its_run_check_sees_the_options_its_resolve_fills_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``check`` is given what the run will use: ``pieces`` left unset is one per attacker (3 here), not None."""
    install(tmp_path, monkeypatch, "split_attack", SPLIT_ATTACK)
    config = load_config(None, {**BASE, "attack.kind": "split_attack:SPEC", "attack.clients": [0, 1, 2]})
    with pytest.raises(ConfigError) as err:
        check_attack(config)
    assert (err.value.field, err.value.message) == ("attack.pieces", "3 pieces need 3 rounds, the run has 2")
    check_attack(config.with_overrides({"federation.rounds": 3}))  # as many rounds as resolved pieces: accepted
    check_attack(config.with_overrides({"attack.pieces": 2}))  # an explicit value is kept


# ---------------------------------------------------------------- where an attack runs follows from its hooks


def test_a_kind_with_no_hook_for_the_protocol_is_refused_with_the_derived_message() -> None:
    config = load_config(None, {**BASE, "attack.kind": SHRINK}).with_overrides({"prototypes": {"method": "fedproto"}})
    with pytest.raises(ConfigError) as err:
        check_attack(config)
    assert err.value.field == "attack.kind"
    assert err.value.message == (
        "'my_attack:SPEC' rewrites a model update, and the prototypes protocol has none (its clients upload class prototypes); "
        "attacks that run under prototypes: backdoor, dba, gaussian, label_flip"
    )


def test_the_built_ins_run_where_their_hooks_say() -> None:
    runs = {name: [p for p in ("parameters", "softlabels", "prototypes") if FAMILY.spec(name).runs_under(p)] for name in FAMILY.built_in_names()}
    assert runs == {
        "backdoor": ["parameters", "softlabels", "prototypes"],
        "dba": ["parameters", "softlabels", "prototypes"],
        "gaussian": ["parameters", "softlabels", "prototypes"],
        "ipm": ["parameters"],
        "label_flip": ["parameters", "softlabels", "prototypes"],
        "lie": ["parameters"],
        "min_max": ["parameters"],
        "min_sum": ["parameters"],
        "scaling": ["parameters"],
        "sign_flip": ["parameters"],
    }
    soft = load_config(None, {"attack.kind": "sign_flip"}).with_overrides({"distillation": {"method": "dsfl", "public_size": 60, "subset_size": 20}})
    with pytest.raises(ConfigError) as err:
        check_attack(soft)
    assert err.value.message == (
        "'sign_flip' rewrites a model update, and the softlabels protocol has none (its clients upload soft-labels on public inputs); "
        "attacks that run under softlabels: backdoor, dba, gaussian, label_flip"
    )


def test_a_spec_with_no_hook_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="has no hook"):
        AttackSpec("idle", AttackConfig)


# ---------------------------------------------------------------- listed like every family


def test_an_entry_point_attack_is_listed_and_runs_by_its_name(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(plugins, "entry_points", lambda: {"shrink": SHRINK})
    assert "shrink" in kind_names()
    assert load_config(None, {"attack.kind": "shrink", "attack.keep": 0.5}).attack.options.keep == 0.5
    assert main(["list"]) == 0
    assert "attacks: backdoor, dba, gaussian, ipm, label_flip, lie, min_max, min_sum, scaling, shrink, sign_flip" in capsys.readouterr().out


def test_the_reference_documents_each_kinds_options_and_a_plugins() -> None:
    text = render_reference([SHRINK])
    part = text[text.index("## [attack] kind = ...") :]
    assert "### Shared options (every kind)" in part and "| `fraction` | `float` | `0.2` |" in part
    assert "### `gaussian`" in part and "| `sigma` | `float` | `1.0` |" in part
    assert f"### `{SHRINK}` — the attackers send a share keep of their update" in part and "| `keep` | `float` | `0.0` |" in part


# ---------------------------------------------------------------- core code names no attack

SRC = Path(__file__).resolve().parents[1] / "src" / "chillfl"
CORE = ["attacks/build.py", "attacks/aggregate.py", "attacks/protocol.py", "attacks/spec.py", "attacks/select.py", "config.py", "settings/attack.py"]


def _code_strings(path: Path) -> list[str]:
    """Every string literal and identifier of the file but its docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            out.append(node.value)
        elif isinstance(node, ast.Name):
            out.append(node.id)
        elif isinstance(node, ast.Attribute):
            out.append(node.attr)
    return out


def _spells(text: str, kind: str) -> bool:
    """Whether ``text``'s words (``snake_case`` and ``CamelCase`` split) contain ``kind``'s as a run."""
    words = [w for w in re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text).lower()) if w]
    own = kind.split("_")
    return any(words[i : i + len(own)] == own for i in range(len(words)))


@pytest.mark.parametrize("module", CORE)
def test_core_code_names_no_attack(module: str) -> None:
    kinds = set(FAMILY.built_in_names())
    found = sorted({kind for text in _code_strings(SRC / module) for kind in kinds if _spells(text, kind)})
    assert found == [], f"{module} names {found}: ask the kind's spec instead"


def test_an_older_result_folders_flat_attack_table_still_loads(tmp_path: Path) -> None:
    """A result folder written before each kind had its own options lists every kind's (factor, sigma, z, ...): its
    config.toml must still load for report and resume, the other kinds' options dropped as that version ignored them."""
    older = tmp_path / "config.toml"
    older.write_text(
        '[attack]\nkind = "gaussian"\nfraction = 0.3\nclients = []\nfactor = 0.0\nsigma = 0.5\nz = 0.0\nlabel_map = []\n'
        "target = 0\npoison_fraction = 0.5\ntrigger_size = 2\n"
    )
    attack = load_config(older).attack
    assert (attack.kind, attack.fraction, attack.options.sigma) == ("gaussian", 0.3, 0.5)
    assert set(resolved(load_config(older)).to_dict()["attack"]) == {"kind", "fraction", "clients", "local_dp", "sigma"}  # local_dp: its default
    with pytest.raises(ConfigError) as err:  # written by hand, another kind's option is still refused
        load_config(None, {"attack": {"kind": "lie", "sigma": 0.5, "z": 1.0}})
    assert err.value.field == "attack.sigma" and "'sigma' is an option of gaussian" in err.value.message
    flat = {"factor": 0.0, "sigma": 1.0, "z": 0.0, "label_map": [], "target": 0, "poison_fraction": 0.5, "trigger_size": 2}
    with pytest.raises(ConfigError) as err:  # every kind's options, by hand: a setting of another kind is refused, not dropped
        load_config(None, {"attack": {"kind": "scaling", **flat, "factor": 5.0, "target": 3}})
    assert err.value.field == "attack.target" and "an option of backdoor" in err.value.message
    assert load_config(None, {"attack": {"kind": "scaling", **flat, "factor": 5.0}}).attack.options.factor == 5.0  # defaults: dropped
