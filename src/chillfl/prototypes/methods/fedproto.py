"""FedProto (Tan et al., AAAI 2022): class prototypes only; every client keeps its own model.

Client: its class means and counts (:meth:`~chillfl.prototypes.spec.PrototypeHooks.release`'s
default). Server: the count-weighted (or uniform) means. Loss: CE + lambda * MSE(f(x), Cbar_y),
lambda = 1 (the official code). The maths is :mod:`chillfl.prototypes.maths`.

Checked against the official code ``yuetan031/fedproto`` (``lib/utils.py``: ``agg_func``,
``proto_aggregation``; the local loss's ``loss_mse(proto_new, protos) * args.ld``) and PFLlib
(``system/flcore/clients/clientproto.py``, ``servers/serverproto.py``): the same loss (a sample whose
class has no global prototype contributes zero: both put its own feature there; PFLlib needs every
class known) and lambda = 1. Choices (docs/baselines.md): ``weighting = "count"`` by default, the
official and PFLlib servers' plain mean over the clients holding the class is ``"uniform"``; the
prototypes uploaded are computed once after training in eval mode, as PFLlib's server has them
recomputed (``receive_protos`` calls ``collect_protos``); the official code collects them from the
training passes (train mode, every epoch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from chillfl.capabilities import Capabilities
from chillfl.options import Scale, require
from chillfl.prototypes.maths import PrototypeLoss, Weighting
from chillfl.prototypes.spec import ClassRows, Head, Knowledge, PrototypeHooks, PrototypeSpec, average_rows
from chillfl.training.local import BaseLoss


@dataclass(frozen=True)
class FedProtoOptions:
    """``lam``: weight of the representation term MSE(f(x), C_y) (lambda = 1). ``weighting``: ``count`` or
    ``uniform`` averaging over clients (:func:`~chillfl.prototypes.maths.aggregate_means`)."""

    lam: Scale = 1.0
    weighting: Weighting = "count"

    def validate(self, section: str) -> None:
        require(self.lam >= 0, f"{section}.lam", f"must be >= 0, got {self.lam}")


class FedProto(PrototypeHooks[FedProtoOptions]):
    """Plain prototype sharing at the options' lambda and weighting."""

    def loss(self, head: Head) -> BaseLoss:
        return PrototypeLoss(self.options.lam)

    def combine(self, releases: Sequence[ClassRows]) -> Knowledge:
        return average_rows(releases, self.options.weighting)


ON_FLOWER = "chillfl.flower carries no prototype sharing; run it with chillfl's own runtime"
RAW_MEANS = (
    "each client uploads the class means of its raw representations, computed outside its training: per-sample clipping of the"
    " steps bounds none of them"
)
"""Why per-sample clipping (``dp-sgd``) bounds no prototype method's upload (their ``private_steps``)."""

SPEC = PrototypeSpec(
    "fedproto",
    FedProtoOptions,
    FedProto,
    summary="class prototypes only (lam = 1); models stay on the clients",
    capabilities=Capabilities(on_flower=ON_FLOWER, personal_model=True, private_steps=RAW_MEANS),
)
