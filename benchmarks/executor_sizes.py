"""One local round per executor for models of several sizes: the evidence behind ``auto``.

32 clients of 64-157 random samples, batch 16, 1 epoch, one intra-op thread;
min of 3 timed rounds after a warm-up. Prints seconds and the speed-up over
the sequential executor. ``python benchmarks/executor_sizes.py`` (about 1 min).
"""
import time

import torch
from torch import nn
torch.set_num_threads(1)
from chillfl.executors.sequential import ClientJob, SequentialExecutor
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.executors.processes import ProcessExecutor
from chillfl.training.local import LocalSpec, model_state

def cnn(c, hw, w):
    return nn.Sequential(nn.Conv2d(c, w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(w, 2*w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2*w*(hw//4)**2, 10))
MODELS = {
    "mlp-5k (8x8)": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)), (1, 8, 8)),
    "cnn-6k (8x8)": (lambda: cnn(1, 8, 16), (1, 8, 8)),
    "mlp-197k (3x32x32)": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(3072, 64), nn.ReLU(), nn.Linear(64, 10)), (3, 32, 32)),
    "cnn-mcmahan-878k": (lambda: nn.Sequential(nn.Conv2d(3, 32, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 512), nn.ReLU(), nn.Linear(512, 10)), (3, 32, 32)),
}
if __name__ == "__main__":
    for name, (make, shape) in MODELS.items():
        torch.manual_seed(0); model = make(); start = model_state(model)
        g = torch.Generator().manual_seed(1)
        sizes = torch.randint(64, 158, (32,), generator=g).tolist()
        jobs = [ClientJob(c, start, torch.randn(n, *shape, generator=g), torch.randint(0, 10, (n,), generator=g), 0.05, 1.0, {}, c) for c, n in enumerate(sizes)]
        spec = LocalSpec(epochs=1, batch_size=16)
        exs = {"sequential": SequentialExecutor(model, spec), "vectorized-1": VectorizedExecutor(model, spec), "vectorized-2": VectorizedExecutor(model, spec, workers=2), "processes-2": ProcessExecutor(model, spec, workers=2)}
        res = {}
        for k, ex in exs.items():
            ex.run(jobs); ts = []
            for _ in range(3):
                t0 = time.perf_counter(); ex.run(jobs); ts.append(time.perf_counter() - t0)
            ex.close(); res[k] = min(ts)
        n = sum(v.numel() for v in start.values())
        print(f"{name:22s} {n:8d} params  " + "  ".join(f"{k} {v:.3f}s ({res['sequential']/v:.2f}x)" for k, v in res.items()), flush=True)
