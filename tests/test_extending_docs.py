"""Every code block of docs/extending.md runs as written, under the sequential, vectorized and process-pool executors.

The page's ``<!-- file: NAME -->`` blocks are written to a scratch folder (``my_methods.py`` is the
concatenation of its blocks, in order) that is put on ``sys.path``, as the page tells a user to do; the
``<!-- example: NAME -->`` blocks are run there; the ``text`` blocks (an error line, ``chillfl list``) are
checked against what the commands print. Only the ``executor`` of each block is changed, by test.

A user aggregator with a client half and state (the page's FedDyn, by import path, with the page's
temperature policy) is stopped and resumed under every executor: bitwise the uninterrupted run.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from chillfl.config import tomllib  # tomli on Python 3.10
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

from chillfl import runner
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.storage.checkpoint import read_state
from chillfl.runner import CHECKPOINT, MODEL, resume_experiment, run_experiment
from test_nbfix_head_notes import head_notes

pytestmark = pytest.mark.slow  # the extending page's examples under every executor; `pytest -m "not slow"` leaves it out

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
SRC = Path(__file__).resolve().parents[1] / "src"
EXECUTORS = ("sequential", "vectorized", "processes")
FENCE = re.compile(r"(?:<!-- (file|example|prints): ([\w.-]+) -->\n)?```(\w+)\n(.*?)^```", flags=re.S | re.M)


def blocks() -> list[tuple[str | None, str | None, str, str]]:
    """Every fenced block: (marker kind, marker name, language, source)."""
    return [(m.group(1), m.group(2), m.group(3), m.group(4)) for m in FENCE.finditer(DOC.read_text(encoding="utf-8"))]


def files() -> dict[str, str]:
    out: dict[str, str] = {}
    for kind, name, _, source in blocks():
        if kind == "file":
            assert name is not None
            out[name] = out.get(name, "") + source + "\n"
    return out


def example(name: str) -> str:
    found = [source for kind, n, _, source in blocks() if kind == "example" and n == name]
    assert len(found) == 1, f"no example {name!r} in {DOC}"
    return found[0]


def output(name: str) -> str:
    """The page's ``<!-- prints: NAME -->`` block: what example NAME prints (a real run's output, pasted)."""
    found = [source for kind, n, _, source in blocks() if kind == "prints" and n == name]
    assert len(found) == 1, f"no output {name!r} in {DOC}"
    return found[0]


def texts() -> list[str]:
    return [source for kind, _, lang, source in blocks() if kind is None and lang == "text"]


def with_executor(source: str, executor: str) -> str:
    """The block with its one ``"executor": "sequential"`` changed."""
    assert source.count('"executor": "sequential"') == 1
    return source.replace('"executor": "sequential"', f'"executor": "{executor}"')


def test_every_block_is_run_by_a_test() -> None:
    kinds = [(k, n, lang) for k, n, lang, _ in blocks()]
    assert all(k is not None or lang == "text" for k, _, lang in kinds), "an unmarked code block: mark it and run it here"
    # typed_plugin.py: run and type-checked by tests/test_typefix_typed_plugins.py
    assert {n for k, n, _ in kinds if k == "file"} == {"my_methods.py", "my_feddyn.toml", "my_prototypes.toml", "pyproject.toml", "typed_plugin.py"}
    assert {n for k, n, _ in kinds if k == "example"} == {"python", "cli", "config", "softlabels", "prototypes", "head"}
    assert {n for k, n, _ in kinds if k == "prints"} == {"prototypes"}
    assert len(texts()) == 2  # the error line and `chillfl list`, each checked below


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The page's files in a scratch folder, which is the working directory and on sys.path (as ``PYTHONPATH=.``)."""
    for name, text in files().items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(runner, "_plots", lambda *args: None)  # figures are not results
    sys.modules.pop("my_methods", None)
    yield tmp_path
    sys.modules.pop("my_methods", None)


def _run(source: str, label: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "extending_docs"}
    exec(compile(source, f"{DOC}:{label}", "exec"), namespace)
    return namespace


_SEQUENTIAL: dict[str, list[dict[str, Any]]] = {}
_PRINTED: dict[str, list[str]] = {}


