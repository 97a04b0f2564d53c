"""Model registry: a name in the config -> an ``nn.Module`` sized for the dataset.

Each entry pairs an options dataclass (parsed from the ``[model]`` table with
:func:`~chillfl.options.parse_options`) with a builder
``build(input_shape, num_classes, options, section)``. Builders adapt every
layer size to the dataset's ``input_shape`` -- (C, H, W) images, (C, L)
sequences or (D,) vectors -- and raise :class:`~chillfl.errors.ConfigError`
naming ``<section>.name`` when the input does not fit the architecture.

All models are written for ``torch.func.functional_call`` and ``vmap``: no
in-place activations, no ``.item()``, no data-dependent control flow. Each
names its classifier head (``head_name()``, :class:`~chillfl.models.parts.DeclaresHead`).
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from collections.abc import Mapping
from typing import Any

import torch
# what `with torch.device("meta")` (meta_size) imports on first use: here, under the command's held start (chillfl/cli.py),
# not in a comparison's check of its runs, where a signal's exception could land inside (and be lost in) its import.
# A private torch module: where a torch build moves it, `with torch.device` imports what it needs itself, as before.
with contextlib.suppress(ImportError):
    import torch.utils._device  # noqa: F401
from torch import nn
from torch.overrides import TorchFunctionMode

from chillfl.errors import ConfigError, signal_in
from chillfl.global_rng import forked_rng
from chillfl.models import alexnet, char_lstm, cnn, cnn1d, fedchill, mlp, resnet, resnet_cifar, vit
from chillfl.models.projection import PROJECTION_OPTION, with_projection_head
from chillfl.models.spec import Builder, ModelSpec
from chillfl.options import Chosen, NoOptions, blame, parse_options, require_memory, short_repr, total_memory_bytes
from chillfl.plugins import building, check_hooks, look_up, plugin_names

__all__ = ["Builder", "MODELS", "ModelSpec", "build_model", "count_parameters", "model_names", "model_spec"]


MODELS: dict[str, ModelSpec] = {
    "flexchill_cnn": ModelSpec(cnn.FlexChillCNNOptions, cnn.build_flexchill_cnn, summary="FLex&Chill Table 2's small CNN: two 5x5 convs, two FC layers"),
    "mcmahan_cnn": ModelSpec(cnn.McMahanCNNOptions, cnn.build_mcmahan_cnn, summary="McMahan et al. (2017)'s CNN: 5x5 convs of 32 and 64, FC 512"),
    "femnist_dnn": ModelSpec(mlp.FemnistDNNOptions, mlp.build_femnist_dnn, summary="FLex&Chill Table 1's DNN: 512 -> 256 -> 128 -> classes"),
    "mlp": ModelSpec(mlp.MLPOptions, mlp.build_mlp, summary="a multilayer perceptron of any hidden widths (none: softmax regression)"),
    "har_cnn1d": ModelSpec(cnn1d.HARCNN1dOptions, cnn1d.build_har_cnn1d, summary="FLex&Chill Table 9's 1-D CNN for sensor windows (UCI HAR)"),
    "fedchill_cnn1": ModelSpec(fedchill.FedChillCNNOptions, fedchill.build_fedchill_cnn1, summary="FedChill Table 8's CNN1 (~686k parameters)"),
    "fedchill_cnn2": ModelSpec(fedchill.FedChillCNN2Options, fedchill.build_fedchill_cnn2, summary="FedChill Table 8's CNN2 (4.96M parameters with extra_conv)"),
    "fedchill_cnn3": ModelSpec(fedchill.FedChillCNNOptions, fedchill.build_fedchill_cnn3, summary="FedChill Table 8's CNN3 (~13.95M parameters)"),
    "svhn_cnn": ModelSpec(fedchill.FedChillCNNOptions, fedchill.build_svhn_cnn, summary="FedChill Table 9's SVHN CNN (~1.24M parameters)"),
    "alexnet": ModelSpec(alexnet.AlexNetOptions, alexnet.build_alexnet, summary="PA3Fed's AlexNet, in the variant that fits the input size"),
    "resnet18": ModelSpec(resnet.ResNet18Options, resnet.build_resnet18, summary="ResNet-18 with a CIFAR or ImageNet stem, batch, group or no norm"),
    "vit": ModelSpec(vit.ViTOptions, vit.build_vit, summary="FLex&Chill Table 8's small vision transformer"),
    "resnet20": ModelSpec(resnet_cifar.CifarResNetOptions, resnet_cifar.build_resnet20, summary="ResNet-20 for CIFAR (He et al. 2016, Sec. 4.2)"),
    "resnet32": ModelSpec(resnet_cifar.CifarResNetOptions, resnet_cifar.build_resnet32, summary="ResNet-32 for CIFAR (He et al. 2016, Sec. 4.2)"),
    "resnet18_fedchill": ModelSpec(resnet_cifar.FedChillResNet18Options, resnet_cifar.build_resnet18_fedchill,
                                   summary="FedChill's baseline ResNet-18, a code_length-wide layer before its classifier"),
    "char_lstm": char_lstm.SPEC,  # LEAF Shakespeare; reads character indices
}


BUILD_CALL = ("input_shape", "num_classes", "options", "section")
"""How a model's builder is called, a built-in's and a plugin's alike."""


