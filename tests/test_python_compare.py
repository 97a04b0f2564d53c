"""``chillfl.compare``: the CLI's comparison from Python, on the user's own model and data (issue 25)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import chillfl
from chillfl.cli import main
from digits_net import Net

TINY = {"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "federation": {"num_clients": 4, "rounds": 2}, "eval": {"client_split_size": 20}}



def test_the_same_table_and_folders_as_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "cmp.toml"
    config.write_text('[dataset]\nname = "digits"\n[model]\nname = "mlp"\n[federation]\nnum_clients = 4\nrounds = 2\n[eval]\nclient_split_size = 20\n')
    assert main(["compare", str(config), "-q", "--out", str(tmp_path / "cli"), "--grid", "client.lr=0.05,0.1", "--seeds", "0,1"]) == 0
    cli_table = capsys.readouterr().out.split("\nresults: ")[0]
    py = chillfl.compare(config=config, grid={"client.lr": [0.05, 0.1]}, seeds=[0, 1], out_dir=tmp_path / "py", progress=False)
    assert isinstance(py, chillfl.Comparison) and py.table == cli_table and str(py) == py.table
    assert py.folder is not None and py.folder.name == "cmp-compare"
    cli = tmp_path / "cli" / "cmp-compare"
    assert sorted(p.name for p in py.folder.iterdir()) == sorted(p.name for p in cli.iterdir())
    assert json.loads((py.folder / "table.json").read_text()) == json.loads((cli / "table.json").read_text()) == py.rows
    assert chillfl.compare(config=config, grid=["client.lr=0.05,0.1"], seeds=[0, 1], write=False, progress=False).table == cli_table


def test_own_model_with_seeds_tuning_and_a_report(tmp_path: Path) -> None:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    data = chillfl.TensorData(x[:1400], y[:1400], x[1400:], y[1400:], num_classes=10)
    config = {"federation": {"num_clients": 4, "rounds": 2}, "eval": {"client_split_size": 20, "validation": 0.1}}
    result = chillfl.compare(Net(), data, config, grid={"temperature": [1, 0.25]}, seeds=[0, 1], tune={"client.lr": [0.05, 0.1]},
                             out_dir=tmp_path, progress=False)
    assert [r["variant"] for r in result.rows] == ["T=1", "T=0.25"]
    assert all(r["final_acc"]["n"] == 2 and r["tuned"]["client.lr"] in (0.05, 0.1) for r in result.rows)
    assert "tuned per variant on the validation split" in result.table
    assert result.folder is not None and (result.folder / "T0.25-lr0.1-s1" / "model.safetensors").is_file()
    saved = chillfl.load_config(result.folder / "T1-lr0.05-s0" / "config.toml")
    assert saved.model["name"] == "custom" and saved.model["class"].endswith("Net")
    page = result.report(tmp_path / "report.html")
    assert page.is_file() and "T0.25-lr0.1-s0" in page.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"grid": {"client.lr": 0.1}}, "grid.client.lr"),
        ({"grid": "client.lr=0.1"}, "grid"),
        ({"seeds": [0, 0]}, "seeds"),
        ({"seeds": [0, "1"]}, "seeds"),
        ({"tune": {"client.lr": []}}, "tune"),
        ({"grid": {"algorithm.name": ["fedavg", "fedavgg"]}}, "algorithm.name"),
        ({"grid": ["client.lr"]}, "grid"),  # the command line's checks, named by the Python keyword, not the flag (--grid)
        ({}, "grid"),
        ({"grid": {"client.lr": [0.05, 0.1]}, "select": "last"}, "select"),
        ({"grid": {"client.lr": [0.05, 0.1]}, "reference": "client.lr=1"}, "reference"),
    ],
)
def test_bad_arguments_name_their_field(tmp_path: Path, kwargs: dict, field: str) -> None:
    with pytest.raises(chillfl.ConfigError) as info:
        chillfl.compare(config=TINY, out_dir=tmp_path, progress=False, **kwargs)
    assert info.value.field.startswith(field)
    assert not any(tmp_path.iterdir())


def test_seeds_given_as_a_string_say_so() -> None:
    """'0,1' is a sequence of characters: the message read "got ['0', ',', '1']" (found by the qaapi helper)."""
    with pytest.raises(chillfl.ConfigError) as info:
        chillfl.compare(config=TINY, seeds="0,1", write=False, progress=False)  # type: ignore[arg-type]
    assert str(info.value) == "seeds: expected a list of integer seeds, e.g. [0, 1, 2], got the string '0,1'"


def test_seeds_alone_compare_the_method_with_itself_over_them_and_nothing_at_all_is_refused(tmp_path: Path) -> None:
    """No grid and no [variants]: seeds (or a tuning grid) run the config as a comparison of one; neither is one line."""
    one = chillfl.compare(config={**TINY, "name": "alone"}, seeds=[0, 1], write=False, progress=False)
    assert [r["variant"] for r in one.rows] == ["alone"] and one.rows[0]["final_acc"]["n"] == 2
    single = [chillfl.run(config={**TINY, "name": "alone"}, seed=s, write=False, progress=False).records[-1]["global_acc"] for s in (0, 1)]
    assert one.rows[0]["final_acc"]["per_seed"] == single  # the very runs `run` makes at each seed
    with pytest.raises(chillfl.ConfigError) as info:
        chillfl.compare(config=TINY, out_dir=tmp_path, progress=False)
    assert info.value.field == "grid" and "seeds" in str(info.value)  # the keyword, not the flag --grid
    assert not any(tmp_path.iterdir())


def test_run_of_a_comparisons_config_says_it_makes_one_run(caplog: pytest.LogCaptureFixture) -> None:
    """chillfl.run is one run: a config's [compare] / [tune] / [variants] are named as unused, once; a plain config says nothing."""
    with caplog.at_level("WARNING", logger="chillfl.api"):
        chillfl.run(config={**TINY, "federation": {"num_clients": 4, "rounds": 1}, "tune": {"client.lr": [0.1, 0.2]}}, write=False, progress=False)
        said = [r.getMessage() for r in caplog.records if r.name == "chillfl.api"]
        assert len(said) == 1 and "not used by one run (at seed 0)" in said[0] and "chillfl.compare" in said[0]
        caplog.clear()
        chillfl.run(config={**TINY, "federation": {"num_clients": 4, "rounds": 1}}, write=False, progress=False)
        assert not [r for r in caplog.records if r.name == "chillfl.api"]


