"""The CLI's config path as a new user meets it (issue 25): overrides that switch a part, a
``--dry-run`` that validates, "did you mean", bundled bases, ``-v``/``-q``, plain progress in logs."""

from __future__ import annotations

import dataclasses
import re
from chillfl.config import tomllib  # tomli on Python 3.10
from pathlib import Path
from types import SimpleNamespace

import pytest

import chillfl
from chillfl.cli import main
from chillfl.config import load_config, variant_config
from chillfl.errors import ConfigError
from chillfl.options import short_path
from chillfl.resolve import resolved
from chillfl.sweeps.plan import parse_grid

DIRICHLET = '[partition]\nname = "dirichlet"\nalpha = 0.3\n'


def write(tmp_path: Path, text: str, name: str = "base.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_an_override_naming_another_partitioner_drops_the_old_options(tmp_path: Path) -> None:
    base = write(tmp_path, DIRICHLET)
    cli = load_config(base, {"partition.name": "iid"})
    api = chillfl.make_config(base, {"partition.name": "iid"})
    assert cli.partition == api.partition == {"name": "iid"}
    kept = load_config(base, {"partition.name": "dirichlet", "partition.min_size": 2})  # same name: options kept
    assert kept.partition == {"name": "dirichlet", "alpha": 0.3, "min_size": 2}


def test_a_grid_over_partitioners_drops_the_old_options(tmp_path: Path) -> None:
    base = load_config(write(tmp_path, DIRICHLET))
    iid, dirichlet = parse_grid(["partition.name=iid,dirichlet"])
    assert variant_config(base, iid.label, iid.overrides).partition == {"name": "iid"}
    assert variant_config(base, dirichlet.label, dirichlet.overrides).partition == {"name": "dirichlet", "alpha": 0.3}


def test_run_with_a_switched_partitioner_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write(tmp_path, DIRICHLET)
    assert main(["run", str(base), "partition.name=iid", "--dry-run"]) == 0
    assert tomllib.loads(capsys.readouterr().out)["partition"] == {"name": "iid"}
    assert main(["compare", str(base), "--grid", "partition.name=iid,dirichlet", "--dry-run"]) == 0


def test_a_compare_dry_run_lists_the_runs_of_its_grid_seeds_and_tuning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--grid, --seeds and --tune show what would run (count and names), as comments: the config stays valid TOML."""
    base = write(tmp_path, f'out_dir = "{(tmp_path / "out").as_posix()}"\n[eval]\nvalidation = 0.2\n')
    argv = ["compare", str(base), "--grid", "algorithm.name=fedavg,fedprox", "--seeds", "0,1", "--tune", "client.lr=0.1,0.2", "--dry-run"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    comments = [line for line in out.splitlines() if line.startswith("#   algorithm") or line.startswith("# compare")]
    assert comments == [
        "# compare (not part of the config): 8 runs: 2 variants x seeds 0, 1 x tuning client.lr = 0.1, 0.2",
        "#   algorithm.name=fedavg: fedavg-lr0.1-s0, fedavg-lr0.1-s1, fedavg-lr0.2-s0, fedavg-lr0.2-s1",
        "#   algorithm.name=fedprox: fedprox-lr0.1-s0, fedprox-lr0.1-s1, fedprox-lr0.2-s0, fedprox-lr0.2-s1",
    ]
    assert tomllib.loads(out)["eval"]["validation"] == 0.2
    assert not (tmp_path / "out").exists()


def test_a_compare_dry_run_prints_the_tables_its_flags_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The TOML showed the file's ``[compare] seeds`` and ``[tune]`` while --seeds and --tune replaced them (only the
    opening comment said so), and its ``[variants]`` under --grid: saved, it ran another comparison. Now it is the one
    the flags ask for: compared again, the saved TOML plans the same runs."""
    base = write(tmp_path, f'out_dir = "{(tmp_path / "out").as_posix()}"\n[eval]\nvalidation = 0.2\n[compare]\nseeds = [0, 1, 2]\n'
                           '[tune]\n"client.lr" = [0.1, 0.2]\n[variants]\na = {}\nb = {"client.epochs" = 2}\n')
    assert main(["compare", str(base), "--seeds", "5,6", "--tune", "client.lr=0.3", "--select", "final", "--dry-run"]) == 0
    out = capsys.readouterr().out
    table = tomllib.loads(out)
    assert table["compare"]["seeds"] == [5, 6] and table["compare"].get("select", "final") == "final" and table["tune"] == {"client.lr": [0.3]}
    assert set(table["variants"]) == {"a", "b"}
    saved = write(tmp_path, out, "saved.toml")
    assert main(["compare", str(saved), "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[:3] == out.splitlines()[:3]  # the same runs, by name
    assert main(["compare", str(base), "--grid", "client.epochs=1,3", "--dry-run"]) == 0
    gridded = capsys.readouterr().out
    assert tomllib.loads(gridded)["variants"] == {"client.epochs=1": {"client.epochs": 1}, "client.epochs=3": {"client.epochs": 3}}
    assert main(["compare", str(write(tmp_path, gridded, "gridded.toml")), "--dry-run"]) == 0  # the grid's rows, not the file's a and b
    assert capsys.readouterr().out.splitlines()[0] == gridded.splitlines()[0]


def test_a_one_run_dry_run_says_1_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``chillfl compare CONFIG --seeds 2 --dry-run`` opened with "1 runs: 1 variant"."""
    assert main(["compare", str(write(tmp_path, "")), "--seeds", "2", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "# compare (not part of the config): 1 run: 1 variant x seeds 2"


def test_the_demos_dry_run_plans_the_runs_the_demo_makes(capsys: pytest.CaptureFixture[str]) -> None:
    """`chillfl run --dry-run` checks the demo's temperatures too (27 runs), not its config's 9."""
    assert main(["run", "--dry-run", "federation.rounds=1"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("# compare (not part of the config): 27 runs: 3 variants x seeds 0, 1, 2")


@pytest.mark.parametrize(
    "argv, line",
    [
        (["run", "{base}", "algorithm.name=fedavgg"], "algorithm.name: unknown value 'fedavgg' (did you mean 'fedavg'?)"),
        (["run", "{base}", "partition.alpah=0.3"], "partition.alpah: unknown option (did you mean 'alpha'?)"),
        (["run", "{base}", "model.name=mlp", "model.hiden=[8]"], "model.hiden: unknown option (did you mean 'hidden'?)"),
        (["run", "{base}", "temperature.policy=fixd"], "temperature.policy: unknown value 'fixd' (did you mean 'fixed'?)"),
        # An option of another entry of the family: which ones take it, and the key that chooses them.
        (["run", "{base}", "temperature.value=0.5"], "temperature.value: unknown option; temperature.policy = 'none' takes no options; 'value' is an option of "),
        (["run", "{base}", "algorithm.mu=0.01"], "algorithm.mu: unknown option; allowed: weighting; 'mu' is an option of "),
        # Spelt right for a sibling, so no spelling is suggested: it said "(did you mean 'target_epsilon'?)" beside "dp-fedavg's".
        (["run", "{base}", "privacy.mechanism=dp-sgd", "privacy.target_quantile=0.5"],
         "privacy.target_quantile: unknown option; allowed: accountant, adjacency, clip_norm, delta, divide_by, mechanism, noise_multiplier, rdp_orders, "
         "target_epsilon; 'target_quantile' is an option of dp-fedavg (set privacy.mechanism)"),
        # A wrapper's: where the wrapped method's option goes (it named only algorithm.name, which would drop the wrapper).
        (["run", "{base}", "algorithm.name=pa3fed", "algorithm.base=fedprox", "algorithm.mu=0.01"],
         "algorithm.mu: unknown option; allowed: base, base_options, beta, delta, eval_batch_size, fgn_scale_by_lr, fgn_weights, first_round_clp, grad_norm, "
         "grad_temperature, mode, signed; 'mu' is an option of apple, fedalign, fedphp, fedprox, moon (set algorithm.name, or, for the method it wraps, "
         "algorithm.base_options.mu)"),
        # A term the wrapped method adds: the wrapped one's options are named (it said "its own options": PA3Fed's, which have no mu).
        (["run", "{base}", "algorithm.name=pa3fed", "algorithm.base=fedprox", "objective.proximal_mu=0.1"],
         "objective.proximal_mu: algorithm 'pa3fed' already adds the proximal term mu/2 ||w - w^t||^2 (FedProx) (its own options, or those of "
         "'fedprox', algorithm.base_options); set one of the two"),
        # a first [distillation] table names its method only: public_size's default 0 was "must be >= subset_size=1000 ..., got 0"
        (["run", "{base}", "distillation.method=scarlet"],
         "distillation.public_size: is not set (0), and method 'scarlet' distils on a public set of |P| >= subset_size=1000 rows (|P^t| a round), "
         "carved from the training set or drawn from public_dataset: set both, e.g. public_size = 400, subset_size = 100 on digits"),
        (["run", "{base}", "federaton.rounds=3"], "federaton: unknown key or section (did you mean 'federation'?)"),
        # Flower's num_rounds, FL-bench's flat keys: a section's option written at the top level names its section
        (["run", "{base}", "rounds=3"], "rounds: unknown key or section (an option of [federation]: federation.rounds); allowed: "),
        (["run", "{base}", "lr=0.1"], "lr: unknown key or section (an option of [client]: client.lr); allowed: "),
        (["run", "{base}", "clip_norm=1"], "clip_norm: unknown key or section (an option of [client], [privacy]: client.clip_norm, privacy.clip_norm); "),
        (["compare", "{base}", "--grid", "algorithm.name=fedavg,fedavgg"], "algorithm.name: unknown value 'fedavgg' (did you mean 'fedavg'?)"),
        # a key in two --grid items: the later set every variant's value, labelled "client.lr=0.1, client.lr=0.3" (ran at 0.3)
        (["compare", "{base}", "--grid", "client.lr=0.1,0.2", "--grid", "client.lr=0.3"], "--grid: client.lr is given twice; give all its values in one item"),
        (["compare", "{base}", "--tune", "client.lr=0.1,0.2", "--tune", "client.lr=0.3"], "--tune: client.lr is given twice; give all its values in one item"),
        # an empty --seeds was taken as none given, and the line named --grid
        (["compare", "{base}", "--seeds", ""], "--seeds: expected a non-empty list of integer seeds from 0 to 2**63 - 1, got []"),
        # an empty item of a comma list was dropped: `--seeds 0,,1` ran seeds 0 and 1, `client.lr=0.1,` one value
        (["compare", "{base}", "--seeds", "0,,1"], "--seeds: an empty item in '0,,1'; expected integers like 0,1,2 or 0-4"),
        (["compare", "{base}", "--seeds", "0,1,"], "--seeds: an empty item in '0,1,'; expected integers like 0,1,2 or 0-4"),
        (["compare", "{base}", "--grid", "client.lr=0.1,,0.2"], "--grid: an empty item in '0.1,,0.2'; expected client.lr=v1,v2,..."),
        (["compare", "{base}", "--tune", "client.lr=0.1, "], "--tune: an empty item in '0.1, '; expected client.lr=v1,v2,..."),
        # an empty data_dir was the current folder, with nothing said
        (["run", "{base}", "--data-dir", ""], "data_dir: must be a non-empty path without NUL characters, got ''"),
        (["run", "{base}", "data_dir="], "data_dir: must be a non-empty path without NUL characters, got ''"),
        (["data", "show", "{base}", "--data-dir", ""], "data_dir: must be a non-empty path without NUL characters, got ''"),
        (["run", "{base}", "model.name=[1,2]"], "model.name: must be a string (a registered name), got list [1, 2]"),  # was "is required (a string)"
        (["run", "{folder}"], "config: {shown} is a folder, not a config file"),  # was "file not found"
    ],
)
def test_dry_run_exits_2_on_what_a_run_would_refuse(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], line: str) -> None:
    base = write(tmp_path, f'out_dir = "{tmp_path / "out"}"\n' + DIRICHLET)
    folder = tmp_path / "a-folder.toml"
    folder.mkdir()
    assert main([a.format(base=base, folder=folder) for a in argv] + ["--dry-run", "dataset.name=digits"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"chillfl: error: {line.format(shown=short_path(str(folder)))}")
    assert not (tmp_path / "out").exists()


def test_dry_run_without_the_data_still_checks_names_and_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write(tmp_path, f'data_dir = "{tmp_path / "nodata"}"\n[dataset]\nname = "cifar10"\n[model]\nname = "resnet20"\n')
    assert main(["run", str(base), "--dry-run"]) == 0
    assert "names and options checked, and the model on the dataset's known inputs (3, 32, 32)" in capsys.readouterr().err
    assert main(["run", str(base), "--dry-run", "algorithm.name=fedavgg"]) == 2
    assert main(["run", str(base), "--dry-run", "model.depth=3"]) == 2
    assert "model.depth: unknown option" in capsys.readouterr().err


def test_an_unknown_option_names_the_siblings_that_take_it() -> None:
    from chillfl.options import Chosen, parse_options

    @dataclasses.dataclass(frozen=True)
    class Plain:
        mu: float = 0.0

    @dataclasses.dataclass(frozen=True)
    class Muted:
        mu: float = 0.0
        gamma: float = 1.0

    @dataclasses.dataclass(frozen=True)
    class Empty:
        pass

    family = {name: SimpleNamespace(options=cls) for name, cls in (("plain", Plain), ("muted", Muted), ("empty", Empty))}
    with pytest.raises(ConfigError) as err:
        parse_options(Empty, {"gamma": 2.0}, "algorithm", Chosen("algorithm.name", "empty", lambda: family))
    assert str(err.value) == "algorithm.gamma: unknown option; algorithm.name = 'empty' takes no options; 'gamma' is an option of muted (set algorithm.name)"
    with pytest.raises(ConfigError) as err:
        parse_options(Plain, {"gama": 2.0}, "algorithm", Chosen("algorithm.name", "plain", lambda: family))
    assert str(err.value) == "algorithm.gama: unknown option; allowed: mu"  # nobody takes it: no owners' clause
    with pytest.raises(ConfigError) as err:
        parse_options(Empty, {"mu": 1.0}, "algorithm", Chosen("algorithm.name", "empty", lambda: family))
    assert str(err.value).endswith("'mu' is an option of muted, plain (set algorithm.name)")
    with pytest.raises(ConfigError) as err:  # without a family: as before, and "(none)" no longer reads like a value
        parse_options(Empty, {"mu": 1.0}, "x")
    assert str(err.value) == "x.mu: unknown option; the table takes no options"


def test_no_suggestion_for_a_name_unlike_any() -> None:
    from chillfl.errors import choice_error

    assert "did you mean" not in str(choice_error("algorithm.name", "zzzzzz", ["fedavg", "scaffold"]))


def _names(of: str) -> list[str]:
    """The real names a typo is matched against: the algorithms, the client's options, the dirichlet partitioner's."""
    from chillfl.aggregation.registry import algorithm_names
    from chillfl.config import ClientConfig
    from chillfl.data.partition import DirichletOptions

    return algorithm_names() if of == "algorithms" else [f.name for f in dataclasses.fields(ClientConfig if of == "client" else DirichletOptions)]


@pytest.mark.parametrize(
    ("typed", "of", "expected"),
    [
        ("fedavgg", "algorithms", "fedavg"),  # difflib: 2*6/13 = 0.92 over fedavgm's 2*6/14 = 0.86
        ("scafold", "algorithms", "scaffold"),
        ("FedAvg", "algorithms", "fedavg"),  # another case
        ("Krum", "algorithms", "krum"),
        ("krm", "algorithms", "krum"),  # short: a letter dropped
        ("kurm", "algorithms", "krum"),  # short: two neighbours swapped
        ("prox", "algorithms", "fedprox"),  # short: part of one name only
        ("alhpa", "dirichlet", "alpha"),  # difflib: al + p (or h) + a = 3 shared, 2*3/10 = 0.6
        ("alpah", "dirichlet", "alpha"),
        ("lrr", "client", "lr"),
        ("LR", "client", "lr"),
        ("lr_decy", "client", "lr_decay"),
        ("foo", "algorithms", None),  # was 'fedfomo': f, o, o in order, 2*3/10 = 0.6
        ("x", "algorithms", None),
        ("x", "client", None),  # one letter: only the same letter in another case
        ("fed", "algorithms", None),  # part of many names: none is the one meant
        ("lr", "algorithms", None),  # no algorithm is one edit from it
        ("zzzzzz", "algorithms", None),
    ],
)
def test_did_you_mean_suggests_what_a_user_meant_and_nothing_for_junk(typed: str, of: str, expected: str | None) -> None:
    from chillfl.errors import did_you_mean

    assert did_you_mean(typed, _names(of)) == ("" if expected is None else f" (did you mean {expected!r}?)")


def test_extends_may_name_a_bundled_base(tmp_path: Path) -> None:
    child = write(tmp_path, 'extends = "flexchill/_base-digits.toml"\n[federation]\nrounds = 2\n')
    config = load_config(child)
    assert config.federation.rounds == 2 and config.dataset["name"] == "digits" and config.name == "base"
    with pytest.raises(ConfigError, match="extends: file not found"):
        load_config(write(tmp_path, 'extends = "flexchill/_no-such-base.toml"\n', "other.toml"))


TINY = ["dataset.name=digits", "federation.num_clients=4", "federation.rounds=3", "model.name=mlp", "eval.client_split_size=20"]


def test_progress_in_a_log_is_plain_lines_without_carriage_returns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write(tmp_path, f'out_dir = "{tmp_path / "out"}"\n')
    assert main(["run", str(base), *TINY]) == 0  # stderr is captured: not a terminal
    err = capsys.readouterr().err
    assert "\r" not in err
    assert "chillfl: base round 3/3 global_acc=" in err  # the last round always gets its line
    assert main(["run", str(base), *TINY, "-v"]) == 0  # -v: one line per round
    err = capsys.readouterr().err
    assert [f"round {r}/3" in err for r in (1, 2, 3)] == [True, True, True]


def test_quiet_levels(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    from chillfl import cli

    seen: list[int] = []
    dispatch = cli._dispatch
    monkeypatch.setattr(cli, "_dispatch", lambda args: (seen.append(logging.getLogger("chillfl").level), dispatch(args))[1])
    base = write(tmp_path, f'out_dir = "{tmp_path / "out"}"\n')
    for flags, level in (([], logging.INFO), (["-v"], logging.DEBUG), (["-q"], logging.WARNING), (["-qq"], logging.ERROR)):
        assert main(["run", str(base), *TINY, *flags, "--dry-run"]) == 0
        assert seen[-1] == level, flags  # while the command runs; main gives the caller's level back after
    assert main(["run", str(base), *TINY, "-q"]) == 0
    assert "round" not in capsys.readouterr().err


def test_run_takes_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write(tmp_path, "")
    assert main(["run", str(base), "--data-dir", str(tmp_path / "d"), "--dry-run"]) == 0
    assert tomllib.loads(capsys.readouterr().out)["data_dir"] == str(tmp_path / "d")


@pytest.mark.parametrize("key", ["data_dir", "out_dir"])
def test_an_empty_folder_in_a_config_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str) -> None:
    """``data_dir = ""`` in a file read datasets from the current folder; ``chillfl.make_config`` refuses it the same way."""
    assert main(["run", str(write(tmp_path, f'{key} = ""\n')), "--dry-run"]) == 2
    assert capsys.readouterr().err.strip() == f"chillfl: error: {key}: must be a non-empty path without NUL characters, got ''"
    with pytest.raises(ConfigError) as err:
        chillfl.make_config(overrides={key: ""})
    assert err.value.field == key


def test_data_download_refuses_an_empty_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``chillfl data download cifar10 --data-dir ""`` unpacked into the current folder; listing it read the current folder."""
    monkeypatch.chdir(tmp_path)
    for argv in (["data", "download", "--data-dir", ""], ["data", "download", "cifar10", "--data-dir", ""]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert captured.err.strip() == "chillfl: error: --data-dir: must be a non-empty path without NUL characters, got ''" and captured.out == ""
    assert not list(tmp_path.iterdir())


def test_reproduce_refuses_an_empty_seed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "flexchill", "--seeds", "0,,1", "--dry-run"]) == 2
    assert capsys.readouterr().err.strip() == "chillfl: error: --seeds: an empty item in '0,,1'; expected integers like 0,1,2 or 0-4"


def test_comma_items_refuses_an_empty_item_and_keeps_a_blank_list_empty() -> None:
    from chillfl.options import comma_items

    assert comma_items(" 0, 1 ,2", "--x", "ints") == ["0", "1", "2"]
    assert comma_items("", "--x", "ints") == [] and comma_items("  ", "--x", "ints") == []  # the caller's own "give one" line
    for text in ("0,,1", "0,", ",0", "0, ,1", ","):
        with pytest.raises(ConfigError) as err:
            comma_items(text, "--x", "ints")
        assert (err.value.field, err.value.message) == ("--x", f"an empty item in {text!r}; expected ints")


@pytest.mark.parametrize("command", ["run", "compare"])
def test_the_resume_hint_after_ctrl_c_works_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                            command: str) -> None:
    """The line said ``resume with: chillfl resume results/base.partial``: a path relative to the folder the run started
    in (nothing, from another terminal), split in two by a space in it. It names the folder absolute and shell-quoted."""
    import shlex
    import signal

    import chillfl.runner
    import chillfl.sweeps.run
    from chillfl.errors import ComparisonInterrupted

    work = tmp_path / "my runs"
    work.mkdir()
    monkeypatch.chdir(work)
    write(work, "seed = 0\n")
    folder = Path("results") / ("base.partial" if command == "run" else "base-compare.partial")

    def stopped(*args: object, **kwargs: object) -> None:
        if command == "run":
            raise chillfl.runner.RunInterrupted(signal.SIGINT, folder, 2)
        raise ComparisonInterrupted(folder)

    monkeypatch.setattr(chillfl.runner, "run_experiment", stopped)
    monkeypatch.setattr(chillfl.sweeps.run, "run_compare", stopped)
    assert main([command, "base.toml", "-q"]) == 130
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.endswith(f"resume with: chillfl resume '{work / folder}'"), line
    assert shlex.split(line.split("resume with: ", 1)[1]) == ["chillfl", "resume", str(work / folder)]


def test_dry_run_refuses_an_out_dir_a_run_could_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    base = write(tmp_path, f'out_dir = "{blocker}"\n')
    assert main(["run", str(base), "--dry-run", "dataset.name=digits"]) == 2
    assert capsys.readouterr().err.startswith("chillfl: error: out_dir:")


def test_dry_run_of_run_on_a_config_with_variants_checks_every_variant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write(tmp_path, '[dataset]\nname = "digits"\n[variants.a]\nclient.lr = 0.1\n[variants.b]\nalgorithm = {name = "fedavgg"}\n')
    assert main(["run", str(base), "--dry-run"]) == 2
    assert capsys.readouterr().err.startswith("chillfl: error: variants.b.algorithm.name: unknown value 'fedavgg' (did you mean 'fedavg'?)")


def test_progress_mode_follows_the_stream() -> None:
    import io

    from chillfl.progress import format_seconds, mode_for

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert (mode_for(False, Terminal()), mode_for(False, io.StringIO()), mode_for(True, Terminal())) == ("bar", "lines", "off")
    assert (format_seconds(5), format_seconds(75), format_seconds(4000)) == ("5s", "1m15s", "1h06m")


def test_a_missing_config_is_the_one_argument_named(capsys: pytest.CaptureFixture[str]) -> None:
    """The overrides are optional: argparse named them as required too ("required: config, overrides")."""
    with pytest.raises(SystemExit) as exit_:
        main(["compare"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip() == "chillfl compare: error: the following arguments are required: config; `chillfl compare --help` shows the usage"


@pytest.mark.parametrize(("argv", "line"), [
    (["reproduce", "nopaper"], "chillfl reproduce: error: argument paper: invalid choice: 'nopaper' (choose from 'flexchill', 'fedchill', 'pa3fed', 'scarlet')"),
    (["bogus"], "chillfl: error: argument command: invalid choice: 'bogus'"),
    # a stray flag names its command's --help (it named `chillfl --help`, which lists the commands, not their flags)
    (["run", "--bogus"], "chillfl run: error: unrecognized arguments: --bogus; `chillfl run --help` shows the usage"),
    # compare's flags after run: said to be compare's (the line named only run's --help, which lists none of them)
    (["run", "demo", "--seeds", "0,1"], "chillfl run: error: unrecognized arguments: --seeds 0,1; --seeds is chillfl compare's, not chillfl run's "
                                        "(chillfl compare CONFIG --seeds ...; chillfl run runs a config's [compare] and [tune] tables as a comparison); "
                                        "`chillfl run --help` shows the usage"),
    (["run", "demo", "--tune=client.lr=0.1", "--controls"], "chillfl run: error: unrecognized arguments: --tune=client.lr=0.1 --controls; "
                                                            "--tune, --controls are chillfl compare's, not chillfl run's (chillfl compare CONFIG --tune ...;"),
    (["data", "show", "demo", "--bogus"], "chillfl data show: error: unrecognized arguments: --bogus; `chillfl data show --help`"),
    (["analyze", "cka", "some/run", "--bogus"], "chillfl analyze cka: error: unrecognized arguments: --bogus; `chillfl analyze cka --help`"),
])
def test_a_command_line_argparse_refuses_is_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], line: str) -> None:
    """argparse printed its usage block (3 lines and more) before the error; --help still shows it."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1 and err.startswith(line) and err.rstrip().endswith("--help` shows the usage")


def test_the_compare_flags_run_names_are_compares_own(capsys: pytest.CaptureFixture[str]) -> None:
    """``cli.COMPARE_FLAGS`` (what ``run`` says belongs to ``compare``) are the flags ``compare --help`` lists and ``run --help`` does not."""
    from chillfl.cli import COMPARE_FLAGS

    flags = {}
    for command in ("run", "compare"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        flags[command] = set(re.findall(r"^  (--[a-z-]+)", capsys.readouterr().out, flags=re.M))
    assert set(COMPARE_FLAGS) == flags["compare"] - flags["run"]


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        # a near miss: the closest command (argparse before Python 3.14 lists the choices and suggests none)
        (["analysis", "calibration", "results/x"], " (did you mean 'analyze'?)"),
        (["analyze", "calib", "results/x"], " (did you mean 'calibration'?)"),
        (["list", "experiment"], " (did you mean 'experiments'?)"),
        # a command other tools (and docs/DESIGN's first sketch) have: where it lives here
        (["tune", "exp.toml"], " (tuning runs inside a comparison: chillfl compare CONFIG --tune client.lr=0.01,0.1 eval.validation=0.2)"),
        (["sweep", "exp.toml"], " (a sweep is a comparison: chillfl compare CONFIG --grid KEY=V1,V2)"),
        (["bogus"], ""),
    ],
)
def test_an_unknown_command_says_which_one_was_meant(capsys: pytest.CaptureFixture[str], argv: list[str], hint: str) -> None:
    """``chillfl tune`` or ``chillfl analysis`` listed the commands and left the newcomer to guess."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1
    assert err.endswith(f"){hint}; `{err.split(':')[0]} --help` shows the usage"), err


@pytest.mark.parametrize("flag", [["--shard", "1/2"], ["--strict"], ["--device", "cpu"]])
def test_data_show_does_not_take_the_flags_of_a_run(capsys: pytest.CaptureFixture[str], flag: list[str]) -> None:
    """``data show --help`` listed ``--shard K/N`` and ``--strict`` (a comparison's share, an exploding loss), which it
    accepted and ignored: it runs no training. They are refused as unknown, in one line. So is ``--device``: the
    partition is drawn on the CPU and is the same on every device (only ``--dry-run`` echoed it)."""
    with pytest.raises(SystemExit) as exit_:
        main(["data", "show", "demo", *flag])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1 and f"unrecognized arguments: {flag[0]}" in err


def _help(capsys: pytest.CaptureFixture[str], *command: str) -> dict[str, str]:
    """``chillfl COMMAND --help``'s options, each flag -> its help text (wrapped lines joined)."""
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    assert exit_.value.code == 0
    options = capsys.readouterr().out.split("\noptions:\n", 1)[1]
    texts: dict[str, str] = {}
    for entry in re.split(r"\n  (?=-)", "\n" + options):
        if entry.strip():
            flags, _, text = entry.strip().partition("  ")
            texts[flags.split(",")[-1].split()[0]] = " ".join(text.split())
    return texts


def test_data_show_help_describes_its_flags_as_it_uses_them(capsys: pytest.CaptureFixture[str]) -> None:
    """``data show --help`` said ``-v`` gives "a progress line every round" and ``--out`` is the "parent folder of the result
    folder": it trains nothing and writes no result folder. Its -v, -q, --out and --seed say what they do there."""
    show, run = _help(capsys, "data", "show"), _help(capsys, "run")
    assert run["--verbose"] == "debug lines, and a progress line every round" and "result folder" in run["--out"]  # a run's are kept
    assert show["--verbose"] == "debug lines" and "progress" not in show["--quiet"]
    assert show["--out"] == "the heat map goes to OUT_DIR/data-show/ (the config's `out_dir`; -o names the file itself)"
    assert show["--seed"] == "the seed the partition is drawn with (the config's `seed`)"
    assert not [flag for flag, text in show.items() if "round" in text or "result folder" in text]


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("attack.name=backdoor", "attack.name: unknown option ([attack] is chosen by attack.kind); allowed: clients, fraction, kind, local_dp"),
        ("privacy.name=dp-sgd", "privacy.name: unknown option ([privacy] is chosen by privacy.mechanism); allowed: "),
        ("temperature.name=fixed", "temperature.name: unknown option ([temperature] is chosen by temperature.policy); temperature.policy = 'none'"),
        ("partition.kind=iid", "partition.kind: unknown option ([partition] is chosen by partition.name); allowed: "),
        ("algorithm.options.mu=1", "algorithm.options: unknown option (options are written flat: algorithm.weighting, not algorithm.options.weighting); allowed: weighting"),
    ],
)
def test_a_key_spelt_as_another_table_spells_it_names_this_ones(override: str, line: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``attack.name`` and ``algorithm.options.mu`` are guesses from sibling tables (or other frameworks), not typos:
    no spelling is close, so the line says which key chooses the table, or that options are flat."""
    assert main(["run", "demo", "--dry-run", override]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and line in err[0], err


def test_every_option_of_every_command_says_what_it_does_and_its_default() -> None:
    """``chillfl analyze cache-ratio --help`` showed ``--seed SEED`` with no word, ``scarlet-deficit`` its ``--seeds``
    (default 0,1,2) likewise, and ``reproduce`` its paper bare. Every option, the analyses' included, has a help line,
    and one whose default is a value (not unset, off or empty) names it."""
    import argparse

    from chillfl.cli import build_parser

    def options(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.Action]]:
        out: list[tuple[str, argparse.Action]] = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    out += options(sub, f"{path} {name}")
            elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                out.append((path, action))
        return out

    found = options(build_parser(), "chillfl")
    assert len({path for path, _ in found}) >= 18  # every command and analysis was walked (19 paths today)
    bare = [f"{path} {'/'.join(a.option_strings) or a.dest}" for path, a in found if not a.help]
    silent = [
        f"{path} {'/'.join(a.option_strings)}"
        for path, a in found
        if a.default not in (None, False, 0, [], argparse.SUPPRESS) and "default" not in (a.help or "") and str(a.default) not in (a.help or "")
    ]
    assert (bare, silent) == ([], [])


@pytest.mark.parametrize(
    ("grid", "line"),
    [
        (["temperature=1,1.0"], "--grid: duplicate values: two variants would both be T=1"),
        (["client.lr=0.1,0.1", "client.epochs=1,2"], "--grid: duplicate values: two variants would both be client.lr=0.1, client.epochs=1"),
    ],
)
def test_a_duplicate_grid_value_is_named(grid: list[str], line: str) -> None:
    """``--grid temperature=1,1.0`` said only "--grid: duplicate values", naming neither the key nor the value."""
    with pytest.raises(ConfigError) as err:
        parse_grid(grid)
    assert f"{err.value.field}: {err.value.message}" == line


def test_temperatures_that_differ_past_six_digits_are_two_variants() -> None:
    # the label showed T with :g, six significant digits: 0.1234561 and 0.1234562 were both "T=0.123456" and the grid
    # was refused as a duplicate; a value :g rounds shows every digit, one it does not keeps its short form
    variants = parse_grid(["temperature=0.1234561,0.1234562,0.5,1"])
    assert [v.label for v in variants] == ["T=0.1234561", "T=0.1234562", "T=0.5", "T=1"]
    assert [v.temperature for v in variants] == [0.1234561, 0.1234562, 0.5, 1.0]


def test_a_duplicate_tuning_value_is_named() -> None:
    from chillfl.tune import parse_tune

    with pytest.raises(ConfigError) as err:
        parse_tune({"client.lr": [0.01, 0.1, 0.1]})
    assert f"{err.value.field}: {err.value.message}" == "tune.client.lr: duplicate values: 0.1 twice in [0.01, 0.1, 0.1]"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3-1", "the range 3-1 counts down; give 1-3"),
        ("0,5-2", "the range 5-2 counts down; give 2-5"),
        ("0-a", "expected integers like 0,1,2 or 0-4, got '0-a'"),
    ],
)
def test_seeds_counting_down_say_so(text: str, message: str) -> None:
    """``--seeds 3-1`` made range(3, 2), empty, and the line read "expected a non-empty list ..., got []"."""
    from chillfl.sweeps.plan import parse_seeds

    with pytest.raises(ConfigError) as err:
        parse_seeds(text)
    assert (err.value.field, err.value.message) == ("--seeds", message)
    assert parse_seeds("0-2,5") == [0, 1, 2, 5] and parse_seeds("4-4") == [4]


@pytest.mark.parametrize(
    ("text", "override", "line"),
    [
        ("seed = 1e30\n", None, "seed: expected an integer, got 1e+30"),
        ("seed = 2.5\n", None, "seed: expected an integer, got 2.5"),
        ('name = "x"\n', "client.epochs=-1e30", "client.epochs: expected an integer, got -1e+30"),
        ('name = "x"\n', "seed=100000000000000000000", "seed: must fit in 64 bits (|x| < 2**63), got 100000000000000000000"),  # an integer: its size
    ],
)
def test_a_float_for_an_integer_option_says_an_integer_is_expected(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, override: str | None, line: str) -> None:
    """``seed = 1e30`` said "must fit in 64 bits": the value is a float (1e30 is whole, so it was taken as 10**30 and
    refused for its size). An integer option given a float that no int64 holds says an integer is expected, as 2.5 does."""
    assert main(["run", str(write(tmp_path, text)), "--dry-run", *([override] if override else [])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"chillfl: error: {line}"]


@pytest.mark.parametrize(
    ("tune", "table", "line"),
    [
        ("client.lr=0.1,0.1", '"client.lr" = [0.1, 0.1]', "tune.client.lr: duplicate values: 0.1 twice in [0.1, 0.1]"),
        ("seed=1,2", "seed = [1, 2]", "tune.seed: not a tunable option (give section.option, e.g. client.lr)"),
        ("client.lr=0.1,[1]", '"client.lr" = [0.1, [1]]', "tune.client.lr: values must be numbers, strings or booleans, got [1]"),
    ],
)
def test_a_tuning_option_is_named_as_the_tune_table_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str], tune: str, table: str, line: str) -> None:
    """``--tune client.lr=0.1,0.1`` was refused on field ``--tune.client.lr``, a name neither the flag nor a config has;
    the same grid's bad value (``client.lr=x``) said ``tune.client.lr``, as a ``[tune]`` table and ``chillfl.compare(tune=)``
    do. Every option of the grid is named ``tune.KEY``, from the flag and from the table alike."""
    base = write(tmp_path, "[eval]\nvalidation = 0.2\n")
    assert main(["compare", str(base), "--tune", tune, "--dry-run"]) == 2
    flag = capsys.readouterr().err.strip().splitlines()
    assert main(["compare", str(write(tmp_path, f"[eval]\nvalidation = 0.2\n[tune]\n{table}\n", "tuned.toml")), "--seeds", "0", "--dry-run"]) == 2
    assert flag == capsys.readouterr().err.strip().splitlines() == [f"chillfl: error: {line}"]


def test_the_flag_is_named_for_the_tuning_grid_as_a_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = ",".join(str(0.001 * (i + 1)) for i in range(40))
    assert main(["compare", str(write(tmp_path, 'name = "x"\n')), "--tune", f"client.lr={values}", "--tune", f"client.momentum={values}", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: --tune: 1600 points; at most "), err


def test_a_single_runs_dry_run_prints_no_empty_comparison_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``chillfl run CONFIG --dry-run`` of one run ended with empty ``[variants]``, ``[compare]`` and ``[tune]`` tables,
    which one run never reads. They are left out (the output still loads as the same config); a comparison's dry run
    keeps them, and a single run at ``--seed`` of a config that sets ``[compare]`` shows it as set."""
    base = write(tmp_path, "[federation]\nrounds = 1\n")
    assert main(["run", str(base), "--dry-run"]) == 0
    out = capsys.readouterr().out
    shown = tomllib.loads(out)
    assert not {"variants", "compare", "tune"} & set(shown) and "federation" in shown
    assert resolved(load_config(write(tmp_path, out, "shown.toml"))) == resolved(load_config(base))  # the same config
    assert main(["data", "show", str(base), "--dry-run"]) == 0
    assert not {"variants", "compare", "tune"} & set(tomllib.loads(capsys.readouterr().out))
    assert main(["compare", str(base), "--seeds", "0,1", "--dry-run"]) == 0
    assert {"variants", "compare", "tune"} <= set(tomllib.loads(capsys.readouterr().out))
    seeds = write(tmp_path, "[compare]\nseeds = [0, 1]\n", "seeds.toml")
    assert main(["run", str(seeds), "--seed", "3", "--dry-run"]) == 0
    shown = tomllib.loads(capsys.readouterr().out)
    assert shown["compare"] == {"seeds": [0, 1]} and "tune" not in shown


@pytest.mark.parametrize(
    ("text", "argv", "field"),
    [
        ('name = "x"\n', ["temperature=0.5"], "temperature"),
        ("temperature = 0.5\n", [], "temperature"),
        ("[variants.a]\ntemperature = 0.5\n", [], "variants.a.temperature"),
    ],
)
def test_a_bare_temperature_says_how_a_config_sets_one(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, argv: list[str], field: str) -> None:
    """``--grid temperature=1,0.05`` is the README's shorthand for a fixed T, so ``chillfl run CONFIG temperature=0.5`` is
    what a reader tries next; it said only "temperature: expected a table, got 0.5". The line says how a config sets it."""
    assert main(["run", str(write(tmp_path, text)), *argv, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    said = "expected a table, got 0.5: a fixed T is temperature.policy=fixed temperature.value=0.5 (only --grid takes temperature=T1,T2 as its shorthand)"
    assert err == [f"chillfl: error: {field}: {said}"], err
    assert main(["run", str(write(tmp_path, 'name = "x"\n')), "temperature.policy=fixed", "temperature.value=0.5", "--dry-run"]) == 0  # as it says
    assert tomllib.loads(capsys.readouterr().out)["temperature"] == {"policy": "fixed", "value": 0.5}


def test_a_comparison_notes_a_variant_that_switches_method_and_so_its_weighting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--grid algorithm.name=fedavg,fedprox`` on a base with ``weighting = "uniform"`` ran FedProx at "samples" (the
    switch starts its table afresh): a confounded comparison, nothing said. A note names it; a variant that sets the
    option, or a method that takes none (Krum), or one whose own default matches, is not noted."""
    base = write(tmp_path, f'out_dir = "{(tmp_path / "out").as_posix()}"\n[algorithm]\nname = "fedavg"\nweighting = "uniform"\n')
    assert main(["compare", str(base), "--grid", "algorithm.name=fedavg,fedprox,krum,scaffold", "--dry-run"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "switches algorithm.name" in line]
    assert notes == ["chillfl: note: variant 'algorithm.name=fedprox' switches algorithm.name, so it runs fedprox at its own algorithm.weighting = "
                     "'samples', not the base's 'uniform': the comparison differs in it too (set algorithm.weighting in the variant, or grid "
                     "it, to compare at one setting)"]  # SCAFFOLD weights uniformly by default
    assert main(["compare", str(base), "--grid", "algorithm.name=fedavg,fedprox", "--grid", "algorithm.weighting=uniform", "--dry-run"]) == 0
    assert "switches algorithm.name" not in capsys.readouterr().err


def test_a_table_valued_override_merges_key_by_key_as_from_python(tmp_path: Path) -> None:
    """``'federation={rounds=3}'`` on the command line replaced the file's [federation] whole (its num_clients and
    clients_per_round back to their defaults, other numbers, nothing said); from Python the same override merged."""
    from chillfl.config import parse_overrides

    base = write(tmp_path, "[federation]\nnum_clients = 6\nclients_per_round = 3\nrounds = 10\n")
    cli = load_config(base, parse_overrides(["federation={rounds=3}"]))
    api = chillfl.make_config(base, {"federation": {"rounds": 3}})
    assert (cli.federation.num_clients, cli.federation.clients_per_round, cli.federation.rounds) == (6, 3, 3)
    assert cli.federation == api.federation
    switched = load_config(base, parse_overrides(['temperature={policy="fixed",value=0.5}']))
    assert switched.temperature == {"policy": "fixed", "value": 0.5}
