"""The public extension API (``chillfl.extend``): a user's parts passed as instances to ``chillfl.run`` /
``chillfl.compare``, their errors, and the terms' declared context keys.

docs/extending.md's own blocks (FedDyn, trimmed mean, warm-up policy, median soft-labels) run in
``tests/test_extending_docs.py``; here: what the API guarantees around them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping

import pytest
import torch

import chillfl
from chillfl.errors import ConfigError
from chillfl.extend import ContextError, Downlink, FedAvg, Stateless

CONFIG: dict[str, Any] = {
    "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]}, "device": "cpu",
    "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 2}, "client": {"lr": 0.05, "batch_size": 32},
}

USER_MODULE = '''
from dataclasses import make_dataclass

import torch
from chillfl.extend import Downlink, FedAvg, Stateless


class Shrink:
    """lam * sum ||w||^2, lam from the downlink."""

    reads = ("shrink",)

    def __call__(self, params, context):
        return context["shrink"] * sum((p ** 2).sum() for p in params.values())


class Counting(FedAvg):
    """FedAvg that counts its rounds (server state) and sends lam."""

    def __init__(self, lam=0.1):
        super().__init__()
        self.lam, self.rounds = lam, 0

    def downlink(self, client_id, round, global_params):
        return Downlink(context={"shrink": self.lam})

    def aggregate(self, global_params, results, round):
        self.rounds += 1
        return super().aggregate(global_params, results, round)

    def state_dict(self):
        return {"rounds": self.rounds}

    def load_state_dict(self, state):
        self.rounds = int(state["rounds"])


class Forgetful(Counting):
    """Sends nothing: its term's key is missing."""

    def downlink(self, client_id, round, global_params):
        return Downlink()


# made, not declared: this module is also exec'd under the test file's `from __future__ import annotations`,
# where a declared dataclass would look its string annotations up in a module that is not imported
ScaleOptions = make_dataclass("ScaleOptions", [("scale", float, 1.0), ("tags", tuple, ("x",))], frozen=True)


class Scaled(FedAvg):
    """FedAvg with an options dataclass, as chillfl's own methods keep theirs: recorded in the saved config."""

    def __init__(self, options=ScaleOptions()):
        super().__init__()
        self.options = options


class DropsKey(FedAvg):
    """Returns the mean without the model's first entry: a model that no longer loads."""

    def aggregate(self, global_params, results, round):
        mean = super().aggregate(global_params, results, round)
        return {k: v for k, v in list(mean.items())[1:]}


class Reshapes(FedAvg):
    """Returns one entry flattened."""

    def aggregate(self, global_params, results, round):
        mean = dict(super().aggregate(global_params, results, round))
        first = next(iter(mean))
        mean[first] = mean[first].flatten()
        return mean


class NoHooks:
    """A personalising half with objectives and train, without prepare and finish."""

    def objectives(self, spec):
        return ()

    def train(self, local):
        return None


class HooklessHalf(FedAvg):
    def client_half(self):
        return NoHooks()


class Vector:
    """Forgot the sum: returns the first parameter's square, not a scalar."""

    reads = ()

    def __call__(self, params, context):
        return next(iter(params.values())) ** 2


class Nothing:
    """Forgot the return."""

    reads = ()

    def __call__(self, params, context):
        (next(iter(params.values())) ** 2).sum()
