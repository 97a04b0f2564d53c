"""The seam between the runtime and a privacy mechanism: a typed spec whose hooks say what it noises and what that costs.

A mechanism is one :class:`MechanismSpec`, ``SPEC`` in the mechanism's own module (a built-in's module under
``chillfl/privacy/mechanisms/``, or a user's named by import path or entry point, found the same way:
:mod:`chillfl.settings.privacy`). Core code calls only these hooks and declarations and never tests which
mechanism runs. What a mechanism says:

* what it accounts: :attr:`MechanismSpec.accounts` (before the run: each kind of privacy unit's sampling
  rate and compositions, for ``target_epsilon``, and the bound on ``delta``) and :attr:`MechanismSpec.charges`
  (each round: which units spend what); :attr:`MechanismSpec.adjacency` (what ``adjacency = "auto"`` means for
  it) and :attr:`MechanismSpec.subsampled` (whether sampling amplifies its releases);
* where it acts, one hook per seam: :attr:`MechanismSpec.aggregator` (parameter sharing: the clients'
  updates, around the run's weighted-mean aggregator), :attr:`MechanismSpec.step` (parameter sharing: each
  local step's gradient from per-sample gradients), :attr:`MechanismSpec.rows` (soft-label sharing: each
  row a client uploads, on the client);
* :attr:`MechanismSpec.settle`: its options once the noise is decided (e.g. a default that depends on sigma);
* :attr:`MechanismSpec.check`: its options against the rest of the run, before anything is built.
* :attr:`MechanismSpec.figures`: the run figures it adds (``privacy.png``, the privacy-utility curve, unless it
  says otherwise).

Which protocols a mechanism covers follows from its hooks (:meth:`MechanismSpec.runs_under`). Hooks hold no
state: a random draw comes from the run's seed through :func:`chillfl.seeds.derive_seed`, so every executor
and a resumed run draw the same. This module imports no torch (its types only for checking).

Checked against: pytorch/opacus 1.6 ``opacus/accountants`` (the subsampled bounds are for add/remove neighbours,
hence ``replace`` only with ``subsampled=False``), Wang, Balle & Kasiviswanathan 2019 (fixed-size sampling is bounded
under replace-one), 2026-12-02.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, Literal, Protocol, Sequence, TypeVar, runtime_checkable

from chillfl.capabilities import Cost
from chillfl.errors import ConfigError
from chillfl.options import short_repr
from chillfl.plugins import Hook
from chillfl.settings.privacy import PrivacyConfig, mechanism_spec

if TYPE_CHECKING:
    from chillfl.aggregation.base import Aggregator
    from chillfl.config import RunConfig
    from chillfl.privacy.aggregate import WeightedMean
    from chillfl.protocols.softlabels.client import RowRelease
    from chillfl.training.local import PrivateGradients

Opt = TypeVar("Opt")

PARAMETERS, SOFTLABELS = "parameters", "softlabels"
"""The protocols a hook acts under (:attr:`chillfl.config.RunConfig.protocol`)."""

RELEASES = {
    PARAMETERS: "its clients upload their models",
    SOFTLABELS: "its clients upload soft-labels on public inputs",
    "prototypes": "its clients upload class prototypes",
}
"""What each protocol's clients send: why a mechanism that noises something else finds nothing there."""


@dataclass(frozen=True)
class RunSizes:
    """The run's sizes a budget depends on."""

    num_clients: int
    per_round: int
    """Clients sampled a round (``clients_per_round``)."""
    rounds: int
    batch_size: int
    epochs: int
    client_sizes: tuple[int, ...]
    """Each client's number of training samples, by client id."""


@dataclass(frozen=True)
class Accounting:
    """What a mechanism's releases cost over the planned run, known before it starts.

    ``steps``: (sampling rate q, compositions) of each kind of privacy unit in the worst case;
    ``target_epsilon`` picks the sigma that the most expensive of them needs. ``delta_below``: ``delta`` must be
    smaller (1 / the number of records in a unit), ``delta_why`` says so in the refusal (e.g.
    ``"1/num_clients = 0.25 (the privacy unit is a client)"``).
    """

    steps: tuple[tuple[float, int], ...]
    delta_below: float = 1.0
    delta_why: str = "1"


@dataclass(frozen=True)
class Participant:
    """One client's part in a round, as :attr:`MechanismSpec.charges` sees it."""

    client_id: int
    work: float
    """The share of its planned local work it completed (1.0: all of it)."""


@dataclass(frozen=True)
class Charge:
    """One round's cost to one privacy unit: ``steps`` Gaussian releases at sampling rate ``rate``
    (the accountant charges each at the plan's noise multiplier per unit of sensitivity)."""

    unit: str
    rate: float
    steps: int = 1


def rate_and_count(q: object, n: object) -> bool:
    """Whether ``q`` is a sampling rate in (0, 1] and ``n`` a whole count >= 0, as the accountants read them: what a
    plugin's :class:`Accounting` step or :class:`Charge` must hold (a rate above 1 would be accounted as given)."""
    if isinstance(q, bool) or isinstance(n, bool) or not isinstance(q, numbers.Real) or not isinstance(n, numbers.Integral):
        return False
    return 0 < float(q) <= 1 and int(n) >= 0


