"""LG-FedAvg (Liang et al., 2020): local representations, global head: the opposite split from FedPer.

Each client trains its whole model for the run's local epochs, as FedAvg
does; only the global layers (the classifier head and the ``global_layers - 1``
parameterised modules before it, default 1: the classifier; :func:`~chillfl.aggregation.fedper.head_keys`) are averaged (n_i / n), and the local
representation (every other entry, buffers included) stays the client's own
(uploaded, for the global model's representation, under the default
``global_body = "average"``; never sent back to a returning client, unless an
``[objective]`` anchor reads it: then priced, its parameters under
``proximal_mu``, every entry under ``ntd``): its
client half (:class:`~chillfl.aggregation.fedbn.KeepLocal`) puts the
client's own representation into its start model and keeps the trained one,
FedBN's pattern with the complement of FedPer's keys. Local accuracy measures
the client's model after its training (own representation, the round's global
head trained locally). The authors' ``main_lg.py`` measures its local test one
step later: after the server's average, each client's own representation with
the new global layers. ``local_eval = "averaged"`` measures that model: the
server evaluates it right after the average
(:class:`~chillfl.aggregation.base.MeasuredAfterAverage`); the default
``"trained"`` keeps the measure every method takes on the client at the end
of its training.

Choices
-------
* ``global_layers = 1``: the authors' code's ``num_layers_keep`` default (the
  last layer is global).
* The global layers are averaged by n_i / n (``weighting = "samples"``, as
  every averaging method here); the authors' code takes their plain mean over
  the round's clients (``weighting = "uniform"``).
* A client's first round starts from the global model's representation (the
  paper first trains by FedAvg; the same initial model is its analogue).
* The global model's representation (used only for the global model's
  evaluation and as the start of first-time clients): ``global_body =
  "average"`` (default) averages the round's clients', ``"keep"`` leaves the
  initial one. The uplink is priced by what the server reads: under
  ``"average"`` the whole model; under ``"keep"`` the global layers only, as
  the paper's client sends them.

Checked against PFLlib (``system/flcore/clients/clientlg.py``: the whole model trains, only the head
is set from the server's, i.e. global) and the authors' ``main_lg.py`` as described above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import nn

from chillfl.aggregation.base import ClientHalf
from chillfl.aggregation.fedbn import FedBN, FedBNOptions, KeepLocal
from chillfl.aggregation.fedper import head_keys
from chillfl.aggregation.registry import AlgorithmSpec, after_average, register_algorithm
from chillfl.capabilities import Capabilities
from chillfl.options import require
from chillfl.training.local import persistent_buffers


@dataclass(frozen=True)
class LGFedAvgOptions:
    """``global_layers``: how many parameterised modules, ending at the classifier head, are averaged; ``global_body``: ``average`` or ``keep``."""

    global_layers: int = 1
    global_body: Literal["average", "keep"] = "average"
    weighting: Literal["samples", "uniform"] = "samples"
    local_eval: Literal["trained", "averaged"] = "trained"
    """``trained``: local accuracy of the client's model at the end of its training; ``averaged``: of its own representation on
    the model the server has just averaged, measured by the server after the round (the authors' code's)."""

    def validate(self, section: str) -> None:
        require(self.global_layers >= 1, f"{section}.global_layers", f"must be >= 1, got {self.global_layers}")


def representation_keys(model: nn.Module, global_layers: int = 1, field: str = "algorithm.global_layers") -> list[str]:
    """State names (parameters and persistent buffers: :func:`~chillfl.training.local.model_state`'s) of everything but
    the ``global_layers`` parameterised modules ending at the head."""
    head = set(head_keys(model, global_layers, field))
    names = [n for n, _ in model.named_parameters()] + [n for n, _ in persistent_buffers(model)]
    return [n for n in names if n not in head]


class LGFedAvg(FedBN):
    """FedAvg over the global layers; the representation is the clients' own (:class:`KeepLocal`)."""

    def __init__(self, model: nn.Module, options: LGFedAvgOptions = LGFedAvgOptions(), section: str = "algorithm") -> None:
        """``section``: the table ``options`` came from, named by errors."""
        super().__init__(representation_keys(model, options.global_layers, f"{section}.global_layers"), FedBNOptions(global_bn=options.global_body, weighting=options.weighting))
        self.options = options

    def client_half(self) -> ClientHalf:
        return KeepLocal(self.bn_keys, "lg_fedavg.local.", after_average=self.options.local_eval == "averaged", option=("global_body", "keep"))


SPEC: AlgorithmSpec = register_algorithm(
    "lg_fedavg",
    AlgorithmSpec(
        LGFedAvgOptions,
        lambda o, ctx: (LGFedAvg(ctx.model, o, ctx.section), []),
        "local representation, global head (Liang et al. 2020)",
        capabilities=Capabilities(takes_weights=True, personal_model=True),
        capabilities_of=lambda o: after_average(SPEC.capabilities, "local_eval", "averaged", o.local_eval == "averaged"),
        makes=(LGFedAvg,),
    ),
)
