"""chillfl on Flower: a parameter-sharing or soft-label config as a Flower ``ServerApp`` + ``ClientApp`` (docs/flower.md).

Needs the optional extra ``chillfl[flower]``; importing this package works
without it, and the factories raise a one-line ConfigError naming the extra.
"""

from chillfl.flower.apps import client_app, run_simulation, server_app

__all__ = ["client_app", "run_simulation", "server_app"]
