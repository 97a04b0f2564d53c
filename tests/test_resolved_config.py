"""The resolved config lists every option of every part, and feeding a result folder's ``config.toml`` back reproduces the run bitwise.

``--dry-run``, :func:`chillfl.make_config` and every result folder's ``config.toml`` carry each part's
options with their defaults (:mod:`chillfl.resolve`); an option left ``None`` (derived at run time) is
omitted from the TOML. ``make_config`` refuses an unknown option of any part as the run would, and
``chillfl list --options`` shows the options of plugins too.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

import chillfl
from chillfl.aggregation.registry import algorithm_names, algorithm_spec
from chillfl.cli import main
from chillfl.config import OPTIONAL_TABLES, config_from_dict, load_config
from chillfl.data.datasets import DATASETS
from chillfl.data.partition import PARTITIONERS
from chillfl.errors import ConfigError
from chillfl.models.projection import PROJECTION_OPTION
from chillfl.models.registry import MODELS
from chillfl.options import parse_options
from chillfl.resolve import algorithm_table, dataset_table, model_table, partition_table, resolved, temperature_table
from chillfl.runner import run_experiment
from chillfl.settings.distillation import DistillationOptions, method_names, method_settings
from chillfl.settings.prototypes import method_names as prototype_methods, method_spec
from chillfl.storage.results import to_toml
from chillfl.temperature import policy_names, policy_spec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

README = Path(__file__).resolve().parents[1] / "README.md"
TINY = {
    "dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 4, "federation.clients_per_round": 3,
    "federation.rounds": 2, "client.batch_size": 32, "client.lr": 0.05, "eval.client_split_size": 20,
}


def fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.init}


def quickstart(folder: Path) -> Path:
    """README's quickstart.toml, as a user saves it."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"Save as `quickstart.toml`.*?```toml\n(.*?)```", text, re.S)
    assert block is not None
    path = folder / "quickstart.toml"
    path.write_text(block.group(1), encoding="utf-8")
    return path


# ---------------------------------------------------------------- what the resolved form shows


def test_dry_run_of_the_quickstart_prints_fedchills_t_min_and_the_partitions_defaults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = quickstart(tmp_path)
    assert main(["run", str(path), "--dry-run", f"out_dir={tmp_path / 'out'}"]) == 0
    out = capsys.readouterr().out
    shown = tomllib.loads(out)
    fedchill = policy_spec("fedchill").options()
    assert shown["temperature"]["t_min"] == fedchill.t_min and set(shown["temperature"]) == {"policy"} | {k for k in fields(type(fedchill)) if getattr(fedchill, k) is not None}
    dirichlet = PARTITIONERS["dirichlet"].options()
    assert shown["partition"] == {"name": "dirichlet", **{k: getattr(dirichlet, k) for k in fields(type(dirichlet))}, "alpha": 0.3}
    assert set(shown["dataset"]) >= {"name", "augment"} | fields(DATASETS["digits"].options)
    assert out.startswith("# unset") and "temperature.p_g" in out.split("\n[", 1)[0]  # a None default is named in the opening comment, not written as a value


def test_make_config_lists_every_option_of_every_part() -> None:
    config = chillfl.make_config(overrides={"temperature.policy": "fedchill", "distillation.method": "dsfl", "distillation.public_size": 100, "distillation.subset_size": 20})
    data = config.to_dict()
    assert set(data["temperature"]) == {"policy"} | fields(policy_spec("fedchill").options)
    assert set(data["algorithm"]) == {"name"} | fields(algorithm_spec("fedavg").options)
    assert set(data["model"]) == {"name", PROJECTION_OPTION} | fields(MODELS["flexchill_cnn"].options)  # and every model's
    assert set(data["distillation"]) == fields(DistillationOptions) | fields(method_settings("dsfl").options)
    assert data["distillation"]["subset_size"] == 20 and data["distillation"]["server_lr"] is None  # None: derived at run time
    assert "server_lr" not in tomllib.loads(to_toml(data))["distillation"]
    protos = chillfl.make_config(overrides={"prototypes.method": "fedhkd"}).to_dict()["prototypes"]
    assert set(protos) == {"method"} | fields(method_spec("fedhkd").options)