def _reference(name: str, records: list[dict[str, Any]], executor: str) -> None:
    """Processes equals sequential bit for bit; vectorized within float tolerance (docs/reproducibility.md)."""
    if executor == "sequential":
        _SEQUENTIAL[name] = records
        return
    ref = _SEQUENTIAL.get(name)
    if ref is None:
        return  # run alone: nothing to compare with
    assert len(ref) == len(records)
    for a, b in zip(ref, records):
        if executor == "processes":
            assert a["global_loss"] == b["global_loss"] and a["train_loss"] == b["train_loss"]
        else:
            assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4)
            assert b["global_loss"] == pytest.approx(a["global_loss"], rel=1e-4)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_python_example_runs_feddyn_and_the_policy_by_instance(workdir: Path, executor: str, capsys: pytest.CaptureFixture[str]) -> None:
    ns = _run(with_executor(example("python"), executor), "python")
    result = ns["feddyn"]
    assert len(result.records) == 3 and 0.0 <= result.summary["final_global_acc"] <= 1.0
    assert [r["temperature_mean"] for r in result.records] == [1.0, 0.75, 0.5]  # the warm-up, round by round
    assert result.config.algorithm == {"name": "custom", "class": "my_methods.FedDyn", "terms": ["my_methods.FedDynTerm"]}
    assert ns["feddyn"].folder is None and "FedDyn: accuracy" in capsys.readouterr().out
    _reference("python", result.records, executor)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_head_example_runs_moon_on_the_declared_head(workdir: Path, executor: str, capsys: pytest.CaptureFixture[str]) -> None:
    from chillfl.models.parts import forward_with_features, head_name

    with head_notes() as notes:
        ns = _run(with_executor(example("head"), executor), "head")
    assert notes == []  # declared: no guess, no note
    result, model = ns["moon"], ns["model"]
    assert len(result.records) == 3 and 0.0 <= result.summary["final_global_acc"] <= 1.0
    assert head_name(model) == "classifier" and "MOON on a cosine classifier: accuracy" in capsys.readouterr().out
    x = torch.zeros(2, 1, 8, 8)
    assert forward_with_features(model, x)[0].shape == (2, 32)  # the body's output, not the raw image (64)
    _reference("head", result.records, executor)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_config_example_runs_the_trimmed_mean_and_the_soft_label_method(workdir: Path, executor: str, capsys: pytest.CaptureFixture[str]) -> None:
    _run(with_executor(example("config"), executor), "config")
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].startswith("my_methods:TrimmedMean None") and out[1].startswith("fedavg my_methods:MEDIAN")
    if executor == "sequential":
        _PRINTED["config"] = out
    elif executor == "processes" and "config" in _PRINTED:
        assert out == _PRINTED["config"]  # the same accuracies, round by round


@pytest.mark.parametrize("executor", EXECUTORS)
def test_cli_example_runs_feddyn_by_import_path(workdir: Path, executor: str) -> None:
    line = example("cli").strip()
    assert line.startswith("PYTHONPATH=. chillfl ")
    assert main([*shlex.split(line.removeprefix("PYTHONPATH=. chillfl ")), f"executor={executor}"]) == 0
    folder = workdir / "results" / "feddyn-warmup"
    records = (folder / "metrics.jsonl").read_text().splitlines()
    assert len(records) == 3 and (folder / MODEL).is_file()
    saved = load_config(folder / "config.toml")
    assert saved.algorithm == {"name": "my_methods:FEDDYN", "alpha": 0.01} and saved.executor == executor


