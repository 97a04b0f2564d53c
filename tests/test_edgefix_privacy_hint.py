"""A divergence hint names what the run has that blew the model up: ``[privacy]``'s noise, an attack, the aggregator's
server-step options only where its options table has them.

Why: ``privacy.noise_multiplier = 1e30`` was blamed on ``client.lr``, or (dp-fedavg) on "the aggregator's server-side
step options", which plain FedAvg does not have; an attack's scaled uploads got the same server-step hint.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from chillfl.data import FederatedData
from chillfl.errors import LOSS_HINT, Diverged
from chillfl.experiment import build_data
from chillfl.protocols.book import ServerBook
from chillfl.runner import run_experiment
from test_pa3fed_e2e import tiny_config

MEASURED = {"federation.rounds": 3, "model.name": "mlp", "eval.clients": "sampled"}
PRIVACY = "lower privacy.noise_multiplier or privacy.clip_norm"


@pytest.fixture(scope="module")
def data() -> FederatedData:
    return build_data(tiny_config({"name": "fedavg"}, **MEASURED))


def _diverged(data: FederatedData, **extra: Any) -> str:
    with pytest.raises(Diverged) as caught:
        run_experiment(tiny_config({"name": "fedavg"}, **{**MEASURED, **extra}), data=data, write=False, progress=False)
    return str(caught.value)


def test_dp_fedavg_noise_is_named_not_server_step_options(data: FederatedData) -> None:
    said = _diverged(data, **{"privacy.mechanism": "dp-fedavg", "privacy.noise_multiplier": 1e30})
    assert "after round 1" in said and said.endswith(f"{PRIVACY} ([privacy] mechanism = 'dp-fedavg' adds noise of scale sigma x C))"), said
    assert "server-side step options" not in said and "server_lr" not in said


def test_dp_sgd_noise_leads_the_loss_hint(data: FederatedData) -> None:
    said = _diverged(data, **{"privacy.mechanism": "dp-sgd", "privacy.noise_multiplier": 1e30})
    assert said.startswith("round 1, client ") and f"({PRIVACY} ([privacy] mechanism = 'dp-sgd'" in said and said.endswith(f"; or {LOSS_HINT})"), said


def _book(algorithm: str, privacy: str | None = None, attack: str | None = None) -> ServerBook:
    book = ServerBook.__new__(ServerBook)  # only the parts the hints read
    config = SimpleNamespace(algorithm={"name": algorithm}, privacy=SimpleNamespace(enabled=privacy is not None, mechanism=privacy),
                             attack=SimpleNamespace(enabled=attack is not None, kind=attack))
    book.evaluation = cast(Any, SimpleNamespace(config=config))
    book.blown_after = 0
    return book


def test_an_attack_is_named_and_fedavg_gets_no_step_options() -> None:
    said = _book("fedavg", attack="scaling").server_step()
    assert said is not None and said.endswith("blew the model up: lower the attack's strength (attack.kind = 'scaling' and its options)"), said
    assert "server-side" not in said


def test_step_options_come_from_the_options_table() -> None:
    said = _book("fedavgm").server_step()
    assert said is not None and said.endswith("blew the model up: lower algorithm.server_lr"), said  # set or not in the run's table
    said = _book("scaffold", privacy="dp-fedavg").server_step()
    assert said is not None and said.endswith(f"lower algorithm.global_lr or {PRIVACY[6:]} ([privacy] mechanism = 'dp-fedavg' adds noise of scale sigma x C)")


def test_loss_hint_without_suspects_is_the_plain_one() -> None:
    from chillfl.errors import loss_hint

    assert loss_hint() == LOSS_HINT
    assert loss_hint(["lower a", "lower b"]) == f"lower a; lower b; or {LOSS_HINT}"
    book = _book("fedavg", privacy="local")
    book.blown_after = None
    assert book.hint() == f"{PRIVACY} ([privacy] mechanism = 'local' adds noise of scale sigma x C); or {LOSS_HINT}"


def test_a_custom_aggregator_has_no_step_options_and_a_wrappers_base_has_its_own() -> None:
    """An aggregator passed from Python runs as ``algorithm.name = "custom"``: the registry's refusal of that name replaced
    the divergence (rev116d 1). PA3Fed over FedAdam sizes its server step with ``base_options.server_lr`` (rev116d 2)."""
    assert _book("custom").step_options() == []
    assert _book("custom").server_step() is None  # nothing the run has: the plain hint
    book = _book("pa3fed")
    book.evaluation.config.algorithm["base"] = "fedadam"
    assert book.step_options() == ["algorithm.base_options.server_lr"]
