"""Which clients attack: ``[attack] clients`` as named, else ``round(fraction * num_clients)`` drawn once from the run's seed.

Checked against (2026-12-02) ebagdasa/backdoor_federated_learning ``training.py`` and AI-secure/DBA
``utils/mnist_params.yaml`` (a fixed ``adversary_list`` of ids for the whole run, as ``clients`` here): the
attackers are fixed once, and attack in every round they are sampled.
"""

from __future__ import annotations

import numpy as np

from chillfl.errors import ConfigError
from chillfl.numeric import rounded_share  # shared with the robust rules' floored counts (floored_share)
from chillfl.seeds import derive_seed
from chillfl.settings.attack import AttackConfig


def attackers(attack: AttackConfig, num_clients: int, seed: int) -> frozenset[int]:
    """The attacking clients' ids: a pure function of (``[attack]``, num_clients, seed); ConfigError naming the field when none or a bad id."""
    if not attack.enabled:
        return frozenset()
    if attack.clients:
        bad = [c for c in attack.clients if c >= num_clients]
        if bad:
            raise ConfigError("attack.clients", f"client ids are < num_clients = {num_clients}, got {bad}")
        return frozenset(attack.clients)
    count = rounded_share(attack.fraction, num_clients)
    if count < 1:
        raise ConfigError("attack.fraction", f"{attack.fraction} of {num_clients} clients rounds to no attacker; raise it or name attack.clients")
    if count >= num_clients:  # the [0, 1) range is there to keep an honest client; 0.95 of 10 rounded to all 10
        raise ConfigError("attack.fraction", f"{attack.fraction} of {num_clients} clients rounds to all {num_clients}: no honest client is left; "
                                             "lower it, or name every client in attack.clients if that is meant")
    rng = np.random.default_rng(derive_seed(seed, "attack", "clients"))
    return frozenset(int(c) for c in rng.choice(num_clients, size=count, replace=False))
