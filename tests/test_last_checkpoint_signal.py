"""The checkpoint after the last round (fsfix2) was written with the stop handler armed as for a round: a SIGTERM during
its write was dropped (the run returned normally, ``chillfl run`` exited 0, a comparison went on to its next run), and a
second one interrupted a run whose every round had run (rev104c). Such a signal now waits until the results are written,
and is then passed on, as one after the checkpoint is."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import os, signal, sys
import chillfl.runner as runner
from chillfl.cli import main
real = runner._checkpoint
def checkpoint(writer, protocol, done, device, wall):
    real(writer, protocol, done, device, wall)
    if done == 2:  # the last round's: a SIGTERM lands during its write
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass
runner._checkpoint = checkpoint
config = os.path.join(sys.argv[1], "last.toml")
with open(config, "w") as f:
    f.write('[dataset]\\nname = "digits"\\n')
sys.exit(main(["run", config, "--quiet", "federation.num_clients=3", "federation.clients_per_round=3", "federation.rounds=2", "checkpoint.every=1",
               "model.name=mlp", "model.hidden=[8]", "name=last", "out_dir=" + sys.argv[1]]))
"""


def test_a_signal_during_the_last_checkpoint_stops_the_command_after_the_results(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode in (128 + signal.SIGTERM, -signal.SIGTERM), (out.returncode, out.stderr[-2000:])
    assert (tmp_path / "last" / "summary.json").is_file() and not (tmp_path / "last.partial").exists()  # the results are complete
    assert "the run has done its rounds; it stops once its results are written" in out.stderr


STOPPED_BY_A_CALLBACK = """
import os, signal, sys
import chillfl
def stop_at_1(record, run):
    if record["round"] == 1:
        os.kill(os.getpid(), signal.SIGTERM)  # the user's Ctrl-C / SIGTERM in the round a callback stops after
        for _ in range(1000):
            pass
        run.stop("enough")
config = {"name": "cb", "out_dir": sys.argv[1], "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]},
          "federation": {"num_clients": 3, "clients_per_round": 3, "rounds": 3}}
for seed in (0, 1):  # a script's loop of runs: the signal must stop it, not let seed 1 start
    chillfl.run(config={**config, "seed": seed, "name": f"cb{seed}"}, callbacks=[stop_at_1], progress=False)
"""


def test_a_signal_in_the_round_a_callback_stops_after_is_passed_on_after_the_results(tmp_path: Path) -> None:
    """It was dropped: the run said "stopping after this round", finished as stopped by its callback, and the script's
    loop went on to its next run (rev104d)."""
    out = subprocess.run([sys.executable, "-c", STOPPED_BY_A_CALLBACK, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode in (128 + signal.SIGTERM, -signal.SIGTERM), (out.returncode, out.stderr[-2000:])
    assert (tmp_path / "cb0" / "summary.json").is_file() and not (tmp_path / "cb1").exists() and not (tmp_path / "cb1.partial").exists()
    assert "a callback stopped the run after this round; the run stops once its results are written" in out.stderr
