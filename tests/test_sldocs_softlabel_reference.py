"""docs/extending.md section 4 has a reference of the soft-label types, like section 5's for prototypes, and its
FedMD-style example (public-set pretraining, a sharpened consensus) runs.

Why: section 4 had two examples and no reference, so ``SoftLabelSpec``'s fields past ``summary`` (``pretraining``,
``default_cache_duration``, ...) and what ``Aggregate``'s arguments are could be found only in the source, and
architecture.md gave the spec's fields in an order in which a fifth positional argument landed in the wrong one. The
checks read the dataclasses and classes themselves, so a field or hook added later fails here until the page names it.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from chillfl.capabilities import Capabilities
from chillfl.config import load_config
from chillfl.extend import (Aggregate, Pretraining, SoftLabelClientHalf, SoftLabelMethod, SoftLabelSpec, SoftLabelUplink,
                            stack_uplinks)
from chillfl.runner import run_experiment

DOCS = Path(__file__).resolve().parents[1] / "docs"


def section_4() -> str:
    text = (DOCS / "extending.md").read_text(encoding="utf-8")
    start = text.index("## 4. A soft-label method")
    return text[start : text.index("\n## 5. ", start)]


def bullet(name: str) -> str:
    """Section 4's reference bullet that starts with ``* `name(``, up to the next bullet or the section's end."""
    m = re.search(rf"^\* `{name}\(.*?(?=^\* |\Z)", section_4(), flags=re.S | re.M)
    assert m is not None, f"docs/extending.md section 4 has no reference bullet for {name}"
    return " ".join(m.group(0).split())  # the page wraps lines, in code spans too


def signature(name: str) -> str:
    """The bullet's ``name(...)`` signature, up to the backtick that closes it."""
    text = bullet(name)
    return text[: text.index("`", 3)]


def documented_default(value: Any) -> str:
    if isinstance(value, type):
        return value.__name__
    if value == "":
        return '""'
    if isinstance(value, Capabilities):
        return "Capabilities()" if value == Capabilities() else repr(value)
    return repr(value)


def fields_in_order(cls: type, sig: str) -> dict[str, str]:
    """Each field of ``cls`` as ``field: ...`` in ``sig``, in the dataclass's order; its text up to the next one."""
    spans, at = {}, 0
    names = [f.name for f in dataclasses.fields(cls)]
    starts = []
    for name in names:
        m = re.compile(rf"\b{name}: ").search(sig, at)
        assert m is not None, f"{cls.__name__}'s reference leaves out {name!r} (or names it out of the dataclass's order): {sig}"
        starts.append(m.start())
        at = m.end()
    for name, begin, end in zip(names, starts, [*starts[1:], len(sig)]):
        spans[name] = sig[begin:end]
    return spans


@pytest.mark.parametrize("cls", [SoftLabelSpec, Aggregate, SoftLabelUplink, Pretraining], ids=lambda c: c.__name__)
def test_the_reference_names_every_field_in_order_with_its_default(cls: type) -> None:
    spans = fields_in_order(cls, signature(cls.__name__))
    for f in dataclasses.fields(cls):
        span = spans[f.name]
        if f.default_factory is not dataclasses.MISSING:
            assert f"= {documented_default(f.default_factory())}" in span, f"{cls.__name__}.{f.name}: {span!r}"
        elif f.default is dataclasses.MISSING:
            assert "=" not in span, f"{cls.__name__}.{f.name} has no default, the page gives one: {span!r}"
        elif isinstance(f.default, type) or not callable(f.default):
            assert f"= {documented_default(f.default)}" in span, f"{cls.__name__}.{f.name}: default {f.default!r} not in {span!r}"
        else:  # a function: the spec's pretraining, which asks for none
            assert f.default(None) is None and "= lambda options: None" in span
    described = bullet(cls.__name__)[len(signature(cls.__name__)) :]
    if cls in (SoftLabelSpec, Aggregate):  # and each field is said what it is, after the signature
        assert [f.name for f in dataclasses.fields(cls) if f"`{f.name}" not in described and f.name not in ("options", "server", "client")] == []


def test_aggregates_fields_are_given_their_shapes() -> None:
    text = bullet("Aggregate")
    assert "`keep`, bool `[n]`" in text and "`rows`, `[kept, D]`" in text and "`server_rows`, `[kept, C]`" in text
    assert "`agg_` prefix" in text


def hooks(cls: type) -> set[str]:
    return {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}


def test_the_reference_names_every_hook_of_the_two_halves() -> None:
    method, client = bullet("SoftLabelMethod"), bullet("SoftLabelClientHalf")
    assert sorted(n for n in hooks(SoftLabelMethod) if f"`{n}(" not in method) == []
    attributes = [n for n, v in vars(SoftLabelMethod).items() if not n.startswith("_") and isinstance(v, (bool, float))]
    assert sorted(n for n in attributes if f"`{n}" not in method) == []
    assert sorted(n for n in hooks(SoftLabelClientHalf) - {"resume"} if f"`{n}(" not in client) == []  # resume: the protocol's
    assert "`aggregate(round: int, indices: Tensor, uplinks: Sequence[SoftLabelUplink]) -> Aggregate`" in method
    assert "-> (stack, sent)" in bullet("stack_uplinks")


def test_stack_uplinks_returns_what_the_page_says() -> None:
    indices = torch.tensor([2, 5, 7])
    ups = [SoftLabelUplink(0, 1, indices, torch.full((3, 2), 0.5)), SoftLabelUplink(1, 1, torch.tensor([7]), torch.tensor([[1.0, 0.0]]))]
    stack, sent = stack_uplinks(indices, ups, 2)
    assert stack.shape == (2, 3, 2) and stack.dtype == torch.float32 and sent.dtype == torch.bool
    assert sent.tolist() == [[True, True, True], [False, False, True]] and stack[1, :2].abs().sum() == 0