def test_bad_option_is_the_documented_line(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    command, expected = texts()[0].strip().splitlines()
    assert command.startswith("$ PYTHONPATH=. chillfl ")
    code = main(shlex.split(command.removeprefix("$ PYTHONPATH=. chillfl ")))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [expected]
    assert not (workdir / "results").exists()  # nothing written


def test_plugin_appears_in_chillfl_list_under_its_part(tmp_path: Path) -> None:
    """The page's pyproject entry points as an installed distribution's ``.dist-info`` (nothing downloaded or installed)."""
    project = tomllib.loads(files()["pyproject.toml"])["project"]
    points = project["entry-points"]["chillfl.plugins"]
    (tmp_path / "my_methods.py").write_text(files()["my_methods.py"], encoding="utf-8")
    info = tmp_path / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    (info / "entry_points.txt").write_text("[chillfl.plugins]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(SRC)])}
    script = (
        "from chillfl.cli import main; from chillfl.config import load_config\n"  # the names work as a config's names too
        "base = {'dataset.name': 'digits', 'model.name': 'mlp'}\n"
        "load_config(None, {**base, 'algorithm': {'name': 'my_feddyn', 'alpha': 0.1}, 'temperature': {'policy': 'linear_warmup', 'end': 0.5}})\n"
        "load_config(None, {**base, 'distillation': {'method': 'median_soft_labels', 'sharpen': 2.0, 'public_size': 200, 'subset_size': 100}})\n"
        "load_config(None, {**base, 'prototypes': {'method': 'confident_prototypes', 'lam': 0.5}})\n"
        "raise SystemExit(main(['list']))"
    )
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    listed = {}
    for line in re.sub(r"\n\s+", " ", out.stdout).splitlines():
        title, _, names = line.partition(": ")
        listed[title] = names.split(", ")
    documented = [line for line in texts()[1].splitlines() if ": " in line]
    assert len(documented) == 7  # and the loss terms, attacks and privacy mechanisms lines
    for line in documented:
        title, _, names = line.partition(": ")
        assert {n for n in names.split(", ") if n != "..."} <= set(listed[title]), title
    assert "my_feddyn" in listed["algorithms"] and "linear_warmup" not in listed["algorithms"]
    assert "confident_prototypes" in listed["prototype methods"] and "confident_prototypes" not in listed["distillation methods"]
    # the plugin's names are not known here, where the distribution is not on the path: nothing was registered
    from chillfl.aggregation.registry import algorithm_names

    assert "my_feddyn" not in algorithm_names()


class _Crash(Exception):
    """Stands for a kill -9 after a round's metrics line, before its checkpoint."""


class _CrashIn:
    def __init__(self, round: int) -> None:
        self.round = round

    def on_round(self, record: dict[str, Any]) -> None:
        if record["round"] == self.round:
            raise _Crash

    def on_end(self, output: object) -> None:
        pass


@pytest.mark.parametrize("executor", EXECUTORS)
def test_feddyn_by_import_path_resumes_bitwise(workdir: Path, executor: str) -> None:
    """FedDyn's h (server) and every client's gradient memory (client state) survive a checkpoint exactly."""

    def config(name: str, every: int) -> Any:
        return load_config(workdir / "my_feddyn.toml", {"name": name, "out_dir": str(workdir), "executor": executor,
                                                         "checkpoint.every": every, "seed": 3})

    reference = run_experiment(config("ref", 0), progress=False).folder
    with pytest.raises(_Crash):
        run_experiment(config("cut", 1), progress=False, callbacks=[_CrashIn(2)])
    partial = workdir / "cut.partial"
    state = read_state(partial / CHECKPOINT)
    assert state["round"] == 1
    protocol = state["protocol"]
    assert set(protocol["aggregator"]) == {"h"} and protocol["aggregator"]["h"]  # the server's h
    memories = [c for c in protocol["clients"].values() if any(k.startswith("feddyn.grad.") for k in c)]
    assert len(memories) == 3  # the round's 3 clients keep their gradient memories
    resumed = resume_experiment(partial, progress=False).folder
    assert reference is not None and resumed is not None
    assert (resumed / "metrics.jsonl").read_bytes() == (reference / "metrics.jsonl").read_bytes()
    assert (resumed / MODEL).read_bytes() == (reference / MODEL).read_bytes()


def test_the_pages_feddyn_on_hand_worked_values(workdir: Path) -> None:
    """Algorithm 1 on one coordinate: m = 4 clients, alpha = 0.5, theta^{t-1} = 1, two clients return 3 and 5.

    Server: h^t = 0 - alpha/m * ((3 - 1) + (5 - 1)) = -0.75; theta^t = (3 + 5)/2 - h^t/alpha = 4 + 1.5 = 5.5.
    Client (theta_k = 3): grad L_k(theta_k^t) = 0 - alpha * (3 - 1) = -1.
    Term at theta = 2 with grad -1, anchor 1: alpha/2 * (2 - 1)^2 - (2 * -1) = 0.25 + 2 = 2.25; its gradient
    alpha * (theta - anchor) - grad = 0.5 + 1 = 1.5.
    """
    import torch

    import my_methods
    from chillfl.extend import ClientResult, Trained

    feddyn = my_methods.FedDyn(my_methods.FedDynOptions(alpha=0.5), num_clients=4, keys=["w"])
    theta = {"w": torch.tensor([1.0])}
    results = [ClientResult(cid, {"w": torch.tensor([v])}, 10, 5, 0.1, 1.0, 0.0) for cid, v in ((0, 3.0), (1, 5.0))]
    assert feddyn.aggregate(theta, results, 0)["w"].item() == 5.5 and feddyn.h["w"].item() == -0.75
    assert feddyn.state_dict()["h"]["w"].item() == -0.75

    half = feddyn.client_half()
    start, context = half.prepare({}, theta, feddyn.downlink(0, 0, theta).context)
    assert context["feddyn_grad"]["w"].item() == 0.0  # zero before the client's first round
    trained = Trained(0, torch.zeros(1), torch.zeros(1), start, context, context, 0.1, 1.0, {"w": torch.tensor([3.0])}, 5)
    state, report = half.finish(torch.nn.Linear(1, 1), {}, trained)
    assert state == {"feddyn.grad.w": torch.tensor([-1.0])} and report == {}
    assert half.prepare(state, theta, context)[1]["feddyn_grad"]["w"].item() == -1.0  # read back next time

    w = torch.tensor([2.0], requires_grad=True)
    value = my_methods.FedDynTerm()({"w": w}, {"feddyn_grad": {"w": torch.tensor([-1.0])}, "feddyn_alpha": 0.5, "global_params": theta})
    value.backward()
    assert value.item() == 2.25 and w.grad is not None and w.grad.item() == 1.5


def test_the_pages_trimmed_mean_and_warmup_on_hand_worked_values(workdir: Path) -> None:
    """beta = 0.2 of 5 clients cuts 1 at each end: values 1, 2, 3, 4, 100 -> mean(2, 3, 4) = 3.
    Warm-up 1 -> 0.25 over 3 rounds: T = 1, 0.75, 0.5, 0.25, then 0.25."""
    import torch

    import my_methods
    from chillfl.extend import ClientResult

    rule = my_methods.TrimmedMean(my_methods.TrimmedMean.Options(beta=0.2))
    results = [ClientResult(i, {"w": torch.tensor([v])}, 1, 1, 0.1, 1.0, 0.0) for i, v in enumerate((4.0, 100.0, 1.0, 3.0, 2.0))]
    assert rule.aggregate({"w": torch.tensor([0.0])}, results, 0)["w"].item() == 3.0
    policy = my_methods.LinearWarmup(my_methods.LinearWarmup.Options(start=1.0, end=0.25, rounds=3))
    assert [policy.temperature(0, r) for r in range(5)] == [1.0, 0.75, 0.5, 0.25, 0.25]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_softlabels_example_keeps_a_typed_client_state_through_the_disk_store(workdir: Path, executor: str, capsys: pytest.CaptureFixture[str]) -> None:
    ns = _run(with_executor(example("softlabels"), executor), "softlabels")  # the block asserts memory == disk itself
    accuracy = ns["accuracy"]
    assert len(accuracy["disk"]) == 3 and accuracy["memory"] == accuracy["disk"]
    assert capsys.readouterr().out.startswith("smoothed uploads: ")
    if executor == "sequential":
        _PRINTED["softlabels"] = accuracy["disk"]
    elif executor == "processes" and "softlabels" in _PRINTED:
        assert accuracy["disk"] == _PRINTED["softlabels"]  # the state travels with each task and comes back, bit for bit


def test_the_pages_soft_label_methods_on_hand_worked_values(workdir: Path) -> None:
    """Median of 0.2, 0.4, 0.9 (class 0) = 0.4, class 1: 0.6 -> [0.4, 0.6]. The smoothed client, decay 0.5:
    first upload p = [0.8, 0.2] as is; then p = [0.2, 0.8] -> 0.5 * [0.8, 0.2] + 0.5 * [0.2, 0.8] = [0.5, 0.5];
    a sample requested for the first time is uploaded as predicted; the state survives to_tensors/restore."""
    import torch

    import my_methods
    from chillfl.extend import SoftLabelUplink

    idx = torch.tensor([0])
    ups = [SoftLabelUplink(k, 1, idx, torch.tensor([[p, 1 - p]])) for k, p in enumerate((0.2, 0.9, 0.4))]
    median = my_methods.MEDIAN.build(my_methods.MedianOptions(), 2, 0, "int32", 10)
    assert median.aggregate(1, idx, ups).rows.tolist() == [[pytest.approx(0.4), pytest.approx(0.6)]]

    client = my_methods.SMOOTHED.client_half(my_methods.SmoothedOptions(decay=0.5), 2, 0)
    state = client.new_state(0, torch.zeros(5, 3), torch.zeros(4, 3))
    first = client.upload(0, 1, torch.tensor([1]), torch.tensor([[0.8, 0.2]]), state)
    assert first.soft_labels.tolist() == [[pytest.approx(0.8), pytest.approx(0.2)]]
    back = client.restore(state.to_tensors())
    second = client.upload(0, 2, torch.tensor([1, 3]), torch.tensor([[0.2, 0.8], [0.3, 0.7]]), back)
    assert second.soft_labels.tolist() == [[pytest.approx(0.5), pytest.approx(0.5)], [pytest.approx(0.3), pytest.approx(0.7)]]
    assert back.seen.tolist() == [False, True, False, True]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_prototypes_example_prints_the_documented_output(workdir: Path, executor: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The plugin runs from a dict and from the page's TOML file by import path, the same records (the block asserts it);
    its printed accuracies are the page's output within one evaluation sample (abs 0.02), under every executor.

    The page's numbers were made on one CPU; another (AVX2 or AVX-512, with or without bf16) or the vectorised
    executor's batched kernels round differently and may flip one prediction, so no executor is held to the page's
    digits. That the dict and the TOML file give the same records, on this machine, the block asserts itself."""
    ns = _run(with_executor(example("prototypes"), executor), "prototypes")
    printed, documented = capsys.readouterr().out.splitlines(), output("prototypes").splitlines()
    assert len(ns["runs"]) == 2 and len(printed) == len(documented) == 2
    for got, want in zip(printed, documented):
        head, _, values = got.partition("[")
        assert head == want.partition("[")[0]
        assert [float(v) for v in values.rstrip("]").split(",")] == pytest.approx([float(v) for v in want.partition("[")[2].rstrip("]").split(",")], abs=0.02)
    confident = ns["runs"]["my_methods:CONFIDENT"]
    assert confident.config.prototypes == {"method": "my_methods:CONFIDENT", "lam": 0.5}


def test_the_pages_confident_prototypes_on_hand_worked_values(workdir: Path) -> None:
    """Two clients, one class, d = 1. A: 2 samples, mean 1, logits giving the true class p = 0.5 each; B: 1 sample,
    mean 4, p = 1 (a huge logit). Count weights: (2 * 1 + 1 * 4) / 3 = 2; count x confidence: (1 * 1 + 1 * 4) / 2 = 2.5."""
    import torch

    import my_methods
    from chillfl.extend import Head, PrototypeLoss

    hooks = my_methods.CONFIDENT.build(my_methods.ConfidentOptions(lam=0.5), num_classes=2, seed=0)
    a = hooks.release(0, 0, torch.tensor([[0.0], [2.0]]), torch.zeros(2, 2), torch.tensor([0, 0]))
    b = hooks.release(1, 0, torch.tensor([[4.0]]), torch.tensor([[100.0, 0.0]]), torch.tensor([0]))
    assert a.extra["confidence"].tolist() == [[0.5], [0.0]] and b.extra["confidence"].tolist() == [[1.0], [0.0]]
    assert a.width() == 2  # the mean's one float and the confidence: what the uplink's bytes count
    knowledge = hooks.combine([a, b])
    assert knowledge.protos.tolist() == [[2.5], [0.0]] and knowledge.mask.tolist() == [True, False] and knowledge.extra == {}
    assert hooks.loss(Head("fc.weight", "fc.bias")) == PrototypeLoss(0.5)
