"""A lookup imports the module named after the method, not the whole package (issue 39's start-up), and finds the rest.

Before, the first lookup of any algorithm imported all of ``chillfl.aggregation`` (65 ms of a 2-core CPU's
run start-up, 0.20 s of an H200 machine's). Names that a module of another name registers (``fedopt.py``'s
``fedadam``) are still found, by the walk of every module, as is everything a listing shows.
"""

from __future__ import annotations

import json
import subprocess
import sys

from chillfl.plugins import package_modules

CHILD = """
import json, sys
from chillfl.aggregation.registry import algorithm_spec, registered_algorithms
from chillfl.temperature.registry import policy_spec

def loaded():
    return sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("chillfl.aggregation."))

prox = algorithm_spec("fedprox")
policy_spec("fixed")
after_prox = loaded()
adam = algorithm_spec("fedadam")
after_adam = loaded()
same = prox is registered_algorithms()["fedprox"] and adam is registered_algorithms()["fedadam"]
print(json.dumps({"prox": after_prox, "adam": after_adam, "same": same}))
"""


def test_a_lookup_imports_its_own_module_and_a_miss_walks_the_package() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, check=True).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert "fedprox" in seen["prox"] and "fedfomo" not in seen["prox"] and "fedopt" not in seen["prox"], seen["prox"]
    assert len(seen["prox"]) < len(package_modules("chillfl.aggregation")) // 2, seen["prox"]
    assert set(package_modules("chillfl.aggregation")) <= set(seen["adam"])  # fedadam lives in fedopt.py: every module imported
    assert seen["same"]  # the same spec objects the full listing holds
