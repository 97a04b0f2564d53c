"""[privacy] refusals and warnings that were missing: a batch-coupling term under dp-sgd, FedChill's label counts,
dropped stragglers in the skipped-round warning."""

from __future__ import annotations

from typing import Any, Mapping

import pytest
import torch

from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.training.terms import Context, StepView, term_spec, user_term
from test_privacy import TINY  # seed 3, digits, an MLP, 4 clients, dp-fedavg

pytest.importorskip("opacus")


def build(**over: Any) -> Any:
    return build_experiment(load_config(None, {**TINY, **over}))


def refusal(**over: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        build(**over)
    return info.value


# ---------------------------------------------------------------- F1: a term that couples the batch's samples


def test_dp_sgd_refuses_a_term_that_couples_the_samples_of_a_batch() -> None:
    # dp-sgd evaluates the loss one sample at a time (xi[None]); FedDecorr's term is 0 for N = 1, so the run was the run
    # without it, bitwise, and was reported as FedDecorr
    err = refusal(**{"privacy.mechanism": "dp-sgd", "objective.terms": ["decorr"]})
    assert err.field == "objective.terms[0]" and "'decorr' couples the samples of a batch" in str(err) and "\n" not in str(err)
    two = refusal(**{"privacy.mechanism": "dp-sgd", "objective.terms": ["ntd", {"name": "decorr", "beta": 0.5}]})
    assert two.field == "objective.terms[1]"  # the entry, not the per-sample one before it


@pytest.mark.parametrize("mechanism", ["dp-fedavg", "local"])
def test_mechanisms_that_noise_the_update_keep_the_term(mechanism: str) -> None:
    build(**{"privacy.mechanism": mechanism, "objective.terms": ["decorr"]})  # the batch's term is inside the clipped update


def test_per_batch_is_not_coupling() -> None:
    # FedNTD's and MOON's terms read the batch (per_batch) but are sums over its samples: dp-sgd keeps them
    assert term_spec("decorr", "objective.terms").couples_samples
    assert not term_spec("ntd", "objective.terms").couples_samples
    build(**{"privacy.mechanism": "dp-sgd", "objective.terms": ["ntd"]})


class CoupledTerm:
    """A plugin's batch term over the batch's mean feature: it declares couples_samples as a class attribute."""

    per_batch = True
    couples_samples = True
    captures: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context, step: StepView) -> torch.Tensor:
        return step.features.mean(dim=0).square().sum()


def test_a_term_class_declares_coupling_as_a_class_attribute() -> None:
    assert user_term(CoupledTerm, "CoupledTerm", "objective.terms").couples_samples
    CoupledTerm.couples_samples = False
    try:
        assert not user_term(CoupledTerm, "CoupledTerm", "objective.terms").couples_samples
    finally:
        CoupledTerm.couples_samples = True


def test_dp_sgd_refuses_a_coupling_term_passed_from_python() -> None:
    """Only [objective]'s terms were checked: the same class passed as chillfl.run(terms=[...]) ran, silently without it."""
    import chillfl
    from chillfl.extend import FedAvg

    data = chillfl.TensorData(torch.randn(40, 6), torch.arange(40) % 3, torch.randn(12, 6), torch.arange(12) % 3, num_classes=3)
    config = {"federation": {"num_clients": 2, "rounds": 1}, "privacy": {"mechanism": "dp-sgd", "noise_multiplier": 1.0}}
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=torch.nn.Linear(6, 3), data=data, aggregator=FedAvg(), terms=[CoupledTerm()], config=config, write=False, progress=False)
    assert err.value.field == "terms[0]" and "couples the samples" in err.value.message


# ---------------------------------------------------------------- F2: FedChill's temperatures read label counts


@pytest.mark.parametrize("mechanism", ["dp-sgd", "dp-fedavg", "local"])
@pytest.mark.parametrize("table", [{"normalisation": "minmax"}, {"measure": "size"}])
def test_fedchill_whose_server_reads_every_clients_counts_is_refused_by_every_mechanism(mechanism: str, table: dict[str, Any]) -> None:
    err = refusal(**{"privacy.mechanism": mechanism, "temperature": {"policy": "fedchill", **table}})
    option = next(iter(table))
    assert err.field == "privacy.mechanism" and "\n" not in str(err)
    read = "training-set size" if option == "measure" else "label counts"
    assert f"temperature policy 'fedchill' also sends, without noise and outside epsilon, each client's {read}" in str(err)
    assert f"temperature.{option}" in str(err)


