"""MOON (Li, He & Song, CVPR 2021): FedAvg aggregation + the model-contrastive local term.

Each client keeps its state after its last local training (its "previous
local model", the paper's w_i^{t-1}) as its own state (:class:`MoonClient`),
as in the paper's Algorithm 1, where the client holds it; the official code
keeps the same models on the server side (``old_nets_pool`` with
``model_buffer_size = 1``), which gives the same numbers. The server sends
``mu``, ``tau`` and the global model. Aggregation is FedAvg (Algorithm 1).

Choices
-------
* A client that has never trained has no previous model. The official code
  trains round 0 with an empty pool (its contrastive logits hold the
  positive pair only, so l_con = 0); here such a client gets weight 0 for
  the term (``moon_weight = 0``) in every round until it has trained once,
  which is the official round 0 and covers partial participation. (Under
  partial participation the official pool, a copy of every client's net
  after round 0, gives a client not yet sampled its own never-trained random
  initialisation as the negative; FL-bench's ``src/client/moon.py`` takes
  the global model, which makes l_con the constant log 2: weight 0, as here.)
* One previous model (the official ``model_buffer_size`` default 1); a
  longer pool of negatives is not implemented.
* The previous model is the client's full state (parameters and batch-norm
  statistics), run in eval mode like the official code's frozen models.

Checked against (2026-12-02) QinbinLi/MOON ``main.py`` (``train_net_fedcon``:
logits ``[cos(z, z_glob), cos(z, z_prev)...] / temperature``, cross-entropy
with label 0, ``loss1 + mu * loss2``; the global and pooled nets in eval mode
without gradients; ``init_nets``, the round loop and its FedAvg weighted by
rows) and KarhouTam/FL-bench ``src/client/moon.py``; the term itself:
:mod:`chillfl.training.moon`.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from chillfl.aggregation.base import ClientHalf, ClientState, Context, Downlink, FedAvg, Params, Report, Trained, Wire, own_entries, with_prefix
from chillfl.options import Scale, require
from chillfl.training.objective import Term
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, Built, register_algorithm, require_model_head, with_terms
from chillfl.capabilities import FORWARD, Capabilities, Cost


@dataclass(frozen=True)
class MoonOptions:
    """``mu``: weight of l_con (paper: 5 on CIFAR-10, 1 on CIFAR-100 and Tiny-ImageNet); ``tau``: temperature (0.5)."""

    mu: Scale = 5.0
    tau: float = 0.5

    def validate(self, section: str) -> None:
        require(self.mu >= 0, f"{section}.mu", f"must be >= 0, got {self.mu}")
        require(self.tau > 0, f"{section}.tau", f"must be > 0, got {self.tau}")


PREFIX = "moon.prev."
"""Where the client's previous local model lives in its state."""


@dataclass(frozen=True)
class MoonClient:
    """MOON's client half: its previous local model as ``moon_prev`` (weight 0 before it has one); keeps the trained one."""

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        prev = own_entries(state, PREFIX)
        out = dict(context)
        if not prev:
            out["moon_weight"] = 0.0
        out["moon_prev"] = prev if prev else context["moon_global"]
        return start, out

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return with_prefix(trained.params, PREFIX), {}


class Moon(FedAvg):
    """FedAvg that sends MOON's term options and the global model; the previous models are the clients' own."""

    def __init__(self, options: MoonOptions = MoonOptions()) -> None:
        super().__init__()
        self.options = options

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        context: dict[str, Wire] = {"moon_weight": self.options.mu, "moon_tau": self.options.tau, "moon_global": global_params}
        return Downlink(context=context, local=("moon_global", "moon_prev"))

    def client_half(self) -> ClientHalf:
        """The client keeps its previous local model (:class:`MoonClient`)."""
        return MoonClient()

    def needed_terms(self) -> list[Term]:
        """The model-contrastive term that reads ``moon_weight`` (:class:`~chillfl.training.moon.MoonTerm`): without it the
        clients run FedAvg's steps."""
        from chillfl.training.moon import MoonTerm  # the representation's forward lives with the training loop

        return [MoonTerm()]


def _build(options: MoonOptions, ctx: BuildContext) -> Built:
    return with_terms(Moon(options))


def _check_model(options: MoonOptions, model: nn.Module) -> None:
    """MOON's term reads the representation before the classifier head: a model without one is refused, by config and
    for an instance passed from Python alike (:attr:`~chillfl.aggregation.registry.AlgorithmSpec.check_model`)."""
    require_model_head(model, "MOON")


SPEC = register_algorithm("moon", AlgorithmSpec(MoonOptions, _build, "model-contrastive FL (Li et al. 2021)",
                                                capabilities=Capabilities(takes_weights=True, cost=Cost(step_passes=1 + 2 * FORWARD)), makes=(Moon,),
                                                check_model=_check_model))
"""Its cost: the global and the previous model's forwards on each step's batch."""
