"""Methods whose clients train through a forward of their own refuse a batch term in one line, with no run folder left.

FedRoD, FML, APFL and FedDBE raised a ValueError from their client half's ``objectives`` as the protocol was built:
a traceback, exit 1, and ``results/<name>.partial`` left behind. Each now refuses through
:func:`chillfl.training.local.refuse_representation_readers`, a ConfigError on the term's ``objective.terms[i]``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.errors import ConfigError
from chillfl.training.local import LocalSpec, refuse_representation_readers

WHY = {
    "fedrod": "FedRoD's loss reads the representation itself",
    "fml": "FML's forward is the pair's stacked logits",
    "apfl": "APFL applies the run's parameter terms to w, and its forward is the pair's",
    "feddbe": "FedDBE's head reads the representation shifted by the PRBM",
    "fedcp": "FedCP's head splits the representation by its policy network",
}


@pytest.mark.parametrize("method", sorted(WHY))
def test_a_batch_term_is_one_line_exit_2_and_no_run_folder(method: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run.toml"
    run.write_text(f'out_dir = "{tmp_path / "results"}"\ndevice = "cpu"\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\n'
                   f'[algorithm]\nname = "{method}"\n[objective]\nterms = [{{name = "decorr"}}]\n', encoding="utf-8")
    assert main(["run", str(run), "federation.rounds=1", "federation.num_clients=4", "federation.clients_per_round=2"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"chillfl: error: objective.terms[0]: {WHY[method]}; a batch term (one that reads the batch's representation) does not compose with it"]
    assert not any((tmp_path / "results").glob("*"))


def test_a_representation_reading_loss_is_refused_on_client_loss_unless_the_method_takes_one() -> None:
    def loss(logits, y, temperature, *, features=None, params=None, context=None):  # type: ignore[no-untyped-def]
        return logits.sum()

    loss.uses_features = True  # type: ignore[attr-defined]
    spec = LocalSpec(1, 8, base_loss=loss)
    with pytest.raises(ConfigError) as err:
        refuse_representation_readers(spec, "its forward is its own")
    assert err.value.field == "client.loss" and err.value.message == "its forward is its own; a representation-based loss does not compose with it"
    refuse_representation_readers(spec, "its forward is its own", losses=False)  # APFL's: the loss is applied to the pair's output
    refuse_representation_readers(LocalSpec(1, 8), "its forward is its own")  # nothing that reads the representation: nothing to refuse
