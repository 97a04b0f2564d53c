"""A run on a local Ray puts back the draws ``ray.init`` makes from Python's ``random`` as soon as it returns, and
keeps the draws the caller's callbacks make during the run (the close rewound them: a callback drawing one number a
round left the caller's stream where it was before the run). In a fresh interpreter, so that chillfl's ``import ray``
is the first."""

import textwrap
from pathlib import Path

import pytest

pytest.importorskip("ray")

from test_statefix_ray import driver_script  # noqa: E402  (after the skip: it needs ray too)

SCRIPT = textwrap.dedent('''
    import json, random
    import torch
    from torch import nn
    import chillfl

    def main():
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(60, 8, generator=g), torch.randint(0, 3, (60,), generator=g)
        data = chillfl.TensorData(x[:48], y[:48], x[48:], y[48:], num_classes=3)
        random.seed(1)
        expected = [random.random() for _ in range(3)]
        random.seed(1)
        drawn = []
        chillfl.run(model=nn.Linear(8, 3), data=data, write=False, progress=False, callbacks=[lambda record: drawn.append(random.random())],
                    config={"federation": {"num_clients": 2, "rounds": 2}, "executor": "ray", "ray": {"workers": 1}})
        print(json.dumps({"drawn": drawn, "next": random.random(), "expected": expected}))

    if __name__ == "__main__":
        main()
''')


def test_the_callers_random_draws_during_a_ray_run_are_kept(tmp_path: Path) -> None:
    seen = driver_script(tmp_path, "ray_random.py", SCRIPT)
    assert seen["drawn"] == seen["expected"][:2]  # ray.init's own draws were put back before the first round
    assert seen["next"] == seen["expected"][2]  # and the callbacks' draws were not rewound at the close
