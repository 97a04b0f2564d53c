"""The one local-training path every parameter-sharing method uses.

A client's training is a loop of steps over an explicit state (parameters,
buffers, momentum buffers) that the step owns: the model object is only a
stateless template run through ``torch.func.functional_call``. One step is

    loss, captured = StepLoss(model, spec)(params, buffers, x, y, temperature, context)
    grads, factors = step_grads(loss, params, keys, captured)  # torch.autograd.grad
    optimizer_step_(params, grads, state, lr, spec, factors)   # in place, no graph

The vectorised executor runs the very same three functions on parameters
stacked along a client dimension (the loss under ``torch.func.vmap``).
For a model prepared by :func:`~chillfl.training.linear_factors.factored_linears`
(every executor prepares its template) the weight gradients of linear layers
stay factored as (input, output gradient) and the update applies them with one
fused matmul; other models take the same path with dense gradients only.
Gradients come from plain ``torch.autograd.grad`` rather than
``torch.func.grad``: the latter imports ``torch._dynamo`` on first use (about
1 s of start-up on a 2-core machine) and adds per-call overhead that dominates
steps of small models.

Two settings of the spec change how the CPU or GPU computes a step, not
what it computes (:func:`resolve_compute` picks them from the config):

* ``memory_format = "channels_last"`` keeps 4-d tensors (conv weights and
  image batches) in NHWC order for the whole of a client's training, where
  oneDNN's CPU convolutions and pooling are faster; the fp32 maths is the
  same up to float rounding, and the returned state is contiguous again;
* ``precision = "bf16"`` runs the model's forward under ``torch.autocast`` in
  bfloat16; the loss, the terms, the gradients of the fp32 parameters and
  the update stay fp32 (mixed precision: the state is never rounded to bf16);
  ``precision = "tf32"`` (CUDA only) keeps every tensor fp32 and lets the
  run's matmuls and convolutions use TF32 tensor cores (set for the run by
  :func:`chillfl.runner.device_settings`).

CPU time of one McMahan-CNN step (batch 50, 3x32x32, one thread, 2-core Xeon
with AVX-512 bf16 / AMX): 30 ms contiguous fp32, 23 ms channels-last, 19 ms
bf16, 11 ms channels-last + bf16 (a plain ``nn.Module`` + ``torch.optim.SGD``
step: 32, 27, 18 and 10 ms).

SGD matches ``torch.optim.SGD`` (dampening 0):
``g <- grad + wd * w;  b <- momentum * b + g;  w <- w - lr * b``, with Nesterov
``w <- w - lr * (g + momentum * b)`` (the momentum buffer starts at zero, which
equals PyTorch's "first step b = g"). Adam, AdamW, gradient clipping and
learning-rate schedules: :mod:`chillfl.training.optim` (``LocalSpec.optim``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import math
import os
import sys
import threading
import weakref
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence

import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode
from torch.torch_version import TorchVersion

from chillfl.errors import ConfigError, one_edit
from chillfl.global_rng import GLOBAL_RNG
from chillfl.models.parts import forward_with_features, head_name
from chillfl.training.batched_conv import batched_conv_mode
from chillfl.training.linear_factors import Captured, Recorder, add_outer_, factored_layers, recording
from chillfl.training.terms import HALF_DTYPES, half_to_float
from chillfl.training.objective import StepView, Term, apply_term, is_batch_term, temperature_cross_entropy
from chillfl.training.optim import Carried, OptState, adam_update_, clip_by_norm_, init_state, load_carried, whole_grads
from chillfl.training.sam import sharpness_aware_grads
from chillfl.data.stamp import Pattern, RowStamp, stamp_codes
from chillfl.training.schedule import SGD, Optimizer, below_floor, first_step_below_floor, planned_steps, schedule_field, schedule_term, step_lr
from chillfl.seeds import derive_seed

if TYPE_CHECKING:  # only the annotation: importing chillfl.data here would load every dataset reader in each worker process
    from chillfl.data.augment import Augment

Params = dict[str, torch.Tensor]
LossFunction = Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor]
"""A plain base loss, ``loss(logits, y, temperature) -> scalar`` (``client.loss``'s: the temperature cross-entropy)."""


class DeclaredLoss(Protocol):
    """A base loss (:attr:`LocalSpec.base_loss`) that reads more than ``(logits, y, temperature)``, and declares what.

    The training step calls it by its flags (a loss that declares neither is a :data:`LossFunction`):

    * ``uses_context`` (and not ``uses_features``): ``loss(logits, y, temperature, context=context)``, the client's
      :data:`~chillfl.aggregation.base.Context` (FedLC's and FedRS's label counts), at no extra forward;
    * ``uses_features``: ``loss(logits, y, temperature, features=features, params=params, context=context)``, also the
      head's input and the parameters, frozen ones and buffers included (FedProto, FedRoD): one more forward a step.

    Why declared: the flags decide the call (and the forward it needs), so a loss whose signature asks for what its
    flags do not give, or a misspelt flag, is one ConfigError when its :class:`LocalSpec` is built
    (:func:`check_base_loss`), not a TypeError mid-run. Declare them as class attributes
    (``uses_context: ClassVar[bool] = True``) or, where they depend on the instance, in ``__init__``.
    """

    @property
    def uses_context(self) -> bool:
        ...

    @property
    def uses_features(self) -> bool:
        ...

    def __call__(
        self, logits: torch.Tensor, y: torch.Tensor, temperature: Any, *,
        features: torch.Tensor | None = None, params: Mapping[str, torch.Tensor] | None = None, context: Mapping[str, Any] | None = None,
    ) -> torch.Tensor:
        ...


BaseLoss = LossFunction | DeclaredLoss
"""What :attr:`LocalSpec.base_loss` holds: a plain :data:`LossFunction` or a :class:`DeclaredLoss`."""

LOSS_FLAGS = ("uses_context", "uses_features")
"""The flags a :class:`DeclaredLoss` declares; the training step reads these names and no other."""


def reads_features(loss: BaseLoss) -> bool:
    """Whether a base loss declares ``uses_features``: it is also called with the head's input, the parameters (frozen
    ones and buffers included) and the context (FedProto, FedHKD, FedRoD). A plain loss function declares nothing
    (:class:`DeclaredLoss`), so the flag is read with a default."""
    return bool(getattr(loss, "uses_features", False))


def loss_call(loss: BaseLoss) -> dict[str, None]:
    """The keyword arguments the training step passes ``loss`` besides ``(logits, y, temperature)``, by its flags
    (:class:`DeclaredLoss`), with None in place of their values."""
    if reads_features(loss):
        return {"features": None, "params": None, "context": None}
    return {"context": None} if reads_context(loss) else {}


def check_base_loss(loss: BaseLoss, field: str) -> None:
    """One ConfigError on ``field`` when ``loss`` cannot be called as its flags say (:class:`DeclaredLoss`): its signature asks
    for an argument the step will not pass (a loss reading ``context`` that declares no ``uses_context``), takes no
    keyword its flags ask the step to pass, or it sets a near-miss of a flag (``use_context``), which the step would
    ignore silently. Why here: the flags are read once per training job, deep in a worker; the mistake is the method's,
    so it is named before the run starts. A callable without a readable signature (a builtin) is trusted."""
    owner = _loss_owner(loss)
    own = tuple(sorted((k, isinstance(v, bool)) for k, v in vars(loss).items())) if hasattr(loss, "__dict__") else ()
    key = (reads_context(loss), reads_features(loss), own)
    if owner is not None and key in _LOSSES_CHECKED.get(owner, ()):
        return  # specs are rebuilt per client and round (dataclasses.replace); the signature is read once
    what = getattr(loss, "__qualname__", None) or type(loss).__qualname__
    held = getattr(loss, "__func__", loss)  # a bound method's flags are its function's (as reads_context reads them)
    for attr in dir(loss):
        if not attr.lower().startswith(("use_", "uses_")):  # the cheap test first: losses not cached are checked per spec
            continue
        near = misspelt_flag(attr, inspect.getattr_static(held, attr, None))
        if near is not None:
            raise ConfigError(field, f"the base loss {what} sets {attr}, which the training step never reads; declare {near} "
                                     "(chillfl.extend.DeclaredLoss)")
    try:
        signature = inspect.signature(loss)
    except (TypeError, ValueError):
        return
    passed = loss_call(loss)
    try:
        signature.bind(None, None, None, **passed)
    except TypeError as exc:
        call = ", ".join(["logits", "y", "temperature", *(f"{k}=..." for k in passed)])
        flags = [f for f in LOSS_FLAGS if bool(getattr(loss, f, False))]
        said = f"it declares {' and '.join(flags)}" if flags else "it declares neither uses_context nor uses_features"
        wanted = [f for f, arg in (("uses_context", "context"), ("uses_features", "features")) if arg in signature.parameters and arg not in passed]
        fix = f"declare {wanted[0]} = True" if wanted else "make its signature take those arguments (by keyword) or change its flags"
        raise ConfigError(field, f"the base loss {what} is called as loss({call}), since {said}, but {exc}; {fix} (chillfl.extend.DeclaredLoss)") from None
    if owner is not None:
        _LOSSES_CHECKED.setdefault(owner, set()).add(key)


def misspelt_flag(name: str, value: object) -> str | None:
    """The flag of :data:`LOSS_FLAGS` that attribute ``name`` holding ``value`` misspells, or None. A misspelling is
    shaped like a flag: ``use_``/``uses_`` (any case) and a rest within one edit (a letter added, dropped, changed or two
    swapped) of ``context``/``features``, holding a bool or a property. Why so narrow: ``used_features = 0`` or
    ``user_context`` are a loss's own state, not a flag, and refusing them would refuse a working loss."""
    if name in LOSS_FLAGS or not (isinstance(value, (bool, property))):
        return None
    lower = name.lower()
    prefix = next((p for p in ("uses_", "use_") if lower.startswith(p)), None)
    if prefix is None:
        return None
    rest = lower[len(prefix):]
    return next((flag for flag in LOSS_FLAGS if rest == flag.removeprefix("uses_") or one_edit(rest, flag.removeprefix("uses_"))), None)


def _loss_owner(loss: BaseLoss) -> Any:
    """What a passed check of ``loss`` is remembered under: a plain function itself, or the class of a callable object
    whose class defines ``__call__``; None (checked every time) for anything whose class says nothing of the code it
    runs (a bound method, a ``functools.partial``: one passing let every later one of another function through)."""
    if inspect.isfunction(loss):
        return loss
    kind = type(loss)
    if inspect.ismethod(loss) or isinstance(loss, functools.partial) or "__call__" not in {k for c in kind.__mro__[:-1] for k in vars(c)}:
        return None
    try:
        weakref.ref(kind)
    except TypeError:
        return None
    return kind


_LOSSES_CHECKED: weakref.WeakKeyDictionary[Any, set[tuple[bool, bool, tuple[tuple[str, bool], ...]]]] = weakref.WeakKeyDictionary()
"""Loss functions and classes :func:`check_base_loss` passed, by their flags and instance attribute names (and whether
each holds a bool, as a misspelt flag does): a cache keyed by the code, as :mod:`~chillfl.executors.compiled`'s, so
that the check costs once, not at every spec (about 70 us)."""


def reads_representation(spec: LocalSpec) -> bool:
    """Whether a training step under ``spec`` runs the model for its representation too (a base loss that reads it, a batch term)."""
    return reads_features(spec.base_loss) or any(is_batch_term(t) for t in spec.terms)


def refuse_representation_readers(spec: LocalSpec, why: str, *, losses: bool = True) -> None:
    """One line (a ConfigError) when a client half that trains through a forward of its own (FedRoD's two heads, FML's
    pair, APFL's mixture, FedDBE's shifted representation) meets what reads the batch's representation through the run's
    template: a batch term (on the first one's field, :meth:`LocalSpec.term_field`: ``objective.terms[1]``, as every other
    refusal of a term names it), or with ``losses`` a base loss that reads it (``client.loss``).
    ``why``: the method's reason. Raised while its protocol is built, before the run's folder is kept: exit 2, no folder."""
    batch = next((i for i, t in enumerate(spec.terms) if is_batch_term(t)), None)
    if batch is not None:
        field = spec.term_field(batch) or "objective.terms"
        raise ConfigError(field, f"{why}; a batch term (one that reads the batch's representation) does not compose with it")
    if losses and reads_features(spec.base_loss):
        raise ConfigError("client.loss", f"{why}; a representation-based loss does not compose with it")


def reads_context(loss: BaseLoss) -> bool:
    """Whether a base loss declares ``uses_context``: it is also called with the client's context, without the extra
    forward that the representation costs (FedRS's and FedLC's adjustment by the client's label counts)."""
    return bool(getattr(loss, "uses_context", False))


def split_state(model: nn.Module, state: Mapping[str, torch.Tensor], frozen: frozenset[str] = frozenset()) -> tuple[Params, Params]:
    """Split a flat state dict into (trainable parameters, buffers) by the model's own naming.

    ``frozen`` parameters go with the buffers: the step reads them and never updates them (:attr:`LocalSpec.frozen`).
    """
    pnames = {n for n, _ in model.named_parameters()} - frozen
    params = {k: v for k, v in state.items() if k in pnames}
    buffers = {k: v for k, v in state.items() if k not in pnames}
    return params, buffers


def model_state(model: nn.Module) -> Params:
    """The model's parameters and persistent buffers as detached clones (the 'global model' payload): ``state_dict()``'s
    entries, a tied tensor once, under its first name.

    A buffer registered ``persistent=False`` (a rotary ``inv_freq``, a cos/sin cache) is left out: it is the module's
    own constant, not in its ``state_dict()``, so it is neither averaged nor noised nor priced nor saved, and a saved
    model loads into the class. The module keeps it, and every executor's forward reads it from there."""
    out = {k: v.detach().clone() for k, v in model.named_parameters()}
    out.update({k: v.detach().clone() for k, v in persistent_buffers(model)})
    return out


def persistent_buffers(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """``model.named_buffers()`` without those registered ``persistent=False`` (which ``state_dict()`` leaves out too)."""
    modules = dict(model.named_modules())
    out = []
    for name, buffer in model.named_buffers():
        owner, _, leaf = name.rpartition(".")
        if leaf not in modules[owner]._non_persistent_buffers_set:
            out.append((name, buffer))
    return out


class PrivateGradients(Protocol):
    """A step's gradient computed from per-sample gradients (implemented by :class:`chillfl.privacy.dpsgd.PerSampleClipping`)."""

    def gradients(
        self, loss_fn: Callable[..., tuple[torch.Tensor, Any]], params: Params, buffers: Params, x: torch.Tensor, y: torch.Tensor,
        temperature: Any, context: Mapping[str, Any], seed: int, step: int,
    ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        ...

    def stacked_gradients(
        self, loss_fn: Callable[..., tuple[torch.Tensor, Any]], params: Params, buffers: Params, x: torch.Tensor, y: torch.Tensor,
        temperature: torch.Tensor, leaves: Sequence[torch.Tensor], seeds: Sequence[int], step: int,
    ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """:meth:`gradients` of many clients stacked along a leading dimension, each with its own seed (the vectorised executor)."""
        ...


@dataclass(frozen=True)
class LocalSpec:
    """What is the same for every client of a run: the optimiser settings and the objective."""

    epochs: int
    batch_size: int
    momentum: float = 0.0
    weight_decay: float = 0.0
    base_loss: BaseLoss = temperature_cross_entropy
    """The data loss a step minimises before the terms: a :data:`LossFunction`, or a :class:`DeclaredLoss` that declares
    what more it reads (checked against its signature when the spec is built: :func:`check_base_loss`)."""
    terms: Sequence[Term] = field(default_factory=tuple)
    term_fields: tuple[str, ...] = ()
    """The config field that put each of :attr:`terms` in the run, by position (``objective.terms[1]``, ``terms[0]`` from
    Python, ``algorithm.name`` for the method's own): a :class:`~chillfl.training.terms.TermError` or
    :class:`~chillfl.training.terms.ContextError` names it, as a ConfigError names its field. A term past its end is one
    a client half added (its ``objectives`` keep the run's terms first, in order): :attr:`method_field`'s."""
    method_field: str | None = None
    """The config field of the method (``algorithm.name``, ``aggregator`` from Python; a protocol whose method its own table
    names and that runs no aggregator: that table's, ``distillation.method``), for the terms its client half adds and the
    base losses it sets (:meth:`phase`'s too); None: unknown (the errors then say ``terms`` / ``context``)."""
    model: nn.Module | None = None
    """The architecture these jobs train (heterogeneous clients: one spec per architecture);
    None: the executor's own template. Executors group jobs by spec, so one batch is one architecture."""
    augment: Augment | None = None
    """Crop/flip of training batches (``[dataset.augment]``); None: batches are the data as stored."""
    memory_format: str = "contiguous"
    """``contiguous`` or ``channels_last`` (4-d states and batches in NHWC order; see the module docstring)."""
    precision: str = "fp32"
    """``fp32`` or ``bf16`` (the forward under bf16 autocast; see the module docstring)."""
    batched_conv: str = "grouped"
    """How a vmapped step runs the clients' ``conv2d`` / ``conv1d``: ``grouped`` (vmap's grouped convolution), ``gemm``
    (a gather of the windows + one batched matrix product: :mod:`chillfl.training.conv_gemm`), ``nhwc`` or ``loop`` (channels-last,
    grouped or per client: :mod:`chillfl.training.conv_nhwc`). One client's step is unaffected."""
    cuda_graphs: bool = False
    """The vectorised executor records a chunk's steps on a CUDA device as CUDA graphs and replays them
    (:mod:`chillfl.executors.step_graphs`); elsewhere, and for steps it cannot replay, steps run as they are."""
    compiled: bool = False
    """The vectorised executor runs a chunk's all-client step's forward and backward through ``torch.compile``
    (:mod:`chillfl.executors.compiled`); other steps and other executors run as they are."""
    optim: Optimizer = SGD
    """The optimiser besides ``momentum`` / ``weight_decay``: Adam(W), Nesterov, clipping, a schedule over local steps."""
    frozen: frozenset[str] = frozenset()
    """Parameters held fixed (read, never updated, no optimiser state): FedRep trains its head with the body frozen, then the body."""
    no_decay: frozenset[str] = frozenset()
    """Parameters that ``weight_decay`` leaves alone: coefficients, not weights (APFL's mixing weight alpha, whose
    Algorithm 1 step has no decay term)."""
    plain_sgd: frozenset[str] = frozenset()
    """Parameters stepped outside the optimiser by plain SGD, ``w <- w - plain_lr * g`` on their raw gradient: no
    momentum, Adam moments, weight decay or clipping (APFL's alpha under ``alpha_step = "sgd"``, as its Algorithm 1 and
    the reference codes, which step alpha by hand). Empty: every parameter takes the optimiser's step."""
    plain_lr: float | None = None
    """The learning rate of :attr:`plain_sgd`'s step; None: the step's own (the round's, after the schedule)."""
    plain_momentum: float = 0.0
    """Heavy-ball momentum of :attr:`plain_sgd`'s step, ``b <- m b + g; w <- w - plain_lr * b`` (``torch.optim.SGD``'s,
    buffers from zero each training, in the optimiser state's ``plain_momentum`` slot); 0: the plain step. A method
    sets it from its own option where its reference code steps such coefficients by SGD with momentum at their own
    learning rate (the method's module says which)."""
    private: PrivateGradients | None = None
    """DP-SGD (``[privacy] mechanism = "dp-sgd"``, :mod:`chillfl.privacy.dpsgd`): each step's gradient from clipped, noised
    per-sample gradients. None: the plain step. Training phases besides private training (:meth:`phase`) drop it."""
    deterministic: bool = True
    """The run's ``deterministic``: a worker training on CUDA sets PyTorch's deterministic algorithms by it (:func:`pin_worker`)."""
    draw_free: bool = False
    """(These two last, after the fields of before they came: a spec built positionally keeps its meaning.) The executor
    verified that the steps draw nothing from torch's global generators (the vectorized executor's probe: vmap refuses a random op):
    :func:`train_client` neither forks nor holds them, whatever :func:`draws_global` assumes."""
    policy_field: str = "temperature.policy"
    """(After those two, for the same reason.) The config field of the run's temperature policy (``temperature.policy``,
    ``policy`` from Python), kept by :meth:`phase`: a T it gives that no training can use, or a client-half state it
    returns that is no tensor table, is refused on it."""

    def term_field(self, index: int) -> str | None:
        """The config field of the term at ``index`` in :attr:`terms` (:attr:`term_fields`, else :attr:`method_field`)."""
        return self.term_fields[index] if index < len(self.term_fields) else self.method_field

    def __post_init__(self) -> None:
        """The base loss's flags against its signature (:func:`check_base_loss`), named by the method that set it: a
        client half's ``objectives`` put it here with ``dataclasses.replace``, which runs this again."""
        check_base_loss(self.base_loss, self.method_field or "algorithm.name")

    def phase(self, epochs: int, batch_size: int, base_loss: BaseLoss = temperature_cross_entropy) -> LocalSpec:
        """The spec of a training phase besides private training (distillation, a server model, FedMD's transfer learning).

        It keeps the run's optimiser and resolved compute settings (memory format,
        precision, batched convolutions), so ``precision = "bf16"`` holds in every
        phase, and its :attr:`frozen` parameters, so a frozen backbone stays frozen on
        the server and in distillation as in private training; it drops the private
        objective's terms (and their :attr:`term_fields`) and augmentation, and sharpness-aware steps (FedSAM's are the
        clients' local training). It keeps the fields that name the run's parts (:attr:`method_field`,
        :attr:`policy_field`): a phase's base loss is the method's, and its errors name the method's field.
        """
        return LocalSpec(
            epochs=epochs, batch_size=batch_size, momentum=self.momentum, weight_decay=self.weight_decay, base_loss=base_loss,
            memory_format=self.memory_format, precision=self.precision, deterministic=self.deterministic, batched_conv=self.batched_conv,
            optim=dataclasses.replace(self.optim, sam_rho=0.0, sam_adaptive=False, sam_eta=0.0),
            cuda_graphs=self.cuda_graphs, compiled=self.compiled, frozen=self.frozen, method_field=self.method_field, policy_field=self.policy_field,
        )


def conv2d_model(model: nn.Module) -> bool:
    """Whether the model has a 2-d convolution (the layers channels-last speeds up)."""
    return any(isinstance(m, nn.Conv2d) for m in model.modules())


def bf16_supported(device: torch.device) -> bool:
    """Whether bf16 autocast runs natively here: a CUDA GPU with bf16, or a CPU whose oneDNN has bf16 kernels (AVX-512 or AMX)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu" and torch.backends.mkldnn.is_available():
        try:
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):  # a torch build without the query: assume no native bf16
            return False
    return False


LARGE_CONV_OUTPUTS = 8192
"""Conv outputs a sample from which the CPU's channels-last kernels (and per-client steps) pay; see :func:`resolve_compute`."""


def conv_outputs_per_sample(model: nn.Module, x: torch.Tensor) -> int:
    """Elements the model's ``Conv2d`` layers output for one sample of ``x`` (one eval-mode forward, template untouched)."""
    total = 0

    def count(_module: nn.Module, _inputs: Any, output: torch.Tensor) -> None:
        nonlocal total
        total += output[0].numel()

    handles = [m.register_forward_hook(count) for m in model.modules() if isinstance(m, nn.Conv2d)]
    was_training = model.training
    try:
        model.eval()
        draws = client_rng(x.device, EVAL_SEED) if model_draws(model, training=False) else nullcontext()
        with torch.no_grad(), draws:  # fractional max-pooling draws in eval mode: the caller's generator is kept
            model(x[:1])
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return total


def resolve_compute(
    memory_format: str, precision: str, model: nn.Module, device: torch.device, sample: torch.Tensor | None = None
) -> tuple[str, str]:
    """The config's ``memory_format`` / ``precision`` -> the spec's (``auto`` decided), or ConfigError.

    ``auto`` is a fixed rule, never a timing taken at run time (runs stay
    reproducible): channels-last on the CPU for a model with a ``Conv2d``
    whose convolutions output at least :data:`LARGE_CONV_OUTPUTS` elements for
    one ``sample`` input (e.g. the McMahan CNN on 32x32 images), where
    oneDNN's NHWC convolutions are faster (measured in the module docstring
    and :mod:`chillfl.executors.parallel`); contiguous otherwise: MLPs and 1-d
    CNNs have no 4-d tensors, small convolutions (8x8 digits) gain little and
    stay bitwise what they were before the option existed, and on GPUs the
    gain is for reduced-precision tensor cores, where cuDNN picks its own
    layouts. Without a ``sample`` every ``Conv2d`` model counts as large.

    ``bf16`` needs a model whose trainable weights are float32: autocast runs a float64 model's forward in float64
    (the run was float64 with its loss rounded to float32, recorded as bf16), and a half model's as it is.
    """
    if precision == "bf16" and not bf16_supported(device):
        raise ConfigError("precision", f"'bf16' needs bfloat16 kernels, which device {str(device)!r} lacks here; use 'fp32'")
    if precision == "tf32" and device.type != "cuda":
        raise ConfigError("precision", f"'tf32' is a mode of NVIDIA GPUs' tensor cores, which device {str(device)!r} lacks; use 'fp32'")
    if precision == "bf16" and (others := trainable_dtypes(model) - {torch.float32}):
        raise ConfigError("precision", f"'bf16' autocasts a float32 model's forward and keeps its float32 weights; this model's trainable weights are "
                                       f"{dtype_names(others)} (autocast leaves float64 layers in float64, and half weights have no float32 copy): "
                                       "use 'fp32', or convert the model with .float()")
    if memory_format == "auto":
        large = conv2d_model(model) and (sample is None or conv_outputs_per_sample(model, sample) >= LARGE_CONV_OUTPUTS)
        memory_format = "channels_last" if device.type == "cpu" and large else "contiguous"
    return memory_format, precision


def trainable_dtypes(model: nn.Module) -> set[torch.dtype]:
    """The dtypes of ``model``'s trainable floating parameters (a frozen layer's and the buffers' are the model's business)."""
    return {p.dtype for p in model.parameters() if p.requires_grad and p.is_floating_point()}


def dtype_names(dtypes: Iterable[torch.dtype]) -> str:
    """``dtypes`` as a config reader writes them (``float64, bfloat16``), sorted."""
    return ", ".join(sorted(str(d).removeprefix("torch.") for d in dtypes))


def parameter_dtypes(model: nn.Module) -> str | None:
    """The dtypes of ``model``'s floating parameters as ``[model] dtype`` records them (None: it has none), which resume
    and ``load_run`` hold a module passed again to: a float32 run's state read into float64 is another computation."""
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    return dtype_names(dtypes) if dtypes else None


def half_weights_note(model: nn.Module, precision: str) -> str | None:
    """The note when ``model`` trains half-precision weights under a ``precision`` that is not bf16 (bf16 refuses them:
    :func:`resolve_compute`): the run is then float16 / bfloat16 throughout (state, updates, the average; no float32
    master weights), while ``config.toml`` records ``precision = "fp32"`` and no dtype."""
    half = trainable_dtypes(model) & set(HALF_DTYPES)
    if precision == "bf16" or not half:
        return None
    return (f"note: the model's trainable weights are {dtype_names(half)}: precision = {precision!r} trains them as they are, in "
            f"{dtype_names(half)} throughout (no float32 copy; config.toml records no model dtype); convert the model with .float() for a float32 run")


def to_memory_format(state: Mapping[str, torch.Tensor], memory_format: str) -> Params:
    """``state`` with its 4-d tensors in ``memory_format`` (others as they are; no copy where already so)."""
    fmt = torch.channels_last if memory_format == "channels_last" else torch.contiguous_format
    return {k: v.contiguous(memory_format=fmt) if v.dim() == 4 else v for k, v in state.items()}


def batch_layout(spec: LocalSpec, x: torch.Tensor) -> torch.Tensor:
    """A batch [clients, batch, C, H, W] laid out as the spec trains it (channels-last: each client's batch NHWC)."""
    if spec.memory_format != "channels_last" or x.dim() != 5:
        return x
    return x.permute(0, 1, 3, 4, 2).contiguous().permute(0, 1, 4, 2, 3)


FP32_PRECISION_API = TorchVersion(torch.__version__) >= "2.9"
"""torch's per-backend ``fp32_precision`` settings (2.9 on), beside the legacy ones (``set_float32_matmul_precision``,
``allow_tf32``). torch keeps both and refuses to read a legacy one that disagrees with its new ones (a RuntimeError
about a "mix of the legacy and new APIs"), so each is set through the legacy API first and the new one after, in step."""


def _fp32_settings() -> tuple[tuple[Any, Any], ...]:
    """Each per-op fp32 precision setting (oneDNN's matmul, convolution, RNN; cuBLAS's matmul, cuDNN's convolution,
    RNN), with the backend-wide one it reads while it is ``"none"``."""
    b: Any = torch.backends
    return ((b.mkldnn.matmul, b.mkldnn), (b.mkldnn.conv, b.mkldnn), (b.mkldnn.rnn, b.mkldnn),
            (b.cuda.matmul, b.cudnn), (b.cudnn.conv, b.cudnn), (b.cudnn.rnn, b.cudnn))


def _readable(read: Callable[[], Any]) -> Any:
    """A legacy setting's value, or None where torch refuses to read it (the caller mixed the two APIs)."""
    try:
        return read()
    except RuntimeError:
        return None


def pin_precision(precision: str) -> Callable[[], None]:
    """Set this process's fp32 math for a run of ``precision``; returns what sets the previous settings back.

    torch's own defaults, whatever the caller changed: IEEE fp32 matmuls (oneDNN's, cuBLAS's) and oneDNN
    convolutions and RNNs; cuDNN's convolutions and RNNs on TF32 (torch's default, and what ``fp32`` has always meant
    here: docs/gpu.md; the GPU timings and BlazeFL's fp32 runs use it); cuBLAS's matmuls on TF32 too for ``"tf32"``. A
    caller's ``torch.set_float32_matmul_precision("medium")`` (bf16 matmuls on the CPU, TF32 on CUDA) or
    ``torch.backends.mkldnn.matmul.fp32_precision = "bf16"`` changed an ``fp32`` run's numbers while its config said
    fp32. ``bf16`` runs its forward under its own autocast, the rest as ``fp32``. Worker processes pin it too. A per-op
    setting that was the value of the backend-wide one it reads comes back as ``"none"`` (reading it again); a legacy
    setting torch refused to read stays as pinned.
    """
    b: Any = torch.backends
    tf32 = precision == "tf32"
    legacy = (_readable(torch.get_float32_matmul_precision), _readable(lambda: b.cuda.matmul.allow_tf32), _readable(lambda: b.cudnn.allow_tf32))
    settings = _fp32_settings() if FP32_PRECISION_API else ()
    saved = [setting.fp32_precision for setting, _ in settings]
    torch.set_float32_matmul_precision("highest")
    b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32 = tf32, True  # cuDNN: torch's default, kept for every precision
    for i, (setting, _) in enumerate(settings):  # after the legacy ones, agreeing with them (see _fp32_settings' order)
        setting.fp32_precision = "tf32" if i >= 4 or (tf32 and i == 3) else "ieee"

    def restore() -> None:
        matmul, cublas, cudnn = legacy
        if matmul is not None:  # its cuBLAS flag with it ("highest" is TF32 off); setting the flag after made "medium" "high"
            torch.set_float32_matmul_precision(matmul)
        elif cublas is not None:
            b.cuda.matmul.allow_tf32 = cublas
        if cudnn is not None:
            b.cudnn.allow_tf32 = cudnn
        for (setting, fallback), value in zip(settings, saved):
            if setting.fp32_precision != value:
                setting.fp32_precision = "none" if value == fallback.fp32_precision else value

    return restore


def _pinned_as(precision: str) -> str:
    """The process-wide settings ``precision`` pins: ``bf16``'s are ``fp32``'s (its autocast is per thread)."""
    return "tf32" if precision == "tf32" else "fp32"


@dataclass(eq=False)
class _Hold:
    """One :func:`run_precision` in progress: its thread and precision (compared by identity)."""

    thread: int
    precision: str


class _SharedPin:
    """The process's fp32 settings as every run in it holds them (runs in threads of one process too).

    torch's precision settings are process-wide: each run pinning and restoring on its own let the first run to end
    set the caller's settings back under a run still going in another thread (which then computed in the caller's
    ``"medium"``), and the last to end "restore" the first one's pin (the caller's settings lost). So the first run in
    pins and keeps the caller's settings, the last one out gives them back; a run in another thread that needs other
    settings (``tf32`` beside ``fp32``/``bf16``) is refused, as there is one set for both. A run nested in the same
    thread (a callback's run) pins its own and gives the outer one's back when it ends, as before.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: list[_Hold] = []
        self.caller: Callable[[], None] | None = None  # sets the caller's settings back, while any run holds the pin
        self.pinned = ""  # _pinned_as of the settings now set

    def enter(self, precision: str) -> _Hold:
        me, want = threading.get_ident(), _pinned_as(precision)
        with self.lock:
            if not self.held:
                self.caller = pin_precision(precision)
            elif self.pinned != want or any(_pinned_as(h.precision) != want for h in self.held):
                others = [h for h in self.held if h.thread != me]
                if others:  # named: a hold whose settings differ (not a nested run that agrees with this one)
                    other = next((h for h in others if _pinned_as(h.precision) != want), others[-1])
                    raise ConfigError(
                        "precision",
                        f"{precision!r}: another run in this process computes in {other.precision!r}; torch's precision "
                        "settings are process-wide (run the two in separate processes, or with one precision)",
                    )
                pin_precision(precision)  # nested in this thread: the outer run's pin is set again when it ends
            self.pinned = want
            hold = _Hold(me, precision)
            self.held.append(hold)
            return hold

    def exit(self, hold: _Hold) -> None:
        with self.lock:
            self.held = [h for h in self.held if h is not hold]
            if not self.held:
                caller, self.caller, self.pinned = self.caller, None, ""
                if caller is not None:
                    caller()
            elif self.pinned != _pinned_as(self.held[-1].precision):  # a nested run of other settings ended
                pin_precision(self.held[-1].precision)
                self.pinned = _pinned_as(self.held[-1].precision)


_SHARED_PIN = _SharedPin()
"""This process's one set of torch precision settings, shared by its runs (:class:`_SharedPin`)."""


@contextmanager
def run_precision(precision: str, device: torch.device) -> Iterator[None]:
    """The run's own precision, whatever the caller's: :func:`pin_precision`, and a caller's ``torch.autocast`` (on the
    run's device or the CPU) turned off, both until it returns (an exception and a Ctrl-C too). A ``bf16`` run enters its
    own autocast inside (:func:`autocast_for`); under the caller's, an fp32 run trained and evaluated in bf16. The pin is
    the process's, shared by runs in several threads (:class:`_SharedPin`: ConfigError for a run in another thread that
    needs other settings); autocast is per thread, turned off for this one only."""
    hold = _SHARED_PIN.enter(precision)
    try:
        with ExitStack() as stack:
            for kind in dict.fromkeys((device.type, "cpu")):
                if torch.is_autocast_enabled(kind):
                    stack.enter_context(torch.autocast(kind, enabled=False))
            yield
    finally:
        _SHARED_PIN.exit(hold)


def set_deterministic(mode: bool, warn_only: bool = False) -> None:
    """``torch.use_deterministic_algorithms(mode, warn_only=warn_only)`` without its import of ``torch._inductor``.

    That import pulls in ``torch._dynamo`` and sympy: 2.7 s of a CUDA run's start-up on an
    H200 (traced there), for a flag that only compiled code reads; chillfl compiles
    nothing. Where inductor is loaded already, its flag is kept in step.
    """
    inductor: Any = sys.modules.get("torch._inductor.config")
    if inductor is not None:
        inductor.deterministic = mode
    torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)


def pin_deterministic(deterministic: bool) -> None:
    """A CUDA run's ``deterministic``: on, PyTorch's deterministic algorithms, ``CUBLAS_WORKSPACE_CONFIG`` (unless set;
    cuBLAS reads it when its first handle is made) and no cuDNN benchmarking; off, the deterministic algorithms off.
    Not restored: :func:`chillfl.runner.device_settings` saves and restores the driver's; a worker sets it per run."""
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        set_deterministic(True)
        torch.backends.cudnn.benchmark = False
    else:
        set_deterministic(False)


def pin_worker(model: nn.Module, spec: LocalSpec) -> None:
    """A worker's settings for the run whose template and spec it was sent (a process pool's worker, a Ray actor: the
    process is chillfl's, and serves run after run, so each run sets its own, unrestored): the run's precision
    (:func:`pin_precision`; a fresh process has cuDNN in TF32) and, where the template is on a CUDA device, its
    ``deterministic`` (:func:`pin_deterministic`), as :func:`chillfl.runner.device_settings` sets the driver's."""
    pin_precision(spec.precision)
    if on_cuda(model):
        pin_deterministic(spec.deterministic)


def on_cuda(model: nn.Module) -> bool:
    """Whether ``model``'s tensors are on a CUDA device (a worker's template: where its clients train)."""
    return any(t.is_cuda for t in itertools.chain(model.parameters(), model.buffers()))


def autocast_for(spec: LocalSpec, device: torch.device) -> Any:
    """The context the training forward runs in: bf16 autocast on ``device`` or nothing."""
    if spec.precision == "bf16":  # no cast cache: a recorded step must not keep autocast's cast weights from one step to
        # the next, and neither may an eager one: torch empties the cache only when the outermost autocast exits, so under
        # a caller's autocast (turned off for the run by run_precision, still entered) a client trained on the bf16 copies
        # of its first step's weights
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False)
    return nullcontext()


class Fp32BatchNorm(TorchFunctionMode):
    """Batch norm on fp32 inputs (its output cast back): for the vmapped bf16 step on CUDA only.

    There, PyTorch's batched backward of ``batch_norm`` refuses a bf16 input with
    fp32 running statistics ("Expected running_mean to have type BFloat16 but
    got Float"; seen on an H200 with torch 2.11), which every batch-norm model
    meets under autocast. The CPU and the sequential CUDA step accept the mix
    and keep their numerics.
    """

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Mapping[str, Any] | None = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is F.batch_norm and args and args[0].dtype == torch.bfloat16:
            return func(args[0].float(), *args[1:], **kwargs).to(torch.bfloat16)
        return func(*args, **kwargs)


def batch_norm_mode(spec: "LocalSpec", device: torch.device, vmapped: bool) -> Any:
    """:class:`Fp32BatchNorm` where it is needed (bf16, vmapped, on CUDA or after ``batched_conv = "gemm"`` / ``"nhwc"`` / ``"loop"``), else nothing.

    The CPU's batched batch norm refuses a bf16 input with fp32 statistics too when the input is laid out
    NHWC, as the ``gemm``, ``nhwc`` and ``loop`` convolutions return it (:mod:`chillfl.training.batched_conv`).
    """
    needed = spec.precision == "bf16" and vmapped and (device.type == "cuda" or spec.batched_conv != "grouped")
    return Fp32BatchNorm() if needed else nullcontext()


def has_tied_tensors(model: nn.Module) -> bool:
    """Whether one tensor is registered under two names (e.g. tied embedding and output weights)."""
    named = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    return len({id(t) for _, t in named}) < len(named)


class StepLoss:
    """loss(params, buffers, x, y, temperature, context) -> (value, captured): base loss + every method term.

    ``captured`` holds the (input, output) of every factored linear call of
    the forward (:mod:`chillfl.training.linear_factors`; empty for a model
    without :class:`~chillfl.training.linear_factors.FactoredLinear` layers,
    or when ``factor`` is False), and ``keys`` names their weights, in call
    order. ``functional_call`` is told whether the model ties tensors: its
    default re-checks that on every call by walking the module tree, half a
    millisecond of Python per step (paid under the GIL by every worker thread).
    """

    def __init__(self, model: nn.Module, spec: LocalSpec, *, factor: bool = True, vmapped: bool = False) -> None:
        self.model = model
        self.spec = spec
        self.factor = factor
        self.vmapped = vmapped
        self.keys: list[str] = []
        self._tie_weights = has_tied_tensors(model)
        self._layers = factored_layers(model)
        self._uses_features = reads_features(spec.base_loss)
        self._uses_context = reads_context(spec.base_loss)
        self._batch_terms = any(is_batch_term(t) for t in spec.terms)
        self._head = head_name(model, warn=False) if reads_representation(spec) else None  # once, not per step; the run's build warned
        self._captures = tuple(dict.fromkeys(name for t in spec.terms for name in getattr(t, "captures", ())))

    def __call__(
        self,
        params: Params,
        buffers: Params,
        x: torch.Tensor,
        y: torch.Tensor,
        temperature: Any,
        context: Mapping[str, Any],
        pending: Mapping[str, tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> tuple[torch.Tensor, list[Captured]]:
        """``pending``: factored weights' updates not yet applied to ``params`` (see :class:`~chillfl.training.linear_factors.DeferredOuter`)."""
        grabbed: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        features = None
        rec_cm = recording(self._layers, vmapped=self.vmapped, pending=pending) if self.factor else nullcontext(Recorder(False))
        with (
            rec_cm as rec,
            autocast_for(self.spec, x.device),
            batch_norm_mode(self.spec, x.device, self.vmapped),
            batched_conv_mode(self.spec.batched_conv, self.vmapped),
        ):
            if self._batch_terms or self._uses_features:  # representation-based objectives and batch terms see the head's input too
                features, logits = self._forward_viewed(params, buffers, x, grabbed)
            else:
                logits = functional_call(self.model, (params, buffers), (x,), tie_weights=self._tie_weights)
        if self.spec.precision == "bf16":  # the loss and the terms in fp32, whatever the forward ran in
            logits = half_to_float(logits)
            features = None if features is None else half_to_float(features)
            grabbed = {name: (half_to_float(xin), half_to_float(out)) for name, (xin, out) in grabbed.items()}  # FedAlign reruns a stage on them, outside autocast
        self.keys = [key for key, _, _ in rec.calls]
        if self._uses_features:  # FedProto, FedHKD; frozen weights (LocalSpec.frozen) travel with the buffers: the loss reads them too
            value = self.spec.base_loss(logits, y, temperature, features=features, params={**buffers, **params}, context=context)  # type: ignore[call-arg]
        elif self._uses_context:
            value = self.spec.base_loss(logits, y, temperature, context=context)  # type: ignore[call-arg]
        else:
            value = self.spec.base_loss(logits, y, temperature)
        step = None if not self._batch_terms or features is None else StepView(self.model, x, y, features, logits, value, buffers, grabbed, self._head)
        for index, term in enumerate(self.spec.terms):
            value = value + apply_term(term, params, context, step, self.spec.term_field(index))
        return value, [(xin, z) for _, xin, z in rec.calls]

    def _forward_viewed(
        self, params: Params, buffers: Params, x: torch.Tensor, grabbed: dict[str, tuple[torch.Tensor, torch.Tensor]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(representation, logits) of the training forward, recording the (input, output) of ``self._captures``."""

        def grab(name: str) -> Any:
            def hook(_module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
                grabbed.setdefault(name, (inputs[0], output))  # a hook that returns a value would replace the output

            return hook

        handles = [self.model.get_submodule(name).register_forward_hook(grab(name)) for name in self._captures]
        try:
            return forward_with_features(
                self.model, x, call=lambda xb: functional_call(self.model, (params, buffers), (xb,), tie_weights=self._tie_weights), head=self._head
            )
        finally:
            for handle in handles:
                handle.remove()


Factors = dict[str, list[tuple[torch.Tensor, torch.Tensor]]]
"""weight key -> its (x, dz) pairs: the weight's gradient (beyond the dense part) is the sum of dz^T x."""


def step_grads(loss: torch.Tensor, params: Params, keys: Sequence[str], captured: Sequence[Captured]) -> tuple[list[torch.Tensor | None], Factors]:
    """d loss / d params (None where the dense graph does not reach a parameter) and the factored parts.

    A factored weight's full gradient is its dense part (tied uses, method
    terms; usually None) plus ``sum dz^T x`` over its recorded calls.
    """
    trained = [(key, x, z) for key, (x, z) in zip(keys, captured) if key in params]  # a frozen weight (LocalSpec.frozen) takes no step
    inputs = [*params.values(), *(z for _, _, z in trained)]
    if not inputs:  # every weight frozen (FedRep's head phase over a frozen head): the steps move nothing
        return [], {}
    grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    factors: Factors = {}
    for (key, x, _), dz in zip(trained, grads[len(params) :]):
        if dz is not None:  # None: this call's output does not reach the loss
            factors.setdefault(key, []).append((x, dz))
    return list(grads[: len(params)]), factors


def leaf_params(params: Mapping[str, torch.Tensor]) -> Params:
    """Private copies of ``params`` that autograd differentiates and :func:`sgd_update_` updates in place."""
    return {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}


@torch.no_grad()
def sgd_update_(
    params: Params,
    grads: Sequence[torch.Tensor | None],
    momenta: Params,
    lr: float | torch.Tensor,
    spec: LocalSpec,
    factors: Factors | None = None,
) -> None:
    """One SGD(momentum, weight decay) step, in place on ``params`` and ``momenta``.

    ``grads[i]`` None means zero; ``factors`` adds each factored weight's
    ``dz^T x`` terms with one fused matmul each (:func:`add_outer_`).
    ``lr`` is a number, or a tensor that broadcasts against every parameter
    (the vectorised executor's per-client learning rates, shape ``[C]``).

    With a number ``lr`` (and no tensor registered twice) the weights' dense
    updates are one ``torch._foreach_add_(ws, gs, alpha=-lr)`` after the loop,
    then the factored ones: each weight sees the same ops in the same order as
    one ``w.sub_(g, alpha=lr)`` each (``sub`` is ``add`` with ``-alpha`` in
    ATen's kernels), so the bits are the same, with one op dispatched (on a GPU
    one fused launch) instead of one per tensor.
    """
    later = not isinstance(lr, torch.Tensor) and len({id(w) for w in params.values()}) == len(params)
    later_w: list[torch.Tensor] = []
    later_g: list[torch.Tensor] = []
    later_outer: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    for (k, w), g in zip(params.items(), grads):
        outer = factors.get(k, []) if factors else []
        if spec.weight_decay and k not in spec.no_decay:
            g = spec.weight_decay * w if g is None else g + spec.weight_decay * w
        if spec.momentum:
            buf = momenta[k].mul_(spec.momentum)
            if g is not None:
                buf.add_(g)
            for x, dz in outer:
                add_outer_(buf, x, dz)
            if spec.optim.nesterov:  # g + momentum * b: g's factored part stays in ``outer``
                g = buf * spec.momentum if g is None else g.add(buf, alpha=spec.momentum)
            else:
                g, outer = buf, []
        if later:  # the update after the loop (docstring); every g and factor is already final here
            if g is not None:
                later_w.append(w)
                later_g.append(g)
            later_outer += [(w, x, dz) for x, dz in outer]
            continue
        if g is not None:
            if isinstance(lr, torch.Tensor):
                w.sub_(g * lr.view(-1, *([1] * (w.dim() - 1))))
            else:
                w.sub_(g, alpha=lr)
        for x, dz in outer:
            add_outer_(w, x, dz, -lr)
    if later_w:
        torch._foreach_add_(later_w, later_g, alpha=-float(lr))  # ``later``: lr is a number here
    for w, x, dz in later_outer:
        add_outer_(w, x, dz, -lr)


HOLDABLE_BY_ALL = torch.finfo(torch.float16).max
"""The largest step size every trainable dtype holds (float16's 65504): :func:`within_dtype` looks no further below it."""


def within_dtype(lr: float | torch.Tensor, params: Params) -> float | torch.Tensor:
    """``lr`` clamped to the largest number of the weights' dtype (a tensor as is). Why: torch takes the step size as a
    scalar of that dtype, and a rate past it (a step size no lr-named option holds, so :func:`chillfl.experiment.
    check_step_sizes` cannot refuse it: perfedavg's beta = 1e39) raised "value cannot be converted to type float without
    overflow" in round 1; clamped, the weights blow up and the run ends as a divergence, as at 1e38."""
    if isinstance(lr, torch.Tensor) or not params or abs(lr) <= HOLDABLE_BY_ALL:  # every step of an ordinary run: nothing to look up
        return lr
    largest = min(torch.finfo(v.dtype).max for v in params.values() if v.is_floating_point())  # a mixed model: its narrowest
    return lr if abs(lr) <= largest else math.copysign(largest, lr)


@torch.no_grad()
def plain_sgd_step_(
    params: Params, grads: Sequence[torch.Tensor | None], lr: float | torch.Tensor, keys: frozenset[str], factors: Factors | None = None,
    momenta: Params | None = None, momentum: float = 0.0,
) -> None:
    """``w <- w - lr * g`` in place for the parameters named in ``keys`` (:attr:`LocalSpec.plain_sgd`; None: zero gradient).

    ``lr`` a number, or a per-client tensor [C] for stacked parameters (the vectorised executor); ``factors`` adds
    a factored weight's ``dz^T x`` terms, as :func:`sgd_update_`. ``momentum`` > 0: ``b <- momentum b + g`` in
    ``momenta[k]`` first, and the step takes ``b`` (:attr:`LocalSpec.plain_momentum`)."""
    for (k, w), g in zip(params.items(), grads):
        if k not in keys:
            continue
        outer = (factors or {}).get(k, [])
        if momentum and momenta is not None:
            buf = momenta[k].mul_(momentum)
            if g is not None:
                buf.add_(g)
            for x, dz in outer:
                add_outer_(buf, x, dz)
            g, outer = buf, []
        if g is None:
            pass
        elif isinstance(lr, torch.Tensor):
            w.sub_(g * lr.view(-1, *([1] * (w.dim() - 1))))
        else:
            w.sub_(g, alpha=lr)
        for x, dz in outer:
            add_outer_(w, x, dz, -lr)


@torch.no_grad()
def optimizer_step_(
    params: Params,
    grads: Sequence[torch.Tensor | None],
    state: OptState,
    lr: float | torch.Tensor,
    spec: LocalSpec,
    factors: Factors | None = None,
    *,
    step: int = 0,
    stacked: bool = False,
) -> None:
    """Local step ``step`` (0-based) of the spec's optimiser, in place on ``params`` and ``state``.

    Plain SGD (with momentum, Nesterov, weight decay) updates from gradient
    factors (:func:`sgd_update_`); Adam and clipping first make every gradient
    whole (:mod:`chillfl.training.optim`). ``stacked``: parameters carry a
    leading client dimension (the vectorised executor), and clipping is per client.
    """
    lr = within_dtype(lr, params)
    opt = spec.optim
    if spec.plain_sgd:  # stepped here by hand; the optimiser sees the rest (its state for them, if any, stays unused)
        rest = [(k, g) for k, g in zip(params, grads) if k not in spec.plain_sgd]
        plain_lr = spec.plain_lr if spec.plain_lr is not None else lr
        plain_sgd_step_(params, grads, plain_lr, spec.plain_sgd, factors, state.get("plain_momentum"), spec.plain_momentum)
        params, grads = {k: params[k] for k, _ in rest}, [g for _, g in rest]
    if not opt.dense:
        sgd_update_(params, grads, state.get("momentum", {}), lr, spec, factors)
        return
    whole = whole_grads(params, grads, factors)
    if opt.clip_norm:
        clip_by_norm_(whole, opt.clip_norm, stacked)
    if opt.name == "sgd":
        sgd_update_(params, list(whole), state.get("momentum", {}), lr, spec)
    else:
        adam_update_(params, whole, state, lr, spec.weight_decay, opt, step + 1, spec.no_decay)


def step_batch(
    spec: LocalSpec, x: torch.Tensor, seeds: Sequence[int], step: int, codes: torch.Tensor | None = None, patterns: Sequence[Pattern] = ()
) -> torch.Tensor:
    """The inputs one step trains on: ``x`` [clients, batch, ...] gathered for ``seeds``' clients, augmented.

    The one place a training batch is formed for every executor (the
    sequential path passes one client). Client i's crop offsets and flips come
    from ``derive_seed(seeds[i], "augment", step)``: its job seed (run seed,
    round, client) and the step, nothing else. ``codes`` [clients, batch]: the
    rows a data-poisoning attack marks (:mod:`chillfl.data.stamp`; ``x``
    then holds them without the pattern), stamped with ``patterns[code - 1]``
    after the crop and flip. The batch comes out in the spec's memory format
    (:func:`batch_layout`).
    """
    if spec.augment is not None:
        x = spec.augment(x, [derive_seed(seed, "augment", step) for seed in seeds])
        if codes is not None:
            x = stamp_codes(x, codes, patterns)
    return batch_layout(spec, x)


def batch_order(num_samples: int, batch_size: int, epochs: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Index batches for all local epochs: a fresh permutation per epoch, last batch kept even if short.

    A trailing batch of a single sample is merged into the batch before it:
    batch norm cannot normalise one sample, and dropping it would waste data.
    """
    batches = []
    for _ in range(epochs):
        perm = torch.randperm(num_samples, generator=generator)
        epoch = [perm[i : i + batch_size] for i in range(0, num_samples, batch_size)]
        if len(epoch) > 1 and len(epoch[-1]) == 1:
            epoch[-2:] = [torch.cat(epoch[-2:])]
        batches.extend(epoch)
    return batches


def completed_steps(order: list[torch.Tensor], work: float) -> list[torch.Tensor]:
    """The batches a client completes when it does ``work`` (in (0, 1]) of them: a prefix, at least one."""
    if work >= 1.0 or not order:
        return order
    return order[: max(1, int(work * len(order)))]


@dataclass
class LocalOutcome:
    params: Params
    num_steps: int
    mean_loss: float
    carry: Carried | None = None
    """The optimiser state the training ended with, when the job carried one in (:attr:`ClientJob.carry`); else None."""


def seed_dropout(seed: int, device: torch.device) -> None:
    """Seed the generators dropout draws from on ``device``: torch's CPU generator, and on an accelerator that device's own.

    Why not ``torch.manual_seed``: it also seeds (or queues a seed for) every accelerator backend and every device
    (CUDA, XPU, MTIA; queued with a Python stack trace, about 0.7 ms a client job under pytest), generators a step never
    draws from, which no fork restored: a run left the caller's CUDA generators reseeded. The two seeded here are
    forked by :func:`dropout_rng` (called inside :func:`client_rng`, which holds them against other threads). The draws
    are the same as ``torch.manual_seed``'s on the CPU and on ``device``.
    """
    torch.random.default_generator.manual_seed(seed)
    if device.type == "cuda":
        with torch.cuda.device(device):
            torch.cuda.manual_seed(seed)
    elif device.type != "cpu":
        torch.get_device_module(device.type).manual_seed(seed)


def _fork(device: torch.device) -> AbstractContextManager[Any]:
    """:func:`torch.random.fork_rng` of the generators :func:`seed_dropout` seeds (the CPU's; ``device``'s own on an accelerator)."""
    if device.type == "cpu":
        return torch.random.fork_rng(devices=[])
    index = device.index if device.index is not None else torch.get_device_module(device.type).current_device() if device.type == "cuda" else 0
    return torch.random.fork_rng(devices=[index], device_type=device.type)


@contextmanager
def dropout_rng(device: torch.device) -> Iterator[None]:
    """A fork of the generators :func:`seed_dropout` seeds, around steps that draw nothing from them (the vectorized
    executor's pool): the caller's RNG states are as they were after. Saved and restored under
    :data:`~chillfl.global_rng.GLOBAL_RNG`, not held between: another thread's :func:`client_rng` block neither sees its
    restore amid its draws nor waits for these steps (nor they for its; a pool thread's own block would deadlock)."""
    fork = ExitStack()
    with GLOBAL_RNG:
        fork.enter_context(_fork(device))
    try:
        yield
    finally:
        with GLOBAL_RNG:
            fork.close()


@contextmanager
def client_rng(device: torch.device, seed: int) -> Iterator[None]:
    """A client's steps that draw from torch's global generators (dropout): forked, seeded with ``seed`` and drawn from as
    one block under :data:`~chillfl.global_rng.GLOBAL_RNG`, so that a run in another thread of the process neither reseeds
    them amid the draws nor restores its fork out of order (:mod:`chillfl.global_rng`)."""
    with GLOBAL_RNG, _fork(device):
        seed_dropout(seed, device)
        yield


_DRAWING_MODULES: tuple[type[nn.Module], ...] = (nn.modules.dropout._DropoutNd, nn.RReLU, nn.FractionalMaxPool2d, nn.FractionalMaxPool3d)
"""torch's modules whose forward draws from the global generator: every dropout and RReLU in training, fractional
max-pooling in training and eval alike (its pooling regions, unless given ``_random_samples``). Checked against torch
2.13's ``torch.nn.modules`` (2026-12): no other module's forward draws (``nn.MultiheadAttention`` and the RNNs draw
through a ``dropout`` rate of their own, read apart)."""

_EVAL_DRAWING_MODULES: tuple[type[nn.Module], ...] = (nn.FractionalMaxPool2d, nn.FractionalMaxPool3d)
"""Those of :data:`_DRAWING_MODULES` that draw in eval mode too (dropout and RReLU are the identity and a fixed slope there)."""

_OWN_MODULES = ("torch", "chillfl")
"""Where code is known: torch's and chillfl's; anything else may draw where chillfl cannot see it."""


def _foreign(code: object) -> bool:
    """Whether ``code`` (a function, a callable object) is neither torch's nor chillfl's: it may draw from torch's global
    generator (``F.dropout``, ``torch.randn``) where chillfl cannot see it."""
    where = getattr(code, "__module__", None) or type(code).__module__
    return where.split(".")[0] not in _OWN_MODULES


def _foreign_class(kind: type) -> bool:
    """Whether a class in ``kind``'s MRO is the user's (neither torch's, chillfl's nor the standard library's): a
    subclass of chillfl's model that overrides a helper its inherited ``forward`` calls (``F.dropout`` in a block's
    shortcut) draws where ``type(module).forward`` is chillfl's."""
    return any(c.__module__.split(".")[0] not in _KNOWN_PACKAGES for c in kind.__mro__)


_KNOWN_PACKAGES = frozenset((*_OWN_MODULES, *sys.stdlib_module_names))
"""Top-level packages whose classes are not the user's (``object``, ``typing.Generic``, ``abc.ABC`` in an MRO)."""


def _global_hooks_foreign() -> bool:
    """Whether a global module hook (``register_module_forward_hook``) is the user's: it runs in every forward."""
    from torch.nn.modules import module as torch_module

    global_hooks = (torch_module._global_forward_hooks, torch_module._global_forward_pre_hooks, torch_module._global_backward_hooks,
                    torch_module._global_backward_pre_hooks)
    return any(_foreign(hook) for hooks in global_hooks for hook in hooks.values())


def model_draws(model: nn.Module, *, training: bool = True) -> bool:
    """Whether ``model``'s forward (in training mode, or with ``training=False`` in eval mode) may draw from torch's
    global generators. In training, conservatively: a module of :data:`_DRAWING_MODULES`, a torch layer with a
    ``dropout`` rate of its own (``nn.LSTM(dropout=0.2)``, ``nn.MultiheadAttention``), or code outside torch and
    chillfl: a module whose class or a class it derives from is the user's (its forward, or a helper an inherited
    forward calls, may call ``F.dropout``), a forward set on an instance, a hook. In eval mode only torch's modules that
    draw there (fractional max-pooling): an evaluation is a block under the lock, and counting every user class would
    queue the predictor's threads one behind another for models that draw nothing in eval mode; a model of the user's
    that draws there (MC dropout) draws from the caller's generators, as it always did (docs/python-api.md)."""
    if not training:
        return any(isinstance(module, _EVAL_DRAWING_MODULES) for module in model.modules())
    if _global_hooks_foreign():
        return True
    drawing = _DRAWING_MODULES
    for module in model.modules():
        rate = getattr(module, "dropout", None)  # nn.LSTM / GRU / RNN, nn.MultiheadAttention: a dropout of their own
        if isinstance(module, drawing) or isinstance(rate, float) and rate > 0 or _foreign_class(type(module)) or _foreign(type(module).forward):
            return True
        own = vars(module).get("forward")
        if own is not None and _foreign(own) or any(_foreign(hook) for hook in _module_hooks(module)):
            return True  # a forward set on the instance, or a hook: code of the user's that may draw (F.dropout)
    return False


def draws_global(model: nn.Module, spec: LocalSpec) -> bool:
    """Whether a client's steps may draw from torch's global generators, so that :func:`train_client` forks, seeds and
    holds them (:func:`client_rng`; serialised against such steps in other threads); steps that draw nothing touch them
    not at all, and run alongside other threads'. Conservative: a model that may draw in training (:func:`model_draws`:
    a torch dropout, RReLU or fractional max-pool module, a torch layer with a ``dropout`` rate of its own, a module of
    the user's own class), or a term or the base loss of code outside torch and chillfl.
    A user's ``nn.Sequential`` of torch's layers without these draws nothing, nor do chillfl's models without them."""
    return model_draws(model) or any(_foreign(term) for term in spec.terms) or _foreign(spec.base_loss)


EVAL_SEED = derive_seed("evaluate")
"""The seed of torch's global generators for an evaluation whose model draws in eval mode (fractional max-pooling): the
same draws at every evaluation, whatever the caller's generator held."""


def _module_hooks(module: nn.Module) -> Iterator[object]:
    """The hooks registered on ``module`` (forward, forward-pre, backward, backward-pre)."""
    for name in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
        yield from getattr(module, name, {}).values()


def check_rows(x: torch.Tensor, y: torch.Tensor, stamp: RowStamp | None) -> None:
    """Inputs, labels and a poisoning stamp pair row for row: batches are drawn over ``len(y)`` and an augmented step
    reads row i's stamp by its index, so a longer ``x`` or stamp would train on misaligned rows without a word."""
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} rows but y has {len(y)}: inputs and labels must pair row for row")
    if stamp is not None and not len(stamp.clean) == len(stamp.marked) == len(y):
        raise ValueError(f"the stamp has {len(stamp.clean)} clean rows and {len(stamp.marked)} marks for {len(y)} rows: they must pair row for row")


def check_step_floor(spec: LocalSpec, lr: float, rows: int, *, trainer: str | None = None, round: int | None = None) -> int:
    """The planned steps of a training of ``rows`` rows from ``lr`` under ``spec``; refused (ConfigError on the schedule's
    option, ``client.lr_gamma`` or ``client.lr_min``) when a step of them would train below float32's smallest normal lr.

    ``trainer``: whose training it is, as the line says it ("client 3's training", "the server model's training");
    ``round``: the round (0-based) it trains in; both None: one training outside a run's rounds ("a training takes").

    Why: the check before the run (:meth:`~chillfl.config.ClientConfig.check_step_lr_floor`) counts ``client.epochs``;
    a method's stage (its own epochs) or a distillation phase (its epochs over the public rows) runs the same schedule over
    more steps and took their later steps to a subnormal or 0 lr without a word. Each training's own steps and lr are
    known here, in every executor, whoever asked for it; each round's lr is normal (checked before the run), so what takes
    a training's step below is the schedule over its steps. The line names the client and the round, as the user's fix
    (fewer epochs of that training, fewer rounds, a gentler decay) depends on both."""
    planned = planned_steps(rows, spec.batch_size, spec.epochs)
    s = first_step_below_floor(spec.optim, lr, planned)
    if s is not None:
        schedule = spec.optim.step_schedule
        field = schedule_field(schedule, "client")
        how = (f"({spec.epochs} epochs over {rows} rows in batches of {spec.batch_size}, client.lr_schedule_over = 'steps', "
               f"from the lr {lr:.3g} it was given)")
        if trainer is None and round is None:
            takes = f"a training takes {how}"
        else:
            takes = f"steps of {trainer or 'a training'}" + ("" if round is None else f" in round {round + 1}") + f" {how}"
        raise ConfigError(field, below_floor(s, planned, takes, f"{lr:.3g}{schedule_term(schedule, s, planned)}", step_lr(spec.optim, lr, s, planned),
                                             field, "the epochs of that training (a method's stage or a distillation phase: its own epochs option)"))
    return planned


def train_client(
    model: nn.Module,
    start: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    spec: LocalSpec,
    lr: float,
    temperature: float,
    context: Mapping[str, Any],
    generator: torch.Generator,
    work: float = 1.0,
    stamp: RowStamp | None = None,
    carry: Carried | None = None,
    trainer: str | None = None,
    round: int | None = None,
) -> LocalOutcome:
    """Train one client from ``start`` on (x, y); returns its full state after training.

    ``trainer``, ``round``: whose training this is and in which round (0-based), for the line that refuses its lr
    schedule (:func:`check_step_floor`); None: not said.

    ``carry``: the optimiser state to start from (instead of zero) and Adam's step count so far; the outcome then
    carries the state the training ended with (:class:`~chillfl.training.optim.Carried`).

    ``work`` < 1 (a straggler) runs only the first ``max(1, floor(work * steps))``
    steps of the client's batch order (:func:`completed_steps`). ``stamp``: the
    rows of ``x`` a data-poisoning attack marks; an augmented step crops and
    flips them clean and stamps them after (:func:`step_batch`).

    The model object is only a stateless template: its own tensors are never
    read or written, so one instance serves every client.
    """
    check_rows(x, y, stamp)
    params, buffers = split_state(model, to_memory_format(start, spec.memory_format), spec.frozen)
    params = leaf_params(params)
    buffers = {k: v.detach().clone() for k, v in buffers.items()}
    opt_state = init_state(params, spec.optim, spec.momentum, spec.plain_sgd if spec.plain_momentum else ())
    if carry is not None and carry.state:
        load_carried(opt_state, carry.state)
    offset = 0 if carry is None else carry.steps  # Adam's bias correction counts the kept state's steps too
    loss_fn = StepLoss(model, spec)
    per_sample = StepLoss(model, spec, factor=False) if spec.private is not None else loss_fn
    total = torch.zeros((), dtype=torch.float64, device=x.device)  # a tensor: no host sync inside the step
    steps = 0
    model.train()
    order = completed_steps(batch_order(len(y), spec.batch_size, spec.epochs, generator), work)
    planned = check_step_floor(spec, lr, len(y), trainer=trainer, round=round)  # a straggler stops early on the same lr schedule
    restamp = stamp if spec.augment is not None else None  # unaugmented, ``x`` holds the stamped rows: the same bits
    # Dropout draws from torch's global generator: fork it and seed it from the client's own stream so runs are
    # reproducible and the caller's RNG state is untouched, held against other threads' runs (client_rng); a model
    # that draws nothing from it (draws_global) leaves it alone and is not held
    draws = not spec.draw_free and draws_global(model, spec)
    with client_rng(x.device, derive_seed(generator.initial_seed(), "dropout")) if draws else nullcontext(), torch.enable_grad():
        for step, idx in enumerate(order):
            if restamp is not None:
                xb = step_batch(spec, restamp.clean[idx][None], [generator.initial_seed()], step, restamp.marked[idx][None].long(), [restamp.pattern])[0]
            else:
                xb = step_batch(spec, x[idx][None], [generator.initial_seed()], step)[0]
            if spec.private is None:
                loss, captured = loss_fn(params, buffers, xb, y[idx], temperature, context)
                grads, factors = step_grads(loss, params, loss_fn.keys, captured)
                if spec.optim.sam_rho:  # FedSAM / FedASAM: the gradient again, at the worst point of the rho-ball (chillfl.training.sam)
                    grads, factors = sharpness_aware_grads(
                        params, buffers, grads, factors, spec.optim.sam_rho, spec.optim.sam_adaptive,
                        lambda p, b: loss_fn(p, b, xb, y[idx], temperature, context), lambda v, p, c: step_grads(v, p, loss_fn.keys, c),
                        eta=spec.optim.sam_eta,
                    )
            else:  # DP-SGD: clipped, noised per-sample gradients (unfactored loss)
                loss, grads = spec.private.gradients(per_sample, params, buffers, xb, y[idx], temperature, context, generator.initial_seed(), step)
                factors = None
            optimizer_step_(params, grads, opt_state, step_lr(spec.optim, lr, step, planned), spec, factors, step=offset + step)
            total += loss.detach()  # float32 -> float64 exactly, then a float64 sum: the bits of a Python float sum
            steps += 1
    state = {k: v.detach() for k, v in params.items()}
    state.update(buffers)
    kept = None if carry is None else Carried({slot: to_memory_format(s, "contiguous") for slot, s in opt_state.items()}, offset + steps)
    return LocalOutcome(to_memory_format(state, "contiguous"), steps, float(total) / max(steps, 1), kept)


@torch.no_grad()
def evaluate(
    model: nn.Module,
    state: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int = 1024,
    observe: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
) -> tuple[float, float]:
    """(accuracy, mean cross-entropy at T = 1) of ``state`` on (x, y), in eval mode.

    ``observe(logits, labels)`` sees every batch (calibration measures ride on this one pass).
    Always fp32 on contiguous tensors, whatever the run's ``memory_format`` and
    ``precision``: those are training-speed choices, and metrics of one state
    must not depend on them (a state given channels-last is read contiguously).

    A model whose eval forward draws from torch's global generators (:func:`model_draws`: fractional max-pooling)
    draws them from :data:`EVAL_SEED` in a fork: the caller's generators are as they were.

    Logits that are not all finite give a NaN accuracy, as they give a NaN loss: the argmax of NaN logits is
    index 0 or whichever is NaN first, and counting it as a prediction reports chance-like accuracy for a broken model.
    """
    if len(y) == 0:
        return float("nan"), float("nan")
    model.eval()
    params, buffers = split_state(model, to_memory_format(state, "contiguous"))
    correct = torch.zeros((), dtype=torch.int64, device=y.device)
    loss = torch.zeros((), dtype=torch.float64, device=y.device)  # tensors: one host sync per call, not per batch
    finite = torch.ones((), dtype=torch.bool, device=y.device)
    # fractional max-pooling draws in eval mode too: a fork seeded alike at every evaluation, held against other threads
    # (client_rng), so metrics do not follow the caller's generator and leave it as it was
    with client_rng(x.device, EVAL_SEED) if model_draws(model, training=False) else nullcontext():
        for i in range(0, len(y), batch_size):
            logits = functional_call(model, (params, buffers), (x[i : i + batch_size],))
            yb = y[i : i + batch_size]
            loss += torch.nn.functional.cross_entropy(logits, yb, reduction="sum")  # float32 batch sums, added in float64
            correct += (logits.argmax(1) == yb).sum()
            finite &= torch.isfinite(logits).all()
            if observe is not None:
                observe(logits, yb)
    right = int(torch.where(finite, correct, -1))  # -1: not finite (one host read for both)
    return (right / len(y) if right >= 0 else float("nan")), float(loss) / len(y)


@torch.no_grad()
def row_outcomes(
    model: nn.Module,
    state: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    rows: torch.Tensor,
    device: torch.device,
    batch_size: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of ``rows`` (indices into x, y): whether ``state`` predicts its label, and whether its logits are all finite.

    Why: :func:`evaluate` called once per client with one model pays its per-call cost (state split, host sync) once per
    client; scored once over the union of their rows, each client's accuracy is a count of these rows, exactly as
    :func:`evaluate` counts them (same argmax, same eval mode, fp32 contiguous state). The rows are gathered batch by batch
    (``batch_size`` a forward), moved to ``device`` (the state's), so no second copy of the test set is held. Bool tensors, on
    ``device``. A model whose eval forward draws (:func:`model_draws`) draws per forward, so the rows of a client
    scored here would not see the draws :func:`evaluate` gives them: score such a model with :func:`evaluate`.
    """
    model.eval()
    params, buffers = split_state(model, to_memory_format(state, "contiguous"))
    correct: list[torch.Tensor] = []
    finite: list[torch.Tensor] = []
    for i in range(0, len(rows), batch_size):
        chunk = rows[i : i + batch_size].to(x.device)
        xb, yb = x[chunk].to(device), y[chunk].to(device)
        logits = functional_call(model, (params, buffers), (xb,))
        correct.append(logits.argmax(1) == yb)
        finite.append(torch.isfinite(logits).all(1))
    if not correct:
        empty = torch.zeros(0, dtype=torch.bool, device=device)
        return empty, empty
    return torch.cat(correct), torch.cat(finite)