def model_names() -> list[str]:
    """Registered model names and the ``chillfl.plugins`` entry points that name a model, sorted."""
    return sorted({*MODELS, *plugin_names(is_model, tuple(MODELS), "model.name")})


def _model_form(obj: Any) -> bool:
    return isinstance(obj, ModelSpec) or (isinstance(obj, type) and issubclass(obj, nn.Module)) or inspect.isfunction(obj)


def is_model(obj: Any) -> bool:
    """Whether a plugin's object is a model: a :class:`ModelSpec`, an ``nn.Module`` class or a function called as a
    builder is (a partitioner's split function takes six parameters, not four: ``chillfl list`` tells them apart by that)."""
    if not inspect.isfunction(obj):
        return _model_form(obj)
    try:
        inspect.signature(obj).bind(*BUILD_CALL)
    except (TypeError, ValueError):
        return False
    return True


def user_model(obj: Any, name: str, field: str) -> ModelSpec:
    """A user's object (import path or entry point) as a :class:`ModelSpec`, or a ConfigError on ``field``.

    ``obj`` is a ``ModelSpec`` (the built-ins' form: options, builder, what its inputs are), or an ``nn.Module``
    class or a function called as the built-ins' builders are, ``build(input_shape, num_classes, options, section)``,
    with ``options`` its ``Options`` dataclass parsed from the ``[model]`` table (:class:`NoOptions` when it declares none).
    Checked when the config is read, before anything is built or written.
    """
    if not _model_form(obj):
        raise ConfigError(field, f"{name!r} must name a model: a ModelSpec, an nn.Module class or a builder function, got {short_repr(obj)}")
    spec = obj if isinstance(obj, ModelSpec) else ModelSpec(inspect.getattr_static(obj, "Options", NoOptions), obj)
    if not (isinstance(spec.options, type) and dataclasses.is_dataclass(spec.options)):
        raise ConfigError(field, f"{name!r}: its options must be a dataclass, got {spec.options!r}")
    check_hooks(name, (("build", spec.build, BUILD_CALL), ("reads_indices", spec.reads_indices, ("options", "num_classes"))), field)
    return spec


def model_spec(name: object, section: str = "model") -> ModelSpec:
    """The registered model ``name``, or a user's (``"pkg.module:Name"``, a ``chillfl.plugins`` entry point);
    a ConfigError on ``<section>.name`` when there is none."""
    spec: ModelSpec = look_up(name, f"{section}.name", MODELS, is_model, model_names, user_model)
    return spec