def test_shard_runs_its_share_into_the_shared_folder_and_the_last_writes_the_table(tmp_path: Path) -> None:
    """``shard="K/N"`` is the command line's ``--shard K/N``: the same share of the runs, the same folder, the last shard's table."""
    kwargs = {"config": TINY, "grid": {"client.lr": [0.05, 0.1]}, "out_dir": tmp_path / "py", "progress": False}
    first = chillfl.compare(shard="1/2", **kwargs)
    partial = tmp_path / "py" / "run-compare.partial"
    assert first.folder == partial and first.pending == 1 and first.runs == 1 and first.table == ""
    assert sorted(p.name for p in partial.iterdir() if p.is_dir()) == ["lr0.05"]
    last = chillfl.compare(shard="2/2", **kwargs)
    assert last.folder == tmp_path / "py" / "run-compare" and last.pending == 0 and not partial.exists()
    whole = chillfl.compare(**{**kwargs, "out_dir": tmp_path / "one"})
    assert last.table == whole.table and last.rows == whole.rows


@pytest.mark.parametrize(
    ("shard", "extra", "line"),
    [
        ("0/2", {}, "shard: K/N needs 1 <= K <= N, got 0/2"),
        ("1 of 2", {}, "shard: give K/N (this process runs the K-th of N shares, 1 <= K <= N), got '1 of 2'"),
        (2, {}, "shard: give K/N (this process runs the K-th of N shares, 1 <= K <= N), got 2"),
        ("1/2", {"write": False}, "shard: a shard writes its runs into the comparison's shared folder"),
    ],
)
def test_a_bad_shard_is_one_config_error_and_writes_nothing(tmp_path: Path, shard: object, extra: dict, line: str) -> None:
    with pytest.raises(chillfl.ConfigError) as info:
        chillfl.compare(config=TINY, grid={"client.lr": [0.05, 0.1]}, shard=shard, out_dir=tmp_path, progress=False, **extra)  # type: ignore[arg-type]
    assert str(info.value).startswith(line) and "\n" not in str(info.value)
    assert not any(tmp_path.iterdir())