@dataclass(frozen=True)
class Noise:
    """The run's noise once decided (``target_epsilon`` resolved): what a mechanism's acting hooks work with."""

    clip_norm: float
    """C: the L2 bound on what is clipped."""
    noise_multiplier: float
    """sigma: the noise's standard deviation in units of C."""
    sizes: RunSizes
    seed: int
    """The run's seed: derive a stream from it (:func:`chillfl.seeds.derive_seed`) with the round and the client."""
    exempt: frozenset[int] = frozenset()
    """Clients that do not run a client-side mechanism on what they upload (attackers with ``attack.local_dp = "skip"``,
    :func:`chillfl.attacks.build.skipping_local_dp`): an ``aggregator`` hook that noises on the clients' side passes them to
    :class:`~chillfl.privacy.aggregate.PrivateAggregation` (``exempt=``); a server-side one has nothing for them to skip.
    A hook that returns an aggregator of its own class exposes them as its ``exempt`` (:class:`ExemptsClients`)."""
    nonnegative: frozenset[str] = frozenset()
    """The model's entries that are variances (its norm layers' ``running_var``, :func:`chillfl.models.common.variance_buffers`):
    noise can take them below 0, where the layer's output is NaN, so an ``aggregator`` hook passes them to
    :class:`~chillfl.privacy.aggregate.PrivateAggregation` (``nonnegative=``), which clamps them at 0 after the noised mean
    (post-processing: no privacy cost). Empty: a model without them, or built without the model."""
    frozen: frozenset[str] = frozenset()
    """The model's frozen parameters (``requires_grad = False``: a pretrained backbone): no client moves them, so an
    ``aggregator`` hook passes them to :class:`~chillfl.privacy.aggregate.PrivateAggregation` (``frozen=``), which neither
    clips, noises nor counts them (noise on them walked a frozen backbone away). Empty: built without the model."""


@runtime_checkable
class ExemptsClients(Protocol):
    """A client-side privacy wrapper that lets some clients send their uploads unreleased (attackers with
    ``attack.local_dp = "skip"``): :class:`~chillfl.privacy.aggregate.PrivateAggregation`, or a plugin mechanism's own.

    Why a capability: the runtime asks the built aggregator which attackers skip the release (to say when ``skip``
    changes nothing), and a mechanism's ``aggregator`` hook may return any class; asking for one class would call a
    plugin's client-side release "nothing to skip".
    """

    @property
    def exempt(self) -> frozenset[int]:
        """The clients whose uploads pass unreleased: :attr:`Noise.exempt` as the hook was given it."""
        ...


