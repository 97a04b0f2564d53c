"""``[privacy]`` is a spec family: a user's mechanism, named by import path, comes in exactly as a built-in does.

A user's module (written to a folder on ``sys.path``, as a plugin author's would be) defines client-side noise
from the public API alone (``chillfl.extend``), with an option of its own; it runs end to end under the serial and
the processes executors and gives the built-in ``local``'s records bit for bit (the same maths, the same streams,
the same accounting); its mistakes are one ConfigError each, naming the field; where it runs follows from its
hooks, and the refusal says so. Core code names no mechanism.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from chillfl import plugins, runner
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.privacy.spec import Accounting, MechanismSpec
from chillfl.report.reference import render_reference
from chillfl.resolve import resolved
from chillfl.settings.privacy import FAMILY, mechanism_names
from test_attack_runs import records as run_records
from user_modules import install

pytest.importorskip("opacus")

USER_MECHANISM = '''
"""Client-side noise from the public API: each client clips its update to C and adds its own N(0, (sigma C)^2)."""

from dataclasses import dataclass

from chillfl.extend import Accounting, Charge, ConfigError, MechanismSpec, PrivateAggregation, require


@dataclass(frozen=True)
class ClientClipOptions:
    min_clients: int = 1

    def validate(self, section):
        require(self.min_clients >= 1, f"{section}.min_clients", f"must be >= 1, got {self.min_clients}")


def accounts(options, sizes):
    return Accounting(((1.0, sizes.rounds),))  # each client's own release, every round: no amplification


def charges(options, sizes, participants):
    return [Charge(f"client {p.client_id}", 1.0) for p in participants]


def aggregator(options, noise, base):
    return PrivateAggregation(base, client_noise=True, clip_norm=noise.clip_norm, noise_multiplier=noise.noise_multiplier,
                              expected=noise.sizes.per_round, seed=noise.seed)


def check(options, config):
    if config.federation.sample_size() < options.min_clients:
        raise ConfigError("privacy.min_clients", f"a round averages {config.federation.sample_size()} noised updates, fewer than {options.min_clients}")


SPEC = MechanismSpec("client_clip", ClientClipOptions, accounts, summary="each client clips and noises its own update",
                     charges=charges, aggregator=aggregator, check=check, adjacency="replace", subsampled=False)

NOT_A_SPEC = ClientClipOptions()
'''

CLIP = "my_mechanism:SPEC"

BASE: dict[str, Any] = {
    "seed": 3,
    "threads": 1,
    "device": "cpu",
    "dataset.name": "digits",
    "partition.name": "iid",
    "model.name": "mlp",
    "model.hidden": [16],
    "federation.num_clients": 4,
    "federation.clients_per_round": 3,
    "federation.rounds": 3,
    "client.epochs": 1,
    "client.batch_size": 32,
    "client.lr": 0.05,
    "eval.clients": "none",
    "checkpoint.every": 0,
    "privacy.clip_norm": 0.5,
    "privacy.noise_multiplier": 1.5,
    "privacy.delta": 1e-3,
}
SOFT = {"distillation": {"method": "dsfl", "public_size": 60, "subset_size": 20}}


@pytest.fixture(autouse=True)
def user_mechanism(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return install(tmp_path, monkeypatch, "my_mechanism", USER_MECHANISM)


def records(tmp_path: Path, name: str, **overrides: Any) -> list[dict[str, Any]]:
    return run_records(tmp_path, name, BASE, **overrides)


# ---------------------------------------------------------------- a user's mechanism, end to end


def test_a_user_mechanism_runs_as_the_built_in_it_rewrites_under_both_executors(tmp_path: Path) -> None:
    seq = records(tmp_path, "seq", **{"privacy.mechanism": CLIP, "privacy.min_clients": 2})
    procs = records(tmp_path, "procs", **{"privacy.mechanism": CLIP, "privacy.min_clients": 2}, executor="processes")
    built_in = records(tmp_path, "local", **{"privacy.mechanism": "local"})
    assert [r["epsilon"] for r in seq] == sorted({r["epsilon"] for r in seq}) and seq[0]["epsilon"] > 0  # it spends, round after round
    assert procs == seq  # clipped and noised in the driver, from seeded streams: the executor changes nothing
    assert seq == built_in  # the same clip, the same client streams, the same charges: local's records bit for bit


def test_the_resolved_config_records_the_mechanisms_options() -> None:
    config = resolved(load_config(None, {**BASE, "privacy.mechanism": CLIP}))
    assert config.privacy.options.min_clients == 1
    table = config.to_dict()["privacy"]
    assert table == {"mechanism": CLIP, "clip_norm": 0.5, "noise_multiplier": 1.5, "target_epsilon": 0.0, "delta": 1e-3, "accountant": "rdp", "rdp_orders": "opacus", "adjacency": "auto",
                     "min_clients": 1}
    assert load_config(None, {"privacy": table}).privacy == config.privacy  # read back: equal
    built_in = load_config(None, {"privacy.mechanism": "dp-fedavg"}).to_dict()["privacy"]
    assert {k: built_in[k] for k in ("target_quantile", "clip_lr", "count_noise")} == {"target_quantile": 0.0, "clip_lr": 0.2, "count_noise": 0.0}
    assert "row_norm" not in built_in  # local's option: not dp-fedavg's


def test_another_mechanism_drops_the_old_ones_options() -> None:
    base = load_config(None, {"privacy.mechanism": "dp-fedavg", "privacy.target_quantile": 0.5, "privacy.clip_norm": 0.3})
    other = base.with_overrides({"privacy.mechanism": "local"})
    assert other.privacy.mechanism == "local" and other.privacy.clip_norm == 0.3 and other.privacy.options.row_norm == "l2"


def test_an_off_table_holds_options_for_the_mechanism_a_variant_switches_on() -> None:
    base = load_config(None, {"privacy.row_norm": "l1", "variants": {"clear": {}, "rows": {"privacy": {"mechanism": "local"}}}})
    assert not base.privacy.enabled and base.to_dict()["privacy"]["row_norm"] == "l1"
    assert base.with_overrides({"privacy.mechanism": "local"}).privacy.options.row_norm == "l1"
    with pytest.raises(ConfigError) as err:
        base.with_overrides({"privacy.mechanism": "dp-sgd"})
    assert err.value.field == "privacy.row_norm" and "'row_norm' is an option of local" in err.value.message


# ---------------------------------------------------------------- its mistakes


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"privacy.min_clientz": 2}, "privacy.min_clientz", "did you mean 'min_clients'?"),  # its unknown option
        ({"privacy.min_clients": 0}, "privacy.min_clients", "must be >= 1"),  # its own validate
        ({"privacy.target_quantile": 0.5}, "privacy.target_quantile", "'target_quantile' is an option of dp-fedavg (set privacy.mechanism)"),  # a sibling's
        ({"privacy.mechanism": "my_mechanism:NOT_A_SPEC"}, "privacy.mechanism", "must name a chillfl.extend.MechanismSpec"),
        ({"privacy.mechanism": "my_mechanism:Missing"}, "privacy.mechanism", "no attribute"),
        ({"privacy.clip_norm": -1.0}, "privacy.clip_norm", "must be > 0"),  # the shared options are checked as for a built-in
    ],
)
def test_mistakes_are_one_config_error_naming_the_field(overrides: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, {**BASE, "privacy.mechanism": CLIP, **overrides})
    assert err.value.field == field and words in err.value.message


def test_a_built_in_refuses_a_siblings_option_naming_its_owner() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, {"privacy.mechanism": "dp-sgd", "privacy.row_norm": "l1"})
    assert err.value.field == "privacy.row_norm" and "'row_norm' is an option of local (set privacy.mechanism)" in err.value.message


def test_its_run_check_refuses_before_anything_is_written(tmp_path: Path) -> None:
    out = tmp_path / "results"
    config = load_config(None, {**BASE, "privacy.mechanism": CLIP, "privacy.min_clients": 4, "out_dir": str(out)})
    with pytest.raises(ConfigError) as err:
        runner.run_experiment(config, progress=False)
    assert err.value.field == "privacy.min_clients" and "fewer than 4" in err.value.message
    assert not out.exists()


# ---------------------------------------------------------------- where a mechanism runs follows from its hooks


def test_a_mechanism_with_no_hook_for_the_protocol_is_refused_with_the_derived_message() -> None:
    config = load_config(None, {**BASE, "privacy.mechanism": CLIP}).with_overrides(SOFT)
    with pytest.raises(ConfigError) as err:
        build_experiment(config)
    assert err.value.field == "privacy.mechanism"
    assert err.value.message == (
        "'my_mechanism:SPEC' noises model updates, and the softlabels protocol has none (its clients upload soft-labels on public inputs); "
        "mechanisms that run under softlabels: local"
    )
    protos = load_config(None, {**BASE, "privacy.mechanism": "dp-sgd"}).with_overrides({"prototypes": {"method": "fedproto"}})
    with pytest.raises(ConfigError) as err:
        build_experiment(protos)
    assert err.value.message == (
        "'dp-sgd' noises per-sample gradients, and the prototypes protocol has none (its clients upload class prototypes); "
        "mechanisms that run under prototypes: none yet"
    )


def test_the_built_ins_are_named_as_configs_write_them_and_run_where_their_hooks_say() -> None:
    assert FAMILY.built_in_names() == ("dp-fedavg", "dp-sgd", "local")
    specs = {name: FAMILY.spec(name) for name in FAMILY.built_in_names()}
    assert {name: spec.name for name, spec in specs.items()} == {name: name for name in specs}
    assert {name: spec.covers() for name, spec in specs.items()} == {
        "dp-fedavg": {"parameters": "model updates"},
        "dp-sgd": {"parameters": "per-sample gradients"},
        "local": {"parameters": "model updates", "softlabels": "soft-label rows"},
    }


def test_a_spec_without_a_hook_or_its_charges_is_a_programming_error() -> None:
    def accounts(options: object, sizes: object) -> Accounting:
        return Accounting(((1.0, 1),))

    with pytest.raises(ValueError, match="has no hook"):
        MechanismSpec("idle", dict, accounts)
    with pytest.raises(ValueError, match="give it charges"):
        MechanismSpec("free", dict, accounts, aggregator=lambda o, n, b: b)  # type: ignore[arg-type, return-value]


# ---------------------------------------------------------------- listed like every family


def test_an_entry_point_mechanism_is_listed_and_runs_by_its_name(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(plugins, "entry_points", lambda: {"client_clip": CLIP})
    assert "client_clip" in mechanism_names()
    assert load_config(None, {"privacy.mechanism": "client_clip", "privacy.min_clients": 2}).privacy.options.min_clients == 2
    assert main(["list"]) == 0
    assert "privacy mechanisms: client_clip, dp-fedavg, dp-sgd, local" in capsys.readouterr().out


def test_listing_mechanisms_imports_no_torch() -> None:
    import subprocess

    code = "import sys; from chillfl.settings.privacy import mechanism_names; print(mechanism_names()); assert 'torch' not in sys.modules"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "'dp-fedavg', 'dp-sgd', 'local'" in done.stdout, done.stderr


def test_the_reference_documents_each_mechanisms_options_and_a_plugins() -> None:
    text = render_reference([CLIP])
    part = text[text.index("## [privacy] mechanism = ...") :]
    assert "### Shared options (every mechanism)" in part and "| `clip_norm` | `float` | `1.0` |" in part
    assert "### `dp-fedavg`" in part and "| `target_quantile` | `float` | `0.0` |" in part
    assert f"### `{CLIP}` — each client clips and noises its own update" in part and "| `min_clients` | `int` | `1` |" in part


# ---------------------------------------------------------------- core code names no mechanism

SRC = Path(__file__).resolve().parents[1] / "src" / "chillfl"
CORE = ["privacy/build.py", "privacy/aggregate.py", "privacy/protocol.py", "privacy/plan.py", "privacy/spec.py", "settings/privacy.py", "config.py"]
ELSEWHERE = {("config.py", "local"): "[compare] local, the comparison's per-client accuracy option: no mechanism"}
"""A mechanism's name that a core file spells for another meaning, and why (each one on purpose)."""


