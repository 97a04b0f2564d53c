"""The round loop: the one loop every protocol runs in, under every executor.

Read top to bottom, one round is::

    sampled = draw_clients(seed, round)            # sorted client ids, own RNG stream (fixed count or Poisson)
    avail   = availability(seed, round, sampled)   # dropout: who reports; stragglers: their share of work
                                                   # (fewer than min_clients: retry or skip the round)
    tasks   = protocol.configure(round, available) # a typed downlink per client
    others  = protocol.configure_unreported(...)   # only a protocol that trains clients it does not aggregate
                                                   # (TrainsUnreported): every other client with rows
    replies = executor.map(tasks + others)         # the client updates (pure); the others' replies go to
                                                   # protocol.receive_unreported, never to server_update
    record  = protocol.server_update(round, tasks, replies)   # in client-id order
    callbacks: writer, plots, checkpoint, ...      # by the caller, per yielded record

Every random choice draws from a stream derived from (seed, purpose, round,
client), so a run is a pure function of its config, and a run resumed at
round r continues exactly as if it had never stopped: nothing but the
protocol's ``state_dict()`` carries over between rounds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterator, Sequence

import numpy as np
import torch

from chillfl.config import FederationConfig
from chillfl.engine.protocol import ClientReply, ClientTask, Executor, ObservesSkippedRounds, ReleasesEmptyRounds, ServerProtocol, TrainsUnreported, capability
from chillfl.engine.record import Json, RoundRecord
from chillfl.seeds import derive_seed

Redraw = Callable[[int, int], torch.Tensor | None]
"""``(client id, round) -> inputs``: a client's training inputs drawn for one visit (None: as configured)."""


def sample_clients(seed: int, round: int, num_clients: int, k: int) -> list[int]:
    """k distinct client ids for this round, sorted; independent of every other random stream."""
    rng = np.random.default_rng(derive_seed(seed, "sample", round))
    if k >= num_clients:
        return list(range(num_clients))
    return sorted(int(c) for c in rng.choice(num_clients, size=k, replace=False))


def poisson_clients(seed: int, round: int, num_clients: int, rate: float) -> list[int]:
    """Each client independently with probability ``rate``, sorted (possibly none): Poisson sampling, the sampling
    the subsampled-Gaussian accountant bounds. One uniform draw per client id from the round's own stream."""
    rng = np.random.default_rng(derive_seed(seed, "poisson", round))
    return [int(c) for c in np.flatnonzero(rng.random(num_clients) < rate)]


def draw_clients(seed: int, round: int, num_clients: int, k: int, sampling: str = "fixed") -> list[int]:
    """The round's sampled clients under ``federation.sampling``: k of them (``fixed``), or each with q = k / num_clients (``poisson``)."""
    if sampling == "poisson":
        return poisson_clients(seed, round, num_clients, min(k / num_clients, 1.0))
    return sample_clients(seed, round, num_clients, k)


def poisson_rate_note(rules: FederationConfig) -> str | None:
    """The note (said once a process) when Poisson sampling draws at a q other than the ``client_fraction`` written:
    q is ``sample_size() / num_clients``, ``max(1, floor(C N)) / N``, so a fraction below 1/N (or not a multiple of it)
    moves. Why: a privacy-amplification study at ``client_fraction = 0.01`` over 4 clients drew at q = 0.25, 25 times
    the rate asked for, and nothing said so (the accountant charges the q used, so epsilon stayed right)."""
    if rules.sampling != "poisson" or rules.clients_per_round is not None:  # a count set: ignored_fraction_note's case
        return None
    k, n = rules.sample_size(), rules.num_clients
    if abs(k / n - rules.client_fraction) <= 1e-9 * rules.client_fraction:
        return None
    return (f"note: federation.sampling = 'poisson' draws each client with q = {k}/{n} = {k / n:.6g}, not federation.client_fraction = "
            f"{rules.client_fraction:g}: q is max(1, floor(client_fraction x num_clients)) / num_clients, and the privacy accountant "
            "charges that q")


MAX_RETRIES = 10
"""Redraws of who is available when ``on_too_few = "retry"``, before the round is skipped."""


def _varies(rules: FederationConfig) -> bool:
    """Whether participation can differ from "every sampled client does all its work"."""
    return bool(rules.dropout or rules.stragglers or rules.min_clients > 1)


@dataclass
class Availability:
    """Who of the sampled clients reports this round, and the share of its local steps each completes."""

    reporting: list[int]
    dropped: list[int] = field(default_factory=list)
    work: dict[int, float] = field(default_factory=dict)  # stragglers only; everyone else does all its work
    attempts: int = 1
    """The availability draws made: 0 when none was (nobody sampled, or fewer than ``min_clients`` with rows under a
    protocol that releases no empty round; one that does, dp-fedavg, draws once to see whether nobody reports)."""
    no_data: list[int] = field(default_factory=list)
    """Sampled clients without training rows: not configured, as if they had dropped out (never counted as reporting)."""
    nobody: bool = False
    """Nobody reported at the round's first draw (none drawn, every drawn client dropped out or without rows): a
    protocol that releases such a round (:class:`~chillfl.engine.protocol.ReleasesEmptyRounds`) runs it without clients."""

    @property
    def skipped(self) -> bool:
        return not self.reporting


