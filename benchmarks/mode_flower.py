"""Flower 1.42 simulation engine on a benchmark workload (runs in ``.venv-peers``).

``flwr.simulation.run_simulation`` with a ``ClientApp`` (plain PyTorch SGD on the
client's rows) and a ``ServerApp`` running the message-API ``FedAvg`` strategy
(``fraction_train`` = sampled / clients, no client-side evaluation). Round ends
are stamped from the strategy's ``evaluate_fn``, which Flower calls before
round 1 (our loop start) and after every round; it evaluates nothing.

Ray backend: ``client_resources = {num_cpus: 1}``, so two ClientApps train at
once on the 2-core machine (Flower's default of 2 CPUs per client would run one).
On ``device = "cuda"`` each ClientApp also asks for ``num_gpus = GPU_FRACTION``
(0.1: up to 10 ClientApps share the GPU, as Flower's simulation guide does),
moves its model once and every batch to the GPU.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.simulation import run_simulation
from torch.utils.data import DataLoader, TensorDataset

from workloads import build_model, client_arrays, read_spec, workload_from_dict

W, SPEC, CLOCK = read_spec(sys.argv) if __name__ == "__main__" else (None, None, None)
# The ClientApp runs in Ray actors that re-import nothing from __main__; it gets the job from this variable.
JOB_ENV = "CHILLFL_BENCH_FLOWER_JOB"

GPU_FRACTION = 0.1

client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    job = json.loads(os.environ[JOB_ENV])
    w = workload_from_dict(job["workload"])
    cid = int(context.node_config["partition-id"])
    device = torch.device(job["device"])
    model = build_model(w.model, job["seed"])
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    model.to(device)
    x, y = client_arrays(Path(job["data"]), w, cid)
    gen = torch.Generator().manual_seed(job["seed"] * 100_003 + cid)
    loader = DataLoader(TensorDataset(x, y), batch_size=w.batch_size, shuffle=True, generator=gen)
    opt = torch.optim.SGD(model.parameters(), lr=w.lr)
    model.train()
    for _ in range(w.epochs):
        for xb, yb in loader:
            xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
    content = RecordDict({"arrays": ArrayRecord({k: v.cpu() for k, v in model.state_dict().items()}), "metrics": MetricRecord({"num-examples": len(y)})})
    return Message(content=content, reply_to=msg)


server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    assert W is not None and SPEC is not None and CLOCK is not None
    model = build_model(W.model, SPEC["seed"])
    CLOCK.note(num_parameters=sum(p.numel() for p in model.parameters()))

    def stamp(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        if server_round == 0:
            CLOCK.start()
        else:
            CLOCK.round_done()
        CLOCK.save()
        return None

    strategy = FedAvg(
        fraction_train=W.clients_per_round / W.num_clients,
        fraction_evaluate=0.0,
        min_train_nodes=W.clients_per_round,
        min_evaluate_nodes=0,
        min_available_nodes=W.num_clients,
    )
    strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=SPEC["rounds"], evaluate_fn=stamp)


if __name__ == "__main__":
    assert W is not None and SPEC is not None
    os.environ[JOB_ENV] = json.dumps({"workload": W.to_dict(), "seed": SPEC["seed"], "data": str(SPEC["data"]), "device": SPEC["device"]})
    gpus = GPU_FRACTION if SPEC["device"] != "cpu" else 0.0
    init_args: dict[str, float] = {"num_cpus": os.cpu_count() or 2}
    if gpus:
        init_args["num_gpus"] = 1
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=W.num_clients,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": gpus}, "init_args": init_args},
    )
    CLOCK.save()
