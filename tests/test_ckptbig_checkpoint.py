"""A checkpoint whose document (JSON skeleton, slots, run metadata) grows past safetensors' 100 MB header limit.

The skeleton grows with every client ever sampled (ledger totals, ``local.acc``/``local.loss``, a slot per packed
per-client tensor), so a federation of a few hundred thousand clients could write no checkpoint: safetensors raised
``SafetensorError: header too large`` as a traceback, and every resume hit it again (scale finding 1). A large
document now goes into a uint8 entry (version 3); files of the format before it (version 2) still read and resume
bitwise; a checkpoint that cannot be written all the same is one StorageError line, its previous checkpoint kept.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any, Mapping

import pytest
import safetensors
import safetensors.torch
import torch

from chillfl import runner
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import StorageError
from chillfl.runner import CHECKPOINT, run_experiment
from chillfl.storage import checkpoint
from chillfl.storage.checkpoint import decode_checkpoint, encode_state, read_checkpoint, saved_round, write_state

from resume_cases import check_resume
from test_damaged_files import TINY
from test_state_dicts import assert_same


def old_encode_state(tree: Mapping[str, Any], run: Mapping[str, Any] | None = None) -> bytes:
    """``encode_state`` as it was before a document could leave the header: every document in the header metadata,
    version 2. Kept here to write the files that runs stopped before the change left behind."""
    tensors: dict[str, torch.Tensor] = {}
    layouts: dict[str, list[int]] = {}
    small: list[tuple[str, torch.Tensor]] = []
    skeleton = checkpoint._encode(tree, tensors, "", layouts, small)
    slots = checkpoint._pack(small, tensors)
    doc: dict[str, Any] = {"version": 2, "tree": skeleton, **({"strides": layouts} if layouts else {})}
    if slots:
        doc["slots"] = slots
    doc["run"] = dict(sorted(dict(run or {}).items()))
    doc["sha256"] = checkpoint._digest(checkpoint._text(doc), tensors)
    return safetensors.torch.save(tensors, metadata={"chillfl": checkpoint._text(doc)})


def federation(clients: int) -> dict[str, Any]:
    """A state tree shaped as a big federation's: per-client ledger totals and local metrics (str-keyed, as the
    protocols write them), a packed per-client tensor each, a large tensor, a transposed one and non-finite floats."""
    ledger = {str(c): {"down.params": 18216, "down.control": 0, "up.params": 18216, "up.control": 0} for c in range(clients)}
    return {
        "round": 7,
        "protocol": {
            "ledger": {"total": {}, "latest": {}, "clients": ledger},
            "local": {"acc": {str(c): c / 3 for c in range(clients)}, "loss": {str(c): math.inf if c == 1 else 1.2345678901234 for c in range(clients)}},
            "controls": {str(c): torch.full((3,), float(c)) for c in range(clients)},
            "model": torch.arange(70000.0),
            "wt": torch.arange(12.0).reshape(3, 4).t(),
            "nan": math.nan,
        },
    }


def header_size(data: bytes) -> int:
    return int(struct.unpack("<Q", data[:8])[0])


def test_a_document_past_the_header_limit_goes_into_an_entry_and_reads_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the header limit (safetensors' 100 MB) and the inline limit scaled down, a 3,000-client document is
    written with a small header and read back bit for bit; before, it went into the header, past the limit."""
    monkeypatch.setattr(checkpoint, "_MAX_HEADER", 200_000)
    monkeypatch.setattr(checkpoint, "INLINE_MAX", 50_000)
    tree = federation(3000)
    path = tmp_path / "checkpoint.safetensors"
    write_state(path, tree, {"metrics_sha256": "x"})
    data = path.read_bytes()
    assert header_size(data) < 50_000
    back, run = read_checkpoint(path)
    assert_same(back, tree)
    assert run == {"metrics_sha256": "x"}
    assert back["protocol"]["wt"].stride() == (1, 4)
    assert saved_round(path) == 7  # `chillfl status` reads the header alone


