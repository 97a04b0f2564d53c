"""The seed table's caption says whose accuracies ``local acc`` averages, by the runs' ``eval.clients``."""

from __future__ import annotations

import pytest

from chillfl.report import compare
from chillfl.report.compare import build_seed_rows, format_seed_table
from chillfl.runner import RunOutput
from chillfl.sweeps.plan import Variant


def rows() -> list[dict]:
    base = Variant("FedAvg", {}, None)
    out = RunOutput(None, [{"round": 1, "global_acc": 0.5}], {"final_global_acc": 0.5, "best_global_acc": 0.5, "final_val_acc": 0.5,
                                                              "final_global_loss": 1.0, "final_local_acc": 0.6})
    return build_seed_rows([base], {("FedAvg", 0): out, ("FedAvg", 1): out}, [0, 1], base, base, None)


@pytest.mark.parametrize(("clients", "said", "not_said"), [
    (("sampled",), "of the round's clients", "every client that has reported"),
    (("all",), "over every client that has reported, each at its latest value", "the round's clients"),
    (("all", "sampled"), 'of the round\'s clients (eval.clients = "sampled") or over every client', None),
])
def test_the_local_caption_follows_eval_clients(clients: tuple[str, ...], said: str, not_said: str | None) -> None:
    assert said in compare.local_clients_phrase(clients)
    table = format_seed_table(rows(), "FedAvg", "FedAvg", None, "final", 0.0, local=True, eval_clients=clients)
    caption = next(line for line in table.splitlines() if "local acc =" in line)
    assert said in caption
    assert not_said is None or not_said not in caption


def test_a_comparison_under_eval_clients_all_says_so() -> None:
    import chillfl

    config = {"dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]}, "federation": {"num_clients": 4, "rounds": 1,
              "clients_per_round": 2}, "eval": {"client_split_size": 20, "clients": "all"}, "compare": {"local": True}}
    result = chillfl.compare(config=config, grid={"algorithm.name": ["fedavg"]}, seeds=[0, 1], write=False, progress=False)
    assert "local acc = final mean accuracy over every client that has reported" in result.table
