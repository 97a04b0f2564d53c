"""Long commands' progress on a non-terminal stderr: plain counted lines, no ``\\r``-redrawn bar, nothing at ``-q``.

temperature-sweep drew a tqdm bar into a log file; a shard's ETA counted the whole comparison's runs; calibration, cka,
aggregation-*, grad-norms said nothing until every run was computed (and had no -q); scarlet-deficit's arms had no count.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from chillfl.cli import main
from chillfl.config import load_config

SWEEP = ('name = "uxs"\n[dataset]\nname = "digits"\n[partition]\nname = "dirichlet_balanced"\nalpha = 0.5\n[model]\nname = "mlp"\n'
         '[federation]\nnum_clients = 3\n[client]\nepochs = 1\nbatch_size = 64\nlr = 0.05\n[eval]\nclient_split_size = 40\n')
RUN = ["dataset.name=digits", "federation.num_clients=4", "federation.rounds=1", "federation.clients_per_round=2", "model.name=mlp", "eval.client_split_size=20"]


def test_temperature_sweep_writes_plain_lines_to_a_non_terminal_stderr_and_nothing_at_q(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP)
    assert main(["analyze", "temperature-sweep", str(config), "--temperatures", "0.5,1", f"out_dir={tmp_path / 'a'}"]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err  # the bar's redraws piled up into one line
    assert re.search(r"^chillfl: temperature sweep: client 3/3 best T=\S+ \(\d+s\)$", err, re.M), err
    assert main(["analyze", "temperature-sweep", str(config), "--temperatures", "0.5,1", f"out_dir={tmp_path / 'b'}", "-q"]) == 0
    assert capsys.readouterr().err == ""


def test_counted_lines_and_their_eta_from_an_injected_clock() -> None:
    from chillfl.analysis.counting import Counted

    now = [100.0]
    counted = Counted(4, "calibration", on=False, clock=lambda: now[0])
    now[0] = 110.0
    assert counted.finished("run-a") == "chillfl: calibration: [1/4] run-a (10s, ETA 30s)"
    now[0] = 130.0
    assert counted.finished("run-b") == "chillfl: calibration: [2/4] run-b (30s, ETA 30s)"
    now[0] = 200.0
    counted.finished("run-c")
    assert counted.finished("run-d") == "chillfl: calibration: [4/4] run-d (1m40s)"  # no ETA at the end
    arms = Counted(3, "scarlet-deficit", on=False, clock=lambda: now[0])
    assert arms.starting("DS-FL, seed 0") == "chillfl: scarlet-deficit: [1/3] DS-FL, seed 0"  # no ETA before an arm ended
    now[0] = 260.0
    assert arms.starting("SCARLET, seed 0") == "chillfl: scarlet-deficit: [2/3] SCARLET, seed 0 (ETA 2m00s)"  # this arm and the next


def test_a_shards_eta_counts_its_own_runs_only(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """8 runs, shard 1/4 runs 0 and 4: at its second (and last) run one run is left, not 4."""
    import chillfl.sweeps.run as sweep_run
    from chillfl.sweeps.shard import Shard

    clock = [0.0]

    def ran(*args: object, **kwargs: object) -> None:
        clock[0] += 20.0  # each run takes 20 s of the injected clock
        return None

    monkeypatch.setattr(sweep_run, "run_experiment", ran)
    monkeypatch.setattr(sweep_run, "build_data", lambda *a, **k: None)
    monkeypatch.setattr(sweep_run, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    config = load_config(None, {"name": "eta", "dataset.name": "digits"})
    cells = [SimpleNamespace(config=config.with_overrides({"name": f"eta-{i}"}), key=(f"v{i}", 0, 0)) for i in range(8)]
    shard = Shard.parse("1/4")
    with caplog.at_level(logging.INFO, logger="chillfl.sweeps.run"):
        sweep_run.run_points(SimpleNamespace(cells=cells), sweep_run.SweepFolder(None, None), False, False, "off", {}, None, None, only=shard)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("run ")]
    assert lines == ["run 1 of 8: eta-0", "run 5 of 8: eta-4, ETA 20s"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("uxruns")
    config = root / "exp.toml"
    config.write_text(f'name = "tiny"\nout_dir = "{root / "out"}"\n')
    assert main(["run", str(config), "-q", *RUN]) == 0
    return root / "out" / "tiny"


@pytest.mark.parametrize("analysis", ["calibration", "cka", "aggregation-accuracy", "aggregation-entropy", "grad-norms"])
def test_an_analysis_over_runs_says_each_run_as_it_is_done_and_nothing_at_q(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], analysis: str) -> None:
    extra = ["--samples", "64"] if analysis in ("cka", "grad-norms") else []
    assert main(["analyze", analysis, str(run_dir), str(run_dir), *extra, "-o", str(tmp_path / "a")]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if "] " in line]
    assert len(lines) == 2 and lines[0].startswith(f"chillfl: {analysis}: [1/2] ") and lines[1].startswith(f"chillfl: {analysis}: [2/2] ") and "\r" not in captured.err
    assert re.fullmatch(rf"chillfl: {analysis}: \[1/2\] \S+ \(\d+s, ETA \d+s\)", lines[0]), lines
    out = captured.out  # stdout as before: a line per run and the results line
    assert out.count("results: ") == 1
    assert main(["analyze", analysis, str(run_dir), str(run_dir), *extra, "-o", str(tmp_path / "b"), "-q"]) == 0
    assert "[1/2]" not in capsys.readouterr().err
    assert main(["analyze", analysis, str(run_dir), *extra, "-o", str(tmp_path / "c")]) == 0  # one run: the results line says it
    assert "[1/1]" not in capsys.readouterr().err


def test_scarlet_deficit_counts_its_runs_up_front(capsys: pytest.CaptureFixture[str]) -> None:
    tiny = ["federation.num_clients=3", "client.epochs=1", "distillation.public_size=60", "distillation.subset_size=20",
            "distillation.server_epochs=1", "distillation.distill_epochs=1", "eval.client_split_size=20"]
    args = ["analyze", "scarlet-deficit", "--seeds", "0", "--rounds", "1", "--durations", "0", "--betas", "1", "--subset-sizes", "", "--parts", "d", *tiny]
    assert main(args) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("chillfl: scarlet-deficit: ")]
    # DS-FL, SCARLET D=0 and the scaled D=1: three runs, each counted of three
    assert [line.split()[2] for line in lines] == ["[1/3]", "[2/3]", "[3/3]"], lines
    assert lines[0].endswith("seed 0, 1 rounds") and re.search(r"\(ETA \d+s\)$", lines[1])
