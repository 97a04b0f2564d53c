"""The accountant around any server protocol: every round's ``epsilon`` in its record, the ledger in its checkpoint.

A wrapper, so no protocol changes: after the inner protocol's ``server_update`` it spends the round's
privacy on the ledger, as the mechanism's spec says:

* under parameter sharing, its ``charges`` hook: which privacy units spend how many Gaussian steps at
  which sampling rate, given the clients that took part (the population once a round, each client that
  reported, each client's completed local steps, ...);
* under the soft-label protocol, the clients' uploads go through the mechanism's ``rows`` hook (this
  wrapper hands the protocol's client side the row release); per client, ``epsilon`` composes one Gaussian
  release (q = 1) per round it uploaded (the bound for any single row, released at most once a round), and
  ``epsilon_upload`` composes every row it released (what its whole upload reveals about its data).

Every step is charged at the plan's noise multiplier per unit of sensitivity (``accounted_sigma``). The
reported ``epsilon`` (at ``delta``) is the largest over the privacy units: the worst-off client.

Checked against: Abadi et al. 2016 Sec. 3.1 and Mironov 2017 Prop. 1 (RDP composes adaptively over rounds),
McMahan et al. 2018 Algorithm 1 (one subsampled step a round for the population), pytorch/opacus 1.6
``opacus/accountants/rdp.py`` (a history of (sigma, q, steps)), 2026-12-02.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping, Sequence


from chillfl.engine.protocol import AroundProtocol, ClientReply, ClientTask, ObservesSkippedRounds, ServerProtocol, capability, protocol_layers
from chillfl.engine.record import Json, RoundRecord
from chillfl.errors import ConfigError
from chillfl.options import short_repr
from chillfl.privacy.accounting import AccountantError, Ledger, finite
from chillfl.privacy.plan import PrivacyPlan
from chillfl.privacy.softlabels import CheckedRelease
from chillfl.privacy.spec import SOFTLABELS, Charge, Participant, rate_and_count
from chillfl.protocols.parameters import ParamUplink
from chillfl.protocols.softlabels.client import SoftLabelClient
from chillfl.protocols.softlabels.messages import SoftLabelRoundDownlink
from chillfl.training.schedule import planned_steps

KEY = "privacy"
"""The ledger's entry in the protocol's checkpointed state."""


def completed(num_samples: int, batch_size: int, epochs: int, work: float) -> int:
    """Local steps a client of ``num_samples`` completes at ``work`` (:func:`chillfl.training.local.completed_steps`' count)."""
    planned = planned_steps(num_samples, batch_size, epochs)
    return planned if work >= 1.0 or planned == 0 else max(1, int(work * planned))


class Accounted(AroundProtocol):
    """``protocol`` with an accountant: same rounds, same state, plus ``epsilon`` in every record and the ledger in checkpoints."""

    OWN = frozenset({"plan", "ledger", "uploads", "every_round", "unaccounted"})

    def __init__(self, protocol: ServerProtocol, plan: PrivacyPlan, every_round: bool = False, unaccounted: frozenset[int] = frozenset()) -> None:
        super().__init__(protocol)
        self.plan = plan
        self.every_round = every_round
        """Charge skipped rounds too (``federation.sampling = "poisson"``): what the mechanism charges for a round nobody
        took part in, so that round t's epsilon is the sampled Gaussian mechanism's over t rounds, as its bound needs.
        A round nobody reported that the aggregator releases (``dp-fedavg``'s noise alone,
        :class:`~chillfl.engine.protocol.ReleasesEmptyRounds`) is no skipped round: it goes through :meth:`server_update`
        with no task, and is charged there under either sampling (a release)."""
        self.unaccounted = unaccounted
        """Clients whose uploads pass unreleased (attackers that skip a client-side mechanism): never charged, and not
        handed to the mechanism's ``charges`` hook, so ``epsilon`` is the honest clients' guarantee."""
        self.ledger = Ledger(plan.delta, plan.accountant, plan.rdp_orders)
        self.uploads = Ledger(plan.delta, plan.accountant, plan.rdp_orders)
        """Soft-label rows: each client's whole uploads (every row it released, composed): ``epsilon_upload``."""
        if self.rows:  # the soft-label client releases its rows through the mechanism's row release
            inner = protocol.client
            rows = plan.spec.rows
            assert isinstance(inner, SoftLabelClient) and rows is not None, "the soft-label protocol's client side, a mechanism that releases rows"
            probabilities = not inner.uses_logits
            released = CheckedRelease(rows(plan.options, plan.noise, probabilities), plan.mechanism, probabilities)  # a plugin's rows off the simplex: one line
            self._client = dataclasses.replace(inner, privacy=released)

    @property
    def rows(self) -> bool:
        """Whether the clients' soft-label rows are what is released (the mechanism's ``rows`` hook, under the soft-label protocol)."""
        return self.plan.protocol == SOFTLABELS

    def server_update(self, round: int, tasks: Sequence[ClientTask[Any, Any]], replies: Sequence[ClientReply[Any, Any]]) -> RoundRecord:
        if self.plan.spec.aggregator is not None:  # it noises the uploads: what else they carry is released as it is
            refuse_undeclared_reports(replies)
        record = self.inner.server_update(round, tasks, replies)
        self.spend(tasks)
        record.metrics["epsilon"] = accounted_epsilon(self.ledger, round)
        if self.rows:
            record.metrics["epsilon_upload"] = accounted_epsilon(self.uploads, round, "epsilon_upload")
        return record

    def skipped_round(self, round: int) -> dict[str, Json]:
        """A round the loop skipped (too few reported; nobody, where the aggregator releases nothing then): charged only under ``every_round``; its record's ``epsilon``
        (with what the inner protocol's own ``skipped_round`` returns: a last round's evaluation)."""
        observer = capability(self.inner, ObservesSkippedRounds)  # the inner may be a wrapper too: not isinstance (Python 3.12)
        inner = {} if observer is None else dict(observer.skipped_round(round))
        if not self.every_round or self.rows:
            return inner
        self.spend([])
        return {**inner, "epsilon": accounted_epsilon(self.ledger, round)}

    def spend(self, tasks: Sequence[ClientTask[Any, Any]]) -> None:
        """One round's privacy cost on the ledger (see the module docstring); the :attr:`unaccounted` clients' tasks charge nothing."""
        p = self.plan
        tasks = [t for t in tasks if t.client_id not in self.unaccounted]
        if not self.rows:
            charges = p.spec.charges
            assert charges is not None, "a mechanism acting on the clients' models declares its charges"
            returned = charges(p.options, p.noise.sizes, [Participant(t.client_id, t.work) for t in tasks])
            charged = list(returned) if isinstance(returned, Iterable) else None
            if charged is None or not all(isinstance(c, Charge) for c in charged):  # a plugin's hook: one line, not a TypeError mid-round
                raise ConfigError("privacy.mechanism", f"{p.mechanism!r}: its charges hook must return chillfl.extend.Charge s, got {short_repr(returned)}")
            odd = next((c for c in charged if not rate_and_count(c.rate, c.steps)), None)
            if odd is not None:  # a rate above 1 was charged as given: an epsilon for a release that cannot happen, with no word
                raise ConfigError("privacy.mechanism", f"{p.mechanism!r}: its charges hook returned {odd!r}: a Charge's rate is a sampling rate in (0, 1] "
                                                       "and its steps a count >= 0")
            for c in charged:
                self.ledger.spend(c.unit, p.accounted_sigma, c.rate, c.steps)
            return
        for task in tasks:  # each row it released: one Gaussian release per round (the worst row: released every round it uploaded)
            released = int(task.downlink.requested.numel()) if isinstance(task.downlink, SoftLabelRoundDownlink) else 0
            if released:
                unit = f"client {task.client_id}"
                self.ledger.spend(unit, p.accounted_sigma, 1.0)
                self.uploads.spend(unit, p.accounted_sigma, 1.0, released)

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), KEY: {"units": self.ledger.state_dict(), "uploads": self.uploads.state_dict()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.inner.load_state_dict({k: v for k, v in state.items() if k != KEY})
        saved = state.get(KEY, {})
        self.ledger.load_state_dict(saved.get("units", {}))
        self.uploads.load_state_dict(saved.get("uploads", {}))


def accounted_epsilon(ledger: Ledger, round: int, key: str = "epsilon") -> float | None:
    """The ledger's epsilon for round ``round``'s record (None: infinite, as :func:`~chillfl.privacy.accounting.finite`
    writes it), or one ConfigError on ``privacy.accountant`` where the accountant cannot give one. Why: the plan probes
    the PRV accountant at a unit's first step and whole planned history only (:func:`chillfl.privacy.build._probe`),
    and a length between can still fail Opacus's discretisation: that was a raw AccountantError traceback mid-run."""
    try:
        return finite(ledger.epsilon())
    except AccountantError as exc:
        raise ConfigError("privacy.accountant", f"round {round}'s {key}: {exc}; use accountant = 'rdp', or more noise") from None
    except ArithmeticError as exc:  # Opacus's RDP at a vanishing noise multiplier (ZeroDivisionError): no budget to report
        raise ConfigError("privacy.noise_multiplier", f"round {round}'s {key}: the accountant cannot bound it ({type(exc).__name__}: {exc}); raise noise_multiplier") from None


def refuse_undeclared_reports(replies: Sequence[ClientReply[Any, Any]]) -> None:
    """One ConfigError on ``algorithm.name`` when a client's upload carries a report besides its model, under a mechanism that
    noises the uploads (its ``aggregator`` hook: ``dp-fedavg``, ``local``). Why: a method that declares what its clients
    report (``Capabilities.reports``) is refused by every mechanism before the run, but one that forgot to declare it sent
    that report (a plugin's update norm) to the server unnoised and outside epsilon, with no word. Not under a mechanism on
    the local steps (``dp-sgd``): what a client computes from its privately trained model is post-processing (SCAFFOLD's
    control variates). The parameter protocol's uploads only: a soft-label upload is the rows the mechanism releases."""
    for reply in replies:
        if isinstance(reply.uplink, ParamUplink) and reply.uplink.report:
            raise ConfigError("algorithm.name", f"client {reply.client_id} sent, besides its model, a report ({', '.join(map(repr, sorted(reply.uplink.report)))}) "
                                                "that its method does not declare (Capabilities.reports): under [privacy] it reaches the server without noise, "
                                                "outside epsilon; declare it (every mechanism then refuses the method), or send the model alone")


def privacy_summary(protocol: ServerProtocol) -> dict[str, Json] | None:
    """What ``summary.json`` records of an accounted run's noise (None: ``[privacy]`` is off): the noise multiplier the
    mechanism ran with (``target_epsilon``'s answer where the config gave one, which ``config.toml`` does not hold), the
    sigma the accountant charged per unit of sensitivity, the clip norm, delta and the accountant, and the clients it did
    not account (attackers that skipped the release). Why: under ``-q`` the chosen sigma was said nowhere."""
    accounted = next((p for p in protocol_layers(protocol) if isinstance(p, Accounted)), None)
    if accounted is None:
        return None
    plan = accounted.plan
    out: dict[str, Json] = {"mechanism": plan.mechanism, "noise_multiplier": plan.noise_multiplier, "accounted_sigma": plan.accounted_sigma,
                            "clip_norm": plan.clip_norm, "delta": plan.delta, "accountant": plan.accountant}
    if accounted.unaccounted:
        out["unaccounted_clients"] = sorted(accounted.unaccounted)
    return out