def test_dp_sgd_refuses_fedchill_whose_temperature_reads_the_clients_own_counts() -> None:
    err = refusal(**{"privacy.mechanism": "dp-sgd", "temperature": {"policy": "fedchill"}})
    assert err.field == "privacy.mechanism" and "\n" not in str(err)
    assert "temperature policy 'fedchill'" in str(err) and "label counts" in str(err) and "dp-fedavg, local" in str(err)


def test_the_dp_sgd_refusal_of_fedchill_names_its_settings_that_read_nothing() -> None:
    """It said only "use a temperature policy that reads no training labels": FedChill itself reads none with one setting changed."""
    err = str(refusal(**{"privacy.mechanism": "dp-sgd", "temperature": {"policy": "fedchill"}}))
    assert "(this one reads none with temperature.init = false or temperature.s = 0)" in err
    assert "with temperature.t_min = temperature.t_max every client starts at T_max and none is read" in err
    build(**{"privacy.mechanism": "dp-sgd", "temperature": {"policy": "fedchill", "init": False}})


@pytest.mark.parametrize("mechanism", ["dp-fedavg", "local"])
def test_fedchill_computed_on_each_client_is_inside_a_noised_update(mechanism: str) -> None:
    build(**{"privacy.mechanism": mechanism, "temperature": {"policy": "fedchill"}})  # T is a function of the client's data, inside the clipped update


@pytest.mark.parametrize("mechanism", ["dp-sgd", "dp-fedavg", "local"])
def test_fedchill_without_initialisation_reads_no_counts(mechanism: str) -> None:
    build(**{"privacy.mechanism": mechanism, "temperature": {"policy": "fedchill", "init": False}})


@pytest.mark.parametrize("table", [{"s": 0.0}, {"t_max": 0.5, "t_min": 0.5}, {"s": 0.0, "normalisation": "minmax"}])
def test_fedchill_whose_eq7_gives_every_client_t_max_reads_nothing(table: dict[str, Any]) -> None:
    """s = 0 or T_min = T_max: Eq. 7 is T_max whatever the counts, the schedule `fixed` would run (it was refused)."""
    build(**{"privacy.mechanism": "dp-sgd", "temperature": {"policy": "fedchill", **table}})


def test_fedchill_by_size_says_it_reads_sizes() -> None:
    err = refusal(**{"privacy.mechanism": "dp-fedavg", "temperature": {"policy": "fedchill", "measure": "size"}})
    assert "training-set size" in str(err) and "label counts" not in str(err)


@pytest.mark.parametrize("table", [{}, {"normalisation": "minmax"}, {"measure": "size"}])
def test_fedchill_without_privacy_builds_as_before(table: dict[str, Any]) -> None:
    exp = build(**{"privacy.mechanism": "none", "temperature": {"policy": "fedchill", **table}})
    assert exp is not None


# ---------------------------------------------------------------- F3: dropped stragglers thin who reports


def test_the_skipped_round_warning_counts_dropped_stragglers(caplog: pytest.LogCaptureFixture) -> None:
    # 4 clients, 4 a round under Poisson (q = 1), min_clients 2: everyone reports, P[1 <= Binomial(3, 1) < 2] = 0, no
    # warning; stragglers = 0.9 dropped leave q = 0.1, P[exactly 1 of 3] = 0.243 a round, far above delta = 1e-3.
    # Stragglers that report their partial work (the default) thin nobody.
    from chillfl.privacy.mechanisms.dp_fedavg import DpFedAvgOptions, check

    base = {**TINY, "federation.sampling": "poisson", "federation.min_clients": 2, "federation.stragglers": 0.9}
    with caplog.at_level("WARNING"):
        check(DpFedAvgOptions(), load_config(None, base))
    assert not any("privacy.delta" in r.getMessage() for r in caplog.records)
    with caplog.at_level("WARNING"):
        check(DpFedAvgOptions(), load_config(None, {**base, "federation.straggler_policy": "drop"}))
    [line] = [r.getMessage() for r in caplog.records if "privacy.delta" in r.getMessage()]
    assert "= 0.1 over 4 clients" in line