def availability(
    seed: int, round: int, sampled: Sequence[int], rules: FederationConfig, empty: Collection[int] = frozenset(), release: bool = False,
) -> Availability:
    """Seeded dropout and straggler draws (``[federation]`` options), one stream per (round, attempt), in client-id order.

    ``empty``: the clients without training rows (:meth:`~chillfl.data.FederatedData.without_training_rows`). A sampled
    one reports nothing, as a dropped client does (``no_data`` in the record), and does not count towards
    ``min_clients``: configured, it crashed the methods that divide by its steps or rows (SCAFFOLD, FedNova,
    q-FFL, ...) or averaged its untrained model in. The draws are the same with or without it.

    ``release``: the protocol releases a round nobody reported (:class:`~chillfl.engine.protocol.ReleasesEmptyRounds`).
    Then a first draw with nobody reporting is that round (``nobody``), neither retried nor skipped, even when fewer than
    ``min_clients`` were sampled: what runs is the first draw's outcome whenever it has no reporting client, so the
    rounds that differ from it are only those with 1 .. min_clients - 1 reporting (retried or skipped as before).

    ``dropped`` is what a draw removed (the last draw's, when every attempt left too few), and ``attempts`` the draws
    made: none (``[]``, 0) when too few were sampled for any draw to matter (one, under a protocol that releases an
    empty round). Why: the too-few paths listed every sampled
    client as dropped (``attempts: 1`` with no draw made, ``dropout = 0``), so the "no round trained" line blamed
    ``federation.dropout`` for a sample too small for ``min_clients``.
    """
    if not sampled:  # Poisson sampling drew nobody: nothing to draw
        return Availability([], attempts=0, nobody=True)
    no_data = [c for c in sampled if c in empty]
    few = len(sampled) - len(no_data) < rules.min_clients  # too few could report even without dropout: no redraw helps
    if few and not release:  # the first draw only tells whether nobody reports, which matters only when that round is released
        return Availability([], [], {}, 0, no_data)
    dropped: list[int] = []
    attempts = 1 if few else 1 + (MAX_RETRIES if rules.on_too_few == "retry" else 0)
    for attempt in range(attempts):
        rng = np.random.default_rng(derive_seed(seed, "availability", round, attempt))
        drop = rng.random(len(sampled)) < rules.dropout
        slow = rng.random(len(sampled)) < rules.stragglers
        share = rng.uniform(0.0, 1.0, len(sampled)) if rules.straggler_work == "uniform" else np.full(len(sampled), rules.straggler_fraction)
        if rules.straggler_policy == "drop":  # FedProx's FedAvg baseline: a straggler's partial work never arrives
            drop = drop | slow
        reporting = [c for c, d in zip(sampled, drop) if not d and c not in empty]
        dropped = [c for c, d in zip(sampled, drop) if d and c not in empty]
        if len(reporting) >= rules.min_clients:
            work = {c: float(w) for c, d, s, w in zip(sampled, drop, slow, share) if s and not d and c not in empty}
            return Availability(reporting, dropped, work, attempt + 1, no_data)
        if release and attempt == 0 and not reporting:  # the round as drawn, released without clients
            return Availability([], dropped, {}, 1, no_data, nobody=True)
    return Availability([], dropped, {}, attempts, no_data)  # too few reported at every draw: the last one's drops


def releases_empty(protocol: ServerProtocol) -> bool:
    """Whether ``protocol`` releases a round nobody reported (:class:`~chillfl.engine.protocol.ReleasesEmptyRounds`); else such a round is skipped."""
    released = capability(protocol, ReleasesEmptyRounds)  # not isinstance: a wrapper's (privacy's, an attack's) too, on Python 3.12
    return released is not None and released.releases_empty_rounds()


def _on_skip(protocol: ServerProtocol, round: int) -> dict[str, Json]:
    """The protocol's ``skipped_round(round)``, if it has one (:class:`~chillfl.engine.protocol.ObservesSkippedRounds`): its metrics for a skipped round's record (the privacy
    accountant charges the round under Poisson sampling, :class:`chillfl.privacy.protocol.Accounted`); none without it."""
    observer = capability(protocol, ObservesSkippedRounds)
    return {} if observer is None else dict(observer.skipped_round(round))