def test_a_wrappers_wrapped_method_is_resolved_through_the_spec() -> None:
    """Generic: every algorithm whose spec wraps another gets the wrapped one's options in ``<wraps>_options``."""
    wrappers = [n for n in algorithm_names() if algorithm_spec(n).wraps]
    assert wrappers
    for name in wrappers:
        spec = algorithm_spec(name)
        base = getattr(spec.options(), spec.wraps)
        table = chillfl.make_config(overrides={"algorithm.name": name}).algorithm
        assert table[spec.wraps] == base and set(table[f"{spec.wraps}_options"]) == fields(algorithm_spec(base).options)
    table = chillfl.make_config(overrides={"algorithm.name": "pa3fed", "algorithm.base": "fedprox", "algorithm.base_options": {"mu": 0.5}}).algorithm
    assert table["base_options"] == {"mu": 0.5, **{k: v for k, v in dataclasses.asdict(algorithm_spec("fedprox").options(mu=0.5)).items()}}


def test_resolving_is_idempotent_and_survives_its_toml_form() -> None:
    config = chillfl.make_config(overrides={"temperature.policy": "fedchill", "algorithm.name": "pa3fed", "algorithm.base": "fednova", "prototypes.method": "fedproto"})
    again = config_from_dict(tomllib.loads(to_toml(config.to_dict())))
    assert resolved(again) == resolved(config) == config


def test_every_loss_term_is_recorded_with_all_of_its_options() -> None:
    # a name alone, a table with some options, and a term without options: each term its spec's every option, given or default
    config = chillfl.make_config(overrides={"objective.terms": ["ntd", {"name": "decorr", "beta": 0.5}, "proximal"]})
    assert config.objective.terms == (
        {"name": "ntd", "beta": 1.0, "tau": 1.0, "tau_squared": True},
        {"name": "decorr", "beta": 0.5},
        {"name": "proximal", "mu": 0.01},
    )
    again = config_from_dict(tomllib.loads(to_toml(config.to_dict())))
    assert resolved(again) == resolved(config) == config  # idempotent, and its TOML form reads back the same
    with pytest.raises(ConfigError) as info:
        chillfl.make_config(overrides={"objective.terms": [{"name": "ntd", "gamma": 1.0}]})
    assert info.value.field.startswith("objective.terms")


def _same_options(cls: type, resolve: Any, table: dict[str, Any], section: str, drop: tuple[str, ...] = ("name",)) -> int:
    """An explicit default acts as the unset option: parsing the resolved table gives the very same options.

    Returns 0 for a part that cannot run at its defaults (a required option, e.g. a Hugging Face dataset's path).
    """
    try:
        bare = parse_options(cls, {}, section)
    except ConfigError:
        return 0
    assert parse_options(cls, {k: v for k, v in resolve(table).items() if k not in drop}, section) == bare
    return 1


def test_every_registered_parts_resolved_defaults_parse_to_the_unset_options() -> None:
    checked = sum(_same_options(entry.options, partition_table, {"name": name}, "partition") for name, entry in PARTITIONERS.items())
    checked += sum(_same_options(spec.options, model_table, {"name": name}, "model", ("name", PROJECTION_OPTION)) for name, spec in MODELS.items())
    checked += sum(_same_options(entry.options, dataset_table, {"name": name}, "dataset", ("name", "augment")) for name, entry in DATASETS.items())
    checked += sum(_same_options(policy_spec(name).options, temperature_table, {"policy": name}, "temperature", ("policy",)) for name in policy_names())
    assert checked >= len(PARTITIONERS) + len(MODELS) + len(policy_names())
    for name in algorithm_names():
        spec = algorithm_spec(name)
        try:
            bare = parse_options(spec.options, {}, "algorithm")
        except ConfigError:  # a required option (as a Hugging Face dataset's path): no run at the defaults to resolve
            continue
        table = {k: v for k, v in algorithm_table({"name": name}).items() if k != "name"}
        if spec.wraps:  # the wrapped method's defaults written out: the same wrapped options once parsed
            assert parse_options(spec.options, table, "algorithm") == dataclasses.replace(bare, **{f"{spec.wraps}_options": table[f"{spec.wraps}_options"]})
        else:
            assert parse_options(spec.options, table, "algorithm") == bare
    for name in method_names():
        setup = chillfl.make_config(overrides={"distillation.method": name, "distillation.public_size": 100, "distillation.subset_size": 20}).distillation_setup
        bare = config_from_dict({"distillation": {"method": name, "public_size": 100, "subset_size": 20}}).distillation_setup
        assert setup == bare
    for name in prototype_methods():
        assert chillfl.make_config(overrides={"prototypes.method": name}).prototype_settings == config_from_dict({"prototypes": {"method": name}}).prototype_settings


