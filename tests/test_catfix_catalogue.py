"""``chillfl list experiments`` prices the rows a run trains on, names the command that makes each experiment and every
dataset it loads; ``list KIND`` cuts summaries to the terminal only; ``--dry-run``'s count multiplies out."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest

from chillfl.catalogue import SMALL_FLOPS, STEP_S, computed_entry, estimate_cpu_minutes
from chillfl.cli import build_parser, main
from chillfl.config import load_config
from chillfl.data.sources import SOURCES
from chillfl.experiments import bundled_experiments, experiments_root, resolve_config


def _config(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "c.toml"
    path.write_text(text)
    return load_config(path, {})


def test_a_partitioners_frac_prices_only_the_rows_it_keeps(tmp_path: Path) -> None:
    # mlp on digits (1438 train, 359 test), dirichlet_balanced frac = 0.5: 719 rows over 2 clients, one a round, batch 100, 3 rounds.
    config = _config(tmp_path, '[dataset]\nname = "digits"\n[model]\nname = "mlp"\n[partition]\nname = "dirichlet_balanced"\nfrac = 0.5\n'
                               '[federation]\nnum_clients = 2\nclients_per_round = 1\nrounds = 3\n[client]\nbatch_size = 100\n')
    from chillfl.catalogue import _forward_flops

    flops = _forward_flops(config) or 0.0
    per_client = 719 / 2
    expected = (3 * math.ceil(per_client / 100) * STEP_S + (3 * 3 * per_client + 3 * 359) * flops / SMALL_FLOPS) / 60
    assert math.isclose(estimate_cpu_minutes(config) or 0.0, expected, rel_tol=1e-12)


def test_fedchill_table1_at_frac_01_costs_about_a_tenth_of_the_training() -> None:
    from chillfl.catalogue import work

    full = work(load_config(resolve_config("fedchill/table1-cifar10-10"), {"partition.frac": 1.0}))  # its FedAvg run
    tenth = work(load_config(resolve_config("fedchill/table1-cifar10-10"), {}))
    assert full is not None and tenth is not None
    ratio = tenth.cpu_seconds() / full.cpu_seconds()
    assert 0.1 < ratio < 0.2  # the training scales by frac; the test set's evaluation does not
    assert entry_days("fedchill/table1-cifar10-10") < 5  # it listed 20 days: every row priced though 10% train


def entry_days(name: str) -> float:
    minutes = computed_entry(name).cpu_min
    assert minutes is not None
    return minutes / 1440


def test_shards_that_cover_part_of_the_data_price_only_their_rows(tmp_path: Path) -> None:
    from chillfl.catalogue import rows

    shards = _config(tmp_path, '[dataset]\nname = "mnist"\n[model]\nname = "mlp"\n[partition]\nname = "shards"\nshard_size = 200\nshards_per_client = 5\n'
                               '[federation]\nnum_clients = 36\nrounds = 1\n[client]\nbatch_size = 1000\n')
    iid = _config(tmp_path, '[dataset]\nname = "mnist"\n[model]\nname = "mlp"\n[federation]\nnum_clients = 36\nrounds = 1\n[client]\nbatch_size = 1000\n')
    from chillfl.catalogue import work

    a, b = work(shards), work(iid)
    assert a is not None and b is not None
    assert a.client_steps == 36 and b.client_steps == 36 * 2  # 1,000 rows a client (36 x 5 x 200 = 36,000), else 60,000 / 36
    assert rows(shards) == (60000, 10000)


def test_dataset_options_set_its_size(tmp_path: Path) -> None:
    from chillfl.catalogue import rows

    mnist1d = _config(tmp_path, '[dataset]\nname = "mnist1d"\nnum_samples = 4000\n[model]\nname = "mlp"\n')
    assert rows(mnist1d) == (3200, 800)  # MNIST-1D's generator: train_split 0.8 of num_samples
    femnist = load_config(resolve_config("flexchill/table4-femnist-dnn"), {})
    train, test = rows(femnist)
    assert 7000 < train < 7600 and 700 < test < 900  # 36 writers x 805,263 / 3,550 samples (LEAF; docs/datasets.md), 90/10
    assert "805,263" in (Path(__file__).parents[1] / "docs/datasets.md").read_text() and "3,550 writers" in (Path(__file__).parents[1] / "docs/datasets.md").read_text()


def test_an_experiment_another_command_makes_is_listed_and_priced_as_that_command() -> None:
    from chillfl.analysis.temperature_sweep import DEFAULT_TEMPERATURES
    from chillfl.catalogue import commands

    e = computed_entry("fedchill/fig1-digits")
    assert e.kind == "analyze temperature-sweep"  # `chillfl run` on it makes a FedChill run, no heat map
    priced = commands()["fedchill/fig1-digits"].priced_as
    assert priced["federation.rounds"] == len(DEFAULT_TEMPERATURES)  # each client alone at each temperature
    config = load_config(resolve_config("fedchill/fig1-digits"), priced)
    assert config.federation.sample_size() == config.federation.num_clients
    assert e.cpu_min is not None and math.isclose(e.cpu_min, estimate_cpu_minutes(config) or 0.0, rel_tol=1e-12)


def test_every_declared_command_is_a_command_that_takes_the_experiment(capsys: pytest.CaptureFixture[str]) -> None:
    from chillfl.catalogue import commands

    assert commands()
    for name, command in commands().items():
        with pytest.raises(SystemExit) as stop:
            build_parser().parse_args([*command.command.split(), name, "--help"])
        assert stop.value.code == 0, name


def test_the_data_column_names_every_dataset_a_run_loads() -> None:
    assert computed_entry("scarlet/fig7-cifar10-a005").data == "data download cifar10 cifar100"  # CIFAR-100: the public set
    femnist = computed_entry("flexchill/table4-femnist-dnn").data
    assert "data download" not in femnist and "docs/datasets.md" in femnist  # `data download femnist` refuses
    assert computed_entry("scarlet/public-dataset-mnist1d").data == "offline"


def test_each_download_the_listing_names_is_one_the_command_fetches() -> None:
    from chillfl.catalogue import stored_rows

    for name, (_, row) in stored_rows().items():
        for part in row.data.split("; "):
            if part.startswith("data download "):
                assert set(part.split()[2:]) <= set(SOURCES), (name, row.data)


def test_a_configs_data_comment_names_the_datasets_its_row_does() -> None:
    from chillfl.catalogue import stored_rows

    for name in bundled_experiments():
        text = (experiments_root() / f"{name}.toml").read_text()
        said = re.findall(r"^# Data: chillfl data download ([a-z0-9_ ]+?) --data-dir", text, flags=re.M)
        listed = stored_rows()[name][1].data
        if said:
            assert listed == f"data download {said[0]}", (name, said, listed)
        elif listed != "offline" and not listed.startswith("data download"):
            assert "# Data:" in text, name  # a dataset without a download: the config says what to do instead


def test_list_of_a_kind_keeps_each_summary_whole_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    from chillfl.report.reference import summaries

    assert main(["list", "algorithms"]) == 0
    lines = capsys.readouterr().out.splitlines()
    printed = {line.split()[0]: " ".join(line.split()[1:]) for line in lines if line.startswith("  ")}
    assert printed == {name: " ".join(summary.split()) for name, summary in summaries("algorithm")}
    assert max(len(line) for line in lines) > 100  # some summary is longer than the 100 columns it was cut to


def test_list_of_a_kind_cuts_summaries_to_the_terminals_width(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setenv("COLUMNS", "70")
    assert main(["list", "algorithms"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 70 and any(line.endswith(" ...") for line in lines)


def test_reproduce_out_help_says_the_default_is_a_paper_folder() -> None:
    parser = build_parser(analyses=False)
    sub = next(a for a in parser._actions if a.dest == "command")
    out = next(a for a in sub.choices["reproduce"]._actions if a.dest == "out_dir")  # type: ignore[union-attr]
    assert "PAPER" in (out.help or "")


def test_the_dry_run_count_multiplies_out_when_variants_tune_their_own_grids(tmp_path: Path) -> None:
    from chillfl.sweeps.plan import describe_plan, plan_runs

    config = _config(tmp_path, '[dataset]\nname = "digits"\n[model]\nname = "mlp"\n[federation]\nnum_clients = 2\nrounds = 1\n[eval]\nvalidation = 0.2\n'
                               '[compare]\nseeds = [0, 1, 2]\n[tune]\n"client.lr" = [0.1, 0.3]\n'
                               '[variants.a]\n[variants.b]\ntune = { "client.momentum" = [0.0, 0.5, 0.9] }\n')
    head = describe_plan(plan_runs(config, []))[0]
    assert head.startswith("24 runs: 8 (variant, tuning point) pairs of 2 variants x seeds 0, 1, 2"), head  # (2 + 2 x 3) x 3
    assert "own grids" in head
    plain = _config(tmp_path, '[dataset]\nname = "digits"\n[model]\nname = "mlp"\n[federation]\nnum_clients = 2\nrounds = 1\n[eval]\nvalidation = 0.2\n'
                              '[compare]\nseeds = [0, 1]\n[tune]\n"client.lr" = [0.1, 0.3]\n[variants.a]\n[variants.b]\n')
    assert describe_plan(plan_runs(plain, []))[0] == "8 runs: 2 variants x seeds 0, 1 x tuning client.lr = 0.1, 0.3"


def test_running_an_experiment_another_command_makes_says_which(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``chillfl run fedchill/fig1-digits`` trained a plain FedChill run and drew no Fig. 1, without a word: a note names
    the command that makes it; a file of the user's own that shares the name says nothing."""
    from chillfl import cli

    ran: list[str] = []
    monkeypatch.setattr("chillfl.runner.run_experiment", lambda config, progress: ran.append(config.name) or 0)
    monkeypatch.setattr(cli, "_report", lambda out: 0)
    assert main(["run", "fedchill/fig1-digits", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert ran and "note: fedchill/fig1-digits's figure is made by `chillfl analyze temperature-sweep fedchill/fig1-digits`" in err
    assert main(["run", "fedchill/table2-digits", "variants={}", "compare={}", "--out", str(tmp_path)]) == 0
    assert "figure is made by" not in capsys.readouterr().err
    assert cli._made_by_another_command("fedchill/fig1-digits.toml") is not None
    assert main(["run", "fedchill/fig1-digits", "--dry-run"]) == 0  # the dry run says it too
    assert "figure is made by `chillfl analyze temperature-sweep" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fedchill").mkdir()
    (tmp_path / "fedchill" / "fig1-digits.toml").write_text('name = "mine"\n')
    assert cli._made_by_another_command("fedchill/fig1-digits.toml") is None
