"""A classifier's representation and head, for methods that need both.

MOON, FedProto, FedHKD, FedGen, FedRoD, FedDBE, the projection head and the CKA
analysis work on the representation a model feeds to its classifier head.
Rather than make every architecture (and every user's own ``nn.Module``)
implement a second forward method, a model *declares* which submodule is its
head (:class:`DeclaresHead`: a ``head_name()`` method returning its dotted
name; every bundled model does), and the representation is that module's
input, captured with a forward pre-hook while the model runs its ordinary
``forward``. The hook sees the tensor the layer sees, so it works under
``torch.func.functional_call`` and ``vmap`` alike, and logits stay exactly
what ``model(x)`` returns.

A model that declares nothing gets its *last registered* ``nn.Linear``, with
a note naming the module picked (said once a call, :func:`warn_undeclared`),
because that rule picks the wrong module for a model that registers an
auxiliary ``nn.Linear`` after its classifier. The note comes from the run's
build; code that runs many batches (a training step, an evaluation) looks the
head up once and silently (``warn=False``).
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Mapping, NamedTuple, Protocol, runtime_checkable

import torch
from torch import nn

from chillfl.errors import ConfigError
from chillfl.once import warn_once

log = logging.getLogger(__name__)


@runtime_checkable
class SlimStaged(Protocol):
    """A model whose final stage can run at reduced width (FedAlign's slimmed stage): it names that stage."""

    slim_stage: str


@runtime_checkable
class DeclaresHead(Protocol):
    """A model that names its classifier head, so that no method has to guess it.

    ``head_name()`` returns the head's dotted submodule name (``"fc"``, ``"classifier.6"``). The head
    holds a ``weight`` of shape ``[num_classes, features]`` (and optionally a ``bias`` of ``[num_classes]``)
    and maps the representation ``[batch, features]`` to the logits, as an ``nn.Linear`` does. A module
    that wraps a model under a prefix (APFL's pair, FedRoD's template) declares the prefixed name.
    """

    def head_name(self) -> str: ...


@runtime_checkable
class SwitchesBatchNorm(Protocol):
    """A model whose options choose whether it has batch norm: ``batch_norm_setting()`` is the ``[model]`` option and its
    TOML value that give it batch norm (``("norm", '"batch"')``), None where this architecture has no such option.

    Why: a method that needs batch norm (FedBN) refuses a model built without it, and names the option of the model at
    hand (a ResNet-18's ``norm``, the FLex&Chill CNN's ``batch_norm``), not one of another model.
    """

    def batch_norm_setting(self) -> tuple[str, str] | None: ...


class NoHeadError(ValueError):
    """The model declares no head and has no ``nn.Linear`` layer, so it has no classifier head to split at."""


class HeadSize(NamedTuple):
    """The head's weight shape: logits out, representation features in."""

    classes: int
    features: int


HOW_TO_DECLARE = "declare it with a head_name() method returning the head's dotted module name (chillfl.extend.DeclaresHead)"


def last_linear(model: nn.Module) -> str:
    """Dotted name of the model's last registered ``nn.Linear``: the head of a model that declares none."""
    name = None
    for module_name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            name = module_name
    if name is None:
        raise NoHeadError(f"{type(model).__name__} declares no classifier head and has no nn.Linear layer to use as one")
    return name


def head_name(model: nn.Module, *, warn: bool = True) -> str:
    """Dotted name of the model's classifier head: the one it declares (:class:`DeclaresHead`), else its last ``nn.Linear``.

    A declared module that declares a head itself (MOON's projection head in place of the model's) is
    followed into. A declared name that is not a submodule holding a 2-D ``weight`` is a ConfigError on ``model``. The
    fallback says so once a call (:func:`warn_undeclared`), naming the model's class and the module picked.
    ``warn=False``: a lookup repeated while a run trains (every step, every client), after the run's build warned.
    """
    if isinstance(model, DeclaresHead):
        name = model.head_name()
        head = declared_head(model, name)
        return prefixed(name, head_name(head, warn=warn)) if isinstance(head, DeclaresHead) else name
    name = last_linear(model)
    check_guessed_head(model, name)
    if warn:
        warn_undeclared(model, f"uses its last nn.Linear, {name!r}")
    return name


RUN_CLASSES: weakref.WeakKeyDictionary[nn.Module, int] = weakref.WeakKeyDictionary()
"""The class count of the run each model was built for (:func:`check_declared_head` records it), so that a head guessed
while the run's method is built (:func:`check_guessed_head`) is checked against it. Why here: the methods look the head up
from the model alone, and only a method that reads the head needs the guess to be one (FedAvg runs any last layer)."""


def check_guessed_head(model: nn.Module, name: str) -> None:
    """A ConfigError on ``model`` when the module guessed as the head of a model that declares none, ``name``, is an
    ``nn.Linear`` whose row count is not the run's class count (:data:`RUN_CLASSES`; unknown outside a run: not checked).

    Such a layer is not the classifier (a parameterless layer after it makes the logits): a method reading it as the
    head would split the model at the wrong layer without a word, or fail mid-run on a [batch, rows] prior or logit.
    """
    classes = RUN_CLASSES.get(model)
    module = model.get_submodule(name)
    if classes is None or not isinstance(module, nn.Linear) or module.out_features == classes:
        return
    raise ConfigError("model", f"{type(model).__name__} declares no classifier head, and its last nn.Linear {name!r}, which would be read as it, "
                               f"has {module.out_features} outputs where the data have {classes} classes: {HOW_TO_DECLARE}")


def warn_undeclared(model: nn.Module, picked: str) -> None:
    """Warn that ``model`` declares no head and what chillfl ``picked`` instead (``"uses its last nn.Linear, 'fc'"``).

    Said once a call (:func:`~chillfl.once.warn_once`), like the other notes: a Python warning showed once per
    process (and again only when some import had reset the filters), so a notebook's next run of the same model was
    silent, and it pointed at this line instead of the user's call. The message names the model's class and the
    pick, so each undeclared class (and rule) is said once within a call.
    """
    kind = type(model)
    warn_once(log, f"{kind.__module__}.{kind.__qualname__} declares no classifier head; chillfl {picked}: {HOW_TO_DECLARE}")


def declared_head(model: nn.Module, name: object) -> nn.Module:
    """The head module ``model`` declares as ``name``; a ConfigError on ``model`` when it is not a head."""
    owner = type(model).__name__
    if not isinstance(name, str) or not name:
        raise ConfigError("model", f"{owner}.head_name() must return the dotted name of its classifier head module, got {name!r}")
    try:
        head = model.get_submodule(name)
    except AttributeError:
        raise ConfigError("model", f"{owner} declares its classifier head {name!r}, which is not one of its submodules") from None
    if isinstance(head, DeclaresHead):
        return head  # followed into by head_name
    weight = dict(head.named_parameters(recurse=False)).get("weight")
    if weight is None or weight.dim() != 2:
        shape = "none" if weight is None else list(weight.shape)
        raise ConfigError("model", f"{owner} declares its classifier head {name!r}, a {type(head).__name__} whose weight ({shape}) is not [num_classes, features]"
                                   + one_by_one_hint(weight))
    return head


def one_by_one_hint(weight: torch.Tensor | None) -> str:
    """What to put in place of a 1x1 convolution head (weight ``[classes, features, 1, 1]``); "" for any other weight.

    Methods read the head's input as ``[batch, features]`` and some apply the head as ``W z + b``; a 1x1 convolution on
    pooled features is that map, but its input is ``[batch, features, 1, 1]``, so it is not accepted as it is.
    """
    if weight is None or weight.dim() != 4 or tuple(weight.shape[2:]) != (1, 1):
        return ""
    classes, features = int(weight.shape[0]), int(weight.shape[1])
    return (f": a 1x1 convolution is not read as a head; on pooled features it is the same map as nn.Flatten() and an nn.Linear({features}, {classes}) "
            "(weight = conv.weight.flatten(1)): put those in its place and declare the nn.Linear")


def prefixed(prefix: str, name: str) -> str:
    """``name`` inside submodule ``prefix``: how a module that wraps a model declares the model's head ("" is the model itself)."""
    return f"{prefix}.{name}" if name else prefix


def head_of(model: nn.Module, name: str | None = None) -> nn.Module:
    """The classifier head module (see :func:`head_name`); ``name``: the head's name where the caller looked it up
    already (once per model, so a model that declares none warns once, not at each of its head's readings)."""
    return model.get_submodule(head_name(model) if name is None else name)


def head_size(model: nn.Module, name: str | None = None) -> HeadSize:
    """The head's ``[num_classes, features]``, from its weight's shape (``name`` as for :func:`head_of`)."""
    weight = dict(head_of(model, name).named_parameters(recurse=False))["weight"]
    return HeadSize(int(weight.shape[0]), int(weight.shape[1]))


def head_has_bias(model: nn.Module, name: str | None = None) -> bool:
    """Whether the classifier head has a bias parameter (FedDBE folds into it; prototype terms apply it); ``name`` as for :func:`head_of`."""
    return dict(head_of(model, name).named_parameters(recurse=False)).get("bias") is not None


def refuse_tied_head(model: nn.Module, head_modules: list[str]) -> None:
    """A ConfigError on ``model`` when a parameter of the head (``head_modules``, dotted names) is tied to one outside it.

    Called where a method splits the model at its head (keeps it local, frozen, or apart from the body). The state
    holds a tied tensor once, under its first name (``emb.weight`` of a char-LM whose output layer reuses its
    embedding), so the head's own name is not in it: the method would average its "personal" head, train its "frozen"
    one, or fail mid-run looking for the name. Keeping one name local and sharing the other cannot be done at all.
    """
    inside = set(head_modules)
    head_objects = {id(model.get_submodule(n)) for n in inside}
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    for name, p in model.named_parameters(remove_duplicate=False):
        owner = name.rpartition(".")[0]
        if owner not in inside:
            continue
        # the head module itself under a second attribute (self.classifier = self.fc) is no tie: the same module
        outside = [n for n in names[id(p)] if id(model.get_submodule(n.rpartition(".")[0])) not in head_objects]
        if outside:
            raise ConfigError("model", f"{type(model).__name__}'s classifier head parameter {name!r} is tied to {outside[0]!r} (one tensor under two names), "
                                       "and this algorithm keeps the head apart from the body, which a tied head cannot be: give the head a parameter of "
                                       "its own, or run a method that does not split the model at its head")
        first = names[id(p)][0]  # the state's name for it
        if first.rpartition(".")[0] not in inside:
            raise ConfigError("model", f"{type(model).__name__}'s classifier head {owner!r} is registered first as {first.rpartition('.')[0]!r}, the name "
                                       f"the run's state holds its parameters under: declare the head by that name (head_name() returning it)")


def check_declared_head(model: nn.Module, num_classes: int) -> None:
    """Before a run: a head the model declares exists and has ``num_classes`` rows (ConfigError on ``model``).

    A model that declares none is not checked (nor warned about) here: only the methods that read a head need one, and
    they check the layer they guess (:func:`check_guessed_head`) against the ``num_classes`` recorded here.
    """
    RUN_CLASSES[model] = num_classes
    if not isinstance(model, DeclaresHead):
        return
    classes = head_size(model).classes
    if classes != num_classes:
        raise ConfigError("model", f"{type(model).__name__}'s declared classifier head {head_name(model)!r} has {classes} outputs; the data have {num_classes} classes")


def is_linear_head(head: nn.Module) -> bool:
    """Whether ``head`` computes ``W z + b`` from its ``weight`` and ``bias``: an ``nn.Linear`` that keeps ``nn.Linear``'s forward.

    A subclass that overrides ``forward`` (a cosine classifier built on ``nn.Linear``) holds the same parameters but
    maps them to other logits, so it is not linear here.
    """
    return isinstance(head, nn.Linear) and type(head).forward is nn.Linear.forward


def refuse_nonlinear_head(model: nn.Module, why: str | None, method: str, field: str = "model", head: str | None = None) -> None:
    """A ConfigError on ``field`` when a method that applies the head as an affine map (``why``: its
    :attr:`~chillfl.capabilities.Capabilities.linear_head`) meets a model whose head is not :func:`is_linear_head`.

    Those methods compute ``W z + b`` from the head's parameters themselves, so under another head their maths
    would differ from the model's logits without any error. A model without a head is left to the method's own check.
    ``head``: the head's name where the caller looked it up already (as for :func:`head_of`).
    """
    if why is None:
        return
    try:
        name = head_name(model) if head is None else head
    except NoHeadError:
        return
    module = model.get_submodule(name)
    if not is_linear_head(module):
        kind = type(module).__name__
        raise ConfigError(field, f"{method} reads the classifier head as a linear map ({why}); {type(model).__name__}'s head {name!r} is a {kind}, "
                                 "not an nn.Linear: run it with a method that only reads the head's input, or give the model an nn.Linear head")


def forward_with_features(model: nn.Module, x: torch.Tensor, *, call: Any = None, head: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``model`` on ``x``; return ``(representation, logits)``.

    ``call`` replaces ``model(x)`` when given (e.g. a ``functional_call``
    closure over stacked parameters); the hook is installed on ``model``'s
    head module either way, which is the module ``functional_call`` runs.
    The representation is flattened to ``[batch, features]`` as the head
    sees it. ``head``: the head's name, looked up once by a caller that runs
    many batches (None: :func:`head_name`, which warns for a model that declares none).
    """
    captured: list[torch.Tensor] = []

    def grab(_module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        captured.append(inputs[0])

    name = head_name(model) if head is None else head
    handle = model.get_submodule(name).register_forward_pre_hook(grab)
    try:
        logits = model(x) if call is None else call(x)
    finally:
        handle.remove()
    if not captured:
        raise NoHeadError(f"{type(model).__name__}'s forward did not call its classifier head {name!r}")
    return captured[-1], logits


@torch.no_grad()
def head_inputs(model: nn.Module, head: str, state: Mapping[str, torch.Tensor], x: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The head's inputs ``[n, d]`` and the logits ``[n, C]`` of ``x`` under ``state`` (parameters and buffers), in eval
    mode, ``batch_size`` rows at a time: a client's rows as the representations a method reads (CCVR's class statistics,
    kNN-Per's datastore)."""
    model.eval()
    reps, logits = [], []
    for i in range(0, len(x), batch_size):
        rep, out = forward_with_features(model, x[i : i + batch_size], call=lambda b: torch.func.functional_call(model, dict(state), (b,)), head=head)
        reps.append(rep.reshape(len(rep), -1))
        logits.append(out)
    return torch.cat(reps), torch.cat(logits)
