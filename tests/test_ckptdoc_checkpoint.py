"""A version 3 checkpoint (its document in the entry ``chillfl.document``) serializes its document once.

Before, ``encode_state`` turned the document into JSON to measure it against ``INLINE_MAX`` and, when it was over,
a second time with ``"version": 3``: for a federation of 10^5-10^6 clients (a 20-200 MB document) that second
``json.dumps`` cost about a fifth of every checkpoint's write. The entry now holds the first text with its version
digit changed; the files are byte for byte what the two encodings wrote, version 2 files and version 3 files alike.
"""

from __future__ import annotations

import gc
import threading
from typing import Any, Mapping

import pytest
import safetensors.torch
import torch

from chillfl.storage import checkpoint, checkpoint_tables
from chillfl.storage.checkpoint import decode_checkpoint, encode_state

from test_ckptbig_checkpoint import federation, old_encode_state
from test_state_dicts import assert_same


def twice_encoded(tree: Mapping[str, Any], run: Mapping[str, Any]) -> bytes:
    """A version 3 file as the encoder before this change wrote it: the whole document serialized again with
    ``"version": 3`` into the entry, the header a document of version, round and checksum."""
    tensors: dict[str, torch.Tensor] = {}
    layouts: dict[str, list[int]] = {}
    small: list[tuple[str, torch.Tensor]] = []
    skeleton = checkpoint._encode(tree, tensors, "", layouts, small)
    slots = checkpoint._pack(small, tensors)
    doc: dict[str, Any] = {"version": 3, "tree": skeleton, **({"strides": layouts} if layouts else {})}
    if slots:
        doc["slots"] = slots
    doc["run"] = dict(sorted(run.items()))
    tensors["chillfl.document"] = torch.frombuffer(bytearray(checkpoint._text(doc).encode("ascii")), dtype=torch.uint8)
    header: dict[str, Any] = {"version": 3, "round": tree["round"]}
    header["sha256"] = checkpoint._digest(checkpoint._text(header), tensors)
    return safetensors.torch.save(tensors, metadata={"chillfl": checkpoint._text(header)})


def test_a_large_document_is_serialized_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one JSON text over INLINE_MAX: two before (to measure it, then again as version 3)."""
    monkeypatch.setattr(checkpoint, "INLINE_MAX", 2000)
    text, large = checkpoint._text, []

    def counted(doc: Mapping[str, Any]) -> str:
        out = text(doc)
        if len(out) > checkpoint.INLINE_MAX:
            large.append(out[:12])
        return out

    monkeypatch.setattr(checkpoint, "_text", counted)
    data = encode_state(federation(40), {"k": 1})
    assert checkpoint.DOCUMENT.encode() in data  # version 3 indeed
    assert large == ['{"version":2'], large


@pytest.mark.parametrize("clients", [1, 40, 300])
def test_version_3_files_keep_their_bytes(clients: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint, "INLINE_MAX", 0 if clients == 1 else 2000)
    monkeypatch.setattr(checkpoint_tables, "TABLE_MIN_ROWS", 10**9)  # 300 rows would be a table (version 4: test_ckptv4_*)
    tree = federation(clients)
    data = encode_state(tree, {"k": 1, "a": "é"})  # a non-ASCII run value: escaped, so still one byte a character
    assert data == twice_encoded(tree, {"k": 1, "a": "é"})
    back, run = decode_checkpoint(data)
    assert_same(back, tree)
    assert run == {"a": "é", "k": 1}


def test_the_limit_itself_stays_version_2_one_byte_more_is_version_3(monkeypatch: pytest.MonkeyPatch) -> None:
    """A document of exactly INLINE_MAX bytes is the version 2 file the old encoder wrote; one byte more, version 3."""
    tree: dict[str, Any] = {"round": 2, "x": torch.ones(3), "s": ""}
    size = len(checkpoint._text({"version": 2, "tree": tree | {"x": {"__tensor__": "0"}},
                                 "slots": {"0": ["packed.float32", 0, 3, [3]]}, "run": {}}))
    monkeypatch.setattr(checkpoint, "INLINE_MAX", size + 10)
    at = {**tree, "s": "a" * 10}
    assert encode_state(at) == old_encode_state(at)
    over = {**tree, "s": "a" * 11}
    assert encode_state(over) == twice_encoded(over, {})
    assert checkpoint.DOCUMENT.encode() not in encode_state(at) and checkpoint.DOCUMENT.encode() in encode_state(over)


def test_the_collector_is_paused_while_a_checkpoint_is_encoded_or_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each object the walks build counted towards a full collection of the whole heap (about 40 % of a write at
    10^5 clients); it is paused for the walks and resumed after, an error too, and left off where it was off."""
    seen: list[bool] = []
    walk, decode = checkpoint._encode, checkpoint._decode
    monkeypatch.setattr(checkpoint, "_encode", lambda *a: (seen.append(gc.isenabled()), walk(*a))[1])
    monkeypatch.setattr(checkpoint, "_decode", lambda *a: (seen.append(gc.isenabled()), decode(*a))[1])
    assert gc.isenabled()
    tree = federation(3)
    assert_same(decode_checkpoint(encode_state(tree))[0], tree)
    assert seen and not any(seen), seen
    assert gc.isenabled()
    with pytest.raises(checkpoint.UnstorableState):
        encode_state({"x": (1, 2)})
    with pytest.raises(ValueError):
        decode_checkpoint(b"\0" * 16)
    assert gc.isenabled()
    gc.disable()
    try:
        encode_state(tree)
        assert not gc.isenabled()  # the caller's choice kept
    finally:
        gc.enable()


def test_a_walk_in_another_thread_leaves_the_collector_alone() -> None:
    """The collector is the process's: two threads pausing it at once could each find it off and leave it off for good.
    Only the main thread pauses it; a walk in another thread finds it on and leaves it on."""
    seen: list[bool] = []
    walk = checkpoint._encode

    def watched(*a: object) -> object:
        seen.append(gc.isenabled())
        return walk(*a)  # type: ignore[arg-type]

    tree = federation(3)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checkpoint, "_encode", watched)
        worker = threading.Thread(target=encode_state, args=(tree,))
        worker.start()
        worker.join()
    assert seen == [True] * len(seen) and seen
    assert gc.isenabled()