def test_a_resumed_comparison_on_user_data_reruns_a_vanished_ended_run_on_that_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that had ended when the resume began (so no data was built for it) and was deleted since runs again on
    the user's data, never on a dataset rebuilt from its config (whose ``dataset.name`` is ``custom``)."""
    from sklearn.datasets import load_digits

    import chillfl.sweeps.run as sweep_run
    from chillfl.api import _prepare
    from chillfl.sweeps.plan import CompareOptions

    x, y = load_digits(return_X_y=True)
    x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    data = chillfl.TensorData(x[:1400], y[:1400], x[1400:], y[1400:], num_classes=10)
    cfg, dataset = _prepare(None, data, {**TINY, "name": "ud"}, tmp_path, {})
    assert dataset is not None and cfg.dataset["name"] == "custom"
    grid, options = ["client.lr=0.05,0.1"], CompareOptions(seeds=[0])
    whole = sweep_run.run_compare(cfg, grid, progress=False, options=options, dataset=dataset)
    assert whole.folder is not None
    partial = whole.folder.with_name(whole.folder.name + ".partial")  # as if stopped after its runs ended, before its table
    whole.folder.rename(partial)
    (partial / "table.md").unlink()
    gone = sorted(p for p in partial.iterdir() if p.is_dir())[0]
    metrics = (gone / "metrics.jsonl").read_bytes()
    real_check_runs = sweep_run.check_runs

    def check_runs(*args: object, **kwargs: object) -> object:
        out = real_check_runs(*args, **kwargs)  # type: ignore[arg-type]
        shutil.rmtree(gone)  # deleted once the resume has seen it ended
        return out

    monkeypatch.setattr(sweep_run, "check_runs", check_runs)
    resumed = sweep_run.run_compare(cfg, grid, progress=False, options=options, dataset=dataset, resume=partial)
    assert resumed.folder == whole.folder and resumed.table == whole.table
    assert (whole.folder / gone.name / "metrics.jsonl").read_bytes() == metrics  # the same run again: the user's data


def _digits_data() -> chillfl.TensorData:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    return chillfl.TensorData(x[:1400], y[:1400], x[1400:], y[1400:], num_classes=10)


