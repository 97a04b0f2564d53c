"""What a round hook sees of a running experiment: read-only copies of its models, and a way to stop it.

A hook (``chillfl.run(callbacks=[fn])`` with ``fn(record, run)``) is called
after every round with that round's record and a :class:`RunView`. Every
model it hands out is a copy: a hook can evaluate, save or inspect it, but
never change the run. ``run.stop(reason)`` ends the run after this round:
the round is checkpointed, the folder is completed with what was done
(``summary.json`` says ``stopped``), and ``chillfl resume FOLDER`` continues it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Callable

import torch
from torch import nn

from chillfl.engine.protocol import ServerProtocol
from chillfl.training.local import persistent_buffers


def model_with_state(template: nn.Module, state: Mapping[str, torch.Tensor]) -> nn.Module:
    """A deep copy of ``template`` (on its own device) with ``state`` copied into its parameters and persistent buffers
    (a ``persistent=False`` buffer is the template's own, not in the state: :func:`~chillfl.training.local.model_state`).
    A state entry that is not a tensor of its parameter's shape is a RuntimeError naming it: ``copy_`` broadcast a
    number (or a ``[10]`` into a ``[4, 10]``) into the weight without a word, and a list was a TypeError, where a
    ``model.safetensors`` from elsewhere (its checksum recomputed) held one."""
    model = copy.deepcopy(template)
    named: dict[str, torch.Tensor] = {**dict(model.named_parameters()), **dict(persistent_buffers(model))}
    missing = sorted(set(named) - set(state))
    if missing:  # pragma: no cover - the run's state is the template's own
        raise RuntimeError(f"state lacks {missing[:5]}")
    for key, tensor in named.items():
        given = state[key]
        if not isinstance(given, torch.Tensor) or given.shape != tensor.shape:
            held = f"shape {list(given.shape)}" if isinstance(given, torch.Tensor) else f"a {type(given).__name__}"
            raise RuntimeError(f"{key!r} is {held}; the model's is a tensor of shape {list(tensor.shape)}")
    with torch.no_grad():
        for key, tensor in named.items():
            tensor.copy_(state[key])
    return model


class RunView:
    """One run, as a round hook sees it (see the module docstring)."""

    def __init__(self, protocol: ServerProtocol, template: nn.Module) -> None:
        self._protocol, self._template = protocol, template
        self.round = 0
        """The last completed round (1-based)."""
        self.stop_reason: str | None = None

    def global_state(self) -> dict[str, torch.Tensor] | None:
        """A copy of the global (server) model's weights; None when the protocol has no global model."""
        state = self._protocol.global_state()
        return None if state is None else {k: v.detach().clone() for k, v in state.items()}

    def global_model(self) -> nn.Module | None:
        """A fresh copy of the model holding the current global weights, in eval mode (None without a global model)."""
        state = self._protocol.global_state()
        return None if state is None else model_with_state(self._template, state).eval()

    def client_states(self) -> dict[int, dict[str, torch.Tensor]]:
        """Copies of every client's own model where the protocol keeps them (empty for FedAvg-like protocols)."""
        return {cid: {k: v.detach().clone() for k, v in s.items()} for cid, s in self._protocol.client_states().items()}

    def stop(self, reason: str = "stopped by a callback") -> None:
        """End the run after this round (checkpointed and resumable)."""
        self.stop_reason = str(reason) or "stopped by a callback"


RoundHook = Callable[[Mapping[str, Any], RunView], None]
"""Called after every round with its record and the :class:`RunView`."""