def test_a_skeleton_over_safetensors_own_limit_is_written(tmp_path: Path) -> None:
    """The real limit, unpatched: a 100,000,001-character string in the state (as 700k clients' tables would be)
    made safetensors raise ``header too large``."""
    tree = {"round": 3, "names": "x" * 100_000_001}
    path = tmp_path / "checkpoint.safetensors"
    write_state(path, tree)
    assert header_size(path.read_bytes()[:8]) < 1000
    assert read_checkpoint(path)[0] == tree


def test_small_documents_keep_the_old_bytes_and_old_files_read_back_equal() -> None:
    """A document that fits stays in the header, byte for byte what the old encoder wrote (older chillfl versions
    read it); the old encoder's files, a large document in the header included, read back equal."""
    small = federation(5)
    assert encode_state(small, {"k": 1}) == old_encode_state(small, {"k": 1})
    for tree in (small, federation(12000)):  # about 2 MB of document, past INLINE_MAX
        back, run = decode_checkpoint(old_encode_state(tree, {"k": 1}))
        assert_same(back, tree)
        assert run == {"k": 1}


def test_a_changed_byte_of_the_document_entry_is_refused() -> None:
    data = bytearray(encode_state({"round": 1, "s": "a" * (checkpoint.INLINE_MAX + 1)}))
    where = data.index(b"aaaa")
    data[where] = ord("b")
    with pytest.raises(checkpoint.Tampered):
        decode_checkpoint(bytes(data))


@pytest.mark.parametrize("method", ["algorithm.fedavg", "algorithm.scaffold", "temperature.fedchill"])
def test_resume_from_checkpoints_with_the_document_in_an_entry_is_bitwise(method: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint, "INLINE_MAX", 0)  # every checkpoint version 3
    encode, written = checkpoint.encode_state, []

    def encode_seen(*args: Any, **kwargs: Any) -> bytes:
        data = encode(*args, **kwargs)
        written.append(checkpoint.DOCUMENT.encode() in data[8:8 + header_size(data)])  # its entry is named in the header
        return data

    monkeypatch.setattr(checkpoint, "encode_state", encode_seen)
    check_resume(method, "sequential", 2, tmp_path, monkeypatch)
    assert written and all(written), written


def test_a_folder_checkpointed_by_the_old_encoder_resumes_bitwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint, "encode_state", old_encode_state)  # write_state's encoder
    check_resume("algorithm.scaffold", "sequential", 1, tmp_path, monkeypatch)


def test_a_checkpoint_that_cannot_be_written_is_one_line_and_the_last_one_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """safetensors refusing the checkpoint of round 2 (as the header limit did): before, a SafetensorError traceback."""
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    save = safetensors.torch.save

    def refuse(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> bytes:
        if '"round":2' in (metadata or {}).get("chillfl", ""):
            raise safetensors.SafetensorError("Error while serializing: header too large")
        return save(tensors, metadata=metadata)

    monkeypatch.setattr(safetensors.torch, "save", refuse)
    options = {**TINY, "federation.rounds": 3, "name": "cut", "out_dir": str(tmp_path)}
    with pytest.raises(StorageError) as caught:
        run_experiment(load_config(None, options), progress=False)
    line = str(caught.value)
    assert "\n" not in line
    assert "cannot write the checkpoint of round 2" in line and "header too large" in line and "checkpoint.every = 0" in line, line
    assert "the checkpoint of round 1 is kept" in line, line
    partial = tmp_path / "cut.partial"
    assert read_checkpoint(partial / CHECKPOINT)[0]["round"] == 1
    monkeypatch.setattr(safetensors.torch, "save", save)
    assert main(["resume", "-q", str(partial)]) == 0, capsys.readouterr().err
    assert (tmp_path / "cut" / "metrics.jsonl").is_file()