@pytest.mark.parametrize("spec", ["SoftLabelSpec", "AlgorithmSpec", "PrototypeSpec"])
def test_architecture_md_gives_the_specs_fields_in_dataclass_order(spec: str) -> None:
    """Each family's spec row lists its fields as the dataclass orders them (AlgorithmSpec's and PrototypeSpec's rows
    had left out fields added since, and put AlgorithmSpec's figures last)."""
    import chillfl.extend

    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    m = re.search(rf"`{spec}\(([^)]*)\)`", text)
    assert m is not None
    assert [n.strip() for n in m.group(1).split(",")] == [f.name for f in dataclasses.fields(getattr(chillfl.extend, spec))]


def test_the_pages_say_any_method_takes_the_cache_and_where_its_default_is_set() -> None:
    s4 = " ".join(section_4().split())
    assert "`[distillation] cache_duration`" in s4 and "applies to any soft-label method" in s4
    assert "`SoftLabelSpec(default_cache_duration=...)` sets the method's default D" in s4
    row = next(line for line in (DOCS / "scarlet.md").read_text(encoding="utf-8").splitlines() if line.startswith("| `cache_duration`"))
    assert "a plugin's too" in row and "SoftLabelSpec(default_cache_duration=...)" in row


# ---------------------------------------------------------------- the example, and the claims the text makes of it


BASE = {"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "executor": "sequential", "device": "cpu", "seed": 3,
        "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 2}, "client": {"lr": 0.05, "batch_size": 32}}


def records(**distillation: Any) -> list[dict[str, Any]]:
    table = {"public_size": 100, "subset_size": 50, **distillation}
    return run_experiment(load_config(None, {**BASE, "distillation": table}), write=False, progress=False).records


def test_the_sharpened_consensus_on_hand_worked_values(my_methods: Any) -> None:
    """Mean of [0.2, 0.8] and [0.6, 0.4] = [0.4, 0.6]; squared [0.16, 0.36], renormalised [0.16, 0.36] / 0.52.
    A sample only client 0 sent ([0.2, 0.8]): its masked mean, squared [0.04, 0.64] / 0.68."""
    spec = my_methods.SHARP_FEDMD
    method = spec.build(my_methods.SharpFedMDOptions(sharpen=2.0), 2, 0, "int32", 10)
    one = torch.tensor([0])
    agg = method.aggregate(1, one, [SoftLabelUplink(0, 1, one, torch.tensor([[0.2, 0.8]])), SoftLabelUplink(1, 1, one, torch.tensor([[0.6, 0.4]]))])
    assert agg.keep.tolist() == [True] and agg.rows.tolist() == [[pytest.approx(0.16 / 0.52), pytest.approx(0.36 / 0.52)]]
    two = torch.tensor([0, 1])
    agg = method.aggregate(1, two, [SoftLabelUplink(0, 1, two, torch.tensor([[0.2, 0.8], [0.5, 0.5]])), SoftLabelUplink(1, 1, torch.tensor([1]), torch.tensor([[0.5, 0.5]]))])
    assert agg.rows[0].tolist() == [pytest.approx(0.04 / 0.68), pytest.approx(0.64 / 0.68)]
    assert spec.pretraining(my_methods.SharpFedMDOptions(transfer_epochs=3)) == Pretraining(3, None, "transfer_epochs")
    assert spec.pretraining(my_methods.SharpFedMDOptions(transfer_epochs=0)) is None


def test_the_fedmd_variant_runs_and_pretrains_as_fedmd_does(my_methods: Any) -> None:
    """Round 1 trains after the pretraining and before any consensus: bitwise the built-in fedmd's (scores = "probs");
    with sharpen = 1 the later rounds differ from it only by the renormalisation's rounding."""
    sharp = records(method="my_methods:SHARP_FEDMD", transfer_epochs=1)
    assert len(sharp) == 2 and all(0 <= r["global_acc"] <= 1 for r in sharp)
    plain = records(method="my_methods:SHARP_FEDMD", transfer_epochs=1, sharpen=1.0)
    fedmd = records(method="fedmd", transfer_epochs=1, scores="probs")
    assert plain[0]["train_loss"] == fedmd[0]["train_loss"] == sharp[0]["train_loss"]
    assert [r["train_loss"] for r in plain] == pytest.approx([r["train_loss"] for r in fedmd], rel=1e-6)
    unpretrained = records(method="my_methods:SHARP_FEDMD", transfer_epochs=0)
    assert unpretrained[0]["train_loss"] != sharp[0]["train_loss"]  # the pretraining ran


def test_a_plugin_method_takes_the_cache_and_its_specs_default(my_methods: Any) -> None:
    """The section's claim: cache_duration applies to a plugin; default_cache_duration sets its default; a config overrides it."""
    my_methods.CACHED = dataclasses.replace(my_methods.SHARP_FEDMD, default_cache_duration=2)
    assert "cache_hit_ratio" not in records(method="my_methods:SHARP_FEDMD", transfer_epochs=0)[1]  # 0 by default: no cache
    cached = records(method="my_methods:CACHED", transfer_epochs=0)
    assert cached[1]["cache_hit_ratio"] > 0 and cached[1]["public_requested"] < cached[1]["public_drawn"]
    assert cached[1]["sync_verified"] == 2  # both clients rebuilt the server's rows
    assert "cache_hit_ratio" not in records(method="my_methods:CACHED", transfer_epochs=0, cache_duration=0)[1]
    again = records(method="my_methods:SHARP_FEDMD", transfer_epochs=0, cache_duration=2)
    assert again[1]["cache_hit_ratio"] == cached[1]["cache_hit_ratio"]
