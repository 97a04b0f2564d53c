"""The report's partition heat map is built without the clients' eval splits (report-scale #2, in part).

``partition_figure`` called ``build_data(run.config)`` to draw train class counts, which drew every registered client's
eval split first (``_proportional_eval``, ~160 us a client in a Python loop: 4.7 s of a 12 s report at 20,000 clients).
The train partition comes from its own random stream, so building with ``eval.clients = "none"`` (client_split none)
draws the same counts; how a run's eval splits are drawn is unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("matplotlib")

import chillfl.data.federated as federated  # noqa: E402
import chillfl.report.html as report  # noqa: E402
from chillfl.config import EvalConfig, FederationConfig, RunConfig  # noqa: E402
from chillfl.experiment import build_data  # noqa: E402


def _config(**eval_options: Any) -> RunConfig:
    return RunConfig(name="startfix", seed=4, dataset={"name": "synthetic", "num_clients": 12, "size_log_mean": 1.0, "size_log_sigma": 0.5,
                                                      "min_samples": 10},
                     partition={"name": "natural"}, federation=FederationConfig(num_clients=12), eval=EvalConfig(**eval_options))


@pytest.mark.parametrize("eval_options", [{}, {"clients": "all", "validation": 0.2}])
def test_the_partition_heat_map_draws_the_runs_train_counts_without_its_eval_splits(monkeypatch: pytest.MonkeyPatch, eval_options: dict[str, Any]) -> None:
    config = _config(**eval_options)
    full = build_data(config)  # as the run drew it: eval splits included
    assert len(full.eval_indices[0]) > 0
    drawn: list[np.ndarray] = []

    def no_eval_splits(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the heat map drew the clients' eval splits")

    monkeypatch.setattr(federated, "_proportional_eval", no_eval_splits)
    monkeypatch.setattr(report, "plot_class_heatmap", lambda counts, path, title="": (drawn.append(np.asarray(counts)), Path(path).write_bytes(b"png")))
    uri = report.partition_figure(report.Run(Path("."), config, [], {}))
    assert uri is not None and len(drawn) == 1
    assert np.array_equal(drawn[0], full.class_counts())  # the same picture