def test_another_method_by_override_drops_the_old_methods_own_options() -> None:
    """A resolved [distillation] holds the old method's own defaults; another method keeps only the shared options."""
    base = chillfl.make_config(overrides={"distillation.method": "dsfl", "distillation.public_size": 100, "distillation.subset_size": 20})
    for name in method_names():
        switched = chillfl.make_config(base, {"distillation.method": name})
        assert switched.distillation_setup == chillfl.make_config(overrides={"distillation.method": name, "distillation.public_size": 100, "distillation.subset_size": 20}).distillation_setup
    hkd = chillfl.make_config(overrides={"prototypes.method": "fedhkd"})
    for name in prototype_methods():  # FedHKD's lam = 0.05 is not FedProto's
        assert chillfl.make_config(hkd, {"prototypes.method": name}).prototype_settings == chillfl.make_config(overrides={"prototypes.method": name}).prototype_settings


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("overrides,field", [
    ({"algorithm.name": "fedprox", "algorithm.muu": 1}, "algorithm.muu"),
    ({"algorithm.name": "pa3fed", "algorithm.base": "fedprox", "algorithm.base_options": {"muu": 1}}, "algorithm.base_options.muu"),
    ({"temperature.policy": "fedchill", "temperature.tmin": 0.1}, "temperature.tmin"),
    ({"distillation.method": "dsfl", "distillation.public_size": 100, "distillation.subset_size": 20, "distillation.temprature": 1.0}, "distillation.temprature"),
    ({"prototypes.method": "fedproto", "prototypes.lamda": 1.0}, "prototypes.lamda"),
    ({"partition.name": "dirichlet", "partition.alpah": 0.1}, "partition.alpah"),
    ({"model.name": "mlp", "model.hiden": 3}, "model.hiden"),
    ({"dataset.name": "digits", "dataset.test_frac": 0.1}, "dataset.test_frac"),
])
def test_make_config_refuses_unknown_method_options_naming_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        chillfl.make_config(overrides=overrides)
    assert err.value.field == field and "allowed:" in err.value.message


