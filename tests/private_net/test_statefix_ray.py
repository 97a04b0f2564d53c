"""A run on a local Ray leaves the calling process as it found it: environment, excepthook, import path, Python's
``random``, and no zombie children. In a fresh interpreter, so that chillfl's ``import ray`` is the first."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")

SCRIPT = textwrap.dedent('''
    import json, os, random, sys
    import torch
    from torch import nn
    import chillfl

    def children():
        me, found = os.getpid(), []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) == me:
                    found.append(fields[0])
        return found

    def main():
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(60, 8, generator=g), torch.randint(0, 3, (60,), generator=g)
        data = chillfl.TensorData(x[:48], y[:48], x[48:], y[48:], num_classes=3)
        random.seed(1)
        env, hook, path, state = dict(os.environ), sys.excepthook, list(sys.path), random.getstate()
        chillfl.run(model=nn.Linear(8, 3), data=data, write=False, progress=False,
                    config={"federation": {"num_clients": 2, "rounds": 1}, "executor": "ray", "ray": {"workers": 1}})
        changed = sorted(k for k in set(env) | set(os.environ) if env.get(k) != os.environ.get(k))
        print(json.dumps({"environ": changed, "hook": sys.excepthook is hook, "path": sys.path == path,
                          "random": random.getstate() == state, "children": children()}))

    if __name__ == "__main__":
        main()
''')


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads child processes from Linux's /proc")
def driver_script(tmp_path: Path, name: str, script: str) -> dict[str, Any]:
    """The JSON last printed by ``script``, run as a fresh driver process in ``tmp_path`` without the job's Ray settings."""
    path = tmp_path / name
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PYTHONBREAKPOINT"))}
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def test_a_local_ray_run_gives_the_driver_back(tmp_path: Path) -> None:
    seen = driver_script(tmp_path, "ray_run.py", SCRIPT)
    assert seen["environ"] == ["RAY_DISABLE_FAILURE_SIGNAL_HANDLER"]  # documented: docs/ray.md
    # sys.path too, also where PYTHONPATH holds Ray's thirdparty_files already (CI's private-network suite, after the
    # Flower simulations: Ray's insert at the import is then a duplicate, which undo_import takes away as well)
    assert seen["hook"] and seen["path"] and seen["random"]
    assert "Z" not in seen["children"]
