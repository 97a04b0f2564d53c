"""rev105c: the one-row refusal asks only the side that trains on batches of one (a server batch size of one is not
refused for a client architecture's batch norm); a crafted checkpoint slot whose shape overflows torch's element count
is a corrupt checkpoint, not a traceback; an unknown public-dataset option's hint names distillation.public_dataset."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch

from chillfl.cli import main
from chillfl.errors import ConfigError
from chillfl.storage.checkpoint import METADATA_KEY, decode_checkpoint, encode_state

HET = """seed = 0
name = "het"
[dataset]
name = "digits"
[model]
name = "mlp"
hidden = [16]
[[model.groups]]
clients = "0"
name = "fedchill_cnn1"
[federation]
num_clients = 2
rounds = 1
[distillation]
method = "scarlet"
public_size = 10
subset_size = 4
"""


@pytest.mark.parametrize(("option", "refused"), [("server_batch_size", False), ("distill_batch_size", True)])
def test_a_batch_of_one_is_refused_only_for_the_side_that_trains_on_it(tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, refused: bool) -> None:
    (tmp_path / "het.toml").write_text(HET)
    code = main(["run", str(tmp_path / "het.toml"), "--dry-run", f"distillation.{option}=1", f"out_dir={str(tmp_path / 'out')!r}".replace("'", '"')])
    err = capsys.readouterr().err
    assert (code == 2) == refused, err
    if refused:
        assert f"distillation.{option}: is 1" in err and "ConvBNNet" in err and len(err.strip().splitlines()) == 1


def test_a_slot_whose_shape_overflows_is_a_corrupt_checkpoint() -> None:
    data = bytearray(encode_state({"a": torch.zeros(3)}))
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + size])
    doc = json.loads(header["__metadata__"][METADATA_KEY])
    slot = doc["slots"]["0"]
    doc["slots"]["0"] = [slot[0], 0, 0, [2**63 - 1, 2**63 - 1, 0]]
    doc.pop("sha256")  # unsigned: read unverified, as an older file
    header["__metadata__"][METADATA_KEY] = json.dumps(doc, separators=(",", ":"))
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with pytest.raises(ValueError, match="malformed slot"):
        decode_checkpoint(struct.pack("<Q", len(text)) + text + bytes(data[8 + size :]))


def test_an_unknown_public_dataset_options_hint_names_the_public_dataset() -> None:
    from chillfl.protocols.softlabels.public import as_public

    exc = as_public(ConfigError("dataset.test_fraction", "unknown option; 'test_fraction' is an option of digits (set dataset.name = ...)"))
    assert exc.field == "distillation.public_dataset_options.test_fraction"
    assert "(set distillation.public_dataset = " in exc.message and "dataset.name" not in exc.message
