"""The Python API: one call runs any registered method on the user's own ``nn.Module`` and data.

::

    result = chillfl.run(model=MyNet(), data=chillfl.TensorData(x_tr, y_tr, x_te, y_te, num_classes=10),
                         config={"algorithm": {"name": "scaffold"}}, progress=False)
    result.model      # a copy of MyNet holding the trained global weights

Nothing is registered: the module is handed to the experiment as its model
template (a deep copy; the caller's object is never trained), so no global
registry changes and two runs in one process cannot see each other. The
saved ``config.toml`` records what actually ran: ``[model] name = "custom"``
with the module's class and parameter count, ``[dataset] name = "custom"``
with the data's sizes; a config file cannot rebuild those parts, and loading
it says so (:data:`chillfl.experiment.CUSTOM`).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, Union

import chillfl._torch  # noqa: F401  (first: imports torch with the GC paused)
import numpy as np
import torch
from torch import nn

from chillfl.config import RunConfig, apply_overrides, check_depth, check_out_dir, config_from_dict, read_config_file
from chillfl.data import ArrayDataset
from chillfl.errors import ConfigError
from chillfl.experiment import CUSTOM, Experiment, build_experiment
from chillfl.runner import Callback, RunOutput, run_experiment

ConfigLike = Union[RunConfig, Mapping[str, Any], str, Path, None]

__all__ = ["Result", "TensorData", "available", "make_config", "run"]


@dataclass(frozen=True, eq=False)
class TensorData:
    """A user's own train/test split: inputs ``[N, ...]`` and integer labels ``[N]`` (tensors or NumPy arrays).

    ``num_classes`` defaults to 1 + the largest label; give it when some classes may be absent.
    ``name`` only labels the data in the saved config (``dataset.source``).
    """

    x_train: Any
    y_train: Any
    x_test: Any
    y_test: Any
    num_classes: int | None = None
    name: str = "tensors"


@dataclass
class Result:
    """What :func:`run` returns.

    ``model``: a fresh copy of the given module (else of the config's model)
    holding the trained global weights (the server model for soft-label
    methods); None when the protocol has no global model (``individual``).
    ``state``: the same weights as a name -> tensor dict. ``folder``: the
    result folder (None with ``write=False``). ``config``: the config that
    ran, as saved in ``folder/config.toml``.
    """

    model: nn.Module | None
    summary: dict[str, Any]
    records: list[dict[str, Any]]
    folder: Path | None
    config: RunConfig
    state: dict[str, torch.Tensor] | None = None
    client_states: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)


def run(
    model: nn.Module | None = None,
    data: TensorData | ArrayDataset | None = None,
    config: ConfigLike = None,
    *,
    out_dir: str | Path | None = None,
    callbacks: Sequence[Callback | Callable[[dict[str, Any]], Any]] = (),
    progress: bool = True,
    write: bool = True,
    **overrides: Any,
) -> Result:
    """Run one federated experiment and return the trained model.

    ``model``: any ``nn.Module`` mapping a batch of inputs to ``[batch, num_classes]``
    logits; its current weights are the initial global model (None: the
    config's registered ``[model]``). ``data``: :class:`TensorData` or an
    :class:`~chillfl.data.ArrayDataset` (None: the config's ``[dataset]``).
    ``config``: a dict shaped like the TOML file, a TOML path or bundled
    experiment name, or a :class:`RunConfig` (None: the defaults).
    ``overrides``: ``key=value`` settings on top, top-level (``seed=1``) or
    dotted (``**{"client.lr": 0.05}``). ``callbacks``: objects with
    ``on_round(record)`` and/or ``on_end(output)``, or functions called with
    each round's record. Every user error raises :class:`ConfigError` naming
    the field, before anything is written.
    """
    if model is not None and not isinstance(model, nn.Module):
        raise ConfigError("model", f"must be a torch.nn.Module, got {type(model).__name__}")
    if out_dir is not None:
        overrides = {**overrides, "out_dir": str(out_dir)}
    cfg = make_config(config, overrides)
    dataset = as_dataset(data, _input_dtype(model)) if data is not None else None
    if dataset is not None:  # the record replaces the table; its [dataset.augment] stays (crop/flip apply to any images)
        augment = {"augment": cfg.dataset["augment"]} if "augment" in cfg.dataset else {}
        cfg = _replace_part(cfg, "dataset", {**dataset_record(dataset), **augment})
    if model is not None:
        cfg = _replace_part(cfg, "model", model_record(model))
    hooks = [_as_callback(cb, i) for i, cb in enumerate(callbacks)]
    if write:
        check_out_dir(cfg.out_dir)
    exp = build_experiment(cfg, dataset, model=model)
    if model is not None:
        check_model_fits(exp)
    out = run_experiment(cfg, write=write, progress=progress, experiment=exp, callbacks=hooks)
    return Result(
        model=_trained_copy(model if model is not None else exp.model, out.model_state),
        summary=out.summary,
        records=out.records,
        folder=out.folder,
        config=dataclasses.replace(cfg, device=str(exp.device)),  # as the runner saves it
        state=out.model_state,
        client_states=out.client_states,
    )


def make_config(config: ConfigLike = None, overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """A validated :class:`RunConfig` from any of :func:`run`'s config forms plus ``key=value`` overrides.

    Overrides follow the command line's rules (:func:`chillfl.config.apply_overrides`):
    key by key into a part's table, except that naming another implementation
    (``"partition.name": "iid"``) starts that part afresh.
    """
    overrides = dict(overrides or {})
    if config is None:
        data: dict[str, Any] = {}
    elif isinstance(config, RunConfig):
        data = config.to_dict()
    elif isinstance(config, (str, Path)):
        from chillfl.experiments import resolve_config

        path = resolve_config(str(config))
        data = read_config_file(path)
        data.setdefault("name", path.stem)
    elif isinstance(config, Mapping):
        data = dict(config)
    else:
        raise ConfigError("config", f"must be a dict, a TOML path or a RunConfig, got {type(config).__name__}")
    check_depth(data)  # before deepcopy, which recurses
    data = copy.deepcopy(data)
    apply_overrides(data, overrides)
    return config_from_dict(data)


def model_record(model: nn.Module) -> dict[str, Any]:
    """The ``[model]`` table a run on ``model`` saves: not rebuildable from a file, but says what ran."""
    cls = type(model)
    return {
        "name": CUSTOM,
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }


def dataset_record(dataset: ArrayDataset) -> dict[str, Any]:
    """The ``[dataset]`` table a run on user data saves: its label and sizes."""
    return {
        "name": CUSTOM,
        "source": dataset.name,
        "num_classes": dataset.num_classes,
        "input_shape": list(dataset.input_shape),
        "train_size": len(dataset.y_train),
        "test_size": len(dataset.y_test),
    }


def _replace_part(cfg: RunConfig, part: str, table: dict[str, Any]) -> RunConfig:
    data = cfg.to_dict()
    data[part] = table
    return config_from_dict(data)


# ---------------------------------------------------------------- user data


def _tensor(value: Any, field: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise ConfigError(field, "must be a numeric array, got dtype object")
        return torch.from_numpy(np.ascontiguousarray(value))
    raise ConfigError(field, f"must be a torch.Tensor or a NumPy array, got {type(value).__name__}")


def _input_dtype(model: nn.Module | None) -> torch.dtype:
    """Floating inputs are cast to the model's parameter dtype (float32 for registered models)."""
    if model is not None:
        for p in model.parameters():
            if p.is_floating_point():
                return p.dtype
    return torch.float32


def as_dataset(data: TensorData | ArrayDataset, dtype: torch.dtype = torch.float32) -> ArrayDataset:
    """Check a user's data and hold it as an :class:`ArrayDataset` on the CPU (floating inputs as ``dtype``).

    Errors name ``data.<field>``: shapes, lengths, label dtype and range, ``num_classes``.
    """
    if not isinstance(data, (TensorData, ArrayDataset)):
        raise ConfigError("data", f"must be chillfl.TensorData or chillfl.data.ArrayDataset, got {type(data).__name__}")
    xs, ys = {}, {}
    for split in ("train", "test"):
        x, y = _tensor(getattr(data, f"x_{split}"), f"data.x_{split}"), _tensor(getattr(data, f"y_{split}"), f"data.y_{split}")
        if x.dim() < 2:
            raise ConfigError(f"data.x_{split}", f"must be [samples, ...features], got shape {tuple(x.shape)} (one feature: x.reshape(-1, 1))")
        if y.dim() != 1:
            raise ConfigError(f"data.y_{split}", f"must be a 1-D tensor of class indices, got shape {tuple(y.shape)}")
        if len(x) != len(y):
            raise ConfigError(f"data.y_{split}", f"has {len(y)} labels for {len(x)} inputs in x_{split}")
        if len(y) == 0:
            raise ConfigError(f"data.x_{split}", "is empty")
        if y.dtype == torch.bool or y.is_floating_point() or y.is_complex():
            raise ConfigError(f"data.y_{split}", f"must hold integer class indices, got dtype {y.dtype} (convert with y.long())")
        if x.is_floating_point():
            if not bool(torch.isfinite(x).all()):
                raise ConfigError(f"data.x_{split}", "contains NaN or infinite values")
            x = x.to(dtype)
        elif x.dtype == torch.bool or x.is_complex():
            raise ConfigError(f"data.x_{split}", f"must be real-valued, got dtype {x.dtype}")
        xs[split], ys[split] = x, y.to(torch.int64)
    if xs["test"].shape[1:] != xs["train"].shape[1:]:
        raise ConfigError("data.x_test", f"samples have shape {tuple(xs['test'].shape[1:])}, those of x_train {tuple(xs['train'].shape[1:])}")
    largest = int(max(ys["train"].max(), ys["test"].max()))
    classes = data.num_classes if data.num_classes is not None else max(2, largest + 1)
    if isinstance(classes, bool) or not isinstance(classes, (int, np.integer)) or classes < 2:
        raise ConfigError("data.num_classes", f"must be an integer >= 2, got {classes!r}")
    classes = int(classes)
    for split in ("train", "test"):
        y = ys[split]
        low, high = int(y.min()), int(y.max())
        if low < 0 or high >= classes:
            raise ConfigError(f"data.y_{split}", f"labels must be in 0..{classes - 1} (num_classes = {classes}), found {low}..{high}")
    name = data.name if isinstance(data.name, str) else str(data.name)
    groups = (data.train_groups, data.test_groups) if isinstance(data, ArrayDataset) else (None, None)
    return ArrayDataset(name, xs["train"], ys["train"], xs["test"], ys["test"], classes, *groups)


def check_model_fits(exp: Experiment) -> None:
    """One forward pass of two training inputs through (a copy of) the model: it must give ``[2, num_classes]`` logits.

    Catches a mismatched model before the result folder exists, where a
    failure in round 1 would leave a half-written run behind.
    """
    model = copy.deepcopy(exp.model)
    if not any(p.requires_grad for p in model.parameters()):
        raise ConfigError("model", f"{type(model).__qualname__} has no trainable parameters")
    x = exp.data.dataset.x_train[:2]
    classes = exp.data.num_classes
    model.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            out = model(x)
    except Exception as exc:  # noqa: BLE001 - the user's forward: any error is a mismatch with the data
        raise ConfigError("model", f"{type(model).__qualname__} fails on a batch of inputs of shape {tuple(x.shape)}: {type(exc).__name__}: {exc}") from None
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != len(x):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ConfigError("model", f"must return logits of shape [batch, num_classes] = [{len(x)}, {classes}], got {shape}")
    if out.shape[1] != classes:
        raise ConfigError("data.num_classes", f"is {classes}, but the model outputs {out.shape[1]} logits per sample")


def _trained_copy(template: nn.Module, state: Mapping[str, torch.Tensor] | None) -> nn.Module | None:
    """A deep copy of ``template`` (on its own device) with ``state`` copied into its parameters and buffers."""
    if state is None:
        return None
    model = copy.deepcopy(template)
    named: dict[str, torch.Tensor] = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    missing = sorted(set(named) - set(state))
    if missing:  # pragma: no cover - the run's state is the template's own
        raise RuntimeError(f"trained state lacks {missing[:5]}")
    with torch.no_grad():
        for key, tensor in named.items():
            tensor.copy_(state[key])
    return model


# ---------------------------------------------------------------- callbacks and registries


class _Hook:
    """A user callback with both of the runner's methods (a missing one does nothing)."""

    def __init__(self, on_round: Callable[[Any], Any] | None, on_end: Callable[[Any], Any] | None) -> None:
        self._round, self._end = on_round, on_end

    def on_round(self, record: Mapping[str, Any]) -> None:
        if self._round is not None:
            self._round(record)

    def on_end(self, output: RunOutput) -> None:
        if self._end is not None:
            self._end(output)


def _as_callback(cb: Any, index: int) -> Callback:
    on_round, on_end = getattr(cb, "on_round", None), getattr(cb, "on_end", None)
    if on_round is None and on_end is None:
        if not callable(cb):
            raise ConfigError(f"callbacks[{index}]", f"needs on_round(record) / on_end(output), or must be a function; got {type(cb).__name__}")
        on_round = cb
    return _Hook(on_round, on_end)


def available() -> dict[str, list[str]]:
    """Every registered name a config may use, by part (what ``chillfl list`` prints)."""
    from chillfl.aggregation.registry import algorithm_names
    from chillfl.data import dataset_names, partitioner_names
    from chillfl.distillation.methods import method_names
    from chillfl.models import model_names
    from chillfl.temperature import policy_names

    return {
        "algorithms": algorithm_names(),
        "datasets": dataset_names(),
        "distillation_methods": method_names(),
        "models": model_names(),
        "partitioners": partitioner_names(),
        "temperature_policies": policy_names(),
    }

