"""A plugin dataset named as its own run's ``distillation.public_dataset`` (byodata finding 1): refused as the built-ins
are, whatever name its builder gives its ArrayDataset, through an import path or an entry point aliasing it."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from chillfl import plugins
from chillfl.cli import main
from plugin_modules import plugin_module

pytestmark = pytest.mark.usefixtures("one_thread")

SOURCE = '''
import numpy as np

from chillfl import ArrayDataset
from chillfl.data.datasets import DatasetEntry
from chillfl.options import NoOptions


def blobs(options, data_dir):
    rng = np.random.default_rng(0)
    y = np.arange(160) % 3
    x = rng.normal(2.0 * y[:, None], 1.0, (160, 4))
    return ArrayDataset("blobs", x[:120], y[:120], x[120:], y[120:], 3)


ENTRY = DatasetEntry(NoOptions, blobs, "real")
'''

BASE = """seed = 0
name = "pub"
out_dir = "{out}"
[dataset]
name = "byofix_pub:blobs"
[model]
name = "mlp"
hidden = [8]
[federation]
num_clients = 2
rounds = 1
[client]
batch_size = 16
[eval]
client_split_size = 10
[distillation]
method = "scarlet"
public_size = 30
subset_size = 20
server_epochs = 1
"""


@pytest.fixture()
def base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(plugins, "entry_points", lambda: {"byofix_alias": "byofix_pub:blobs", "byofix_entry": "byofix_pub:ENTRY"})
    path = tmp_path / "base.toml"
    path.write_text(BASE.format(out=(tmp_path / "out").as_posix()), encoding="utf-8")
    with plugin_module(tmp_path, monkeypatch, "byofix_pub", SOURCE):
        yield path


@pytest.mark.parametrize("run,public", [("byofix_pub:blobs", "byofix_pub:blobs"), ("byofix_pub:blobs", "byofix_alias"),
                                        ("byofix_alias", "byofix_entry"), ("byofix_pub:ENTRY", "byofix_pub:blobs")])
def test_a_plugin_dataset_as_its_own_public_dataset_is_refused(base: Path, capsys: pytest.CaptureFixture[str], run: str, public: str) -> None:
    """The pool was drawn from the clients' own training rows, silently: the builder's ArrayDataset is named "blobs",
    never the config's "byofix_pub:blobs" the old check compared with. One line, nothing written."""
    assert main(["run", str(base), "-q", f'dataset.name="{run}"', f'distillation.public_dataset="{public}"']) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: distillation.public_dataset: {public!r} is the run's own dataset"), err
    assert not (base.parent / "out").exists() or not any((base.parent / "out").rglob("metrics.jsonl"))
