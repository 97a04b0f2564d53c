"""FedCP's clients train their head from the personal head they keep (the authors' ``set_parameters`` sends the body
only; ``generate_upload_head`` uploads (W^hp + W^hg) / 2), so the head a returning client uploads is no update of the
head it was sent: FedCP declares ``trains_from_own_start`` and a model attack on it is refused on ``attack.kind``
before the run (before, ``sign_flip`` forged from the sent head, silently another upload)."""

from __future__ import annotations

import pytest
import torch

from chillfl.aggregation.base import Local, Train
from chillfl.aggregation.fedcp import PREFIX, FedCP, FedCPClient, FedCPOptions
from chillfl.cli import main
from chillfl.training.local import LocalSpec
from test_fedcp import model, start


def test_a_returning_clients_training_starts_its_head_from_the_head_it_keeps() -> None:
    net = model()
    fedcp = FedCP(net, FedCPOptions(lam=0.0, noise="none"), seed=0)
    half = fedcp.client_half()
    assert isinstance(half, FedCPClient)
    glob = start(net)
    context = dict(fedcp.downlink(0, 0, glob).context)
    kept = {PREFIX + "weight": torch.full((2, 2), 3.0), PREFIX + "bias": torch.tensor([1.0, -1.0])}
    local = Local(0, torch.ones(2, 2), torch.zeros(2, dtype=torch.long), glob, context, 0.1, kept, 0, LocalSpec(epochs=1, batch_size=2))
    job = next(half.train(local))
    assert isinstance(job, Train)
    # the head the client trains (W^hp) starts at its own 3's, not at the sent head (the server never saw them)
    assert torch.equal(job.start["net.2.weight"], torch.full((2, 2), 3.0)) and not torch.equal(job.start["net.2.weight"], glob["2.weight"])
    assert torch.equal(job.start["net.2.global_head.weight"], glob["2.weight"])  # W^hg, frozen: the sent head
    assert torch.equal(job.start["net.0.weight"], glob["0.weight"])  # the body: the sent one


@pytest.mark.parametrize("upload", ["mixed", "personal"])
def test_a_model_attack_on_fedcp_is_refused_in_one_line_on_attack_kind(upload: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "algorithm.name=fedcp", f'algorithm.upload_head="{upload}"', 'attack={kind="sign_flip", clients=[0]}', "--dry-run"]
    assert main(args) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("chillfl: error: attack.kind: 'sign_flip' forges each attacker's upload from its update w - start, and algorithm 'fedcp' "
                           "trains from a start the server does not know (from its second round each client trains its head from the personal head")


def test_a_data_attack_on_fedcp_runs() -> None:
    assert main(["run", "algorithm.name=fedcp", 'attack={kind="label_flip", clients=[0]}', "--dry-run"]) == 0