'''


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    (tmp_path / "ext_user_parts.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    import ext_user_parts

    yield ext_user_parts
    sys.modules.pop("ext_user_parts", None)


def test_instances_run_and_are_never_mutated(user: Any) -> None:
    agg = user.Counting(0.1)
    first = chillfl.run(config=CONFIG, aggregator=agg, terms=[user.Shrink()], write=False, progress=False)
    second = chillfl.run(config=CONFIG, aggregator=agg, terms=[user.Shrink()], write=False, progress=False)
    assert agg.rounds == 0  # the run worked on a copy
    assert [r["global_loss"] for r in first.records] == [r["global_loss"] for r in second.records]  # no state leaked between runs
    plain = chillfl.run(config=CONFIG, aggregator=user.Counting(0.0), terms=[user.Shrink()], write=False, progress=False)
    assert [r["train_loss"] for r in plain.records] != [r["train_loss"] for r in first.records]  # the term acted
    assert first.config.algorithm == {"name": "custom", "class": "ext_user_parts.Counting", "terms": ["ext_user_parts.Shrink"]}


def test_the_term_with_the_builtin_fedavg_equals_fedavg_when_it_adds_nothing(user: Any) -> None:
    """An instance of the built-in FedAvg with no terms is the configured fedavg, bit for bit."""
    ours = chillfl.run(config=CONFIG, aggregator=FedAvg(), write=False, progress=False)
    builtin = chillfl.run(config=CONFIG, write=False, progress=False)
    assert [r["global_loss"] for r in ours.records] == [r["global_loss"] for r in builtin.records]


def test_a_saved_run_with_an_instance_cannot_be_rebuilt_from_its_file(user: Any, tmp_path: Path) -> None:
    result = chillfl.run(config=CONFIG, aggregator=user.Counting(), terms=[user.Shrink()], out_dir=tmp_path / "out", progress=False)
    assert result.folder is not None
    with pytest.raises(ConfigError) as err:
        chillfl.run(config=result.folder / "config.toml", write=False, progress=False)
    assert err.value.field == "algorithm.name" and "aggregator=" in err.value.message


def test_a_run_with_instances_resumes_from_python_bitwise(user: Any, tmp_path: Path) -> None:
    """Such a run checkpoints like any other, but ``chillfl resume`` cannot rebuild it from its file: chillfl.resume can."""
    from torch import nn

    config = {**CONFIG, "federation": {**CONFIG["federation"], "rounds": 3}, "checkpoint": {"every": 1}}

    def net() -> nn.Module:
        torch.manual_seed(7)
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))

    whole = chillfl.run(net(), config=config, aggregator=user.Counting(0.1), terms=[user.Shrink()], out_dir=tmp_path / "whole", progress=False)

    def stop_after_1(record: dict[str, Any], run: Any) -> None:
        if record["round"] == 1:
            run.stop("test")

    cut = chillfl.run(net(), config=config, aggregator=user.Counting(0.1), terms=[user.Shrink()], out_dir=tmp_path / "cut", progress=False,
                      callbacks=[stop_after_1])
    assert cut.folder is not None and len(cut.records) == 1
    with pytest.raises(ConfigError) as err:  # a file cannot rebuild the model, the method: the CLI's resume says where to go
        chillfl.resume(cut.folder, aggregator=user.Counting(0.1), terms=[user.Shrink()], progress=False)
    assert err.value.field == "model.name" and "chillfl.resume(FOLDER, model=...)" in err.value.message
    with pytest.raises(ConfigError) as err:  # another class than the one the run was made with
        chillfl.resume(cut.folder, net(), aggregator=user.Forgetful(0.1), terms=[user.Shrink()], progress=False)
    assert err.value.field == "aggregator" and "ext_user_parts.Counting" in err.value.message
    done = chillfl.resume(cut.folder, net(), aggregator=user.Counting(0.1), terms=[user.Shrink()], progress=False)
    assert done.records == whole.records  # rounds 2 and 3 as the uninterrupted run, bit for bit
    assert all(torch.equal(done.state[k], whole.state[k]) for k in whole.state)  # type: ignore[index]
    assert done.model is not None and done.config.algorithm["class"] == "ext_user_parts.Counting"


def test_an_instances_options_dataclass_is_recorded_and_checked_on_resume(user: Any, tmp_path: Path) -> None:
    """The saved config said only the class: `beta = 0.3` was recorded nowhere, and a resume could not tell."""
    from chillfl.config import load_config

    def stop_after_1(record: dict[str, Any], run: Any) -> None:
        if record["round"] == 1:
            run.stop("test")

    cut = chillfl.run(config=CONFIG, aggregator=user.Scaled(user.ScaleOptions(scale=0.5)), out_dir=tmp_path / "out", progress=False, callbacks=[stop_after_1])
    assert cut.folder is not None
    assert cut.config.algorithm["options"] == {"scale": 0.5, "tags": ["x"]}
    assert load_config(cut.folder / "config.toml").algorithm["options"] == {"scale": 0.5, "tags": ["x"]}
    with pytest.raises(ConfigError) as err:
        chillfl.resume(cut.folder, aggregator=user.Scaled(user.ScaleOptions(scale=0.7)), progress=False)
    assert err.value.field == "aggregator" and "options" in err.value.message and "0.7" in err.value.message
    done = chillfl.resume(cut.folder, aggregator=user.Scaled(user.ScaleOptions(scale=0.5)), progress=False)
    assert len(done.records) == 2


@pytest.mark.parametrize("kwargs,field,words", [
    ({"terms": [object()]}, "terms[0]", "callable term"),
    ({"terms": "abc"}, "terms", "list"),
    ({"aggregator": FedAvg}, "aggregator", "a class, not an instance"),
    ({"aggregator": object()}, "aggregator", "lacks"),
    ({"policy": 0.5}, "policy", "lacks temperature"),
    ({"policy": type("NoHalf", (), {m: (lambda self, *a: None) for m in ("temperature", "observe", "state_dict", "load_state_dict")})()},
     "policy", "lacks client_half"),
])
def test_bad_parts_are_one_config_error(kwargs: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        chillfl.run(config=CONFIG, write=False, progress=False, **kwargs)
    assert err.value.field == field and words in err.value.message


def test_terms_need_their_aggregator_and_a_reads_declaration(user: Any) -> None:
    with pytest.raises(ConfigError, match="terms: .*aggregator="):
        chillfl.run(config=CONFIG, terms=[user.Shrink()], write=False, progress=False)

    class NoReads:
        def __call__(self, params: Any, context: Any) -> torch.Tensor:
            return torch.zeros(())

    with pytest.raises(ConfigError, match=r"terms\[0\]: NoReads must declare reads"):
        chillfl.run(config=CONFIG, aggregator=FedAvg(), terms=[NoReads()], write=False, progress=False)


def test_an_instance_and_a_config_table_for_the_same_part_are_refused(user: Any) -> None:
    with pytest.raises(ConfigError) as err:
        chillfl.run(config={**CONFIG, "algorithm": {"name": "scaffold"}}, aggregator=FedAvg(), write=False, progress=False)
    assert err.value.field == "aggregator" and "scaffold" in err.value.message
    with pytest.raises(ConfigError) as err:
        chillfl.run(config={**CONFIG, "temperature": {"policy": "fixed", "value": 0.5}}, policy=chillfl.extend.ConstantTemperature(0.5), write=False, progress=False)
    assert err.value.field == "policy"


@pytest.mark.parametrize("executor", ["sequential", "vectorized", "processes"])
def test_a_missing_context_key_names_the_term_and_the_key(user: Any, executor: str) -> None:
    """Under ``processes`` a worker finds it and the run raises the same ConfigError (it was a WorkerError: exit 1).
    Under ``ray``: tests/private_net/test_extending_ray.py (a local Ray runs in the private network only)."""
    with pytest.raises(ContextError, match=r"^terms\[0\]: Shrink reads context key\(s\) 'shrink', which client \d+'s context lacks") as err:
        chillfl.run(config={**CONFIG, "executor": executor}, aggregator=user.Forgetful(), terms=[user.Shrink()], write=False, progress=False)
    assert err.value.field == "terms[0]"  # the keyword that passed the term (it was "context", no argument's name)


@pytest.mark.parametrize("executor", ["sequential", "processes"])
def test_a_missing_context_key_is_one_config_error_and_leaves_no_folder(user: Any, tmp_path: Path, executor: str) -> None:
    """Found by a plugin author: a 40-line traceback, exit 1 and an unresumable NAME.partial per attempt (under
    ``processes`` too, where the worker finds it)."""
    code = (
        "import sys, chillfl, ext_user_parts as u\n"
        "from chillfl.cli import main\n"
        f"config = {{**{CONFIG!r}, 'executor': {executor!r}}}\n"
        "try:\n"
        "    chillfl.run(config=config, aggregator=u.Forgetful(), terms=[u.Shrink()], out_dir='out', progress=False)\n"
        "except chillfl.ConfigError as exc:\n"
        "    print(exc.field)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={"PYTHONPATH": f"{Path(__file__).resolve().parents[1] / 'src'}:{tmp_path}"})
    assert out.returncode == 0 and out.stdout.strip() == "terms[0]", out.stderr[-2000:]
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []  # no NAME.partial left behind


@pytest.mark.parametrize("executor", ["sequential", "vectorized", "processes"])
@pytest.mark.parametrize(("term", "words"), [("Vector", "returned a tensor of shape (16, 64)"), ("Nothing", "returned NoneType")])
def test_a_term_that_returns_no_scalar_is_one_config_error_under_every_executor(user: Any, executor: str, term: str, words: str) -> None:
    """It was a traceback from autograd ("grad can be implicitly created only for scalar outputs") in every run of a
    comparison, and under ``vectorized`` a fallback to the sequential executor first, as if vmap were at fault."""
    with pytest.raises(ConfigError) as err:
        chillfl.run(config={**CONFIG, "executor": executor}, aggregator=FedAvg(), terms=[getattr(user, term)()], write=False, progress=False)
    assert err.value.field == "terms[0]" and err.value.message.startswith(f"{term} {words}; a loss term returns a scalar"), err.value


def test_a_config_error_in_a_comparisons_first_run_leaves_no_folder(user: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """``[objective] terms`` naming such a term: exit 2, one line, and no ``NAME-compare.partial`` (it held only the sweep's record)."""
    from chillfl.cli import main

    (tmp_path / "c.toml").write_text(
        'name = "c"\ndevice = "cpu"\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\nhidden = [16]\n'
        '[federation]\nnum_clients = 4\nclients_per_round = 2\nrounds = 1\n[objective]\nterms = ["ext_user_parts:Vector"]\n'
        '[variants.a]\nclient = {lr = 0.05}\n[variants.b]\nclient = {lr = 0.1}\n'
    )
    assert main(["run", str(tmp_path / "c.toml"), "--out", str(tmp_path / "out"), "-q"]) == 2
    err = capfd.readouterr().err
    assert err.splitlines() == ["chillfl: error: objective.terms[0]: Vector returned a tensor of shape (16, 64); a loss term returns a scalar (a 0-d tensor)"], err
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize(("rule", "words"), [("DropsKey", "lacks 'head.weight'"), ("Reshapes", "returned 'head.weight' as (640,) torch.float32, the model's is (10, 64) torch.float32")])
def test_an_aggregate_that_changes_the_models_entries_is_refused(user: Any, tmp_path: Path, rule: str, words: str) -> None:
    """It was accepted silently: the run went on and model.safetensors lacked the layer."""
    config = {**CONFIG, "model": {"name": "mlp", "hidden": []}}  # one Linear(64, 10): entries head.weight, head.bias
    with pytest.raises(ConfigError) as err:
        chillfl.run(config=config, aggregator=getattr(user, rule)(), out_dir=tmp_path / "out", progress=False)
    assert err.value.field == "algorithm.name" and err.value.message.startswith(f"{rule}.aggregate() ")
    assert words in err.value.message
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_a_client_half_without_its_hooks_is_refused_when_the_run_is_built(user: Any) -> None:
    """It failed at the first client with AttributeError: 'NoHooks' object has no attribute 'prepare'."""
    with pytest.raises(ConfigError) as err:
        chillfl.run(config=CONFIG, aggregator=user.HooklessHalf(), write=False, progress=False)
    assert err.value.field == "aggregator" and "client half NoHooks lacks prepare, finish" in err.value.message


def test_every_builtin_term_declares_what_it_reads() -> None:
    """Built-in terms declare ``reads`` too; the keys are those their methods' downlinks or halves provide (their own tests run them)."""
    from chillfl.aggregation.scaffold import LinearCorrectionTerm
    from chillfl.training.fedalign import FedAlignTerm
    from chillfl.training.fedgen import FedGenTerm
    from chillfl.training.moon import MoonTerm
    from chillfl.training.objective import ProximalTerm

    for term in (ProximalTerm(), LinearCorrectionTerm(), FedAlignTerm("layer3"), FedGenTerm("fc"), MoonTerm()):  # instances: some name their keys when built
        assert isinstance(term.reads, tuple) and all(isinstance(k, str) for k in term.reads), term


def test_compare_runs_each_variant_on_its_own_copy(user: Any, tmp_path: Path) -> None:
    agg = user.Counting(0.1)
    comparison = chillfl.compare(config=CONFIG, grid={"client.lr": [0.02, 0.05]}, aggregator=agg, terms=[user.Shrink()], write=False, progress=False)
    assert [r["variant"] for r in comparison.rows] == ["client.lr=0.02", "client.lr=0.05"] and agg.rounds == 0
    with pytest.raises(ConfigError, match="replaces \\[algorithm\\]"):
        chillfl.compare(config=CONFIG, grid={"algorithm.name": ["fedavg", "fedprox"]}, aggregator=agg, write=False, progress=False)


def test_processes_refuses_classes_its_workers_cannot_import(tmp_path: Path) -> None:
    """A class defined in exec'd code (a notebook cell) cannot reach worker processes: one line on ``executor``, nothing written."""
    namespace: dict[str, Any] = {"__name__": "a_notebook_cell"}
    exec(USER_MODULE, namespace)
    with pytest.raises(ConfigError) as err:
        chillfl.run(config={**CONFIG, "executor": "processes"}, aggregator=namespace["Counting"](), terms=[namespace["Shrink"]()],
                    out_dir=tmp_path, progress=False)
    assert err.value.field == "executor" and "put your classes in a module" in err.value.message
    assert not any(tmp_path.iterdir())
    # the same classes run in-process
    assert chillfl.run(config=CONFIG, aggregator=namespace["Counting"](), terms=[namespace["Shrink"]()], write=False, progress=False).records


def test_policy_by_import_path_with_options_validated(user: Any, tmp_path: Path) -> None:
    (tmp_path / "ext_user_policy.py").write_text(
        "from dataclasses import dataclass\n"
        "from chillfl.extend import ConstantTemperature, require\n"
        "class Half(ConstantTemperature):\n"
        "    @dataclass(frozen=True)\n"
        "    class Options:\n"
        "        value: float = 0.5\n"
        "        def validate(self, section):\n"
        "            require(self.value > 0, f'{section}.value', 'must be > 0')\n"
        "    def __init__(self, options):\n"
        "        super().__init__(options.value)\n"
    )
    try:
        result = chillfl.run(config={**CONFIG, "temperature": {"policy": "ext_user_policy:Half", "value": 0.25}}, write=False, progress=False)
        assert {r["temperature_mean"] for r in result.records} == {0.25}
        for table, field in (({"policy": "ext_user_policy:Half", "value": -1.0}, "temperature.value"),
                             ({"policy": "ext_user_policy:Half", "valeu": 1.0}, "temperature"),
                             ({"policy": "ext_user_parts:Counting"}, "temperature.policy")):
            with pytest.raises(ConfigError) as err:
                chillfl.run(config={**CONFIG, "temperature": table}, write=False, progress=False)
            assert err.value.field.startswith(field), err.value
    finally:
        sys.modules.pop("ext_user_policy", None)


def test_import_chillfl_does_not_import_torch_and_extend_does() -> None:
    code = ("import sys, chillfl; assert 'torch' not in sys.modules and 'extend' in dir(chillfl)\n"
            "assert chillfl.extend.FedAvg.__name__ == 'FedAvg' and 'torch' in sys.modules\n"  # loaded on first use
            "from chillfl import extend; assert extend is chillfl.extend")
    src = Path(__file__).resolve().parents[1] / "src"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(src)})
    assert out.returncode == 0, out.stderr


def test_stateless_half_and_downlink_are_the_documented_defaults() -> None:
    start: Mapping[str, torch.Tensor] = {"w": torch.ones(2)}
    params, context = Stateless().prepare({}, dict(start), {"a": 1.0})
    assert params == start and context == {"a": 1.0}
    assert Downlink().context == {} and FedAvg().client_half() is None


def test_every_public_extension_type_says_what_it_is() -> None:
    """The brief of the API: each part is a class or Protocol with a docstring; every exported name exists."""
    import inspect

    import chillfl.extend as extend

    for name in extend.__all__:
        obj = getattr(extend, name)
        if inspect.isclass(obj):
            assert (obj.__doc__ or "").strip(), name
    for proto, methods in ((extend.Aggregator, ("aggregate", "downlink", "client_half", "state_dict")), (extend.ClientHalf, ("prepare", "finish")),
                           (extend.TemperaturePolicy, ("temperature", "observe", "state_dict"))):
        for method in methods:
            assert (getattr(proto, method).__doc__ or "").strip(), f"{proto.__name__}.{method}"


@pytest.mark.parametrize("how", ["-c", "stdin"])
def test_processes_refuses_classes_of_an_interactive_main(how: str) -> None:
    """A class defined in ``python -c``, ``python - < script.py`` (or a notebook's ``__main__``) pickles here, but a
    spawned worker cannot import it: one ConfigError, not a FileNotFoundError for '<stdin>' in every worker."""
    code = (
        "import chillfl\n"
        "from chillfl.extend import FedAvg\n"
        "class Mine:\n"  # a term travels to the workers (an aggregator without a client half does not)
        "    reads = ()\n"
        "    def __call__(self, params, context):\n"
        "        return sum((p ** 2).sum() for p in params.values())\n"
        "config = {'dataset': {'name': 'digits'}, 'model': {'name': 'mlp'}, 'device': 'cpu', 'executor': 'processes'}\n"
        "try:\n"
        "    chillfl.run(config=config, aggregator=FedAvg(), terms=[Mine()], write=False, progress=False)\n"
        "except chillfl.ConfigError as exc:\n"
        "    print(exc)\n"
    )
    src = Path(__file__).resolve().parents[1] / "src"
    args, stdin = ([sys.executable, "-c", code], None) if how == "-c" else ([sys.executable, "-"], code)
    out = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(src)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("executor: 'processes' sends") and "Mine defined in an interactive __main__" in out.stdout


def test_a_processes_run_from_a_script_on_stdin_starts_its_workers() -> None:
    """``python - < script.py``: spawn used to rerun ``__main__.__file__`` = '<stdin>' in every worker, which died on
    FileNotFoundError; the workers now start as for ``python -c``."""
    code = (
        "import chillfl\n"
        "config = {'dataset': {'name': 'digits'}, 'model': {'name': 'mlp', 'hidden': [8]}, 'device': 'cpu', 'executor': 'processes',\n"
        "          'federation': {'num_clients': 4, 'clients_per_round': 2, 'rounds': 1}}\n"
        "result = chillfl.run(config=config, write=False, progress=False)\n"
        "print('rounds', len(result.records))\n"
    )
    src = Path(__file__).resolve().parents[1] / "src"
    out = subprocess.run([sys.executable, "-"], input=code, capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(src)})
    assert out.returncode == 0 and out.stdout.strip() == "rounds 1", out.stderr[-2000:]
