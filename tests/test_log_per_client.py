"""``[log] per_client``: each client's local accuracy and loss in every round's record, so that what steered a client
(FedChill's decay reads its accuracy) can be checked from ``metrics.jsonl``; before, only the round's means were kept."""

from __future__ import annotations

from typing import Any

import pytest

from chillfl.config import config_from_dict
from chillfl.runner import run_experiment

BASE: dict[str, Any] = {
    "seed": 1, "threads": 1, "device": "cpu", "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]},
    "federation": {"num_clients": 5, "clients_per_round": 3, "rounds": 3}, "client": {"epochs": 1, "batch_size": 32, "lr": 0.1},
    "temperature": {"policy": "fedchill"}, "checkpoint": {"every": 0}, "eval": {"client_split_size": 20},
}


def _records(per_client: bool, **tables: Any) -> list[dict[str, Any]]:
    config = config_from_dict({**BASE, **tables, "log": {"per_client": per_client}})
    return run_experiment(config, write=False, progress=False).records


@pytest.mark.parametrize("eval_table", [{"client_split_size": 20}, {"client_split_size": 20, "clients": "all", "validation": 0.2}],
                         ids=["sampled", "all-with-validation"])
def test_each_clients_values_are_the_ones_the_means_average(eval_table: dict[str, Any]) -> None:
    on, off = _records(True, eval=eval_table), _records(False, eval=eval_table)
    for with_clients, means in zip(on, off):
        shown = {k: v for k, v in with_clients.items() if k not in ("local_accs", "local_losses", "local_val_accs")}
        assert shown == means  # the option adds fields, and changes nothing else
        accs, losses = with_clients["local_accs"], with_clients["local_losses"]
        which = with_clients["clients"] if eval_table.get("clients", "sampled") == "sampled" else accs
        assert sorted(accs, key=int) == sorted(losses, key=int) == sorted(map(str, which), key=int)
        assert len(accs) == with_clients["local_clients"]
        assert sum(accs.values()) / len(accs) == pytest.approx(with_clients["local_acc"], rel=1e-12)
        assert sum(losses.values()) / len(losses) == pytest.approx(with_clients["local_loss"], rel=1e-12)
        assert ("local_val_accs" in with_clients) == ("validation" in eval_table)
        if "validation" in eval_table:
            vals = with_clients["local_val_accs"]
            assert sum(vals.values()) / len(vals) == pytest.approx(with_clients["local_val_acc"], rel=1e-12)
        assert "local_accs" not in means
    assert len(on[-1]["local_accs"]) >= len(on[0]["local_accs"])
