"""FedBN (Li et al., ICLR 2021): keep batch-norm layers local, average everything else.

Each client keeps its own BN affine parameters and running statistics
(weight, bias, running_mean, running_var, num_batches_tracked); all other
entries are averaged as in FedAvg, ``w <- sum_i p_i w_i`` with
``p_i = n_i / sum n_j`` (``weighting = "samples"``, FedAvg's; the authors'
code weighs its sites 1/K, ``weighting = "uniform"``, on sites cut to one
size, where the two agree). A returning client starts from
the global non-BN entries plus its own BN entries: they are the client's own
state (:class:`KeepLocal` puts them into its start model and keeps the trained
ones), as in the paper, where BN layers never leave the client (here they are
uploaded, for the global model's BN entries, under the default
``global_bn = "average"``, and never sent back to a returning client, unless an ``[objective]`` anchor reads
them: ``ntd`` reads every BN entry, ``proximal_mu`` the BN weights and biases, and those are priced).

Choices
-------
* A client's first round starts from the global model's BN entries.
* Local accuracy: ``local_eval = "trained"`` (default) measures the client's
  model at the end of its training, with its own BN entries, before the
  server's average; ``"averaged"`` measures its own BN entries on the
  non-BN entries the server has just averaged, as the authors' code tests its
  sites.
* The global model's BN entries (used for global-model evaluation, which
  FLex&Chill Sec. 4.7 / Table 7 reports for FedBN, and as the start of
  first-time clients): ``global_bn = "average"`` (default) stores the weighted
  average of the round's clients' BN entries; ``"keep"`` leaves them as they
  were (the initial values), which is closer to "BN never leaves the client"
  and is what the authors' server model holds.

Checked against (2026-12-02) med-air/FedBN ``federated/fed_digits.py`` and
``fed_office.py`` ``communication``: every state entry whose name holds "bn"
stays with its site (weight, bias, running_mean, running_var,
num_batches_tracked; here every entry of a ``_BatchNorm`` module, found by
type, not name), the rest averaged with ``client_weights = 1/client_num``;
the server model's BN entries are never written; each site is tested after
``communication``, on the averaged non-BN entries with its own BN entries.
chillfl's default local accuracy (``local_eval = "trained"``) is taken before
the average, on the site's trained model, so it is not the authors' measure and
sits above it; ``local_eval = "averaged"`` is theirs (the server measures
:meth:`KeepLocal.personal_model` on the new global model right after the
average, :class:`~chillfl.aggregation.base.MeasuredAfterAverage`). And
KarhouTam/FL-bench ``src/client/fedbn.py`` (BatchNorm2d parameters and every
buffer personal).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Literal, Mapping, Sequence

import torch
from torch import nn

from chillfl.aggregation.base import (
    AggregatorBase,
    ClientHalf,
    ClientResult,
    ClientState,
    Context,
    Params,
    Report,
    Trained,
    Wire,
    check_state_keys,
    client_weights,
    own_entries,
    weighted_average,
    with_prefix,
)
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, Built, after_average, instance_field, register_algorithm
from chillfl.capabilities import Capabilities
from chillfl.errors import ConfigError
from chillfl.models.parts import SwitchesBatchNorm
from chillfl.training.local import model_state


@dataclass(frozen=True)
class FedBNOptions:
    """``global_bn``: what the global model's BN entries become (``average`` or ``keep``)."""

    global_bn: Literal["average", "keep"] = "average"
    weighting: Literal["samples", "uniform"] = "samples"
    """As FedAvg's: ``samples`` (m_i / m) or ``uniform`` (1/|S|, the FLex&Chill authors' code)."""
    local_eval: Literal["trained", "averaged"] = "trained"
    """``trained``: local accuracy of the client's model at the end of its training; ``averaged``: of its own BN entries on
    the model the server has just averaged, measured by the server after the round (the authors' code's)."""


def batchnorm_keys(model: nn.Module) -> list[str]:
    """State-dict names of every batch-norm layer's parameters and buffers (any BatchNorm1d/2d/3d)."""
    keys: list[str] = []
    for prefix, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            base = f"{prefix}." if prefix else ""
            keys.extend(base + n for n, _ in module.named_parameters(recurse=False))
            keys.extend(base + n for n, b in module.named_buffers(recurse=False) if b is not None)
    return keys


PREFIX = "fedbn."
"""Where a client's own BN entries live in its state."""


@dataclass(frozen=True)
class KeepLocal:
    """A client half that keeps ``keys`` local (FedBN's BN entries, FedPer's and FedRep's head): its own entries (under ``prefix``) replace the global ones in its start; the trained ones are kept."""

    keys: frozenset[str]
    prefix: str
    after_average: bool = field(default=False, kw_only=True)
    """Local accuracy of the client's own entries on the *next* global model, measured by the server after the
    average (:class:`~chillfl.aggregation.base.MeasuredAfterAverage`; FedBN's, FedPer's, FedRep's, LG-FedAvg's ``local_eval``)."""
    option: tuple[str, str] | None = field(default=None, kw_only=True)
    """The method's option (and value) that leaves ``keys`` out of the server's average (``("global_bn", "keep")``),
    named by a refusal (:class:`~chillfl.aggregation.base.NamesKeepOption`); None: the method has none."""

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        own = own_entries(state, self.prefix)
        return ({**start, **own} if own else start), dict(context)

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return with_prefix({k: v for k, v in trained.params.items() if k in self.keys}, self.prefix), {}

    def kept_entries(self) -> frozenset[str]:
        """``keys``: after its first round the client's own values replace the sent ones (:class:`~chillfl.aggregation.base.KeepsEntries`)."""
        return self.keys

    def keep_option(self) -> tuple[str, str] | None:
        """:attr:`option` (:class:`~chillfl.aggregation.base.NamesKeepOption`)."""
        return self.option

    def held_entries(self, state: ClientState) -> frozenset[str]:
        """The kept entries under ``prefix`` in ``state`` (:class:`~chillfl.aggregation.base.HoldsKeptEntries`)."""
        return self.keys & frozenset(own_entries(state, self.prefix))

    def personal_model(self, state: ClientState, global_model: Params) -> Params:
        """The global model with the client's own entries: what it starts its next round from."""
        own = own_entries(state, self.prefix)
        return {k: own[k].to(v.device) if k in own else v for k, v in global_model.items()}