def model_options(name: str, options: Mapping[str, Any] | None, section: str = "model") -> Any:
    """Model ``name``'s options parsed from ``options`` (its table without ``name`` and the projection)."""
    return parse_options(model_spec(name, section).options, options, section, Chosen(f"{section}.name", name, lambda: MODELS))


def build_model(
    name: str,
    input_shape: tuple[int, ...],
    num_classes: int,
    options: Mapping[str, Any] | None = None,
    *,
    section: str = "model",
    seed: int | None = None,
) -> nn.Module:
    """Build model ``name`` for inputs of ``input_shape`` (no batch dim) and ``num_classes`` outputs.

    ``options`` is the model's option table; a ``name`` key in it is ignored,
    so the whole ``[model]`` table may be passed. With ``seed`` the weights are
    initialised from the CPU generator seeded with ``seed`` inside a forked RNG, leaving
    the global RNG state untouched; without it torch's global RNG is used.
    """
    spec = model_spec(name, section)
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    table = {k: v for k, v in (options or {}).items() if k not in ("name", PROJECTION_OPTION)}
    projection = (options or {}).get(PROJECTION_OPTION, 0)
    parsed: Any = model_options(name, table, section)
    shape = tuple(int(s) for s in input_shape)
    check_model_memory(name, shape, num_classes, parsed, section)
    with float32_default():
        if seed is None:
            return with_projection_head(_build(spec, name, shape, num_classes, parsed, section), projection, f"{section}.{PROJECTION_OPTION}")
        with forked_rng(seed):  # the CPU's alone (torch.manual_seed also reseeds the caller's CUDA generators), held against other threads
            return with_projection_head(_build(spec, name, shape, num_classes, parsed, section), projection, f"{section}.{PROJECTION_OPTION}")


@dataclasses.dataclass(eq=False)
class _DtypeHold:
    """One :func:`float32_default` (``float32``) or :func:`caller_dtype` in progress, in its thread (compared by identity)."""

    thread: int
    float32: bool


class _SharedDtype:
    """torch's default dtype as every run in the process holds it (runs in threads of one process too).

    ``torch.set_default_dtype`` is process-wide: each registered-model run setting float32 and restoring its own saved
    dtype let the first to end set the caller's float64 back under a run still going in another thread (FedGen's then
    crashed on a dtype mismatch), and the last to end "restore" float32. So the first float32 hold saves the caller's
    dtype and the last one gives it back. A run on a model of the caller's own computes in the caller's dtype
    (:func:`caller_dtype`): beside a float32 run in another thread, that dtype is float32, so the two are refused
    (ConfigError) where the caller's is not float32. Holds nested in one thread (a callback's run) are never refused.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: list[_DtypeHold] = []
        self.saved: torch.dtype | None = None  # the caller's dtype, while any float32 hold is in

    def enter(self, float32: bool) -> _DtypeHold:
        me = threading.get_ident()
        with self.lock:
            caller = self.saved if self.saved is not None else torch.get_default_dtype()
            if caller != torch.float32 and any(h.float32 != float32 for h in self.held if h.thread != me):
                what = "a registered model (float32)" if float32 else f"your own model (in your default dtype, {caller})"
                other = f"your own model in your default dtype, {caller}" if float32 else "a registered model in float32"
                raise ConfigError("model", f"a run on {what} cannot start while a run in another thread of this process trains "
                                           f"{other}: torch's default dtype is process-wide (run the two in separate processes)")
            if float32:
                if self.saved is None:
                    self.saved = caller
                torch.set_default_dtype(torch.float32)
            hold = _DtypeHold(me, float32)
            self.held.append(hold)
            return hold

    def exit(self, hold: _DtypeHold) -> None:
        with self.lock:
            self.held = [h for h in self.held if h is not hold]
            if hold.float32 and self.saved is not None and not any(h.float32 for h in self.held):
                torch.set_default_dtype(self.saved)
                self.saved = None


_SHARED_DTYPE = _SharedDtype()
"""This process's one default dtype, shared by its runs (:class:`_SharedDtype`)."""


