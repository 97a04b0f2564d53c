"""The Flower app components for ``flwr run`` (deployment): ``chillfl.flower.deploy:server`` and ``:client``.

Both read the chillfl config from the Flower run config (``config``,
``overrides``, ``min-nodes``), see :mod:`chillfl.flower.apps` and docs/flower.md.
"""

from chillfl.flower.apps import client_app, server_app

server = server_app()
client = client_app()
