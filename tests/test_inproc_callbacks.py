"""A user's ``on_end`` gets its own copy of the run's output, as ``on_round`` gets its own record: a callback that
edits what it is given (accuracy in %, a weight zeroed) must not change the returned Result, which the folder's files
(summary.json, metrics) also hold."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

import chillfl
from test_api import SMALL, TinyMLP, data, digits  # noqa: F401  (fixtures)


class Editor:
    """Edits everything it is handed, in place."""

    def __init__(self) -> None:
        self.seen_acc: list[float] = []

    def on_end(self, output: Any) -> None:
        self.seen_acc.append(output.summary["final_global_acc"])
        output.summary["final_global_acc"] *= 100
        for record in output.records:
            record["global_acc"] = -1.0
        for tensor in output.model_state.values():
            tensor.zero_()


def test_an_on_end_that_edits_its_output_leaves_the_result_and_the_next_callback_alone(data: chillfl.TensorData, tmp_path: Path) -> None:  # noqa: F811
    first, second = Editor(), Editor()
    config = {**SMALL, "name": "edited", "out_dir": str(tmp_path)}
    result = chillfl.run(model=TinyMLP(), data=data, config=config, callbacks=[first, second], progress=False)
    on_disk = json.loads((Path(result.folder) / "summary.json").read_text())
    assert result.summary["final_global_acc"] == on_disk["final_global_acc"] == first.seen_acc[0] == second.seen_acc[0]
    assert 0 < on_disk["final_global_acc"] <= 1
    assert all(r["global_acc"] != -1.0 for r in result.records)
    assert any(bool(torch.any(p != 0)) for p in result.model.state_dict().values())
