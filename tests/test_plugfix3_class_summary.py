"""``chillfl list --options`` summarises a plugin class (aggregator, policy, model, term) by its docstring's first line, as
it did a plugin function (a dataset's builder): a class showed no summary at all. A dataclass without a docstring of its
own (the decorator writes its signature there) still shows none."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from chillfl.cli import main
from plugin_modules import plugin_module

MODULE = '''
from dataclasses import dataclass

import torch
from torch import nn

from chillfl.extend import ConstantTemperature, FedAvg


class Rule(FedAvg):
    """Mean of the uploads, my way.

    More lines that are not the summary.
    """


class Bare(FedAvg):
    pass


class Warm(ConstantTemperature):
    """A constant temperature, mine."""

    def __init__(self):
        super().__init__(1.0)


@dataclass
class DataWarm(ConstantTemperature):
    t: float = 1.0

    def __post_init__(self):
        super().__init__(self.t)


class Net(nn.Module):
    """A one-layer net of mine."""

    def __init__(self, input_shape, num_classes, options, section):
        super().__init__()
        self.fc = nn.Linear(int(torch.tensor(input_shape).prod()), num_classes)

    def forward(self, x):
        return self.fc(x.flatten(1))


class Zero:
    """A loss term that adds nothing."""

    reads = ()

    def __call__(self, params, context):
        return torch.zeros(())
'''


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with plugin_module(tmp_path, monkeypatch, "plugfix3_doc", MODULE):
        yield tmp_path


@pytest.mark.parametrize("name,heading", [
    ("plugfix3_doc:Rule", "### `plugfix3_doc:Rule` — Mean of the uploads, my way."),
    ("plugfix3_doc:Warm", "### `plugfix3_doc:Warm` — A constant temperature, mine."),
    ("plugfix3_doc:Net", "### `plugfix3_doc:Net` — A one-layer net of mine."),
    ("plugfix3_doc:Zero", "### `plugfix3_doc:Zero` — A loss term that adds nothing."),
    ("plugfix3_doc:Bare", "### `plugfix3_doc:Bare`"),  # no docstring of its own: none (FedAvg's is not its)
    ("plugfix3_doc:DataWarm", "### `plugfix3_doc:DataWarm`"),  # the dataclass decorator's signature is no summary
])
def test_a_plugin_classs_docstring_is_its_summary(plugin: Path, capsys: pytest.CaptureFixture[str], name: str, heading: str) -> None:
    assert main(["list", "--options", name]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(f"### `{name}`")]
    assert lines == [heading]