def _code_strings(path: Path) -> list[str]:
    """Every string literal, identifier and argument name of the file but its docstrings (a string statement of its
    own, a module's, a class's, a function's or an attribute's: documentation, which may name what the code does not)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            out.append(node.value)
        elif isinstance(node, ast.Name):
            out.append(node.id)
        elif isinstance(node, ast.Attribute):
            out.append(node.attr)
        elif isinstance(node, ast.arg):
            out.append(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            out.append(node.arg)
    return out


def _spells(text: str, name: str) -> bool:
    """Whether ``text``'s words (``snake_case``, ``kebab-case`` and ``CamelCase`` split) contain ``name``'s as a run."""
    words = [w for w in re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text).lower()) if w]
    own = re.split(r"[-_]", name)
    return any(words[i : i + len(own)] == own for i in range(len(words)))


@pytest.mark.parametrize("module", CORE)
def test_core_code_names_no_mechanism(module: str) -> None:
    names = set(FAMILY.built_in_names())
    found = sorted({name for text in _code_strings(SRC / module) for name in names if _spells(text, name) and (module, name) not in ELSEWHERE})
    assert found == [], f"{module} names {found}: ask the mechanism's spec instead"


def test_the_check_sees_a_name_in_code() -> None:
    """The check above would catch the code it replaced (so a pass means something)."""
    old = 'if p.mechanism in ("dp-fedavg",):\n    x = local\nelif p.mechanism == "dp-sgd": pass\n'
    tree = ast.parse(old)
    texts = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)] + [n.id for n in ast.walk(tree) if isinstance(n, ast.Name)]
    assert {name for name in FAMILY.built_in_names() if any(_spells(t, name) for t in texts)} == {"dp-fedavg", "dp-sgd", "local"}


def test_the_pages_privacy_table_refuses_another_mechanisms_options_as_the_page_says(tmp_path: Path) -> None:
    """docs/privacy.md's first [privacy] table, as a reader copies it: it loads as written, and switched to another
    mechanism its dp-fedavg options are refused with one line naming their owner."""
    page = (Path(__file__).parent.parent / "docs" / "privacy.md").read_text(encoding="utf-8")
    snippet = re.search(r"```toml\n(\[privacy\]\n.*?)```", page, re.S)
    assert snippet is not None
    table = snippet.group(1)
    (tmp_path / "as_written.toml").write_text(table)
    assert load_config(tmp_path / "as_written.toml").privacy.mechanism == "dp-fedavg"
    switched = re.sub(r'^mechanism = "dp-fedavg"', 'mechanism = "local"', table, flags=re.M)
    (tmp_path / "switched.toml").write_text(switched)
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "switched.toml")
    assert err.value.field in {"privacy.target_quantile", "privacy.clip_lr", "privacy.count_noise"} and "an option of dp-fedavg" in err.value.message


@pytest.mark.parametrize(("mechanism", "own"), [("dp-fedavg", {"target_quantile", "clip_lr", "count_noise", "weight_cap", "estimator", "w_min_share", "clamp_fraction", "clipping"}),
                                                ("local", {"row_norm"}), ("dp-sgd", {"divide_by"})])
def test_an_older_result_folders_flat_privacy_table_still_loads(tmp_path: Path, mechanism: str, own: set[str]) -> None:
    """A result folder written before each mechanism had its own options lists all eleven: its config.toml must still
    load for report and resume, the other mechanisms' options dropped as that version ignored them."""
    older = tmp_path / "config.toml"
    older.write_text(
        f'[privacy]\nmechanism = "{mechanism}"\nclip_norm = 0.5\nnoise_multiplier = 1.1\ntarget_epsilon = 0.0\ndelta = 1e-05\n'
        'accountant = "rdp"\nrow_norm = "l2"\nadjacency = "auto"\ntarget_quantile = 0.0\nclip_lr = 0.2\ncount_noise = 0.0\n'
    )
    privacy = load_config(older).privacy
    assert (privacy.mechanism, privacy.clip_norm, privacy.noise_multiplier) == (mechanism, 0.5, 1.1)
    written = set(resolved(load_config(older)).to_dict()["privacy"])
    assert written == {"mechanism", "clip_norm", "noise_multiplier", "target_epsilon", "delta", "accountant", "rdp_orders", "adjacency"} | own
    with pytest.raises(ConfigError) as err:  # written by hand, another mechanism's option is still refused
        load_config(None, {"privacy": {"mechanism": "dp-sgd", "row_norm": "l1"}})
    assert err.value.field == "privacy.row_norm" and "'row_norm' is an option of local" in err.value.message


def test_a_flat_table_written_by_hand_keeps_another_mechanisms_setting_and_is_refused() -> None:
    """A table that holds all four mechanism-specific options looks like an older result folder's; only options at their
    owner's default are dropped then (they change nothing), so a setting is refused, naming its owner, never lost."""
    table = {"mechanism": "local", "row_norm": "l2", "target_quantile": 0.5, "clip_lr": 0.2, "count_noise": 0.0}
    with pytest.raises(ConfigError) as err:
        load_config(None, {"privacy": table})
    assert err.value.field == "privacy.target_quantile" and "an option of dp-fedavg" in err.value.message
    assert load_config(None, {"privacy": {**table, "target_quantile": 0.0}}).privacy.mechanism == "local"  # all defaults: as before
