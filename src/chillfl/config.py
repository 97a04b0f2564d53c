"""Run configuration: TOML file + ``key=value`` overrides -> validated :class:`RunConfig`.

Precedence: command-line overrides > config file > defaults below. The
resolved config is written into every result folder, so a run can always be
repeated from its own output.

Pluggable parts (dataset, partition, model, temperature, algorithm) are
tables with a ``name`` (``policy`` for temperature) plus that part's own
options; each part parses and validates its options itself (see
:mod:`chillfl.options`), so adding a method never touches this file.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

from chillfl.errors import ConfigError
from chillfl.options import parse_options, require

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


@dataclass(frozen=True)
class FederationConfig:
    """How many clients exist and how many train each round."""

    num_clients: int = 10
    rounds: int = 30
    clients_per_round: int | None = None
    """Number of clients sampled per round; ``None`` -> use ``client_fraction``."""
    client_fraction: float = 1.0
    """Fraction of clients sampled per round, in (0, 1] (ignored when clients_per_round is set)."""

    def validate(self, section: str) -> None:
        require(self.num_clients >= 1, f"{section}.num_clients", f"must be >= 1, got {self.num_clients}")
        require(self.rounds >= 1, f"{section}.rounds", f"must be >= 1, got {self.rounds}")
        require(0.0 < self.client_fraction <= 1.0, f"{section}.client_fraction", f"must be in (0, 1], got {self.client_fraction}")
        if self.clients_per_round is not None:
            require(
                1 <= self.clients_per_round <= self.num_clients,
                f"{section}.clients_per_round",
                f"must be in [1, num_clients={self.num_clients}], got {self.clients_per_round}",
            )

    def sample_size(self) -> int:
        if self.clients_per_round is not None:
            return self.clients_per_round
        return max(1, int(round(self.client_fraction * self.num_clients)))


@dataclass(frozen=True)
class ClientConfig:
    """Local training: SGD with momentum and weight decay, lr decayed per round."""

    epochs: int = 1
    batch_size: int = 16
    lr: float = 0.01
    lr_decay: float = 1.0
    """Multiplicative per-round decay: lr at round t (0-based) is lr * lr_decay**t."""
    momentum: float = 0.0
    weight_decay: float = 0.0
    loss: str = "standard"
    """Base loss: ``standard`` (temperature cross-entropy) or a gradient ablation (FedChill Table 5)."""

    def validate(self, section: str) -> None:
        require(self.epochs >= 1, f"{section}.epochs", f"must be >= 1, got {self.epochs}")
        require(self.batch_size >= 1, f"{section}.batch_size", f"must be >= 1, got {self.batch_size}")
        require(self.lr > 0, f"{section}.lr", f"must be > 0, got {self.lr}")
        require(0 < self.lr_decay <= 1.0, f"{section}.lr_decay", f"must be in (0, 1], got {self.lr_decay}")
        require(0 <= self.momentum < 1, f"{section}.momentum", f"must be in [0, 1), got {self.momentum}")
        require(self.weight_decay >= 0, f"{section}.weight_decay", f"must be >= 0, got {self.weight_decay}")

    def lr_at(self, round: int) -> float:
        return self.lr * self.lr_decay**round


@dataclass(frozen=True)
class EvalConfig:
    """What is evaluated, and how often.

    ``global_acc``: the aggregated model on the global test set.
    ``local_acc``: each client's own model right after its local training, on
    that client's own split (drawn from the test set with the client's class
    proportions), averaged over clients. ``clients = "all"`` averages the
    latest local accuracy of every client that has trained so far and also
    reports ``global_client_acc``: the global model on every client's split.
    """

    every: int = 1
    clients: Literal["sampled", "all", "none"] = "sampled"
    client_split: Literal["proportional", "natural", "none"] = "proportional"
    client_split_size: int = 100
    batch_size: int = 1024
    target_accuracy: float | None = None
    """Optional: report the first round whose global accuracy reaches this value."""

    def validate(self, section: str) -> None:
        require(self.every >= 1, f"{section}.every", f"must be >= 1, got {self.every}")
        require(self.client_split_size >= 1, f"{section}.client_split_size", f"must be >= 1, got {self.client_split_size}")
        require(self.batch_size >= 1, f"{section}.batch_size", f"must be >= 1, got {self.batch_size}")
        if self.clients != "none":
            require(
                self.client_split != "none",
                f"{section}.client_split",
                f"must not be 'none' when {section}.clients = {self.clients!r} (local accuracy needs client splits)",
            )


EXECUTORS = ("auto", "sequential", "vectorized", "processes")


@dataclass(frozen=True)
class RunConfig:
    """A whole experiment. ``seed`` + this config determine every metric bit for bit."""

    name: str = "run"
    seed: int = 0
    executor: str = "sequential"
    out_dir: str = "results"
    data_dir: str = "data"
    threads: int = 1
    """torch intra-op threads for the run (0: torch's default). Part of the config because the
    thread count changes float reduction order: bitwise reproducibility holds at a fixed count.
    One thread suits the small CPU models; raise it for large models. The vectorised executor
    trains chunks of clients on ``cores // threads`` worker threads (one when 0)."""
    federation: FederationConfig = field(default_factory=FederationConfig)
    client: ClientConfig = field(default_factory=ClientConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    dataset: dict[str, Any] = field(default_factory=lambda: {"name": "digits"})
    partition: dict[str, Any] = field(default_factory=lambda: {"name": "dirichlet", "alpha": 0.5})
    model: dict[str, Any] = field(default_factory=lambda: {"name": "flexchill_cnn"})
    temperature: dict[str, Any] = field(default_factory=lambda: {"policy": "none"})
    algorithm: dict[str, Any] = field(default_factory=lambda: {"name": "fedavg"})
    distillation: dict[str, Any] = field(default_factory=dict)
    """Options of the soft-label protocol (SCARLET / DS-FL family); empty for parameter sharing."""
    variants: dict[str, Any] = field(default_factory=dict)
    """``chillfl compare`` without ``--grid``: label -> table of overrides (a paper table's rows)."""
    compare: dict[str, Any] = field(default_factory=dict)
    """``chillfl compare`` options: ``reference`` (label whose best accuracy is the target), ``baseline``."""

    def validate(self, section: str) -> None:
        require(self.executor in EXECUTORS, "executor", f"unknown value {self.executor!r}; allowed: {', '.join(EXECUTORS)}")
        require(self.threads >= 0, "threads", f"must be >= 0 (0 = torch's default), got {self.threads}")
        require(bool(self.name) and "/" not in self.name, "name", f"must be a non-empty name without '/', got {self.name!r}")
        for part, key in (("dataset", "name"), ("partition", "name"), ("model", "name"), ("temperature", "policy"), ("algorithm", "name")):
            table = getattr(self, part)
            require(isinstance(table.get(key), str), f"{part}.{key}", "is required (a string)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def with_overrides(self, overrides: Mapping[str, Any]) -> "RunConfig":
        data = self.to_dict()
        for key, value in overrides.items():
            set_dotted(data, key, value)
        return config_from_dict(data)

    @staticmethod
    def component(table: Mapping[str, Any], key: str = "name") -> tuple[str, dict[str, Any]]:
        """Split a part's table into (name, options)."""
        options = {k: v for k, v in table.items() if k != key}
        return str(table[key]), options


def config_from_dict(data: Mapping[str, Any]) -> RunConfig:
    """Validate a plain nested dict (as read from TOML) into a RunConfig."""
    return parse_options(RunConfig, data, "")


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``a.b.c = value`` in nested dicts, creating tables as needed."""
    parts = key.split(".")
    if not all(parts):
        raise ConfigError(key, "override keys look like section.option=value")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif dataclasses.is_dataclass(child):
            child = node[part] = dataclasses.asdict(child)
        elif not isinstance(child, dict):
            raise ConfigError(key, f"{part!r} is a value, not a table")
        node = child
    node[parts[-1]] = value


def parse_value(text: str) -> Any:
    """Interpret an override value as TOML (numbers, booleans, lists, quoted strings), else a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_overrides(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(item, "overrides look like section.option=value (e.g. client.lr=0.05)")
        key, _, text = item.partition("=")
        out[key.strip()] = parse_value(text.strip())
    return out


def read_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError("config", f"file not found: {p}")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("config", f"malformed TOML in {p}: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError("config", f"{p} is not a UTF-8 text file") from None


def load_config(path: str | Path | None, overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """Read a TOML file (or start from defaults), apply overrides, validate."""
    data: dict[str, Any] = read_toml(path) if path is not None else {}
    if path is not None and "name" not in data:
        data["name"] = Path(path).stem
    data = copy.deepcopy(data)
    for key, value in (overrides or {}).items():
        set_dotted(data, key, value)
    return config_from_dict(data)


def is_finite_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
