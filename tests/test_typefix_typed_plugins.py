"""Plugins written as docs/extending.md writes them, fully annotated, type-check under mypy's strict flags, and wrong
ones passed to ``chillfl.run`` are type errors (apiref F4).

Before: a term's ``reads = ("a",)`` (a plain class attribute, ``tuple[str]`` to mypy) did not satisfy ``LossTerm``
(a mutable, so invariant, protocol member), a builder typed ``-> tuple[MyRule, list[LossTerm]]`` was refused by
``AlgorithmSpec`` (``Built`` held an invariant ``list[Term]``), and ``chillfl.run(aggregator=..., terms=..., policy=...)``
took ``Any``, while ``AggregatorBase`` declared no ``aggregate`` to check a subclass's against. The mypy test is slow as
tests/test_public_typing.py is (seconds from a warm ``.mypy_cache``, a minute or two cold); the runtime tests are fast.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError
from chillfl.extend import AggregatorBase
from docs_pages import blocks

ROOT = Path(__file__).resolve().parents[1]


def docs_typed_plugin() -> str:
    """docs/extending.md's ``typed_plugin.py`` ("Type-checking your plugin"), as the reader writes it."""
    page = (ROOT / "docs" / "extending.md").read_text()
    return "".join(b.source for b in blocks(page) if b.kind == "file" and b.value == "typed_plugin.py")


def docs_snippets() -> dict[str, str]:
    """Every python block of docs/extending.md a reader copies, by the file it goes into: a ``file`` block's file (blocks
    of one name concatenated, as the page builds ``my_methods.py``) and each ``example`` as ``example_NAME.py``."""
    out: dict[str, str] = {}
    for b in blocks((ROOT / "docs" / "extending.md").read_text()):
        if b.language == "python" and b.kind in ("file", "example"):
            name = b.value if b.kind == "file" else f"example_{b.value}.py"
            assert name is not None
            out[name] = out.get(name, "") + b.source + "\n"
    return out

# --strict's per-module flags, inline: a command-line --strict changes every module's options, so mypy would check all
# of chillfl again (its cache is keyed by them: minutes) where this file is what is under test
STRICT = """# mypy: disallow-untyped-defs, disallow-incomplete-defs, disallow-any-generics, disallow-untyped-calls, disallow-subclassing-any
# mypy: disallow-untyped-decorators, check-untyped-defs, warn-return-any, warn-unused-ignores, no-implicit-reexport, strict-equality, extra-checks
"""

PLUGIN = STRICT + '''from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

import chillfl
from chillfl.extend import (AggregatorBase, AlgorithmSpec, BuildContext, Capabilities, ClientResult, Context, Downlink, FedAvg,
                            LossTerm, Params, StepView, TemperatureHalf, read_number, read_table, require)


class Prox:
    """A parameter term with reads as a plain class attribute (tuple[str] to mypy)."""

    reads = ("global_params",)

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context) -> torch.Tensor:
        anchor = read_table(context, "global_params")
        total = torch.zeros(())
        for k in anchor:
            total = total + ((params[k] - anchor[k]) ** 2).sum()
        return total * read_number(context, "mu")


class Logits:
    """A batch term: per_batch and captures as plain class attributes."""

    per_batch = True
    reads = ()
    captures = ()

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context, step: StepView) -> torch.Tensor:
        return 0.0 * step.logits.square().mean()


class Uniform(FedAvg):
    """A FedAvg subclass overriding aggregate as the tutorial does (weights= kept)."""

    def __init__(self) -> None:
        super().__init__("uniform")

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        return Downlink(context={"mu": 0.01, "global_params": global_params}, local=("global_params",))

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None) -> Params:
        return super().aggregate(global_params, results, round, weights)


class TrimmedMean(AggregatorBase):
    @dataclass(frozen=True)
    class Options:
        beta: float = 0.1

        def validate(self, section: str) -> None:
            require(0 <= self.beta < 0.5, f"{section}.beta", f"must be in [0, 0.5), got {self.beta}")

    def __init__(self, options: Options = Options()) -> None:
        self.options = options
        self.beta = options.beta

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        return Downlink(context={"mu": 0.01, "global_params": global_params}, local=("global_params",))

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        cut = int(self.beta * len(results))
        out = {}
        for key, ref in global_params.items():
            values = torch.stack([r.params[key] for r in results])
            kept = values.sort(dim=0).values[cut : len(results) - cut] if ref.is_floating_point() else values
            out[key] = kept.double().mean(dim=0).to(ref.dtype) if ref.is_floating_point() else values.max(dim=0).values
        return out


def build(options: TrimmedMean.Options, ctx: BuildContext) -> tuple[TrimmedMean, list[LossTerm]]:
    return TrimmedMean(options), [Prox()]


TRIMMED = AlgorithmSpec(TrimmedMean.Options, build, "trimmed mean with a proximal term")


class Fixed:
    capabilities = Capabilities(trains_at=0.5)

    def temperature(self, client_id: int, round: int) -> float:
        return 0.5

    def observe(self, client_id: int, round: int, local_accuracy: float | None) -> None:
        return None

    def client_half(self, num_classes: int) -> TemperatureHalf | None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None


def run(data: chillfl.TensorData, model: torch.nn.Module) -> chillfl.Result:
    return chillfl.run(model=model, data=data, config=CONFIG, aggregator=Uniform(), terms=[Prox(), Logits()], policy=Fixed(), write=False, progress=False)


CONFIG: dict[str, Any] = {"federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 1}, "client": {"lr": 0.1, "batch_size": 8}}
'''

