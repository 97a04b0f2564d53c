"""The two benchmark workloads, their synthetic data and plain-PyTorch models.

Shared by every mode: the runner (system python), the compute-bound loop, the
chillfl worker, and the BlazeFL / Flower workers that run in the separate peer
virtual environment. It therefore imports only the standard library, numpy and
torch, never chillfl.

Workload 1 is BlazeFL's FedAvg benchmark (McMahan et al.'s CIFAR CNN, 100 clients
x 500 samples, all sampled, 5 local epochs, batch 50, lr 0.1); workload 2 is
many small clients (1,000 x 50, 100 sampled per round, MLP 3072-64-10, 1 epoch,
batch 10). ``scale`` shrinks workload 1's number of clients only, so that one
client's work (500 samples, 5 epochs, 50 steps) stays the same. Workload 3 is a
SCARLET-style soft-label round (100 clients x 400 private samples, all sampled,
a public pool of 10,000 rows, 1,000 of them per round; MLP, batch 50); workload
4 is workload 2 with 100,000 registered clients, whose data are workload 2's
1,000 blocks of 50 rows, block ``c mod 1000`` for client ``c``.

Data: 50,000 CIFAR-shaped samples x ~ N(0, 1) (float32, 3x32x32), labels
uniform in 0..9, drawn from ``np.random.default_rng(seed)``, written once to an
``.npy`` files that every mode loads, so all modes train on the same bytes.
Client ``c`` owns the contiguous rows ``[b * n, (b + 1) * n)`` with ``b = c mod
data_clients`` (``data_clients`` = the number of clients except in workload 4);
workload 3's public pool is the ``public_size`` rows after the clients' rows.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 10
IMAGE_SHAPE = (3, 32, 32)
TEST_SIZE = 100
"""chillfl's worker evaluates the global model every round (``mode_chillfl.EVAL_EVERY``); a tiny test set keeps that negligible."""


@dataclass(frozen=True)
class Workload:
    """What one federated round does; every mode reads only these fields."""

    key: str
    title: str
    model: str  # "cnn" (McMahan CIFAR CNN) or "mlp" (3072-64-10)
    num_clients: int
    samples_per_client: int
    clients_per_round: int
    epochs: int
    batch_size: int
    lr: float
    data_clients: int = 0
    """Distinct blocks of client data (0: one per client); client c reads block c mod data_clients."""
    public_size: int = 0
    """Soft-label workloads: rows of the unlabelled public pool (after the clients' rows)."""
    public_per_round: int = 0
    """Soft-label workloads: public rows distilled on and predicted per round (SCARLET's subset P^t)."""
    peers: bool = True
    """Whether BlazeFL and Flower run this workload (they have no soft-label protocol)."""

    @property
    def blocks(self) -> int:
        return self.data_clients or self.num_clients

    @property
    def num_samples(self) -> int:
        return self.blocks * self.samples_per_client + self.public_size

    @property
    def steps_per_round(self) -> int:
        """SGD steps one round takes over all sampled clients (last short batch kept)."""
        return self.clients_per_round * self.epochs * math.ceil(self.samples_per_client / self.batch_size)

    @property
    def client_sgd_steps_per_round(self) -> int:
        """Every SGD step the sampled clients take in a round: local training, and for soft labels each client's one
        distillation epoch on P^{t-1} at the client batch size (workload 3: 800 + 100 x 20 = 2,800). The op count's
        denominator: its numerator has the distillation's ops too (it once divided them by the 800 local steps)."""
        return self.steps_per_round + self.clients_per_round * math.ceil(self.public_per_round / self.batch_size)

    @property
    def sample_steps_per_round(self) -> int:
        """Training samples (forward + backward) per round: local training, and for soft labels the distillation."""
        local = self.clients_per_round * self.epochs * self.samples_per_client
        # soft labels: every client distils on P^{t-1} (1 epoch) and the server model on P^t (client.epochs)
        return local + (self.clients_per_round + self.epochs) * self.public_per_round

    @property
    def forward_samples_per_round(self) -> int:
        """Samples only predicted (forward, no backward) per round: the clients' soft labels on P^t."""
        return self.clients_per_round * self.public_per_round

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["steps_per_round"] = self.steps_per_round
        out["client_sgd_steps_per_round"] = self.client_sgd_steps_per_round
        out["sample_steps_per_round"] = self.sample_steps_per_round
        out["forward_samples_per_round"] = self.forward_samples_per_round
        return out


WORKLOADS = ("1", "2", "3", "4")


