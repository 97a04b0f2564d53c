"""The command line: error paths (one line, exit 2, nothing written) and an end-to-end run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chillfl.cli import main

TINY = [
    "dataset.name=digits",
    "federation.num_clients=4",
    "federation.rounds=2",
    "model.name=mlp",
    "eval.client_split_size=20",
]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["dataset.name=imagenet"], "dataset.name"),
        (["model.name=transformer9000"], "model.name"),
        (["partition.name=sorted"], "partition.name"),
        (["algorithm.name=fedfoo"], "algorithm.name"),
        (["temperature.policy=fixed", "temperature.value=0"], "temperature.value"),
        (["temperature.policy=fixed", "temperature.value=-2"], "temperature.value"),
        (["partition.name=dirichlet", "partition.alpha=0"], "partition.alpha"),
        (["federation.num_clients=100000"], "federation.num_clients"),
        (["federation.client_fraction=1.5"], "federation.client_fraction"),
        (["federation.client_fraction=0"], "federation.client_fraction"),
        (["client.lr=abc"], "client.lr"),
        (["executor=gpu"], "executor"),
    ],
)
def test_user_errors_exit_2_with_one_line(tmp_path, capsys, overrides, field):
    config = _write(tmp_path, f'out_dir = "{tmp_path / "out"}"\n')
    assert main(["run", str(config), "-q", *TINY, *overrides]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"chillfl: error: {field}:")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_unknown_name_lists_the_allowed_values(tmp_path, capsys):
    config = _write(tmp_path, f'out_dir = "{tmp_path / "out"}"\n')
    main(["run", str(config), "-q", *TINY, "dataset.name=imagenet"])
    err = capsys.readouterr().err
    assert "allowed:" in err and "digits" in err and "mnist1d" in err and "synthetic" in err


def test_missing_config_and_malformed_toml(tmp_path, capsys):
    assert main(["run", str(tmp_path / "missing.toml")]) == 2
    assert "file not found" in capsys.readouterr().err
    bad = _write(tmp_path, "[client\nlr = 0.1\n")
    assert main(["run", str(bad)]) == 2
    assert "malformed TOML" in capsys.readouterr().err


def test_an_override_in_the_config_place(tmp_path, capsys, monkeypatch):
    # `chillfl run client.lr=0.1`: the usage says [CONFIG|NAME] [overrides], so the demo with that override (it was
    # "config: file not found"); compare needs a config, and says the argument is an override, not a missing file
    assert main(["run", "client.epochs=3", "federation.rounds=3", "--dry-run", "-q"]) == 0  # not client.lr, which the demo tunes
    resolved = capsys.readouterr().out
    assert "\nepochs = 3\n" in resolved and "\nrounds = 3\n" in resolved and 'name = "demo"' in resolved
    assert main(["compare", "client.lr=0.1", "--dry-run", "-q"]) == 2
    assert capsys.readouterr().err.strip() == "chillfl: error: config: 'client.lr=0.1' is an override (section.option=value): give the config file or bundled experiment first"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a=b.toml").write_text('name = "odd"\n')  # a file of that shape is still a config
    assert main(["run", "a=b.toml", "--dry-run", "-q"]) == 0
    assert 'name = "odd"' in capsys.readouterr().out


def test_error_from_the_installed_command_has_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "chillfl", "run", str(tmp_path / "nope.toml")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_a_closed_stdout_ends_the_command_quietly_as_a_filter_does():
    # `chillfl list experiments | head -1`: the reader is gone (here before the child starts), so the listing's write
    # fails; this was a BrokenPipeError traceback and exit 1, and is now nothing said and 128 + SIGPIPE
    from chillfl.cli import BROKEN_PIPE_EXIT

    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "chillfl", "list", "experiments"], stdout=write, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (BROKEN_PIPE_EXIT, "")


def test_a_broken_pipe_that_is_not_stdout_is_not_hidden(monkeypatch):
    # the quiet exit is for stdout's reader only: another pipe's error (a worker's, say) still surfaces
    import argparse

    from chillfl.cli import _dispatch

    def fails(args):
        raise BrokenPipeError("some other pipe")

    with pytest.raises(BrokenPipeError, match="some other pipe"):
        _dispatch(argparse.Namespace(func=fails, command="run"))


@pytest.mark.parametrize(("command", "says_resume"), [("analyze", False), ("report", False), ("list", False), ("run", True), ("compare", True)])
def test_an_interruption_names_resume_only_where_a_command_leaves_partial_folders(command, says_resume, capsys):
    # Ctrl-C during `chillfl analyze` said "unfinished results are left in *.partial folders (`chillfl resume FOLDER` ...)"
    import argparse

    from chillfl.cli import _dispatch

    def interrupted(args):
        raise KeyboardInterrupt

    assert _dispatch(argparse.Namespace(func=interrupted, command=command)) == 130
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("chillfl: interrupted") and ("chillfl resume" in err) == says_resume, err


def test_run_writes_a_complete_result_folder(tmp_path, capsys):
    config = _write(tmp_path, f'name = "e2e"\nout_dir = "{tmp_path / "out"}"\n[temperature]\npolicy = "fixed"\nvalue = 0.1\n')
    assert main(["run", str(config), "-q", *TINY]) == 0
    folder = tmp_path / "out" / "e2e"
    assert sorted(p.name for p in folder.iterdir()) == ["accuracy_loss.png", "config.toml", "metrics.jsonl", "model.safetensors", "partition.json", "summary.json"]
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [1, 2]
    assert all(r["temperature_mean"] == 0.1 for r in records)
    summary = json.loads((folder / "summary.json").read_text())
    assert 0.0 <= summary["final_global_acc"] <= 1.0 and "best_local_acc" in summary
    # the written config reproduces the run exactly
    assert main(["run", str(folder / "config.toml"), "-q", "out_dir=" + str(tmp_path / "again")]) == 0
    again = (tmp_path / "again" / "e2e" / "metrics.jsonl").read_text()
    assert again == (folder / "metrics.jsonl").read_text()
    # a second run with the same name does not overwrite the first
    assert main(["run", str(config), "-q", *TINY]) == 0
    assert (tmp_path / "out" / "e2e-2" / "summary.json").exists()
    assert "results:" in capsys.readouterr().out


def test_compare_prints_and_saves_the_table(tmp_path, capsys):
    config = _write(tmp_path, f'name = "cmp"\nout_dir = "{tmp_path / "out"}"\n')
    assert main(["compare", str(config), "-q", *TINY, "--grid", "temperature=4,1,0.1"]) == 0
    out = capsys.readouterr().out
    assert "| T=4 |" in out and "| T=0.1 |" in out and "target = best global accuracy of T=4" in out
    folder = tmp_path / "out" / "cmp-compare"
    assert {"table.md", "table.json", "curves.png", "T4", "T1", "T0.1"} <= {p.name for p in folder.iterdir()}
    rows = json.loads((folder / "table.json").read_text())
    assert [r["variant"] for r in rows] == ["T=4", "T=1", "T=0.1"]
    base = next(r for r in rows if r["variant"] == "T=1")
    assert base["baseline"] is True and base["delta_acc"] is None  # its own difference is measured nowhere: null, not 0
    for run in ("T4", "T1", "T0.1"):  # pointed at the finished folder, keeping the line of what the run ran with
        text = (folder / run / "config.toml").read_text()
        assert text.startswith("# ran with: chillfl ") and f'out_dir = "{folder}"' in text, text[:300]


def test_bad_grid_is_a_user_error(tmp_path, capsys):
    config = _write(tmp_path, f'out_dir = "{tmp_path / "out"}"\n')
    assert main(["compare", str(config), "-q", *TINY, "--grid", "temperature=0,1"]) == 2
    assert "temperature" in capsys.readouterr().err


def test_data_show(tmp_path, capsys):
    config = _write(tmp_path, 'name = "parts"\n[partition]\nname = "shards"\nshard_size = 20\nshards_per_client = 2\n')
    png = tmp_path / "heat.png"
    assert main(["data", "show", str(config), "federation.num_clients=5", "-o", str(png)]) == 0
    out = capsys.readouterr().out
    assert "client" in out.lower() and png.stat().st_size > 0


def test_a_bad_variant_fails_before_any_folder_is_made(tmp_path, capsys):
    config = _write(
        tmp_path,
        f'name = "bad"\nout_dir = "{tmp_path / "out"}"\n'
        '[variants.ok]\nalgorithm = { name = "fedavg" }\n'
        '[variants.typo]\nalgorithm = { name = "fedprox", muu = 0.1 }\n',
    )
    assert main(["compare", str(config), "-q", *TINY]) == 2
    assert "algorithm.muu" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_out_dir_that_cannot_hold_results_is_refused_before_anything_runs(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for out_dir in (blocker, blocker / "below"):
        config = _write(tmp_path, f'name = "x"\nout_dir = "{out_dir}"\n')
        assert main(["run", str(config), "-q", *TINY]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("chillfl: error: out_dir: ")
    assert blocker.read_text() == "x"


def test_run_of_a_config_with_variants_runs_the_comparison(tmp_path, capsys):
    config = _write(tmp_path, f'name = "v"\nout_dir = "{tmp_path / "out"}"\n[variants."a"]\nclient = {{ lr = 0.1 }}\n[variants."b"]\nclient = {{ lr = 0.05 }}\n')
    assert main(["run", str(config), *TINY]) == 0
    captured = capsys.readouterr()
    said = [line for line in captured.err.splitlines() if "variants" in line]
    assert len(said) == 1 and "running the comparison" in said[0] and "chillfl compare" in said[0]
    assert said[0].endswith("; one of its runs: --variant LABEL --seed N)"), said  # the way to the one run a user may have meant
    assert "| a |" in captured.out and "| b |" in captured.out
    assert (tmp_path / "out" / "v-compare" / "table.md").is_file()


def test_run_of_a_config_with_seeds_and_no_variants_runs_it_over_the_seeds(tmp_path, capsys):
    """[compare] seeds without [variants]: one method over the seeds (a comparison of one), not one run that drops them."""
    config = _write(tmp_path, f'name = "s"\nout_dir = "{tmp_path / "out"}"\n[compare]\nseeds = [0, 1, 2]\n')
    assert main(["run", str(config), *TINY]) == 0
    captured = capsys.readouterr()
    said = [line for line in captured.err.splitlines() if "comparison of one variant" in line]
    assert len(said) == 1 and "a [compare] table" in said[0] and "chillfl compare" in said[0]
    table = json.loads((tmp_path / "out" / "s-compare" / "table.json").read_text())
    runs = sorted(p.name for p in (tmp_path / "out" / "s-compare").iterdir() if p.is_dir())
    assert runs == ["s-s0", "s-s1", "s-s2"]
    header = next(line for line in captured.out.splitlines() if line.startswith("| variant |"))
    assert "accuracy %" in header and "95 % CI" in header and "diff" not in header and "sign holds" not in header  # nothing to pair with
    assert "| s |" in captured.out and table
    # --seed N asks for one run at N, not the [compare] seeds
    assert main(["run", str(config), "-q", "--seed", "1", "name=one", *TINY]) == 0
    assert (tmp_path / "out" / "one" / "metrics.jsonl").is_file() and not (tmp_path / "out" / "one-compare").exists()
    # a mistake is the config's own field, not a variant's the user never wrote; the info line comes only once all is checked
    assert main(["run", str(config), *TINY, "precision=tf32"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: precision: ")


def test_data_show_into_a_missing_folder_is_one_line(tmp_path, capsys):
    config = _write(tmp_path, 'name = "d"\n')
    blocker = tmp_path / "f"
    blocker.write_text("")
    assert main(["data", "show", str(config), "-o", str(blocker / "sub" / "x.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: output: ")  # the option given, not out_dir (issue 27)


def test_data_show_creates_a_missing_output_folder(tmp_path, capsys):
    config = _write(tmp_path, 'name = "d"\n[federation]\nnum_clients = 4\n')
    out = tmp_path / "new" / "deeper" / "x.png"
    assert main(["data", "show", str(config), "-o", str(out)]) == 0
    assert out.is_file()


def test_flags_override_the_file_and_dry_run_prints_the_resolved_config(tmp_path, capsys):
    from chillfl.config import tomllib  # tomli on Python 3.10

    config = _write(tmp_path, 'name = "flags"\nseed = 1\nout_dir = "elsewhere"\n')
    assert main(["run", str(config), "--seed", "7", "--out", str(tmp_path / "o"), "--device", "cpu", "--dry-run", "client.lr=0.5"]) == 0
    resolved = tomllib.loads(capsys.readouterr().out)
    assert (resolved["seed"], resolved["out_dir"], resolved["device"], resolved["client"]["lr"]) == (7, str(tmp_path / "o"), "cpu", 0.5)
    assert not (tmp_path / "o").exists() and not (tmp_path / "elsewhere").exists()


def test_default_logging_prints_only_our_own_lines(tmp_path, capsys, monkeypatch):
    import logging

    from chillfl import cli

    dispatch = cli._dispatch

    def logged(args):  # while the command runs: main gives the caller's logging back when it returns
        logging.getLogger("matplotlib.font_manager").info("generated new fontManager")  # what a first matplotlib import says
        logging.getLogger("chillfl.executors.parallel").info("our line")
        return dispatch(args)

    monkeypatch.setattr(cli, "_dispatch", logged)
    config = _write(tmp_path, f'name = "quiet"\nout_dir = "{tmp_path / "out"}"\n')
    assert main(["run", str(config), *TINY]) == 0
    err = capsys.readouterr().err
    assert "fontManager" not in err and "chillfl: our line" in err
