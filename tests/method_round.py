"""A method's two halves run by hand, as the parameter-sharing protocol runs them, for formula tests.

:class:`Clients` keeps each client's own state the way chillfl's runtime does
(:class:`~chillfl.protocols.parameters.ParamStore`): the aggregator's downlink,
then the client half's ``prepare`` (what the client trains from and with), then,
given what "training" produced, the half's ``finish`` (the client's next state
and its report), so a test can state the trained models and check every value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import nn

from chillfl.aggregation.base import Aggregator, ClientResult, ClientState, Halves, Params, Report, Trained, Wire
from chillfl.aggregation.pa3fed import PA3FedClient


class Clients:
    """The clients of one aggregator: their states, and its client half run around stated training results."""

    def __init__(self, aggregator: Aggregator, model: nn.Module | None = None) -> None:
        self.aggregator = aggregator
        self.half = aggregator.client_half()
        self.model = model if model is not None else nn.Identity()
        self.states: dict[int, ClientState] = {}

    def start(self, cid: int, round: int, global_params: Params) -> tuple[Params, dict[str, Wire]]:
        """What client ``cid`` trains from and with this round."""
        start, context, _ = self._prepare(cid, round, global_params)
        return start, context

    def _prepare(self, cid: int, round: int, global_params: Params) -> tuple[Params, dict[str, Wire], dict[str, Wire]]:
        down = self.aggregator.downlink(cid, round, global_params)
        start = global_params if down.params is None else {**global_params, **down.params}
        if self.half is None:
            return start, dict(down.context), dict(down.context)
        s, c = self.half.prepare(self.states.get(cid, {}), start, down.context)
        return s, c, dict(down.context)

    def results(
        self, round: int, global_params: Params, trained: Sequence[ClientResult], x: torch.Tensor | None = None, y: torch.Tensor | None = None
    ) -> list[ClientResult]:
        """``trained`` (each client's model after training, steps, lr) with its half's report; the states move on."""
        out = []
        for r in trained:
            start, context, sent = self._prepare(r.client_id, round, global_params)
            if self.half is None:
                out.append(r)
                continue
            xs = x if x is not None else torch.zeros(r.num_samples, 1)
            ys = y if y is not None else torch.zeros(r.num_samples, dtype=torch.long)
            done = Trained(r.client_id, xs, ys, start, sent, context, r.lr, r.temperature, r.params, r.num_steps)
            state, report = self._finish(self.states.get(r.client_id, {}), done, r.report)
            if state:
                self.states[r.client_id] = state
            out.append(dataclasses.replace(r, report={**r.report, **report}))
        return out

    def _finish(self, state: ClientState, done: Trained, given: Report) -> tuple[ClientState, Report]:
        """The half's finish; a PA3Fed part whose score the test states runs Eq. 10 only (PA3FedClient.remember)."""
        parts = self.half.parts if isinstance(self.half, Halves) else (self.half,)
        new_state: ClientState = {}
        report: Report = {}
        for part in parts:
            if isinstance(part, PA3FedClient) and "score" in given:
                s, alpha = part.remember(state, float(given["score"]))  # type: ignore[arg-type]
                r: Report = {"alpha": alpha}
            else:
                s, r = part.finish(self.model, state, done)
            new_state.update(s)
            report.update(r)
        return new_state, report

    def state_dict(self) -> dict[str, dict[str, torch.Tensor]]:
        """The clients' states as chillfl's checkpoint holds them."""
        return {str(cid): dict(state) for cid, state in self.states.items()}

    def load_state_dict(self, state: dict[str, dict[str, torch.Tensor]]) -> None:
        self.states = {int(cid): dict(s) for cid, s in state.items()}
