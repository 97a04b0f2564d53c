"""Test-wide setup: one intra-op thread.

The models in the tests are tiny, where torch's thread pool costs more than it
gives, and CI machines are small and shared; one thread also keeps the process
executor's bitwise comparison with the sequential one meaningful.
"""

import os

import torch

torch.set_num_threads(1)

# tests/private_net/ (Ray clusters, Flower's simulation and deployment) run only inside a private
# network namespace, started by tests/test_private_net.py: there the loopback device is the only
# interface, so Ray, which otherwise advertises the host's own address, cannot send a packet anywhere else.
collect_ignore = [] if os.environ.get("CHILLFL_PRIVATE_NET") == "1" else ["private_net"]
