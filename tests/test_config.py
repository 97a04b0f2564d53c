"""Config loading, overrides and validation errors (field named, allowed values listed)."""

from pathlib import Path

import pytest

from chillfl.config import RunConfig, load_config, parse_overrides, parse_value
from chillfl.errors import ConfigError
from chillfl.experiments import bundled_experiments, resolve_config


def test_defaults_and_overrides(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text('seed = 3\n[client]\nlr = 0.1\n[temperature]\npolicy = "fixed"\nvalue = 0.5\n')
    cfg = load_config(path, parse_overrides(["client.lr=0.05", "federation.rounds=7", "dataset.name=mnist1d"]))
    assert cfg.name == "exp" and cfg.seed == 3
    assert cfg.client.lr == 0.05 and cfg.federation.rounds == 7
    assert cfg.temperature == {"policy": "fixed", "value": 0.5}
    assert cfg.dataset["name"] == "mnist1d"


def test_parse_value_types():
    assert parse_value("3") == 3 and parse_value("0.5") == 0.5 and parse_value("true") is True
    assert parse_value("[1, 2]") == [1, 2] and parse_value("digits") == "digits" and parse_value('"x y"') == "x y"


def test_sample_size_count_and_fraction():
    assert load_config(None, {"federation.num_clients": 50, "federation.client_fraction": 0.2}).federation.sample_size() == 10
    assert load_config(None, {"federation.num_clients": 50, "federation.clients_per_round": 7}).federation.sample_size() == 7


@pytest.mark.parametrize(("num_clients", "fraction", "count"), [(10, 0.15, 1), (10, 0.35, 3), (10, 0.25, 2), (100, 0.29, 29), (10, 0.05, 1), (7, 1.0, 7)])
def test_sample_size_truncates_the_fraction_as_flower_fl_bench_and_pflib(num_clients, fraction, count):
    """max(1, floor(C N)), as ``int(N * fraction)`` in the reference frameworks (1.5 -> 1, 3.5 -> 3; round() gave 2 and 4),
    safe from the product's float error (0.29 x 100 = 28.999999999999996 is 29 clients)."""
    federation = load_config(None, {"federation.num_clients": num_clients, "federation.client_fraction": fraction}).federation
    assert federation.sample_size() == count


def test_lr_decay_per_round():
    cfg = load_config(None, {"client.lr": 0.01, "client.lr_decay": 0.8})
    assert cfg.client.lr_at(0) == 0.01
    assert cfg.client.lr_at(2) == pytest.approx(0.01 * 0.64)


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"federation.client_fraction": 0.0}, "federation.client_fraction"),
        ({"federation.client_fraction": 1.5}, "federation.client_fraction"),
        ({"federation.clients_per_round": 11}, "federation.clients_per_round"),
        ({"client.lr": -1}, "client.lr"),
        ({"client.lrr": 1}, "client.lrr"),
        ({"client.epochs": "two"}, "client.epochs"),
        ({"executor": "gpu"}, "executor"),
        ({"eval.clients": "some"}, "eval.clients"),
    ],
)
def test_errors_name_the_field(overrides, field):
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides)
    assert info.value.field == field


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[client\nlr = 1")
    with pytest.raises(ConfigError, match="malformed TOML"):
        load_config(bad)


@pytest.mark.parametrize(("line", "hint"), [
    ('name = fedprox', '; a string needs quotes: name = "fedprox"'),  # YAML's and Hydra's unquoted strings
    ('name = my_rules:Median  # a plugin', '; a string needs quotes: name = "my_rules:Median"'),
    ('weighting = Uniform', '; a string needs quotes: weighting = "Uniform"'),
    ('decay = True', '; TOML writes booleans in lower case: decay = true'),  # Python's spelling
    ('mu = 0.1.2', ''),  # not a bare word: tomllib's own message, nothing guessed
    ('mu = { a = b }', ''),
])
def test_a_bare_word_in_a_config_file_says_how_to_write_it(tmp_path: Path, line: str, hint: str) -> None:
    """tomllib says only "Invalid value (at line 2, column 8)" for ``name = fedprox``, the way YAML and Hydra write strings."""
    bad = tmp_path / "bad.toml"
    bad.write_text(f"[algorithm]\n{line}\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    assert info.value.field == "config" and str(info.value).startswith("config: malformed TOML in ")
    assert str(info.value).endswith(")" + hint)


def test_bundled_experiments_load():
    names = bundled_experiments()
    assert "demo" in names
    for name in names:
        load_config(resolve_config(name))


@pytest.mark.parametrize(
    "text, field, named",
    [
        ("[privacy]\nnoise_multiplier = 1.1\nclip_norm = 0.5\n", "privacy.mechanism", "privacy.clip_norm, privacy.noise_multiplier would change nothing"),
        ("[attack]\nfraction = 0.3\n", "attack.kind", "attack.fraction would change nothing"),
        # an option written only in a variant, with no switch anywhere: every run would ignore it too
        ('[variants.a]\n[variants.b]\nprivacy = { target_epsilon = 8.0 }\n', "privacy.mechanism", "privacy.target_epsilon"),
        ('[variants.a]\n"attack.factor" = 5.0\n', "attack.kind", "attack.factor"),
        ('[tune]\n"privacy.clip_norm" = [0.5, 1.0]\n', "privacy.mechanism", "privacy.clip_norm"),
    ],
)
def test_options_of_a_table_no_run_switches_on_are_refused(tmp_path, text, field, named):
    """[privacy] and [attack] are off unless mechanism / kind say otherwise: options without the switch would be dropped silently."""
    path = tmp_path / "exp.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.field == field and named in str(err.value) and "is off by default" in str(err.value)


@pytest.mark.parametrize(
    "grid, tune, field, named",
    [
        # --grid privacy.target_epsilon=4,8 with no mechanism anywhere ran two identical non-private rows, no epsilon column
        (["privacy.target_epsilon=4,8"], None, "privacy.mechanism", "privacy.target_epsilon would change nothing"),
        (["attack.fraction=0.2,0.4"], None, "attack.kind", "attack.fraction would change nothing"),
        (["client.lr=0.05,0.1"], {"privacy.noise_multiplier": [1.0, 2.0]}, "privacy.mechanism", "privacy.noise_multiplier"),  # --tune
    ],
)
def test_swept_options_of_a_table_no_run_switches_on_are_refused(grid, tune, field, named):
    from chillfl.sweeps.plan import CompareOptions, plan_sweep

    base = load_config(None, {"dataset.name": "digits", "federation.num_clients": 4, "federation.rounds": 1, "eval.validation": 0.2})
    with pytest.raises(ConfigError) as err:
        plan_sweep(base, grid, CompareOptions(tune=tune))
    assert err.value.field == field and named in str(err.value) and "is off by default" in str(err.value)


def test_a_base_option_whose_switch_the_command_line_sweeps_is_kept(tmp_path, capsys):
    # privacy.delta=1e-3 --grid privacy.mechanism=none,dp-fedavg: the base holds the shared option, the grid switches it on;
    # refused before (the file's check saw no mechanism), while a [variants] table doing the same was allowed
    from chillfl.cli import main

    with pytest.raises(ConfigError):
        load_config(None, {"privacy.delta": 1e-3})
    assert load_config(None, {"privacy.delta": 1e-3}, swept=["privacy.mechanism"]).privacy.delta == 1e-3
    base = tmp_path / "base.toml"
    base.write_text('[dataset]\nname = "digits"\n[federation]\nnum_clients = 4\nrounds = 1\n')
    assert main(["compare", str(base), "--grid", "privacy.mechanism=none,dp-fedavg", "privacy.delta=1e-3", "--dry-run"]) == 0
    assert main(["compare", str(base), "--grid", "client.lr=0.1,0.2", "privacy.delta=1e-3", "--dry-run"]) == 2  # no switch anywhere
    assert "privacy.mechanism: is not set" in capsys.readouterr().err
    # and from Python: chillfl.compare's grid (a dict or 'key=v1,v2' items) counts as the command line's
    import chillfl

    shared = {"dataset": {"name": "digits"}, "federation": {"num_clients": 4, "rounds": 1}, "privacy": {"delta": 1e-3}}
    for grid in ({"privacy.mechanism": ["none", "dp-fedavg"]}, ["privacy.mechanism=none,dp-fedavg"]):
        assert chillfl.compare(config=shared, grid=grid, write=False, progress=False).rows[1]["epsilon"] is not None


def test_swept_options_with_a_switch_somewhere_run():
    from chillfl.sweeps.plan import CompareOptions, Variant, plan_sweep

    base = load_config(None, {"dataset.name": "digits", "federation.num_clients": 4, "federation.rounds": 1, "eval.validation": 0.2})
    assert len(plan_sweep(base, ["privacy.target_epsilon=4,8", "privacy.mechanism=dp-fedavg"])[0]) == 2  # the grid sets it
    assert len(plan_sweep(base, ["attack.fraction=0.25,0.5"], CompareOptions(tune={"attack.kind": ["scaling"]}))[0]) == 2  # the tuning grid sets it
    own = [Variant("clean", {}, None), Variant("dp", {"privacy": {"mechanism": "local", "delta": 1e-3}}, None), Variant("dp2", {"privacy.clip_norm": 0.5}, None)]
    assert len(plan_sweep(base, [], variants=own)[0]) == 3  # a nested table switches on; another variant's key rides on a run that is on
    private = load_config(None, {"dataset.name": "digits", "federation.num_clients": 4, "federation.rounds": 1, "privacy.mechanism": "dp-fedavg", "privacy.delta": 1e-3})
    assert len(plan_sweep(private, ["privacy.clip_norm=0.5,1"])[0]) == 2  # on in the base config


@pytest.mark.parametrize(
    "text",
    [
        '[privacy]\nmechanism = "dp-fedavg"\nnoise_multiplier = 1.1\n',
        '[privacy]\nmechanism = "none"\nnoise_multiplier = 1.1\n',  # "none" written: a choice, not an omission
        # shared options in the base, the switch per variant (the bundled attacks/aggregators-digits pattern)
        '[attack]\nfraction = 0.3\n[variants.clean]\n[variants.flip]\nattack = { kind = "label_flip" }\n',
        '[privacy]\nclip_norm = 0.5\n[variants.a]\n"privacy.mechanism" = "dp-sgd"\n',
        '[privacy]\nclip_norm = 0.5\n[tune]\n"privacy.mechanism" = ["none", "dp-fedavg"]\n',
    ],
)
def test_options_with_their_switch_set_somewhere_load(tmp_path, text):
    path = tmp_path / "exp.toml"
    path.write_text(text)
    config = load_config(path)
    assert config.with_overrides({}).privacy == config.privacy  # the resolved dict names every switch: it loads again


def test_a_python_runconfig_with_options_of_a_switched_off_table_is_refused_too():
    """``RunConfig(privacy=PrivacyConfig(noise_multiplier=1.1))`` trained with no noise and reported no epsilon: its dict
    writes every field, the switch ``"none"`` too, which passed for a choice. A RunConfig cannot tell a written "none"
    from the default, so its switched-off tables are read as a file that leaves the switch out."""
    import chillfl
    from chillfl.settings.attack import AttackConfig
    from chillfl.settings.privacy import PrivacyConfig

    with pytest.raises(ConfigError) as err:
        chillfl.make_config(RunConfig(privacy=PrivacyConfig(noise_multiplier=1.1)))
    assert err.value.field == "privacy.mechanism" and "privacy.noise_multiplier would change nothing" in err.value.message
    with pytest.raises(ConfigError) as err:
        chillfl.make_config(RunConfig(attack=AttackConfig(fraction=0.3)))
    assert err.value.field == "attack.kind" and "attack.fraction" in err.value.message
    on = chillfl.make_config(RunConfig(privacy=PrivacyConfig(mechanism="dp-fedavg", noise_multiplier=1.1)))
    assert (on.privacy.mechanism, on.privacy.noise_multiplier) == ("dp-fedavg", 1.1)
    resolved = chillfl.make_config("demo")  # every switch written, every option at its default: loads again, unchanged
    assert chillfl.make_config(resolved) == resolved


@pytest.mark.parametrize(
    ("overrides", "noted"),
    [
        ({"federation.clients_per_round": 5, "federation.client_fraction": 0.3}, True),  # 0.3 x 20 = 6 clients, not 5
        ({"federation.clients_per_round": 6, "federation.client_fraction": 0.3}, False),  # the same count: nothing to say
        ({"federation.clients_per_round": 5}, False),  # client_fraction = 1.0, as every saved config.toml writes it
        ({"federation.client_fraction": 0.3}, False),
    ],
)
def test_a_count_that_overrides_a_different_fraction_is_noted_once(tmp_path, capsys, overrides, noted):
    """Both set: clients_per_round wins, in one note (not an error: a saved config.toml writes both and must rerun)."""
    from chillfl.cli import main

    path = tmp_path / "both.toml"
    path.write_text(f'out_dir = "{(tmp_path / "out").as_posix()}"\n[federation]\nnum_clients = 20\n', encoding="utf-8")
    argv = ["run", str(path), "--dry-run", *(f"{k}={v}" for k, v in overrides.items())]
    assert main(argv) == 0
    err = capsys.readouterr().err
    line = "federation.client_fraction = 0.3 is ignored: federation.clients_per_round = 5 sets the clients a round (the fraction would give 6 of 20)"
    assert err.count(line) == (1 if noted else 0), err
    assert "client_fraction" not in err or noted


@pytest.mark.parametrize(("name", "section"), [("fedgh", "prototypes"), ("feddistill", "prototypes"), ("scarlet", "distillation")])
def test_a_method_of_another_family_under_algorithm_says_where_it_goes(name: str, section: str) -> None:
    """``algorithm.name = "fedgh"`` got "did you mean 'pfedhn'?", ``feddistill`` no hint: they are prototype methods."""
    from chillfl.experiment import check_parts

    with pytest.raises(ConfigError) as err:
        check_parts(load_config(None, {"algorithm.name": name}))
    assert (err.value.field, err.value.message) == ("algorithm.name", f"{name!r} is a {section} method, not an algorithm: set {section}.method = {name!r}")


def test_a_variant_giving_one_key_both_ways_is_refused(tmp_path) -> None:
    """``"client.lr" = 0.2`` beside ``client.lr = 0.3`` in one variant: the run took 0.3 and dropped 0.2 without a word
    (``[tune]`` refused the same already)."""
    path = tmp_path / "dup.toml"
    path.write_text('name = "dup"\n[dataset]\nname = "digits"\n[variants."A"]\nclient.lr = 0.1\n[variants."B"]\n"client.lr" = 0.2\nclient.lr = 0.3\n')
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert (err.value.field, err.value.message) == ("variants.B.client.lr", "is given twice (as a dotted key and in a table); keep one")


@pytest.mark.parametrize("text", ["[privacy]\nnoise_multiplier = 1.1\n", "[attack]\nfactor = 3.0\n"])
def test_the_switch_refusal_suggests_only_values_that_switch_the_table_on(tmp_path, text):
    """Its hint listed 'none' first: taken, the options were kept and did nothing, the no-op the refusal is there for."""
    path = tmp_path / "exp.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    suggested = err.value.message.split("set it to one of ", 1)[1]
    assert "'none'" not in suggested and suggested.count("'") >= 2