def _unreported(protocol: ServerProtocol, round: int, tasks: Sequence[ClientTask[Any, Any]], num_clients: int, empty: Collection[int]) -> list[ClientTask[Any, Any]]:
    """The tasks of the clients the protocol trains this round without their reporting (:class:`TrainsUnreported`): every
    client with training rows outside ``tasks``; none where the protocol trains the reporting clients only, or nobody reports."""
    trainer = capability(protocol, TrainsUnreported)
    if not tasks or trainer is None or not trainer.trains_unreported():
        return []
    reporting = {t.client_id for t in tasks}
    return trainer.configure_unreported(round, [c for c in range(num_clients) if c not in reporting and c not in empty])


def _train(executor: Executor, protocol: ServerProtocol, round: int, tasks: Sequence[ClientTask[Any, Any]],
           others: Sequence[ClientTask[Any, Any]]) -> list[ClientReply[Any, Any]]:
    """The reporting clients' replies, in ``tasks``' order. ``others`` (:func:`_unreported`) train in the same executor
    call, everyone in client-id order, and their replies go to the protocol's ``receive_unreported`` here, before its
    ``server_update`` reads the round: no wrapper around it sees them."""
    if not others:
        return executor.map(tasks) if tasks else []
    trainer = capability(protocol, TrainsUnreported)
    assert trainer is not None, "only a protocol that trains unreported clients configures them"
    replies = {r.client_id: r for r in executor.map(sorted((*tasks, *others), key=lambda t: t.client_id))}
    trainer.receive_unreported(round, others, [replies[t.client_id] for t in others])
    return [replies[t.client_id] for t in tasks]


def run_rounds(
    protocol: ServerProtocol,
    executor: Executor,
    *,
    seed: int,
    num_clients: int,
    clients_per_round: int,
    rounds: int,
    start: int = 0,
    participation: FederationConfig = FederationConfig(),
    redraw: Redraw | None = None,
    empty: Collection[int] = frozenset(),
) -> Iterator[dict[str, Json]]:
    """Rounds ``start`` .. ``rounds - 1`` of ``protocol``; yields one metrics record (plain JSON) per round.

    ``redraw(client, round)``: that client's training inputs for that round, replacing those the
    protocol configured (a user Dataset's random transforms, drawn anew at every visit;
    :meth:`chillfl.data.federated.FederatedData.client_redraw`), or None to keep them.

    A round with fewer than ``min_clients`` reporting clients (after retries),
    or one in which Poisson sampling drew nobody, is skipped: nothing trains, the
    protocol's state stays (but for what its optional ``skipped_round(round)``
    hook does: :func:`_on_skip`), and its record says ``skipped``. ``empty``: clients without training rows, never configured
    (:func:`availability`; the record lists the round's as ``no_data``).

    Except: a protocol that releases a round nobody reported (:func:`releases_empty`: DP-FedAvg's noise alone) runs
    ``server_update(round, [], [])`` on a round whose first draw has nobody reporting; its record has no clients, says
    ``nobody_reported``, ``sampled``, ``dropped`` and ``attempts``, and has no ``skipped``: the model moved, and the round
    evaluates it as any other does.
    """
    release = releases_empty(protocol)
    for rnd in range(start, rounds):
        sampled = draw_clients(seed, rnd, num_clients, clients_per_round, participation.sampling)
        avail = availability(seed, rnd, sampled, participation, empty, release)
        if avail.skipped and not (release and avail.nobody):
            skipped: dict[str, Json] = {"sampled": sampled, "dropped": avail.dropped, "skipped": True, "attempts": avail.attempts, **_on_skip(protocol, rnd)}
            yield RoundRecord(rnd + 1, [], metrics={**skipped, **({"no_data": avail.no_data} if avail.no_data else {})}).to_json()
            continue
        tasks = protocol.configure(rnd, avail.reporting) if avail.reporting else []  # nobody reported: no downlink, no training
        others = _unreported(protocol, rnd, tasks, num_clients, empty)
        for task in (*tasks, *others):
            task.work = avail.work.get(task.client_id, 1.0)  # a client that does not report is outside the availability draw
            if redraw is not None and (x := redraw(task.client_id, rnd)) is not None:  # a user Dataset's transforms, drawn for this visit
                task.data = dataclasses.replace(task.data, x=x.to(task.data.x.device))
        replies = _train(executor, protocol, rnd, tasks, others)
        record = protocol.server_update(rnd, tasks, replies)
        if not tasks:
            record.metrics.update({"sampled": sampled, "dropped": avail.dropped, "nobody_reported": True, "attempts": avail.attempts})
        elif _varies(participation):
            record.metrics.update({"sampled": sampled, "dropped": avail.dropped, "stragglers": {str(c): w for c, w in avail.work.items()}, "attempts": avail.attempts})
        if avail.no_data:
            record.metrics.update({"sampled": sampled, "no_data": avail.no_data})
        yield record.to_json()
