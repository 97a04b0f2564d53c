"""Building the soft-label protocol from a run's parts, and checking ``[distillation]`` against the run first."""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator
from typing import Any

import torch

from chillfl.aggregation.registry import refuse_unused_options
from chillfl.capabilities import FORWARD, Cost
from chillfl.config import RunConfig
from chillfl.errors import ConfigError
from chillfl.models.assign import per_client_architectures
from chillfl.models.inputs import check_index_rows
from chillfl.once import warn_once
from chillfl.paths import check_writable_dir
from chillfl.options import require
from chillfl.protocols.common import Evaluation
from chillfl.protocols.parts import Experiment, build_client_models
from chillfl.seeds import derive_seed
from chillfl.settings.distillation import SECTION, DistillationSetup
from chillfl.training.local import train_client
from chillfl.training.schedule import StageSteps

from .client import PublicPretraining
from .method import SoftLabelClientHalf, SoftLabelMethod, spec_of
from .public import public_inputs, public_labels, refuse_own_rows
from .server import SoftLabelProtocol

Params = dict[str, torch.Tensor]
log = logging.getLogger(__name__)


def default_algorithm() -> str:
    """The ``[algorithm]`` a config gets when it names none: the only one this protocol accepts, as it builds no aggregator."""
    return str(RunConfig().algorithm["name"])


def soft_label_cost(config: RunConfig) -> Cost:
    """The public-set work of a round, for time estimates: each client distils on P^{t-1} (``distill_epochs``) and labels
    P^t (a forward, ``FORWARD`` of a trained sample; every sample, as without the cache), the server model trains on P^t
    (``server_epochs``); none for a method that shares no soft-labels.

    The pretraining a method declares (its spec's :class:`~.method.Pretraining`, FedMD's transfer learning), ``epochs`` over
    the labelled pool P at each client's first participation and once for the server model, is spread over the rounds:
    :func:`pretraining_cost`."""
    setup = config.distillation_setup
    assert setup is not None, "the soft-label protocol runs only when [distillation] names a method"
    c = setup.common
    spec = spec_of(setup)
    if not spec.collaborative:
        return Cost()
    cost = Cost(public_samples=(c.distill_epochs + FORWARD) * c.subset_size, server_samples=(c.server_epochs or config.client.epochs) * c.subset_size)
    asked = spec.pretraining(setup.options)
    return cost if asked is None or not asked.epochs else cost.plus(pretraining_cost(config, asked.epochs * c.public_size))


def pretraining_cost(config: RunConfig, samples: float) -> Cost:
    """``samples`` trained once by each client, at its first participation, and once by the server model, as a round's
    share: the clients expected to take part at least once, N (1 - (1 - m / N)^R) (m of N sampled uniformly each of R
    rounds), times ``samples``, over the R m client-rounds; the server's ``samples`` over the R rounds."""
    fed = config.federation
    m, rounds = fed.sample_size(), fed.rounds
    participants = fed.expected_participants()
    return Cost(public_samples=participants * samples / (rounds * m), server_samples=samples / rounds)


def check_distillation(config: RunConfig, data: Any) -> DistillationSetup:
    """Check the parsed ``[distillation]`` against the rest of the run and its data, before a run starts (called by ``build_experiment``)."""
    setup = config.distillation_setup
    assert setup is not None, "the soft-label protocol runs only when [distillation] names a method"
    spec = spec_of(setup)
    algorithm, default = config.algorithm.get("name"), default_algorithm()
    require(
        algorithm == default,
        "algorithm.name",
        f"the soft-label protocol trains clients with the base loss only (no aggregator, no objective terms); "
        f"use {default!r} (the default), got {algorithm!r}",
    )
    refuse_unused_options(config.algorithm, default, "the soft-label protocol builds no aggregator")
    if spec.check is not None:
        spec.check(setup.options, config)
    if spec.notes is not None:  # before anything is written: a dry run says them too
        for note in spec.notes(setup.options, config):
            if not isinstance(note, str):  # a plugin's hook: one line, not a log record of a list
                raise ConfigError(f"{SECTION}.method", f"{setup.common.method!r}: its notes hook must return strings, got {type(note).__name__}")
            warn_once(log, note)
    if setup.common.state_dir is not None:  # a file or read-only folder: one line now, not a traceback in round 1
        check_writable_dir(setup.common.state_dir, f"{SECTION}.state_dir")
    if spec.collaborative:
        check_server_lr_floor(config, setup)
        pool = public_inputs(setup, data, config.seed, config.data_dir)
        refuse_own_rows(setup.common, pool, data.dataset, config.dataset.get("name"))
        if setup.common.public_dataset is not None:  # a pool carved from the data was checked with its training rows
            check_index_rows(config.model, data, pool, f"the public inputs of {setup.common.public_dataset!r}")
    asked = spec.pretraining(setup.options)
    if asked is not None and asked.epochs:
        public_labels(setup, data, config.seed, config.data_dir, asked.field)
    return setup


