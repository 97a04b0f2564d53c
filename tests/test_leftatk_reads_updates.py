"""``ReadsUpdates`` and ``SentStarts`` are exported by ``chillfl.extend``: a plugin's own wrapper that reads each
client's update w_i - start_i says so, and the run then refuses a client half that moves its start in ``prepare``,
as it does under ``[attack]`` and ``[privacy]`` (before, a wrapper not built on the built-ins could not import them,
so its clip read such a client's update from the wrong start with no word)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

import chillfl
from chillfl.errors import ConfigError
from plugin_modules import plugin_module

MODULE = '''
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from chillfl.extend import (AlgorithmSpec, AroundAggregator, Capabilities, Downlink, FedAvg, ReadsUpdates, SentStarts, Stateless,
                            build_base)


@dataclass(frozen=True)
class ClipOptions:
    base: str = "fedavg"
    base_options: dict[str, Any] = field(default_factory=dict)
    clip: float = 0.5
    reads: bool = True


class ServerClip(AroundAggregator, ReadsUpdates):
    def __init__(self, base, clip, reads=True):
        super().__init__(base)
        self.clip, self.reads = clip, reads
        self.sent = SentStarts()

    def downlink(self, client_id, round, global_params):
        return self.sent.record(client_id, round, self.base.downlink(client_id, round, global_params))

    def reads_updates(self):
        return self.reads

    def aggregate(self, global_params, results, round):
        starts = self.sent.starts(round, global_params, results, self.base)
        out = []
        for r in results:
            s = starts.get(r.client_id, global_params)
            keys = [k for k, v in s.items() if v.is_floating_point()]
            norm = math.sqrt(sum(float((r.params[k] - s[k]).double().square().sum()) for k in keys))
            scale = min(1.0, self.clip / norm) if norm > 0 else 1.0
            out.append(dataclasses.replace(r, params={**r.params, **{k: s[k] + scale * (r.params[k] - s[k]) for k in keys}}))
        return self.base.aggregate(global_params, out, round)


CLIP = AlgorithmSpec(ClipOptions, lambda o, ctx: (lambda b: (ServerClip(b[0], o.clip, o.reads), b[1]))(build_base(o, ctx)),
                     "a server clip of each update", wraps="base")


@dataclass(frozen=True)
class MovesHalf(Stateless):
    def prepare(self, state, start, context):  # trains from the sent model plus 1: not the start the server knows
        return {k: v + 1.0 if v.is_floating_point() else v for k, v in start.items()}, dict(context)


class Moves(FedAvg):
    capabilities = Capabilities(takes_weights=True)

    def client_half(self):
        return MovesHalf()
'''

BASE: dict[str, Any] = {"seed": 0, "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]}, "device": "cpu", "executor": "sequential",
                        "partition": {"name": "iid"}, "federation": {"num_clients": 3, "clients_per_round": 3, "rounds": 2},
                        "client": {"batch_size": 64, "lr": 0.1}, "eval": {"clients": "none"}}


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with plugin_module(tmp_path, monkeypatch, "leftatk_clip", MODULE):
        yield tmp_path


def clip(base: str, reads: bool = True) -> dict[str, Any]:
    return {**BASE, "algorithm": {"name": "leftatk_clip:CLIP", "base": base, "reads": reads}}


def test_a_plugin_wrapper_that_reads_updates_gets_the_start_check(plugin: Path) -> None:
    err = pytest.raises(ConfigError, chillfl.run, config=clip("leftatk_clip:Moves"), write=False, progress=False)
    assert err.value.field == "algorithm.name"
    assert "MovesHalf.prepare() gave client 0 a start other than the one it was sent" in err.value.message and "\n" not in err.value.message


def test_without_the_declaration_or_a_moved_start_it_runs(plugin: Path) -> None:
    assert [r["round"] for r in chillfl.run(config=clip("leftatk_clip:Moves", reads=False), write=False, progress=False).records] == [1, 2]
    assert [r["round"] for r in chillfl.run(config=clip("fedavg"), write=False, progress=False).records] == [1, 2]


def test_the_exported_seam_by_hand(plugin: Path) -> None:
    """SentStarts from chillfl.extend: client 1 was sent a model of its own, so its update is read from there."""
    from chillfl.aggregation.base import start_watched
    from chillfl.extend import ClientResult, Downlink, FedAvg, ReadsUpdates, SentStarts

    import leftatk_clip

    sent = SentStarts()
    own = {"w": torch.tensor([10.0, 10.0])}
    assert sent.record(1, 0, Downlink(params=own)).params is own
    sent.record(0, 0, Downlink())
    g = {"w": torch.tensor([0.0, 0.0])}
    results = [ClientResult(c, {"w": torch.tensor([3.0, 4.0]) + (10.0 if c else 0.0)}, 1, 1, 0.1, 1.0, 0.0) for c in (0, 1)]
    starts = sent.starts(0, g, results)
    assert list(starts) == [1] and torch.equal(starts[1]["w"], own["w"])  # client 0 started from g
    wrapper = leftatk_clip.ServerClip(FedAvg(), 0.5)
    assert isinstance(wrapper, ReadsUpdates) and start_watched(wrapper)
    assert not start_watched(leftatk_clip.ServerClip(FedAvg(), 0.5, reads=False))
    wrapper.downlink(0, 0, g)  # FedAvg's downlink: no model of its own
    wrapper.sent.record(1, 0, Downlink(params=own))  # as a base sending client 1 its own model would
    # each update (3, 4), norm 5, clipped to 0.5: (0.3, 0.4) from its own start; the mean of (0.3, 0.4) and (10.3, 10.4)
    torch.testing.assert_close(wrapper.aggregate(g, results, 0)["w"], torch.tensor([5.3, 5.4]))