WRONG = """
class NoAggregate(AggregatorBase):
    pass


class ShortAggregate(AggregatorBase):
    def aggregate(self, global_params: Params, results: Sequence[ClientResult]) -> Params:  # E: override
        return dict(global_params)


class NoWeights(FedAvg):  # docs/extending.md's FedAvg subclasses keep weights= for this
    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:  # E: override
        return super().aggregate(global_params, results, round)


NoAggregate()  # E: abstract
chillfl.run(config=CONFIG, aggregator=object(), write=False)  # E: arg-type
chillfl.run(config=CONFIG, terms=[Prox], write=False)  # E: list-item
chillfl.run(config=CONFIG, policy=3, write=False)  # E: arg-type
"""


@pytest.mark.slow
def test_typed_plugins_type_check_and_wrong_ones_are_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = pytest.importorskip("mypy.api")
    user = tmp_path / "typed_plugins.py"
    user.write_text(PLUGIN + WRONG)
    docs = tmp_path / "typed_plugin.py"
    docs.write_text(STRICT + docs_typed_plugin())  # the docs' example: no error
    monkeypatch.chdir(ROOT)  # mypy's config (pyproject.toml) and its cache
    monkeypatch.setenv("MYPYPATH", str(ROOT / "src"))  # this checkout's chillfl, whatever one is installed
    out, err, status = api.run(["--no-error-summary", "--hide-error-context", "--show-error-codes", str(user), str(docs)])
    assert docs.name not in out, out
    lines = user.read_text().splitlines()
    expected = sorted((n, line.split("# E: ")[1]) for n, line in enumerate(lines, 1) if "# E: " in line)
    # the file's own name and line: mypy's cache may replay an error under the path an earlier run had for the module
    found = sorted((int(line.split("/")[-1].split(":")[1]), line.rsplit("[", 1)[1].rstrip("]"))
                   for line in out.splitlines() if ": error:" in line and line.split("/")[-1].startswith(user.name))
    assert status == 1 and not err and found == expected, out


@pytest.mark.slow
def test_every_extending_snippet_type_checks_strictly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each block of docs/extending.md, written to its file as the reader copies it, passes mypy's --strict flags.

    Before: all but section 6's typed_plugin.py left their annotations out, so a researcher who pasted FedDyn,
    TrimmedMean or LinearWarmup into a typed plugin got a screen of no-untyped-def errors (and FedDyn's context reads,
    untyped, hid a Wire read as a table); the examples' calls of those classes were untyped calls."""
    api = pytest.importorskip("mypy.api")
    snippets = docs_snippets()
    assert {"my_methods.py", "typed_plugin.py", "example_python.py", "example_config.py"} <= set(snippets), sorted(snippets)
    for name, source in snippets.items():
        (tmp_path / name).write_text(STRICT + source)
    monkeypatch.chdir(ROOT)  # mypy's config (pyproject.toml) and its cache
    monkeypatch.setenv("MYPYPATH", os.pathsep.join((str(ROOT / "src"), str(tmp_path))))  # this chillfl; the examples import my_methods
    out, err, status = api.run(["--no-error-summary", "--hide-error-context", "--show-error-codes", *sorted(str(tmp_path / n) for n in snippets)])
    assert status == 0 and not err and not out, out


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    (tmp_path / "typefix_typed_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "typefix_typed_plugin", raising=False)
    return importlib.import_module("typefix_typed_plugin")


def _data() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(48, 6, generator=g), torch.arange(48) % 3
    return chillfl.TensorData(x[:36], y[:36], x[36:], y[36:], num_classes=3)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(6, 3)


def test_the_typed_plugins_run(plugin: ModuleType) -> None:
    """The annotated parts are the parts the runtime takes: an instance aggregator, a parameter and a batch term, a policy."""
    result = plugin.run(_data(), _model())
    assert result.records[-1]["temperature_mean"] == 0.5
    by_spec = chillfl.run(model=_model(), data=_data(), config={**plugin.CONFIG, "algorithm": {"name": "typefix_typed_plugin:TRIMMED"}},
                          write=False, progress=False)  # the builder typed -> tuple[TrimmedMean, list[LossTerm]]
    assert len(by_spec.records) == 1


def test_the_docs_typed_plugin_runs_by_import_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "typefix_docs_plugin.py").write_text(docs_typed_plugin())
    monkeypatch.syspath_prepend(str(tmp_path))
    config = {"federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 1}, "client": {"lr": 0.1, "batch_size": 8},
              "algorithm": {"name": "typefix_docs_plugin:TYPED", "mu": 0.1}}
    result = chillfl.run(model=_model(), data=_data(), config=config, write=False, progress=False)
    assert len(result.records) == 1 and result.config.algorithm["mu"] == 0.1


def test_aggregator_base_declares_aggregate_for_the_type_checker_only() -> None:
    """A subclass without ``aggregate`` is still refused in one line when the run is built, not by an error in round 1."""

    class NoAggregate(AggregatorBase):
        pass

    assert not hasattr(AggregatorBase, "aggregate")
    with pytest.raises(ConfigError, match="aggregate") as caught:
        chillfl.run(model=_model(), data=_data(), aggregator=NoAggregate(), write=False, progress=False)  # type: ignore[abstract]
    assert caught.value.field == "aggregator"