@dataclass(frozen=True)
class MechanismSpec(Generic[Opt]):
    """One differential-privacy mechanism: everything the runtime, the config and ``chillfl list`` may ask of it.

    ``options``: its own options (a frozen dataclass with an optional ``validate(section)``), parsed from
    ``[privacy]`` beside the options every mechanism shares (``clip_norm``, ``noise_multiplier``,
    ``target_epsilon``, ``delta``, ``accountant``, ``adjacency``). Each hook receives the parsed options first:

    * ``accounts(options, sizes)``: the :class:`Accounting` of the planned run (required);
    * ``charges(options, sizes, participants)``: one round's :class:`Charge` s, given who took part
      (required with ``aggregator`` or ``step``: soft-label rows are charged per row released, by the runtime);
    * ``aggregator(options, noise, base)``: the aggregator that privatises the clients' updates around ``base``
      (a weighted mean: the runtime refuses any other);
    * ``step(options, noise)``: the local step's gradient from per-sample gradients
      (:class:`~chillfl.training.local.PrivateGradients`);
    * ``rows(options, noise, probabilities)``: what a client releases of its soft-label rows
      (:class:`~chillfl.protocols.softlabels.client.RowRelease`; ``probabilities``: the method uploads
      probabilities, not logits, and the release must return rows on the simplex: each entry >= 0, each row
      summing to 1, else a ConfigError on ``privacy.mechanism``, :class:`chillfl.privacy.softlabels.CheckedRelease`);
    * ``settle(options, noise)``: the options completed once sigma is known (a ConfigError for an impossible one);
    * ``check(options, config)``: refuse a run these options make no sense in (a ConfigError naming the field);
    * ``approximation(options, config)``: what the reported epsilon accounts as Poisson sampled though the run samples
      it otherwise, as a phrase (``"each client's shuffled fixed-size batches as Poisson sampled at q = batch_size / n_k"``),
      or None where the epsilon is a proven bound; printed in the comparison's epsilon caveat. Without the hook a
      subsampled mechanism is read as sampling clients: an approximation under ``federation.sampling = "fixed"`` with
      fewer clients a round than ``num_clients`` (docs/privacy.md, *Sampling*).

    ``adjacency``: the neighbouring inputs ``adjacency = "auto"`` means for it (``replace``: any two clipped
    values, sensitivity 2C; ``add_remove``: a value against none, C). ``subsampled``: whether sampling
    amplifies its releases; then only ``add_remove`` is accounted (Opacus's subsampled bounds).
    """

    name: str
    options: type[Opt]
    accounts: Callable[[Opt, RunSizes], Accounting]
    summary: str = ""
    charges: Callable[[Opt, RunSizes, Sequence[Participant]], Sequence[Charge]] | None = None
    aggregator: Callable[[Opt, Noise, WeightedMean], Aggregator] | None = None
    step: Callable[[Opt, Noise], PrivateGradients] | None = None
    rows: Callable[[Opt, Noise, bool], RowRelease] | None = None
    settle: Callable[[Opt, Noise], Opt] | None = None
    check: Callable[[Opt, RunConfig], None] | None = None
    adjacency: Literal["add_remove", "replace"] = "add_remove"
    subsampled: bool = True
    cost: Cost = Cost()
    """The work it adds to a round beyond plain local SGD, for time estimates (:class:`~chillfl.capabilities.Cost`;
    ``dp-sgd``'s per-sample gradients); work on the parameters or the uploads alone (clipping, noising) is not counted."""
    any_rule: bool = False
    """Its ``aggregator`` hook privatises each client's update on the client's side (``local``): the server's rule only
    post-processes releases already private, so the guarantee holds whatever that rule is. The runtime then lets it wrap a
    rule that declares no ``takes_weights`` (median, Krum, a plugin's robust rule; not one with ``plain_sgd``, ``not_a_base``
    or ``personal_model``), handed to the hook as a :class:`~chillfl.privacy.aggregate.WeightedMean` that takes equal
    weights only. False (server-side noise, ``dp-fedavg``: its sensitivity is that of a weighted mean): such rules are refused."""
    figures: tuple[str, ...] = ("privacy",)
    """The run figures it adds, by name (:func:`chillfl.plots.registry.register_figure`), drawn after the run:
    ``privacy`` (accuracy against the ``epsilon`` every private run records, and epsilon over rounds) by default;
    a mechanism with round metrics of its own adds its figure beside it (``("privacy", "mine")``)."""
    approximation: Callable[[Opt, RunConfig], str | None] | None = None
    """The ``approximation`` hook above; last, after the fields of before it came, so that a spec built positionally
    keeps its meaning."""

    def calls(self) -> list[Hook]:
        """Each hook the runtime calls: (field, the hook or None, the parameters it is called with), checked where the spec is read."""
        return [
            ("accounts", self.accounts, ("options", "sizes")), ("charges", self.charges, ("options", "sizes", "participants")),
            ("aggregator", self.aggregator, ("options", "noise", "base")), ("step", self.step, ("options", "noise")),
            ("rows", self.rows, ("options", "noise", "probabilities")), ("settle", self.settle, ("options", "noise")),
            ("check", self.check, ("options", "config")), ("approximation", self.approximation, ("options", "config")),
        ]

    def __post_init__(self) -> None:
        if not self.covers():
            raise ValueError(f"privacy mechanism {self.name!r} has no hook: give it aggregator, step or rows")
        if (self.aggregator is not None or self.step is not None) and self.charges is None:
            raise ValueError(f"privacy mechanism {self.name!r} acts on the clients' models: give it charges (what each round costs)")
        if self.adjacency == "replace" and self.subsampled:
            raise ValueError(f"privacy mechanism {self.name!r}: 'replace' adjacency is accounted for releases sampling does not amplify (subsampled=False)")

    def covers(self) -> dict[str, str]:
        """Protocol -> what the mechanism noises there, one entry per protocol its hooks act under."""
        out = {}
        if self.aggregator is not None or self.step is not None:
            out[PARAMETERS] = " and ".join(w for w, hook in (("model updates", self.aggregator), ("per-sample gradients", self.step)) if hook is not None)
        if self.rows is not None:
            out[SOFTLABELS] = "soft-label rows"
        return out

    def runs_under(self, protocol: str) -> bool:
        """Whether the mechanism acts under ``protocol`` (a hook of that protocol)."""
        return protocol in self.covers()


def spec_of(privacy: PrivacyConfig) -> MechanismSpec[Any]:
    """The spec of ``[privacy]``'s mechanism (which must be on); a ConfigError on ``privacy.mechanism`` when it names no
    :class:`MechanismSpec` (the config tells specs apart by their fields only: it sits below this module)."""
    return mechanism(privacy.mechanism)


def mechanism(name: str) -> MechanismSpec[Any]:
    """The :class:`MechanismSpec` mechanism ``name`` names (:func:`chillfl.settings.privacy.mechanism_spec`, type-checked)."""
    spec = mechanism_spec(name)
    if not isinstance(spec, MechanismSpec):
        raise ConfigError("privacy.mechanism", f"{name!r} must name a chillfl.extend.MechanismSpec, got {short_repr(spec)}")
    return spec