def _stop_a_run(monkeypatch: pytest.MonkeyPatch, run: int, after_round: int) -> None:
    """The comparison's ``run``-th run gets SIGINT after round ``after_round``, as on Ctrl-C: it stops there, checkpointed."""
    import os
    import signal

    import chillfl.sweeps.run as sweep_run

    real_run, calls = sweep_run.run_experiment, [0]

    def on_round(record: dict) -> None:
        if record["round"] == after_round:
            os.kill(os.getpid(), signal.SIGINT)

    def run_experiment(cfg: object, **kw: object) -> object:
        calls[0] += 1
        if calls[0] == run:
            kw["hooks"] = [lambda record, view: on_round(record)]
        return real_run(cfg, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(sweep_run, "run_experiment", run_experiment)


def _run_files(folder: Path) -> dict[str, bytes]:
    return {f"{p.parent.name}/{p.name}": p.read_bytes() for p in sorted(folder.glob("*/metrics.jsonl"))}


def test_an_interrupted_comparison_on_user_data_resumes_through_the_python_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``chillfl.resume_compare(folder, model=, data=)``: the finished run read back, the stopped one resumed from its
    checkpoint on the user's model and data, the rest run; the table and every run's metrics as the uninterrupted one's."""
    config = {**TINY, "federation": {"num_clients": 4, "rounds": 3}, "name": "ud"}
    config.pop("dataset"), config.pop("model")
    kw: dict = {"grid": {"client.lr": [0.05, 0.1]}, "seeds": [0, 1], "progress": False}
    net = Net()  # its weights are every run's initial model: the same ones each time
    whole = chillfl.compare(net, _digits_data(), config, out_dir=tmp_path / "a", **kw)
    _stop_a_run(monkeypatch, run=2, after_round=2)
    with pytest.raises(Exception, match="interrupted by SIGINT"):
        chillfl.compare(net, _digits_data(), config, out_dir=tmp_path / "b", **kw)
    monkeypatch.undo()
    partial = tmp_path / "b" / "ud-compare.partial"
    assert sum(p.name.endswith(".partial") for p in partial.iterdir()) == 1
    resumed = chillfl.resume_compare(partial, net, _digits_data(), progress=False)
    assert resumed.folder == tmp_path / "b" / "ud-compare" and not partial.exists()
    assert resumed.table == whole.table and resumed.rows == whole.rows
    assert whole.folder is not None and _run_files(resumed.folder) == _run_files(whole.folder) != {}


def test_resuming_a_user_data_comparison_without_its_parts_or_with_others_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = {**TINY, "federation": {"num_clients": 4, "rounds": 2}, "name": "ud"}
    config.pop("dataset"), config.pop("model")
    net, data = Net(), _digits_data()
    _stop_a_run(monkeypatch, run=1, after_round=1)
    with pytest.raises(Exception, match="interrupted by SIGINT"):
        chillfl.compare(net, data, config, grid={"client.lr": [0.05, 0.1]}, out_dir=tmp_path, progress=False)
    monkeypatch.undo()
    partial = tmp_path / "ud-compare.partial"
    before = sorted((p.relative_to(partial), p.stat().st_mtime_ns) for p in partial.rglob("*"))
    with pytest.raises(chillfl.ConfigError) as info:
        chillfl.resume_compare(partial, progress=False)
    assert info.value.field == "run_dir" and "chillfl.resume_compare(FOLDER, model=..., data=...)" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(chillfl.ConfigError) as info:
        chillfl.resume(partial, net, data, progress=False)
    assert str(info.value) == f"run_dir: {partial} is an interrupted comparison: chillfl.resume_compare(FOLDER, ...) goes on with it"
    smaller = chillfl.TensorData(data.x_train[:1000], data.y_train[:1000], data.x_test, data.y_test, num_classes=10)
    with pytest.raises(chillfl.ConfigError) as info:
        chillfl.resume_compare(partial, net, smaller, progress=False)
    assert info.value.field == "data" and "is not what the comparison was made with" in str(info.value)  # the folder's kind, not "run"
    with pytest.raises(chillfl.ConfigError) as info:  # the model again but not the data: the function called, not chillfl.resume
        chillfl.resume_compare(partial, net, progress=False)
    assert info.value.field == "dataset.name" and "resume it with chillfl.resume_compare(FOLDER, data=...)" in str(info.value)
    assert "chillfl.resume(" not in str(info.value) and "\n" not in str(info.value)
    assert sorted((p.relative_to(partial), p.stat().st_mtime_ns) for p in partial.rglob("*")) == before


def test_resuming_a_registry_data_comparison_with_user_data_names_the_comparison(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A part passed again to a comparison that did not take one from Python: the line says comparison, not run."""
    _stop_a_run(monkeypatch, run=1, after_round=1)
    with pytest.raises(Exception, match="interrupted by SIGINT"):
        chillfl.compare(config={**TINY, "name": "reg"}, grid={"client.lr": [0.05, 0.1]}, out_dir=tmp_path, progress=False)
    monkeypatch.undo()
    partial = tmp_path / "reg-compare.partial"
    before = sorted((p.relative_to(partial), p.stat().st_mtime_ns) for p in partial.rglob("*"))
    with pytest.raises(chillfl.ConfigError) as info:
        chillfl.resume_compare(partial, data=_digits_data(), progress=False)
    assert str(info.value).startswith("data: the comparison in this folder did not take one from Python: its [dataset] is ")
    assert sorted((p.relative_to(partial), p.stat().st_mtime_ns) for p in partial.rglob("*")) == before


def test_resume_on_a_finished_comparisons_folder_says_it_is_finished(tmp_path: Path) -> None:
    """It said "is an interrupted comparison: chillfl.resume_compare(FOLDER, ...) goes on with it", which then said finished."""
    done = chillfl.compare(config={**TINY, "federation": {"num_clients": 4, "rounds": 1}}, grid={"client.lr": [0.05, 0.1]}, out_dir=tmp_path, progress=False)
    assert done.folder is not None and not done.folder.name.endswith(".partial")
    with pytest.raises(chillfl.ConfigError) as info:
        chillfl.resume(done.folder, progress=False)
    assert str(info.value) == f"run_dir: {done.folder} is a finished comparison (its table is written); nothing to resume"


def test_a_wrapped_signal_while_a_run_on_your_own_model_is_built_stops_the_comparison(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A comparison on your own model builds each run's parts itself (``build_experiment`` in the sweep): a stop signal
    whose exception a package wrapped there was recorded as that run's failure ("failed: RuntimeError; the comparison
    goes on"), and the signal was lost. It stops the comparison, which a resume continues."""
    import chillfl.sweeps.run

    built = chillfl.sweeps.run.build_experiment
    calls = [0]

    def build(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        if calls[0] == 4:  # the second run's parts (the first two: check_runs' dry pass)
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt as stop:
                raise RuntimeError("Error calling __set_name__") from stop
        return built(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(chillfl.sweeps.run, "build_experiment", build)
    with pytest.raises(KeyboardInterrupt):
        chillfl.compare(Net(), None, {**TINY, "model": {}, "dataset": {"name": "digits"}}, grid={"client.lr": [0.05, 0.1]}, out_dir=tmp_path, progress=False)
    (folder,) = tmp_path.iterdir()
    assert folder.name.endswith("-compare.partial") and sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["lr0.05"]