class FedBN(AggregatorBase):
    """FedAvg over non-BN keys; every client's BN entries stay with the client (:class:`KeepLocal`)."""

    def __init__(self, bn_keys: Collection[str], options: FedBNOptions = FedBNOptions()) -> None:
        self.bn_keys = frozenset(bn_keys)
        self.rule = options
        self.options: Any = options
        """The method's own options, recorded for an instance passed from Python; a method on FedBN's rule (FedPer, FedBABU,
        LG-FedAvg) sets its own here, and the rule it runs is :attr:`rule`."""

    def default_weights(self, results: Sequence[ClientResult]) -> torch.Tensor:
        return client_weights(results, self.rule.weighting)

    def aggregate(
        self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None
    ) -> Params:
        w = self.default_weights(results) if weights is None else weights
        out = weighted_average([r.params for r in results], w, keys=self.aggregated_keys(global_params))
        return {k: out[k] if k in out else global_params[k] for k in global_params}

    def aggregated_keys(self, global_params: Params) -> tuple[str, ...]:
        """The entries :meth:`aggregate` averages: all but the local ones, which it averages too under ``global_bn = "average"``.

        Under ``average`` the global model's local entries (what first-time clients start from and the global
        model's evaluation reads) are the clients' average, so a private run must clip and noise them with the rest;
        under ``keep`` they are the global model's own and the clients' are never read.
        """
        if self.rule.global_bn == "average":
            return tuple(global_params)
        return tuple(k for k in global_params if k not in self.bn_keys)

    def client_half(self) -> ClientHalf:
        """The client keeps its own BN entries (:class:`KeepLocal`), measured after the average under ``local_eval = "averaged"``."""
        return KeepLocal(self.bn_keys, PREFIX, after_average=self.rule.local_eval == "averaged", option=("global_bn", "keep"))

    def state_dict(self) -> dict[str, Any]:
        """Nothing: every client's BN entries are in its own state, the global model has the average."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, (), "FedBN")


def _check_model(model: nn.Module) -> None:
    """A model without batch norm is refused for the config's method, whose keys are its batch-norm entries: FedBN would
    silently be FedAvg."""
    if not batchnorm_keys(model):
        setting = model.batch_norm_setting() if isinstance(model, SwitchesBatchNorm) else None
        if setting is not None:  # the model at hand has an option for it: name that one
            option, value = setting
            raise ConfigError(f"model.{option}", "FedBN keeps each client's batch-norm layers local, and this model has none, so it would run as "
                                                 f"plain FedAvg: set model.{option} = {value}")
        raise ConfigError(
            "model.name",
            "FedBN keeps each client's batch-norm layers local, and this model has none, so it would run as plain FedAvg: "
            "choose a model with batch-norm layers (a registered one: flexchill_cnn with model.batch_norm = true)",
        )


def _build(options: FedBNOptions, ctx: BuildContext) -> Built:
    """FedBN over the model's batch-norm entries (a model without any is refused first, :func:`_check_model`)."""
    _check_model(ctx.model)
    return FedBN(batchnorm_keys(ctx.model), options), []


def _bind(aggregator: FedBN, ctx: BuildContext) -> None:
    """An instance passed from Python keeps local the entries it was given, batch norm or not (``FedBN(["head.weight",
    "head.bias"])`` is a personal head), so its keys are checked, not the model: none (``FedBN([])``: plain FedAvg; on a
    model without batch norm, refused as the config's method is) or a name the model's state lacks (a typo, a tied
    weight's second name: that entry stayed global without a word) is refused on ``aggregator.bn_keys``."""
    if not aggregator.bn_keys:
        _check_model(ctx.model)  # the config's refusal where the model has no batch norm (what FedBN([]) was likely meant for)
        raise ConfigError(instance_field(ctx, "bn_keys"), "is empty, so FedBN would keep nothing local and run as plain FedAvg: "
                                                          "pass the model's batch-norm entries (chillfl.aggregation.fedbn.batchnorm_keys(model))")
    if unknown := sorted(aggregator.bn_keys - model_state(ctx.model).keys()):
        what = ("names no entry of the model's state (its parameters and persistent buffers), so FedBN would keep nothing local "
                "and run as plain FedAvg" if len(unknown) == len(aggregator.bn_keys) else
                "names entries the model's state (its parameters and persistent buffers) lacks, which FedBN would leave global without a word")
        raise ConfigError(instance_field(ctx, "bn_keys"), f"{what}; got {', '.join(map(repr, unknown[:3]))}{' and more' if len(unknown) > 3 else ''}")


SPEC: AlgorithmSpec = register_algorithm(
    "fedbn",
    AlgorithmSpec(
        FedBNOptions,
        _build,
        "local batch norm (Li et al. 2021)",
        capabilities=Capabilities(takes_weights=True, personal_model=True),
        capabilities_of=lambda o: after_average(SPEC.capabilities, "local_eval", "averaged", o.local_eval == "averaged"),
        makes=(FedBN,),
        bind=_bind,
    ),
)
