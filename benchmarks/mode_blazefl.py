"""BlazeFL 2.0.3 on a benchmark workload (runs in ``.venv-peers``, never imported by chillfl).

Uses BlazeFL's own FedAvg (``blazefl.contrib``): ``FedAvgBaseServerHandler`` and
one of its three client trainers, driven by the explicit loop BlazeFL's
examples use (sample -> downlink -> local_process -> uplink -> load):

* ``serial``: ``FedAvgBaseClientTrainer`` (one model, clients one by one);
* ``threads``: ``FedAvgThreadPoolClientTrainer`` with 2 threads;
* ``processes``: ``FedAvgProcessPoolClientTrainer`` with 2 processes, shared-memory IPC,
  start method ``spawn`` (with the default ``fork`` the pool workers hang here:
  a fork after torch has started its OpenMP threads). BlazeFL opens a new pool
  every round, so each round pays for two fresh interpreters importing torch.

The dataset object keeps only file paths (it is pickled into every process-pool
task); each client's rows are copied out of the memory-mapped ``.npy`` files
when its DataLoader is built, like BlazeFL's examples that load per-client files.

``device``: BlazeFL 2.0.3 takes a device string (``"cpu"``, ``"cuda"``) in its
server handler and in every trainer; each moves the model and every batch to
it (the process pool's workers each on ``cuda``, as its own examples do).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from workloads import Workload, build_model, client_arrays, read_spec


class Selector:
    """BlazeFL ``ModelSelector``: the workload's model from a fixed seed."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def select_model(self, model_name: str) -> torch.nn.Module:
        return build_model(model_name, self.seed)


class FileDataset:
    """BlazeFL ``PartitionedDataset``: per-client tensors read from the shared data files."""

    def __init__(self, folder: Path, w: Workload) -> None:
        self.folder, self.w = folder, w

    def get_dataset(self, type_: str, cid: int | None) -> Dataset:
        x, y = client_arrays(self.folder, self.w, 0 if cid is None else cid)
        return TensorDataset(x, y)

    def set_dataset(self, type_: str, cid: int | None, dataset: Dataset) -> None:
        return None  # nothing to cache: get_dataset re-reads the (page-cached) file

    def get_dataloader(self, type_: str, cid: int | None, batch_size: int | None, generator: torch.Generator | None) -> DataLoader:
        return DataLoader(self.get_dataset(type_, cid), batch_size=batch_size, shuffle=True, generator=generator)


def main() -> int:
    from blazefl.contrib import (
        FedAvgBaseClientTrainer,
        FedAvgBaseServerHandler,
        FedAvgProcessPoolClientTrainer,
        FedAvgThreadPoolClientTrainer,
    )
    from blazefl.core import IPCMode

    w, spec, clock = read_spec(sys.argv)
    seed, variant, device = spec["seed"], spec["variant"], spec["device"]
    selector, dataset = Selector(seed), FileDataset(spec["data"], w)
    common = dict(model_selector=selector, model_name=w.model, dataset=dataset, device=device, num_clients=w.num_clients,
                  epochs=w.epochs, batch_size=w.batch_size, lr=w.lr, seed=seed)
    with tempfile.TemporaryDirectory(prefix="blazefl-") as tmp_name:  # the process pool's share/state dirs
        tmp = Path(tmp_name)
        if variant == "serial":
            trainer = FedAvgBaseClientTrainer(**common)
        elif variant == "threads":
            trainer = FedAvgThreadPoolClientTrainer(**common, num_parallels=2)
        else:
            torch.multiprocessing.set_start_method("spawn", force=True)
            trainer = FedAvgProcessPoolClientTrainer(**common, share_dir=tmp / "share", state_dir=tmp / "state",
                                                     num_parallels=2, ipc_mode=IPCMode.SHARED_MEMORY)
        server = FedAvgBaseServerHandler(model_selector=selector, model_name=w.model, dataset=dataset, global_round=spec["rounds"],
                                         num_clients=w.num_clients, sample_ratio=w.clients_per_round / w.num_clients,
                                         device=device, batch_size=w.batch_size, seed=seed)
        clock.note(num_parameters=sum(p.numel() for p in server.model.parameters()), clients_per_round=server.num_clients_per_round)
        clock.start()
        while not server.if_stop():
            cids = server.sample_clients()
            trainer.local_process(server.downlink_package(), cids)
            for package in trainer.uplink_package():
                server.load(package)
            clock.round_done()
        clock.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
