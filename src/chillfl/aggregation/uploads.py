"""Client uploads checked for NaN/inf before an aggregator reads them (the server's check, and an attack's forged ones).

Why here, beside the aggregators: the protocols check what arrives, and :mod:`chillfl.attacks.aggregate` checks what an
attack forges after that, so the check lives below both (imports flow one way).
"""

from __future__ import annotations

import logging
from typing import Iterable, Mapping, Protocol, Sequence, runtime_checkable

import torch

from chillfl.aggregation.base import AroundAggregator, ClientResult
from chillfl.errors import Diverged

log = logging.getLogger(__name__)

UPLOAD_CAUSE = "an [attack]'s, or a client.lr high enough to blow the weights up"
"""What makes a client's upload non-finite while its training loss was finite."""


def _floats(params: Mapping[str, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    return [(k, v) for k, v in params.items() if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel()]


def nonfinite_entry(params: Mapping[str, torch.Tensor]) -> str | None:
    """The first floating entry of ``params`` with a NaN or inf, else None."""
    return next((k for k, v in _floats(params) if not bool(torch.isfinite(v).all())), None)


def finite_sums(tensors: Iterable[torch.Tensor]) -> bool:
    """Whether every one of ``tensors`` (floating, non-empty) is finite, or may not be (then the caller looks at each
    exactly): a sum a tensor (NaN and inf carry through it; a finite tensor whose sum overflows is only a false alarm,
    resolved by the exact look) and ONE host sync for them all, not one a client (the GPU round is launch-bound). A sum:
    the max-abs reduction took a third of a 100-client CPU round. Shared by the model uploads (:func:`finite_uploads`)
    and the rows a soft-label or prototype method uploads (:func:`chillfl.protocols.common.rows_all_finite`)."""
    sums = [v.sum(dtype=torch.float64 if v.dtype == torch.float64 else torch.float32) for v in tensors]
    if not sums:
        return True
    stacked = torch.stack(sums) if len({t.device for t in sums}) == 1 else torch.stack([t.cpu() for t in sums])
    return bool(torch.isfinite(stacked).all())


def _all_finite(results: Sequence[ClientResult]) -> bool:
    """Whether every floating entry of every upload is finite, or may not be (:func:`finite_sums`: one host sync a round)."""
    return finite_sums(v for r in results for _, v in _floats(r.params))


def finite_uploads(round: int, results: Sequence[ClientResult], tolerant: bool) -> tuple[list[ClientResult], list[int]]:
    """The round's uploads an aggregator may read, and the clients left out (``round``: 0-based).

    A non-finite upload stops the run as :class:`Diverged` naming the round, the client and the entry, unless the
    aggregator is built to withstand bad clients (``tolerant``: its spec declares
    :attr:`~chillfl.aggregation.registry.AlgorithmSpec.tolerates`): then it is left out of the round with one warning
    line. Why: nothing checked uploads, so the rule met the NaN: an SVD-based rule crashed with a raw ``LinAlgError``, a
    clipping rule's or the mean's model turned NaN and the run stopped naming a parameter of the global model, never the
    client who sent it. A round whose every upload is non-finite has nothing to aggregate: it stops the run under any rule."""
    if _all_finite(results):
        return list(results), []
    kept: list[ClientResult] = []
    dropped: list[tuple[int, str]] = []
    for result in results:
        bad = nonfinite_entry(result.params)
        if bad is None:
            kept.append(result)
            continue
        if not tolerant:
            raise Diverged(round + 1, f"its upload's parameter {bad!r} is not finite ({UPLOAD_CAUSE})", result.client_id)
        dropped.append((result.client_id, bad))
    if results and not kept:
        cid, bad = dropped[0]
        raise Diverged(round + 1, f"its upload's parameter {bad!r} is not finite ({UPLOAD_CAUSE}), and so is every other upload of the round", cid)
    for cid, bad in dropped:
        log.warning("round %d: client %d's upload: parameter %r is not finite (%s); left out of the round's aggregation, "
                    "which is built to withstand bad clients", round + 1, cid, bad, UPLOAD_CAUSE)
    return kept, [cid for cid, _ in dropped]


@runtime_checkable
class LeavesOutUploads(Protocol):
    """An aggregator that checks uploads of its own inside ``aggregate`` and may leave some out (the attack wrapper's
    forged models, :class:`~chillfl.attacks.aggregate.AttackedAggregation`), and says which.

    Why: the server writes the round's ``uploads_left_out`` from its own check, made before the aggregator; a client
    left out further in was only a warning line, and ``metrics.jsonl`` did not say who was dropped."""

    def uploads_left_out(self, round: int) -> Sequence[int]:
        """The clients whose upload the last ``aggregate`` of ``round`` (0-based) left out; none for any other round."""
        ...


def round_left_out(server: Sequence[int], aggregator: object, round: int) -> list[int]:
    """The round's ``uploads_left_out``: the server's own check's (``server``) and those of every layer of the
    :class:`~chillfl.aggregation.base.AroundAggregator` chain that leaves uploads out (:class:`LeavesOutUploads`),
    each client once, by client id."""
    found = set(server)
    level: object | None = aggregator
    while level is not None:
        if isinstance(level, LeavesOutUploads):
            found.update(level.uploads_left_out(round))
        level = level.base if isinstance(level, AroundAggregator) else None
    return sorted(found)