def check_server_lr_floor(config: RunConfig, setup: DistillationSetup) -> None:
    """Refuse, before the run, a server model's distillation whose local steps the schedule over steps
    (``client.lr_schedule_over = "steps"``, the phase keeps the run's optimiser) takes below float32's smallest normal lr.

    Why: ``server_epochs`` over the round's public subset runs the schedule further down than the clients' training,
    and was refused only when the server first trained (after round 1's client updates, or hours in with a decayed lr).
    Its lr is its own (``server_lr``, else ``distill_lr``), the same every round; its rows are the subset a round draws
    (``subset_size``; a filter keeps fewer, so fewer steps)."""
    c = setup.common
    config.client.check_stage_lr_floor(config.federation.rounds, StageSteps(
        c.server_epochs or config.client.epochs, f"{SECTION}.server_epochs", c.server_batch_size or c.distill_batch_size or config.client.batch_size,
        config.client.optim(), c.subset_size, f"the {c.subset_size} public rows a round draws", c.server_lr or c.distill_lr), "client")


_CHECKING = contextvars.ContextVar("chillfl_softlabels_checking", default=False)
"""Set while a run is built only to be checked (``--dry-run``): the server's pretraining is then skipped."""


@contextlib.contextmanager
def only_checking() -> Iterator[None]:
    """Build the protocol without the server model's pretraining on the public set. Why: ``--dry-run`` ("nothing is
    run") trained the server model for ``transfer_epochs`` epochs there; its options are checked before, at build."""
    token = _CHECKING.set(True)
    try:
        yield
    finally:
        _CHECKING.reset(token)


def pretrain_server(model: Any, state: Params, pretraining: PublicPretraining) -> Params:
    """The server model's pretraining on the labelled public set, once, before round 1."""
    gen = torch.Generator().manual_seed(derive_seed(pretraining.seed, "transfer", "server"))
    out = train_client(
        model, state, pretraining.x, pretraining.y, spec=pretraining.specs[0], lr=pretraining.lr, temperature=1.0, context={}, generator=gen,
    )
    return out.params


def build_soft_label_sharing(exp: Experiment, evaluation: Evaluation) -> SoftLabelProtocol:
    """Soft-label sharing (``[distillation]``): its method's spec, heterogeneous clients built, the server's pretraining done."""
    setup = exp.config.distillation_setup
    assert setup is not None, "the soft-label protocol runs only when [distillation] names a method"
    hetero = build_client_models(exp) if per_client_architectures(exp.config.model) else None
    protocol = SoftLabelProtocol(exp, setup, evaluation, hetero, spec_of(setup))
    refuse_one_row_batches(setup, protocol)
    if protocol.client.pretraining is not None and not _CHECKING.get():
        protocol.server_state = pretrain_server(protocol.model, protocol.server_state, protocol.client.pretraining)
    return protocol


def refuse_one_row_batches(setup: DistillationSetup, protocol: SoftLabelProtocol) -> None:
    """Refuse public-set batches of one row that a model of the run cannot train on, before anything is run.

    Why: the partition check (``client.batch_size``, one-row clients) left out the public set, so a batch-norm model
    raised mid-run ("Expected more than 1 value per channel") when the server model (and every client, on the rows
    sent down) distilled on a P^t of ``subset_size = 1``, on batches of one, or pretrained on a pool of one row. A filter
    that leaves one row at run time skips that round's public rows instead (:meth:`SoftLabelProtocol.one_row_failure`)."""
    c = setup.common
    if not protocol.collaborative:
        return
    server_ones = c.server_batch_size == 1 or (c.server_batch_size is None and c.distill_batch_size == 1)
    ones = [  # (is one, the option, what trains on one row, the server's side, the clients' side)
        (protocol.client.pretraining is not None and c.public_size == 1, "public_size", "the labelled public set's pretraining trains on its one row", True, True),
        (c.subset_size == 1, "subset_size", "the server model and every client distil on P^t's one row each round", True, True),
        (c.distill_batch_size == 1, "distill_batch_size", "the clients (and the server model, without server_batch_size) distil on batches of one row",
         server_ones, True),
        (c.server_batch_size == 1, "server_batch_size", "the server model distils on batches of one row", True, False),
    ]
    for one, field, what, server, clients in ones:
        why = protocol.one_row_failure(server, clients) if one else None
        if why is not None:
            raise ConfigError(f"{SECTION}.{field}", f"is 1: {what}, and {why}; set it to 2 or more")


def make_method(setup: DistillationSetup, num_classes: int, seed: int) -> SoftLabelMethod[Any]:
    """The server half of the method ``setup`` names, for a run with ``num_classes`` classes."""
    c = setup.common
    return spec_of(setup).build(setup.options, num_classes, seed, c.index_encoding, max(c.public_size, 1))


def make_client_half(setup: DistillationSetup, num_classes: int, seed: int) -> SoftLabelClientHalf[Any, Any]:
    """The client half of the method ``setup`` names (what every client runs)."""
    return spec_of(setup).client_half(setup.options, num_classes, seed)
