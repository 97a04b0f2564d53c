"""FedPer (Arivazhagan et al., 2019): base layers are federated, personalisation layers stay local.

Each client trains its whole model (base + its own head) for the run's local
epochs, as FedAvg does; only the base layers are averaged (FedAvg weights
n_i / n), and the head ("personalisation layers") stays the client's own
(uploaded for the global model under the default ``global_head = "average"``;
never sent back to a returning client, unless an ``[objective]`` anchor, ``proximal_mu`` or ``ntd``, reads it:
then it is priced): its client half (:class:`KeepLocal`) puts the client's own head into its
start model and keeps the trained one, FedBN's pattern with other keys.
Local accuracy measures the client's model after its training, with its own
head (``local_eval = "trained"``, default); ``local_eval = "averaged"``
measures its own head on the base the server has just averaged, as the FedRep
authors' code measures FedPer (the server evaluates it after the round,
:class:`~chillfl.aggregation.base.MeasuredAfterAverage`).

Choices
-------
* The head is the model's declared classifier head (:mod:`chillfl.models.parts`)
  and the ``head_layers - 1`` modules owning parameters registered just before
  it (default 1: the classifier, the paper's "FedPer with one personalisation
  layer"; it also reports 2). Modules registered after the classifier (an
  auxiliary layer) are shared. A model that declares no head keeps its last
  ``head_layers`` parameterised modules, with a warning naming them.
* A client's first round starts from the global model's head.
* The global model's head (used only for the global model's evaluation and
  as the start of first-time clients): ``global_head = "average"`` (default)
  averages the round's clients' heads, ``"keep"`` leaves the initial head.
  The uplink is priced by what the server reads (:meth:`FedBN.aggregated_keys`):
  under ``"average"`` the whole model, heads included; under ``"keep"`` the
  base only, as the paper's client sends it.

Checked against PFLlib (``system/flcore/clients/clientper.py``: the whole model trains, only the
base is set from the server's).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal, Sequence

from torch import nn

from chillfl.aggregation.base import ClientHalf
from chillfl.aggregation.fedbn import FedBN, FedBNOptions, KeepLocal
from chillfl.options import require
from chillfl.aggregation.registry import AlgorithmSpec, after_average, register_algorithm
from chillfl.capabilities import Capabilities
from chillfl.errors import ConfigError
from chillfl.models.parts import DeclaresHead, check_guessed_head, head_name, refuse_tied_head, warn_undeclared

log = logging.getLogger(__name__)

NORMS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.RMSNorm)
"""Normalisation layers (batch, instance, layer, group, RMS norm): each belongs with the weight layer before it."""

CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
"""Modules that only hold layers in a row: a head boundary between their children cuts no layer."""


@dataclass(frozen=True)
class FedPerOptions:
    """``head_layers``: how many parameterised modules, ending at the classifier head, stay local; ``global_head``: ``average`` or ``keep``."""

    head_layers: int = 1
    global_head: Literal["average", "keep"] = "average"
    weighting: Literal["samples", "uniform"] = "samples"
    local_eval: Literal["trained", "averaged"] = "trained"
    """``trained``: local accuracy of the client's model at the end of its training; ``averaged``: of its own head on
    the model the server has just averaged, measured by the server after the round (the authors' code's)."""

    def validate(self, section: str) -> None:
        require(self.head_layers >= 1, f"{section}.head_layers", f"must be >= 1, got {self.head_layers}")


def head_keys(model: nn.Module, layers: int = 1, field: str = "algorithm.head_layers") -> list[str]:
    """State-dict names (parameters and persistent buffers: the run's state's) of the ``layers`` modules that own
    parameters ending at the declared head.

    A model that declares no head: its last ``layers`` such modules (warned once per class). A head that leaves
    no body is a ConfigError on ``field``, the option that asked for ``layers``. A head that cuts a layer (half an
    LSTM layer, a BatchNorm without its Linear: :func:`cut_layer`) is kept as counted, with one warning line.
    """
    owners = [(name, m) for name, m in model.named_modules() if any(True for _ in m.parameters(recurse=False))]
    if len(owners) <= layers:
        raise ConfigError(field, f"{type(model).__name__} has {len(owners)} parameterised modules; a head of its last {layers} leaves no body before it")
    end = len(owners)
    if isinstance(model, DeclaresHead):
        head = head_name(model)
        module = model.get_submodule(head)  # by the module, not its name: registered first under another (named_modules' one)
        end = next(i for i, (_, m) in enumerate(owners) if m is module) + 1
        if end < layers:
            raise ConfigError(field, f"{type(model).__name__}'s declared head {head!r} has {end - 1} parameterised module(s) before it; a head of {layers} needs {layers - 1}")
    else:
        check_guessed_head(model, owners[-1][0])  # a last nn.Linear that is not the classifier
        warn_undeclared(model, f"keeps its last {layers} parameterised module(s), {[name for name, _ in owners[-layers:]]}, as its head")
    refuse_tied_head(model, [name for name, _ in owners[end - layers : end]])  # its keys would name a tensor the state holds under the body's name
    warn_cut_layer(model, owners, end, layers, field)
    keys: list[str] = []
    for name, module in owners[end - layers : end]:
        base = f"{name}." if name else ""
        keys.extend(base + n for n, _ in module.named_parameters(recurse=False))
        # not a persistent=False buffer: the run's state (model_state) holds none, so no upload has it
        keys.extend(base + n for n, b in module.named_buffers(recurse=False) if b is not None and n not in module._non_persistent_buffers_set)
    return keys


def cut_layer(model: nn.Module, owners: Sequence[tuple[str, nn.Module]], start: int, end: int) -> str | None:
    """What a head of ``owners[start:end]`` (the parameterised modules, in order) cuts at its start, in words; None when nothing.

    Counting every module with parameters as a layer (the rule recorded results were run with) can cut what the papers
    count as one layer: a module of several parameterised parts (an LSTM layer's input and hidden halves, a residual
    block) that is a common ancestor of the last body module and the first head module (not the model, not a plain
    container); or a normalisation layer from its sibling (same parent) weight layer before it. Not only the nearest
    ancestor: a torchvision ViT's MLP is an ``nn.Sequential`` inside the residual block, so the rule climbs past a
    plain container while the cut is between two of its layers, and stops at one whose children at the cut are whole
    sub-modules (a row of blocks: a ResNet stage's, a transformer's), a cut between whole blocks. The norm rule wants
    siblings: a pre-norm transformer's final norm normalises the residual stream, not the last block's Linear.
    """
    if start < 1:
        return None
    (before, shared), (first, personal) = owners[start - 1], owners[start]
    parts_a, parts_b = before.split("."), first.split(".")
    depth = next((i for i, (x, y) in enumerate(zip(parts_a, parts_b)) if x != y), min(len(parts_a), len(parts_b)))
    unit = ""
    for level in range(depth, 0, -1):  # the common ancestors, nearest first; "" (the model) left out
        ancestor = ".".join(parts_a[:level])
        if ancestor in (before, first):
            continue
        if not isinstance(model.get_submodule(ancestor), CONTAINERS):
            unit = ancestor
            break
        if ".".join(parts_a[: level + 1]) != before or ".".join(parts_b[: level + 1]) != first:
            break  # a row of whole sub-modules: cut between two of them
    if unit:
        inside = [(i, name) for i, (name, _) in enumerate(owners) if name.startswith(f"{unit}.")]
        head = [f"{name}.*" for i, name in inside if start <= i < end]
        body = [f"{name}.*" for i, name in inside if not start <= i < end]
        return f"splits {unit} ({type(model.get_submodule(unit)).__name__}): {_few(head)} in the head, {_few(body)} in the body"
    if isinstance(personal, NORMS) and not isinstance(shared, NORMS) and parts_a[:-1] == parts_b[:-1]:  # siblings
        return f"begins the head with the normalisation layer {first}.* ({type(personal).__name__}) and leaves its weight layer {before}.* ({type(shared).__name__}) in the body"
    return None


def _few(names: Sequence[str]) -> str:
    """``names`` joined, the first three and a count of the rest: one readable line for a large block."""
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def warn_cut_layer(model: nn.Module, owners: Sequence[tuple[str, nn.Module]], end: int, layers: int, field: str) -> None:
    """One warning line when the head of ``layers`` modules ending at ``owners[end - 1]`` cuts a layer (:func:`cut_layer`),
    with the nearest ``field`` values that do not. Why a warning and not another count: every recorded result of FedPer,
    FedRep, FedBABU, LG-FedAvg and pFedSim was run with this one, and a head of 2 that is a BatchNorm and the classifier,
    or half an LSTM layer and the classifier, is rarely what the user meant."""
    cut = cut_layer(model, owners, end - layers, end) if layers > 1 else None  # 1: the declared classifier alone, as asked
    if cut is None:
        return
    whole = [k for k in range(1, end) if k != layers and cut_layer(model, owners, end - k, end) is None]
    nearest = [k for k in whole if k > layers][:1] + [k for k in whole if k < layers][-1:]
    hint = f"; {field.rsplit('.', 1)[-1]} = {' or '.join(map(str, nearest))} keeps every layer whole" if nearest else ""
    log.warning("%s = %d %s (every module with parameters counts as a layer)%s", field, layers, cut, hint)


def fedper_server(model: nn.Module, options: FedPerOptions, section: str = "algorithm") -> tuple[list[str], FedBNOptions]:
    """The head's keys and FedBN's options that average the rest (FedBN's rule with the head as its local keys)."""
    return head_keys(model, options.head_layers, f"{section}.head_layers"), FedBNOptions(global_bn=options.global_head, weighting=options.weighting)


class FedPer(FedBN):
    """FedAvg over the base; the head is the clients' own (:class:`KeepLocal`)."""

    def __init__(self, model: nn.Module, options: FedPerOptions = FedPerOptions(), section: str = "algorithm") -> None:
        """``section``: the table ``options`` came from, named by errors."""
        keys, fedbn = fedper_server(model, options, section)
        super().__init__(keys, fedbn)
        self.options = options

    def client_half(self) -> ClientHalf:
        return KeepLocal(self.bn_keys, "fedper.head.", after_average=self.options.local_eval == "averaged", option=("global_head", "keep"))


SPEC: AlgorithmSpec = register_algorithm(
    "fedper",
    AlgorithmSpec(
        FedPerOptions,
        lambda o, ctx: (FedPer(ctx.model, o, ctx.section), []),
        "shared base, local head (Arivazhagan et al. 2019)",
        capabilities=Capabilities(takes_weights=True, personal_model=True),
        capabilities_of=lambda o: after_average(SPEC.capabilities, "local_eval", "averaged", o.local_eval == "averaged"),
        makes=(FedPer,),
    ),
)