def workload(key: str, scale: float = 1.0) -> Workload:
    """Workload ``"1"`` (scaled by ``scale``: fewer clients, all sampled) or ``"2"``-``"4"`` (never scaled)."""
    if key == "1":
        clients = max(1, round(100 * scale))
        return Workload("1", "BlazeFL FedAvg benchmark (CIFAR CNN)", "cnn", clients, 500, clients, 5, 50, 0.1)
    if key == "2":
        return Workload("2", "many small clients (MLP)", "mlp", 1000, 50, 100, 1, 10, 0.1)
    if key == "3":
        return Workload("3", "SCARLET-style soft-label round (MLP)", "mlp", 100, 400, 100, 1, 50, 0.1,
                        public_size=10_000, public_per_round=1_000, peers=False)
    if key == "4":
        return Workload("4", "workload 2 with 100,000 registered clients (MLP)", "mlp", 100_000, 50, 100, 1, 10, 0.1, data_clients=1000)
    raise ValueError(f"unknown workload {key!r}; allowed: {', '.join(WORKLOADS)}")


def workload_from_dict(data: dict[str, Any]) -> Workload:
    """Inverse of :meth:`Workload.to_dict` (derived keys are ignored)."""
    return Workload(**{k: data[k] for k in Workload.__dataclass_fields__})


# ---------------------------------------------------------------- data


def data_dir(directory: Path, num_samples: int, seed: int) -> Path:
    return directory / f"data-n{num_samples}-s{seed}"


def default_data_dir() -> Path:
    """``--data-dir``'s default in every script: ``$TMPDIR/chillfl-bench-data`` (``tempfile.gettempdir()``), so that all
    of them share one copy (many_clients.py once wrote a second 614 MB copy to a literal ``/tmp``)."""
    return Path(tempfile.gettempdir()) / "chillfl-bench-data"


def data_problem(directory: Path, seed: int, sizes: list[int]) -> str | None:
    """Why ``--seed`` / ``--data-dir`` cannot give the data of ``sizes`` samples, as ``"--option: why"``, or None.

    Checked before anything is written or measured: a negative seed once ended in numpy's traceback after an empty
    data folder had been made, and a ``--data-dir`` that is a file in ``pathlib``'s. A folder whose data are already
    written (its ``done`` file) is only read, so it need not be writable.
    """
    if seed < 0:
        return f"--seed must be >= 0 (got {seed}): numpy's generator takes no negative seed"
    for num_samples in sizes:
        folder = data_dir(directory, num_samples, seed)
        if (folder / "done").is_file():
            continue
        if folder.exists() and not folder.is_dir():
            return f"--data-dir: {folder} is not a folder"
        if why := unmakeable(folder):
            return f"--data-dir: {why}"
    return None


def unmakeable(folder: Path) -> str | None:
    """Why ``folder`` (and the folders above it that do not exist yet) cannot be made, or None: the first folder above
    it that exists must be a folder this process can write in (``--data-dir``, ``run.py --out``)."""
    existing = folder
    while not existing.exists() and existing != existing.parent:  # the folders made are made under the first that exists
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def make_arrays(num_samples: int, seed: int, shape: tuple[int, ...] = IMAGE_SHAPE) -> dict[str, np.ndarray]:
    """Seeded synthetic data: ``num_samples`` train and :data:`TEST_SIZE` test inputs of ``shape`` with labels."""
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((num_samples, *shape), dtype=np.float32),
        "y": rng.integers(0, NUM_CLASSES, size=num_samples, dtype=np.int64),
        "x_test": rng.standard_normal((TEST_SIZE, *shape), dtype=np.float32),
        "y_test": rng.integers(0, NUM_CLASSES, size=TEST_SIZE, dtype=np.int64),
    }


def write_data(folder: Path, num_samples: int, seed: int) -> None:
    """Seeded synthetic CIFAR-shaped data as x/y/x_test/y_test ``.npy`` files (skipped if present)."""
    if (folder / "done").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in make_arrays(num_samples, seed).items():
        np.save(folder / f"{name}.npy", array)
    (folder / "done").write_text("ok")


def load_data(folder: Path, mmap: bool = False) -> dict[str, np.ndarray]:
    """The arrays of :func:`write_data`; ``mmap`` leaves them on disk (page cache) until sliced."""
    mode = "c" if mmap else None  # copy-on-write: writable for torch.from_numpy, nothing written back
    return {name: np.load(folder / f"{name}.npy", mmap_mode=mode) for name in ("x", "y", "x_test", "y_test")}


def client_slice(w: Workload, cid: int) -> slice:
    """Client ``cid``'s rows: its block ``cid mod blocks`` of ``samples_per_client`` contiguous rows."""
    block = cid % w.blocks
    return slice(block * w.samples_per_client, (block + 1) * w.samples_per_client)


def public_slice(w: Workload) -> slice:
    """The public pool's rows (soft-label workloads): right after the clients' blocks."""
    start = w.blocks * w.samples_per_client
    return slice(start, start + w.public_size)


# ---------------------------------------------------------------- models