@contextmanager
def float32_default() -> Iterator[None]:
    """Registered models are float32, as the datasets are, whatever the caller's default dtype
    (``torch.set_default_dtype(torch.float64)`` in a notebook made float64 weights, and round 1 a dtype mismatch);
    a run on one is float32 throughout (:func:`chillfl.runner.run_experiment`: a method's own modules and noise too,
    FedGen's generator). Shared by runs in several threads (:class:`_SharedDtype`): the caller's dtype is given back
    when the last of them ends; ConfigError beside a run in another thread on a model of the caller's own."""
    hold = _SHARED_DTYPE.enter(True)
    try:
        yield
    finally:
        _SHARED_DTYPE.exit(hold)


@contextmanager
def caller_dtype() -> Iterator[None]:
    """A run on a model of the caller's own, which computes in the caller's default dtype: refused (ConfigError) while a
    run in another thread holds float32 over a caller's other dtype (:class:`_SharedDtype`); changes nothing itself."""
    hold = _SHARED_DTYPE.enter(False)
    try:
        yield
    finally:
        _SHARED_DTYPE.exit(hold)


def _build(spec: ModelSpec, name: str, shape: tuple[int, ...], num_classes: int, options: Any, section: str) -> nn.Module:
    """``spec``'s builder called as the built-ins' are; a user's model (import path, entry point) whose constructor
    raises is one line on ``<section>.name`` (as a failing forward is, :func:`chillfl.experiment.check_model_fits`),
    not a traceback: its code, or a class that is not built that way (``torch.nn:Linear``), failed on this input."""
    with building(name, f"{section}.name", name in MODELS,
                  f" for inputs of shape {shape} and {num_classes} classes (called as build(input_shape, num_classes, options, section))"):
        return built(spec.build(shape, num_classes, options, section), name, section)


def built(model: object, name: str, section: str = "model") -> nn.Module:
    """What a model's builder returned, if it is a module; else one line naming the model (a plugin's builder that
    returned None failed as an AttributeError traceback, deep in the memory check)."""
    if not isinstance(model, nn.Module):
        raise ConfigError(f"{section}.name", f"the builder of {name!r} must return a torch.nn.Module, got {type(model).__name__}")
    return model


MODEL_COPIES = 4
"""A run holds at least the weights, their gradients, a momentum buffer and one client update."""


class _ShapesOnly(TorchFunctionMode):
    """Skips in-place ops (weight initialisation) on meta tensors: they change values, which meta tensors lack.

    On the meta device some of them (``normal_``, as ``kaiming_normal_`` calls it) run
    torch's Python decompositions, which import ``torch._dynamo`` on first use; inside a
    ``torch.device("meta")`` context that import can fail half-way ("partially initialized
    module 'torch._dynamo' has no attribute 'disable'", issue 26), and it costs seconds.
    In-place ops that change a tensor's shape or flags (``_KEEP``) still run.
    """

    _KEEP = frozenset({
        "resize_", "resize_as_", "set_", "as_strided_", "unsqueeze_", "squeeze_", "transpose_", "t_", "swapdims_", "swapaxes_",
        "requires_grad_", "share_memory_", "detach_", "rename_",
    })

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = getattr(func, "__name__", "")
        if name.endswith("_") and not name.endswith("__") and name not in self._KEEP:
            if args and isinstance(args[0], torch.Tensor) and args[0].is_meta:
                return args[0]
        return func(*args, **(kwargs or {}))


