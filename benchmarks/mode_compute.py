"""Compute bound: one plain PyTorch loop over a round's sample-steps, no FL machinery.

Per round it visits the same number of (client, epoch, batch) steps as FedAvg
would -- ``clients_per_round`` clients drawn from a seeded generator, a fresh
permutation of the client's rows per epoch, batches of ``batch_size`` (last
short batch kept) -- but trains ONE model with ``torch.optim.SGD``: no copies of
the global model, no aggregation, no per-client state. Sequential, batch size
as configured: this is what the FL frameworks are compared against.

Soft-label workloads (``public_per_round`` > 0, workload 3) add the plain
PyTorch work of a SCARLET round, looped the same way: every sampled client
distils on the previous round's public subset against its soft labels (one
epoch, soft-target cross-entropy), trains on its private rows, then predicts
soft labels on this round's subset (forward only); their mean is the next
targets, on which a second model (the server's) distils for ``epochs`` epochs.
Round 1 has no soft labels yet, so it does not distil (as in SCARLET); it is
the warm-up round the runner leaves out. No cache, no per-client state.

The data are moved to ``device`` once before round 1 (on a GPU every mode keeps
its data resident); the round clock synchronises the device at every round end.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch import nn

from workloads import Workload, build_model, client_slice, load_data, public_slice, read_spec


def sgd_epochs(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, target: torch.Tensor, w: Workload, epochs: int, gen: torch.Generator) -> None:
    """``epochs`` passes over (x, target) in batches of ``w.batch_size`` (target: labels, or soft labels [n, classes])."""
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=gen).to(x.device)
        for i in range(0, len(x), w.batch_size):
            idx = perm[i : i + w.batch_size]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[idx]), target[idx]).backward()
            opt.step()


def main() -> None:
    w, spec, clock = read_spec(sys.argv)
    device = torch.device(spec["device"])
    arrays = load_data(spec["data"])
    x, y = torch.from_numpy(arrays["x"]).to(device), torch.from_numpy(arrays["y"]).to(device)
    model = build_model(w.model, spec["seed"]).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=w.lr)
    server = build_model(w.model, spec["seed"] + 1).to(device) if w.public_per_round else model  # soft labels: the server's own model
    server_opt = torch.optim.SGD(server.parameters(), lr=w.lr)
    gen = torch.Generator().manual_seed(spec["seed"])
    public = x[public_slice(w)]
    previous: tuple[torch.Tensor, torch.Tensor] | None = None  # (public rows, soft labels) of the last round
    clock.note(num_parameters=sum(p.numel() for p in model.parameters()), device=str(device))
    clock.start()
    for _ in range(spec["rounds"]):
        clients = torch.randperm(w.num_clients, generator=gen)[: w.clients_per_round].sort().values
        subset = torch.randperm(len(public), generator=gen)[: w.public_per_round].to(device) if w.public_per_round else None
        predictions = []
        for cid in clients.tolist():
            if previous is not None:
                sgd_epochs(model, opt, public[previous[0]], previous[1], w, 1, gen)
            part = client_slice(w, cid)
            sgd_epochs(model, opt, x[part], y[part], w, w.epochs, gen)
            if subset is not None:
                with torch.no_grad():
                    predictions.append(F.softmax(model(public[subset]), dim=1))
        if subset is not None:
            soft = torch.stack(predictions).mean(0)
            sgd_epochs(server, server_opt, public[subset], soft, w, w.epochs, gen)
            previous = (subset, soft)
        clock.round_done()
    clock.save()


if __name__ == "__main__":
    main()
