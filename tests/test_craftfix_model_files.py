"""Crafted model and checkpoint files (the checksum is recomputable, so a file from elsewhere passes it with any content):
each is the reader's one-line corrupt-file error naming the file, never a traceback nor a silent accept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import chillfl
from chillfl.engine.view import model_with_state
from chillfl.errors import ConfigError
from chillfl.storage.checkpoint import DIGEST_KEY, METADATA_KEY, CorruptCheckpoint, _digest, _header_metadata, _text, encode_state, read_checkpoint
from chillfl.storage.model_file import read_client_models, read_model, write_client_models, write_model
from test_revbfix_load_run import CONFIG, DATA, Watched

STATE = {"fc.weight": torch.ones(2, 4), "fc.bias": torch.zeros(2)}

MARKS = [5, None, [1], "nan:" + "f" * 20, "nan:fff", "nan:+fffffffffffffff", "nan:0000000000000000", "NaN", "infinity"]
"""``{"__float__": mark}`` values no chillfl writes: a non-str, a NaN's bits of the wrong length, not hex, or a number's bits."""


def crafted(tree: dict[str, Any], mark: Any, run: dict[str, Any] | None = None) -> bytes:
    """``tree``'s file with its ``"x"`` entry (an inf) written as ``{"__float__": mark}`` and the checksum recomputed,
    as someone crafting a file does (the writer refuses such a key)."""
    import json

    import safetensors.torch

    data = encode_state({**tree, "x": float("inf")}, run)
    doc = json.loads(_header_metadata(data)[METADATA_KEY])
    doc["tree"]["x"] = {"__float__": mark}
    doc.pop(DIGEST_KEY)
    stored = safetensors.torch.load(data)
    doc[DIGEST_KEY] = _digest(_text(doc), stored)
    return safetensors.torch.save(stored, metadata={METADATA_KEY: _text(doc)})


@pytest.mark.parametrize("mark", MARKS)
def test_a_bad_float_mark_in_a_checkpoint_is_a_corrupt_checkpoint(tmp_path: Path, mark: Any) -> None:
    path = tmp_path / "checkpoint.safetensors"
    path.write_bytes(crafted({"model": STATE}, mark, {"round": 1}))
    with pytest.raises(CorruptCheckpoint, match="not a valid chillfl checkpoint"):
        read_checkpoint(path)


@pytest.mark.parametrize("mark", MARKS)
def test_a_bad_float_mark_in_an_older_model_file_is_one_line(tmp_path: Path, mark: Any) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(crafted(STATE, mark))
    with pytest.raises(ConfigError, match="model.safetensors is not a valid safetensors model file"):
        read_model(path)


def test_the_float_marks_chillfl_writes_still_read_back(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.safetensors"
    odd = float(torch.tensor([-float("nan")], dtype=torch.float64).item())  # a NaN of another sign: its bits are kept
    path.write_bytes(encode_state({"a": float("inf"), "b": -float("inf"), "c": float("nan"), "d": odd}, {"round": 1}))
    tree, _ = read_checkpoint(path)
    assert tree["a"] == float("inf") and tree["b"] == -float("inf") and tree["c"] != tree["c"] and tree["d"] != tree["d"]


@pytest.mark.parametrize("entry", [[torch.zeros(2)], {"t": torch.zeros(2)}, 3, "x"])
def test_an_older_model_file_entry_that_is_not_a_tensor_is_one_line(tmp_path: Path, entry: Any) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(encode_state({**STATE, "fc.bias": entry}))
    with pytest.raises(ConfigError, match="model.safetensors is not a valid safetensors model file: .*fc.bias"):
        read_model(path)


@pytest.mark.parametrize("key", ["abc", "\u0661", "-1", "03", "1.0", ""])
def test_an_older_client_file_whose_key_is_no_client_id_is_one_line(tmp_path: Path, key: str) -> None:
    path = tmp_path / "client_models.safetensors"
    path.write_bytes(encode_state({key: STATE}))
    with pytest.raises(ConfigError, match="client_models.safetensors: tensor .* does not name a client id"):
        read_client_models(path)


@pytest.mark.parametrize("value", [[torch.zeros(2)], 3])
def test_an_older_client_file_entry_that_is_not_a_tensor_is_one_line(tmp_path: Path, value: Any) -> None:
    path = tmp_path / "client_models.safetensors"
    path.write_bytes(encode_state({"0": {**STATE, "fc.bias": value}}))
    with pytest.raises(ConfigError, match="not a valid safetensors model file"):
        read_client_models(path)


@pytest.mark.parametrize("cid", ["\u0661", "-1", "01"])
def test_a_client_file_tensor_name_with_no_client_id_is_one_line(tmp_path: Path, cid: str) -> None:
    path = tmp_path / "client_models.safetensors"
    write_model(path, {f"{cid}/fc.bias": torch.zeros(2)})
    with pytest.raises(ConfigError, match="does not name a client id"):
        read_client_models(path)


def test_client_ids_past_the_runs_clients_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "client_models.safetensors"
    write_client_models(path, {0: STATE, 99999999999999999999999: STATE})
    assert set(read_client_models(path)) == {0, 99999999999999999999999}  # no count known: only the spelling is checked
    with pytest.raises(ConfigError, match="does not name one of the run's client ids 0..3"):
        read_client_models(path, num_clients=4)


@pytest.mark.parametrize("given", [torch.tensor(3.0), torch.zeros(1, 2), torch.zeros(3)])
def test_a_state_of_another_shape_is_not_broadcast_into_a_model(given: torch.Tensor) -> None:
    with pytest.raises(RuntimeError, match="'fc.bias' is shape"):
        model_with_state(Watched(), {"fc.weight": torch.ones(2, 4), "fc.bias": given})


def test_model_with_state_names_a_non_tensor() -> None:
    with pytest.raises(RuntimeError, match="'fc.bias' is a list"):
        model_with_state(Watched(), {"fc.weight": torch.ones(2, 4), "fc.bias": [torch.zeros(2)]})  # type: ignore[dict-item]


def test_load_run_refuses_a_scalar_weight_and_a_client_past_the_runs(tmp_path: Path) -> None:
    torch.manual_seed(0)
    folder = chillfl.run(model=Watched(), data=DATA, config=CONFIG, out_dir=tmp_path, name="r", progress=False).folder
    assert folder is not None
    good = read_model(folder / "model.safetensors")
    write_model(folder / "model.safetensors", {**good, "fc.bias": torch.tensor(3.0)})
    with pytest.raises(ConfigError, match="model.safetensors: 'fc.bias' is shape \\[\\]"):
        chillfl.load_run(folder, model=Watched(), data=DATA)
    write_model(folder / "model.safetensors", good)
    write_client_models(folder / "client_models.safetensors", {0: good, 7: good})  # a 2-client run
    with pytest.raises(ConfigError, match="client_models.safetensors: tensor '7/fc.bias' does not name one of the run's client ids 0..1"):
        chillfl.load_run(folder, model=Watched(), data=DATA)