def meta_size(name: str, input_shape: tuple[int, ...], num_classes: int, options: Any, section: str = "model") -> float:
    """Parameters plus buffers of model ``name``, counted on the meta device (nothing allocated); inf if too big to build.

    A plugin's model that cannot be built on the meta device (it reads a value) counts 0: its own build then says what
    is wrong, rather than a "too large" it may not be. A registered model counts inf only for an error that says a size
    overflowed (:func:`_overflowed`); any other is raised as it is: it was read as "too large" (a false ConfigError naming
    the model's widest option), a stop signal's exception that a package wrapped (:func:`~chillfl.errors.signal_in`) too.
    """
    spec = model_spec(name, section)
    try:
        with torch.device("meta"), _ShapesOnly():
            model = built(spec.build(input_shape, num_classes, options, section), name, section)
    except ConfigError:  # the input does not fit the architecture (or the builder built no module): the user's error, as is
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's code: left to its real build
        if signal_in(exc) is not None:  # the command is stopped: neither a size nor the plugin's to report
            raise
        if name not in MODELS:
            return 0.0
        if _overflowed(exc):
            return math.inf
        raise
    return float(sum(t.numel() for t in itertools.chain(model.parameters(), model.buffers())))


def check_model_shape(name: str, input_shape: tuple[int, ...], num_classes: int, options: Mapping[str, Any] | None = None,
                      section: str = "model") -> None:
    """Build registered model ``name`` for inputs of ``input_shape`` and ``num_classes`` on the meta device (no weights):
    a dry run's check when a dataset's files are absent but its numbers are known (:func:`chillfl.catalogue.dataset_size`).

    Why: a model that does not fit the dataset (``har_cnn1d`` on CIFAR-10, a ViT ``patch`` that does not divide the
    image) passed such a dry run and failed once the files were there. The checks are the ones a run's build makes
    (:func:`build_model`): the memory check, the builder's own shape checks (each sizes its head by a forward of its
    features, ``flat_features``) and the projection head's, each one line naming ``<section>.name`` or the option.
    No forward of the whole model: on meta tensors it imports ``torch._dynamo`` and sympy (2.6 s), and on an
    uninitialised CPU copy a ResNet-18's costs a second a run, for logits whose width the builders fix.
    """
    if name not in MODELS:
        raise ValueError(f"check_model_shape checks registered models, got {name!r}")  # a plugin's may read values: its run checks it
    table = {k: v for k, v in (options or {}).items() if k not in ("name", PROJECTION_OPTION)}
    parsed: Any = model_options(name, table, section)
    shape = tuple(int(s) for s in input_shape)
    check_model_memory(name, shape, num_classes, parsed, section)  # builds it on meta: a mismatch is the builder's ConfigError
    projection = (options or {}).get(PROJECTION_OPTION, 0)
    if projection:  # the head it replaces must be found (built again: the memory check's model is not kept)
        with float32_default(), torch.device("meta"), _ShapesOnly():
            with_projection_head(built(MODELS[name].build(shape, num_classes, parsed, section), name, section), projection, f"{section}.{PROJECTION_OPTION}")


def _overflowed(exc: Exception) -> bool:
    """Whether building a registered model failed because a size is past what torch counts (int64): Python's
    OverflowError or MemoryError, or torch's own error saying so ("Storage size calculation overflowed", "integer
    multiplication overflow", "Overflow when unpacking long long", a RuntimeError, a TypeError)."""
    return isinstance(exc, (OverflowError, MemoryError)) or (isinstance(exc, (RuntimeError, ValueError, TypeError)) and "overflow" in str(exc).lower())


def check_model_memory(name: str, input_shape: tuple[int, ...], num_classes: int, options: Any, section: str = "model") -> None:
    """Refuse, before allocating, a model whose float32 copies exceed this machine's memory.

    The error names the option most to blame (e.g. ``model.hidden``) and the estimate.
    """
    total = total_memory_bytes()
    size = meta_size(name, input_shape, num_classes, options, section)
    if total is None or size * 4 * MODEL_COPIES <= total:
        return
    field = blame(options, lambda o: meta_size(name, input_shape, num_classes, o, section), section, f"{section}.name")
    count = f"{size:,.0f}" if math.isfinite(size) else "too many"
    require_memory(size * 4 * MODEL_COPIES, field, f"{name} has {count} parameters, {MODEL_COPIES} float32 copies (weights, gradients, momentum, an update)")
    raise ConfigError(field, f"{name} is too large to build")  # pragma: no cover - require_memory raised


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters (BatchNorm running statistics are buffers, not counted)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