class McMahanCNN(nn.Module):
    """conv 3->32 5x5, pool, conv 32->64 5x5, pool, fc 1600->512, fc 512->10 (McMahan et al. 2017, CIFAR)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 5)
        self.conv2 = nn.Conv2d(32, 64, 5)
        self.fc1 = nn.Linear(1600, 512)
        self.fc2 = nn.Linear(512, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class SmallMLP(nn.Module):
    """Flatten, 3072 -> 64 ReLU -> 10."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3 * 32 * 32, 64)
        self.fc2 = nn.Linear(64, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def build_model(name: str, seed: int) -> nn.Module:
    """The workload's model, initialised from ``seed`` without touching the global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return McMahanCNN() if name == "cnn" else SmallMLP()


# ---------------------------------------------------------------- FLOPs


def sample_flops(model_name: str, batch_size: int) -> tuple[float, float]:
    """(training, forward-only) FLOPs per sample of ``model_name``, counted by ``torch.utils.flop_counter``.

    One step at ``batch_size``: forward, cross-entropy and backward of every
    parameter (``FlopCounterMode`` counts matmuls and convolutions, 2 per
    multiply-add), divided by the batch size; these models' FLOPs are linear in
    it. The SGD update's elementwise FLOPs are not counted (no matmul).
    """
    from torch.utils.flop_counter import FlopCounterMode

    model = build_model(model_name, 0)
    x = torch.zeros(batch_size, *IMAGE_SHAPE)
    y = torch.zeros(batch_size, dtype=torch.int64)
    with FlopCounterMode(display=False) as train:
        F.cross_entropy(model(x), y).backward()
    with FlopCounterMode(display=False) as forward, torch.no_grad():
        model(x)
    return train.get_total_flops() / batch_size, forward.get_total_flops() / batch_size


def round_flops(w: Workload) -> float:
    """FLOPs of one round's training and prediction (:func:`sample_flops` times the round's samples)."""
    train, forward = sample_flops(w.model, w.batch_size)
    return train * w.sample_steps_per_round + forward * w.forward_samples_per_round


PEAK_GFLOPS = {
    "H100 SXM, FP32 (no tensor cores)": 67_000,
    "H100 SXM, TF32 tensor cores (dense)": 494_700,
    "H100 SXM, BF16 tensor cores (dense)": 989_400,
    "H100 PCIe, FP32": 51_200,
    "H100 PCIe, TF32 (dense)": 378_000,
    "H100 PCIe, BF16 (dense)": 756_000,
    "H200 SXM, FP32": 67_000,
    "H200 SXM, TF32 (dense)": 494_700,
    "H200 SXM, BF16 (dense)": 989_400,
    "A100, FP32": 19_500,
    "A100, TF32 (dense)": 156_000,
    "A100, BF16 (dense)": 312_000,
}
"""NVIDIA's datasheet peaks (GFLOP/s, dense: the datasheets' tensor-core figures with sparsity are twice these), as
benchmarks/README.md's table lists them. ``run.py`` takes the FP32 one as ``--peak-gflops`` and the others as
``--peak-gflops-tf32`` / ``--peak-gflops-bf16`` (gpu-check.sh passes all three): PyTorch runs fp32 matmuls without TF32
unless ``torch.backends.cuda.matmul.allow_tf32`` is set, cuDNN convolutions with TF32 by default."""


# ---------------------------------------------------------------- worker protocol


class RoundClock:
    """Worker-side timestamps written as JSON, read back by the runner.

    ``t_loop_start`` is wall-clock time (``time.time()``) just before round 1,
    ``round_end`` one stamp per finished round; the runner subtracts its own
    launch stamp to get start-up times.
    """

    def __init__(self, out: Path) -> None:
        self.out = out
        self.data: dict[str, Any] = {"t_worker_start": time.time(), "round_end": []}

    def start(self) -> None:
        self.data["t_loop_start"] = time.time()

    def round_done(self) -> None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()  # a round has ended when its kernels have, not when they were queued
        self.data["round_end"].append(time.time())

    def note(self, **kv: Any) -> None:
        self.data.update(kv)

    def save(self) -> None:
        self.out.write_text(json.dumps(self.data))


def read_spec(argv: list[str]) -> tuple[Workload, dict[str, Any], RoundClock]:
    """A worker's job: ``argv[1]`` is a JSON file written by the runner (see ``run.py``)."""
    spec = json.loads(Path(argv[1]).read_text())
    w = workload_from_dict(spec["workload"])
    spec["data"] = Path(spec["data"])
    spec.setdefault("device", "cpu")
    return w, spec, RoundClock(Path(spec["clock"]))


def client_arrays(folder: Path, w: Workload, cid: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One client's (x, y), copied out of the memory-mapped files (what a peer's dataset loads per client)."""
    arrays = load_data(folder, mmap=True)
    part = client_slice(w, cid)
    return torch.from_numpy(np.array(arrays["x"][part])), torch.from_numpy(np.array(arrays["y"][part]))
