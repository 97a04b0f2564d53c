"""Every message of the soft-label protocol, in one place: what crosses the wire and what it costs.

Round t's traffic, in order: the server's :class:`SoftLabelRoundDownlink` to each sampled client
(I_req^t as a :class:`SoftLabelRequest`'s indices, round t-1's :class:`SoftLabelDownlink`, a
:class:`CacheSyncDelta` for a client that missed rounds), then each client's
:class:`SoftLabelReport` carrying its :class:`SoftLabelUplink`. ``chillfl.flower.wire`` rebuilds
exactly these dataclasses on the receiving side; each prices itself with ``nbytes`` (the
ledger's index and tensor encodings), so the byte counts are the same under every runtime.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch

from chillfl.engine import ledger


class CacheSignal(enum.IntEnum):
    """gamma^t entries (Algorithm 2); three values -> 2 bits on the wire."""

    NEWLY_CACHED = 0
    CACHED = 1
    EXPIRED = 2


@dataclass(frozen=True)
class SoftLabelRequest:
    """Server -> clients at the start of round t: I_req^t, the public indices to predict on."""

    round: int
    indices: torch.Tensor

    def nbytes(self, index_encoding: ledger.IndexEncoding = "int32", universe: int | None = None) -> dict[str, int]:
        return {"indices": ledger.index_bytes(self.indices.numel(), universe, index_encoding)}


@dataclass(frozen=True)
class SoftLabelUplink:
    """Client -> server: soft-labels ``[n, C]`` on public ``indices`` (``bits``: quantised width, None = dtype).

    The indices are implied by the request unless a client-side selector
    dropped some, so they are counted only when ``send_indices`` is true.
    """

    client_id: int
    round: int
    indices: torch.Tensor
    soft_labels: torch.Tensor
    bits: int | None = None
    send_indices: bool = False

    def __post_init__(self) -> None:
        if self.soft_labels.dim() != 2 or self.soft_labels.shape[0] != self.indices.numel():
            raise ValueError(
                f"soft_labels must be [len(indices), C]; got {tuple(self.soft_labels.shape)} for {self.indices.numel()} indices"
            )

    def nbytes(self, index_encoding: ledger.IndexEncoding = "int32", universe: int | None = None) -> dict[str, int]:
        out = {"soft_labels": ledger.tensor_bytes(self.soft_labels, self.bits)}
        if self.send_indices:
            out["indices"] = ledger.index_bytes(self.indices.numel(), universe, index_encoding)
        return out


@dataclass(frozen=True)
class SoftLabelDownlink:
    """Server -> clients after round t: gamma^t, zhat_req^t and I^t (Algorithm 1, sent at round t + 1).

    ``soft_labels`` holds only the fresh rows (signals NEWLY_CACHED / EXPIRED),
    in the order they occur in ``indices``.
    """

    round: int
    indices: torch.Tensor
    signals: torch.Tensor
    soft_labels: torch.Tensor
    bits: int | None = None

    def nbytes(self, index_encoding: ledger.IndexEncoding = "int32", universe: int | None = None, with_signals: bool = True) -> dict[str, int]:
        out = {
            "indices": ledger.index_bytes(self.indices.numel(), universe, index_encoding),
            "soft_labels": ledger.tensor_bytes(self.soft_labels, self.bits),
        }
        if with_signals:
            out["cache_signals"] = ledger.signal_bytes(self.signals.numel())
        return out


@dataclass(frozen=True)
class CacheSyncDelta:
    """Catch-up for a client that missed rounds: entries to store and indices to delete.

    Applying it brings the client's cache to the server's state at the end of
    round ``through_round``, ready for the downlink of ``through_round + 1``.
    """

    client_id: int
    through_round: int
    store_indices: torch.Tensor
    store_soft_labels: torch.Tensor
    delete_indices: torch.Tensor

    @property
    def num_entries(self) -> int:
        return int(self.store_indices.numel() + self.delete_indices.numel())

    def nbytes(self, index_encoding: ledger.IndexEncoding = "int32", universe: int | None = None) -> int:
        """Indices of every item plus the soft-labels of stored items at their dtype (one message of kind ``"sync"``).

        The protocol's ledger prices the stored rows with the method's downlink price instead (the same rows cost
        the same in a catch-up as in a downlink: CFD's ``bits_down``); for float32 rows of a plain method the two agree.
        """
        if self.num_entries == 0:
            return 0
        return ledger.index_bytes(self.num_entries, universe, index_encoding) + ledger.tensor_bytes(
            self.store_soft_labels
        )


@dataclass
class SoftLabelRoundDownlink:
    """Server -> client k at round t: I_req^t, round t-1's downlink (+ catch-up delta), lr, T and seeds.

    ``sizes`` are the message's bytes by kind, priced by the server's method
    when it builds the message (see :mod:`chillfl.protocols.softlabels`' Choices).
    ``hint``: what the client needs to pick its target from the rows (the method's
    :meth:`~chillfl.protocols.softlabels.method.SoftLabelMethod.target_hint`).
    """

    round: int
    requested: torch.Tensor
    lr: float
    temperature: float
    train_seed: int
    distill_seed: int
    previous: SoftLabelDownlink | None = None
    previous_indices: torch.Tensor | None = None
    sync: CacheSyncDelta | None = None
    hint: int | None = None
    sizes: dict[str, int] | None = None

    def nbytes(self) -> dict[str, int]:
        return dict(self.sizes or {})


@dataclass
class SoftLabelReport:
    """Client k -> server at round t: its soft-labels (None: nothing requested or no collaboration) and its round's numbers."""

    soft: SoftLabelUplink | None
    train_loss: float
    num_samples: int
    distill_loss: float | None = None
    rebuilt_digest: str | None = None