def test_the_cli_refuses_an_unknown_option_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", str(quickstart(tmp_path)), "--dry-run", "algorithm.name=fedprox", "algorithm.muu=1", f"out_dir={tmp_path / 'out'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "algorithm.muu" in err[0] and "allowed: mu" in err[0]


# ---------------------------------------------------------------- reruns are bitwise


RERUNS = {
    "fedchill": {"temperature.policy": "fedchill"},
    "pa3fed-fednova": {"algorithm.name": "pa3fed", "algorithm.base": "fednova", "client.momentum": 0.5},  # FedNova's momentum: from client.momentum when unset
    "scaffold-momentum": {"algorithm.name": "scaffold", "client.momentum": 0.5},
    "softlabels-dsfl": {"distillation.method": "dsfl", "distillation.public_size": 120, "distillation.subset_size": 40},
    "prototypes-fedhkd": {"prototypes.method": "fedhkd"},
}


def _toml(overrides: dict[str, Any]) -> str:
    data: dict[str, Any] = {}
    for key, value in overrides.items():
        section, _, option = key.partition(".")
        data.setdefault(section, {})[option] = value
    return to_toml(data)


@pytest.mark.parametrize("case", sorted(RERUNS))
def test_rerunning_a_result_folders_config_is_bitwise(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Run a small config from the command line, rerun its folder's config.toml, and run the unresolved config: the same bytes."""
    path = tmp_path / f"{case}.toml"
    path.write_text(_toml({**TINY, **RERUNS[case]}), encoding="utf-8")
    assert main(["run", str(path), f"out_dir={tmp_path / 'first'}", "-q"]) == 0
    first = tmp_path / "first" / case
    saved = tomllib.loads((first / "config.toml").read_text(encoding="utf-8"))
    assert [key for key in OPTIONAL_TABLES if key in saved and not saved[key]] == []  # an empty [variants], [compare], ... was written
    assert {key for key in OPTIONAL_TABLES if key in saved} == {key.partition(".")[0] for key in RERUNS[case]} & set(OPTIONAL_TABLES)
    again_as_run = {"out_dir": str(tmp_path / "first"), "device": saved["device"]}  # the run records the device it ran on
    assert resolved(load_config(first / "config.toml")) == resolved(load_config(path, again_as_run))  # read back: the same config
    algorithm = algorithm_spec(saved["algorithm"]["name"]).options()
    assert set(saved["algorithm"]) == {"name"} | {k for k in fields(type(algorithm)) if getattr(algorithm, k) is not None}  # every option written
    assert main(["run", str(first / "config.toml"), f"out_dir={tmp_path / 'again'}", "-q"]) == 0
    again = tmp_path / "again" / case
    rerun = tomllib.loads((again / "config.toml").read_text(encoding="utf-8"))
    assert {**rerun, "out_dir": ""} == {**saved, "out_dir": ""}  # the same resolved config
    assert (again / "metrics.jsonl").read_bytes() == (first / "metrics.jsonl").read_bytes()
    raw = run_experiment(load_config(path, {"out_dir": str(tmp_path / "raw")}), progress=False)  # not resolved: every option as written
    assert raw.folder is not None and (raw.folder / "metrics.jsonl").read_bytes() == (first / "metrics.jsonl").read_bytes()
    capsys.readouterr()


# ---------------------------------------------------------------- plugin options in `chillfl list --options`


PLUGIN_MODULE = '''
from dataclasses import dataclass


class Halving:
    """A toy aggregator plugin with one option."""

    @dataclass(frozen=True)
    class Options:
        shrink_factor: float = 0.5

    def __init__(self, options):
        self.options = options

    def downlink(self, client_id, round, global_params): ...
    def aggregate(self, global_params, results, round): ...
    def round_metrics(self): ...
    def begin_round(self, round, client_ids): ...
    def client_half(self): ...
    def state_dict(self): ...
    def load_state_dict(self, state): ...


class Warm:
    """A toy temperature policy plugin with one option."""

    @dataclass(frozen=True)
    class Options:
        warmth_level: float = 2.0

    def __init__(self, options):
        self.options = options

    def temperature(self, client_id, round): ...
    def observe(self, round, metrics): ...
    def client_half(self): ...
    def state_dict(self): ...
    def load_state_dict(self, state): ...
'''


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A plugin module on sys.path; ``halving`` and ``warm`` registered as ``chillfl.plugins`` entry points."""
    (tmp_path / "h4_plugin_parts.py").write_text(PLUGIN_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "h4_plugin_parts"
    sys.modules.pop("h4_plugin_parts", None)


def _section(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def test_list_options_shows_entry_point_plugins_options(plugin: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import chillfl.plugins

    monkeypatch.setattr(chillfl.plugins, "entry_points", lambda: {"halving": f"{plugin}:Halving", "warm": f"{plugin}:Warm"})
    assert main(["list", "--options"]) == 0
    text = capsys.readouterr().out
    algorithms, policies = _section(text, "## [algorithm]"), _section(text, "## [temperature]")
    assert "### `halving`" in algorithms and "| `shrink_factor` | `float` | `0.5` |" in algorithms and "warmth_level" not in algorithms
    assert "### `warm`" in policies and "| `warmth_level` | `float` | `2.0` |" in policies and "shrink_factor" not in policies


def test_list_options_shows_a_plugin_named_by_import_path(plugin: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--options", f"{plugin}:Halving"]) == 0
    algorithms = _section(capsys.readouterr().out, "## [algorithm]")
    assert f"### `{plugin}:Halving`" in algorithms and "| `shrink_factor` | `float` | `0.5` |" in algorithms
    # its docstring's first line is its summary (since 2026-12-07, as a plugin function's), never the import path again
    # ("— h4_plugin_parts:Halving")
    assert f"### `{plugin}:Halving` — A toy aggregator plugin with one option.\n" in algorithms and "— h4_plugin_parts" not in algorithms
    assert main(["list", "--options", f"{plugin}:Nothing"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Nothing" in err[0]


def test_a_resolved_config_still_takes_an_aggregator_from_python() -> None:
    """``chillfl.run(config=make_config(...), aggregator=...)``: a resolved default [algorithm] / [temperature] is no clash."""
    from chillfl.extend import FedAvg

    config = chillfl.make_config(overrides={**TINY, "federation.rounds": 1})
    result = chillfl.run(config=config, aggregator=FedAvg(), write=False, progress=False)
    assert result.config.algorithm["name"] == "custom" and len(result.records) == 1
    weighted = chillfl.make_config(config, {"algorithm.weighting": "uniform"})
    with pytest.raises(ConfigError, match="replaces \\[algorithm\\]"):
        chillfl.run(config=weighted, aggregator=FedAvg(), write=False, progress=False)


def test_a_resolved_config_still_takes_the_public_set_passed_with_the_data() -> None:
    """A resolved [distillation] has ``public_size = 0`` where it was unset: the public rows passed from Python fill it, as before."""
    import torch
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    data = chillfl.TensorData(x[:1000], y[:1000], x[1200:], y[1200:], num_classes=10, public=x[1000:1200])
    config = chillfl.make_config(overrides={**TINY, "federation.rounds": 1, "distillation.method": "individual"})
    assert config.distillation["public_size"] == 0
    result = chillfl.run(data=data, config=config, write=False, progress=False)
    assert result.config.distillation["public_size"] == 200
