"""Attacks under prototype sharing: an attacker's class prototypes arrive forged (and ``gaussian``'s maths).

:class:`ForgedPrototypes` runs the kind's :attr:`~chillfl.attacks.spec.AttackSpec.forge_prototypes`
hook on the replies where the server receives them. ``gaussian``: attacker i's uploaded class means
``P_c`` (for each class c it holds, count > 0) become ``P_c + N(0, sigma^2 I)``, drawn on the CPU from (seed, "attack", "prototypes", round, client); its
counts, its method's own rows (FedHKD's ``soft``) and any shared model are sent as trained. Applied to
the replies where the server receives them, before the protocol's server update: the same arithmetic
the attacker would do on its side, and the same bytes (the ledger counts them as received).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from chillfl.attacks.spec import PrototypeUpload, check_forged
from chillfl.engine.protocol import ClientReply
from chillfl.errors import ConfigError
from chillfl.protocols.prototypes import KnowledgeUplink
from chillfl.prototypes.spec import ClassRows

PrototypeForge = Callable[[Any, PrototypeUpload], ClassRows]
"""A kind's ``forge_prototypes`` hook: (its options, one attacker's upload) -> the class rows it sends."""


def noisy_means(means: torch.Tensor, counts: torch.Tensor, sigma: float, seed: int) -> torch.Tensor:
    """``means`` with ``N(0, sigma^2)`` added to the rows of the classes held (count > 0); the others as they are."""
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(means.shape, generator=gen, dtype=means.dtype).to(means.device)
    held = (counts > 0).to(means.device)[:, None]
    return torch.where(held, means + sigma * noise, means)


@dataclass(frozen=True)
class ForgedPrototypes:
    """The attackers' replies with their class rows through ``forge`` (the kind's hook, with its ``options``); other replies untouched."""

    ids: frozenset[int]
    forge: PrototypeForge
    options: Any
    seed: int

    def __call__(self, round: int, replies: Sequence[ClientReply[Any, Any]]) -> list[ClientReply[Any, Any]]:
        out = []
        for reply in replies:
            up = reply.uplink
            if reply.client_id in self.ids and isinstance(up, KnowledgeUplink):
                rows = self.forge(self.options, PrototypeUpload(up.rows, reply.client_id, round, self.seed))
                if not isinstance(rows, ClassRows):
                    raise ConfigError("attack.kind", f"the attack's forge_prototypes returned for client {reply.client_id} a {type(rows).__name__}, not a ClassRows")
                check_forged("forge_prototypes", reply.client_id, {"means": rows.means, "counts": rows.counts, **rows.extra},
                             {"means": up.rows.means, "counts": up.rows.counts, **up.rows.extra})
                reply = dataclasses.replace(reply, uplink=dataclasses.replace(up, rows=rows))
            out.append(reply)
        return out
