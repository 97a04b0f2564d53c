"""Compute bound: one plain PyTorch loop over a round's sample-steps, no FL machinery.

Per round it visits the same number of (client, epoch, batch) steps as FedAvg
would -- ``clients_per_round`` clients drawn from a seeded generator, a fresh
permutation of the client's rows per epoch, batches of ``batch_size`` (last
short batch kept) -- but trains ONE model with ``torch.optim.SGD``: no copies of
the global model, no aggregation, no per-client state. Sequential, batch size
as configured: this is what the FL frameworks are compared against.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from workloads import build_model, client_slice, load_data, read_spec


def main() -> None:
    w, spec, clock = read_spec(sys.argv)
    arrays = load_data(spec["data"])
    x, y = torch.from_numpy(arrays["x"]), torch.from_numpy(arrays["y"])
    model = build_model(w.model, spec["seed"])
    opt = torch.optim.SGD(model.parameters(), lr=w.lr)
    gen = torch.Generator().manual_seed(spec["seed"])
    clock.note(num_parameters=sum(p.numel() for p in model.parameters()))
    clock.start()
    for _ in range(spec["rounds"]):
        clients = torch.randperm(w.num_clients, generator=gen)[: w.clients_per_round].sort().values
        for cid in clients.tolist():
            part = client_slice(w, cid)
            xc, yc = x[part], y[part]
            for _ in range(w.epochs):
                perm = torch.randperm(len(yc), generator=gen)
                for i in range(0, len(yc), w.batch_size):
                    idx = perm[i : i + w.batch_size]
                    opt.zero_grad(set_to_none=True)
                    F.cross_entropy(model(xc[idx]), yc[idx]).backward()
                    opt.step()
        clock.round_done()
    clock.save()


if __name__ == "__main__":
    main()
