"""Test-wide setup: one intra-op thread.

The models in the tests are tiny, where torch's thread pool costs more than it
gives, and CI machines are small and shared; one thread also keeps the process
executor's bitwise comparison with the sequential one meaningful.
"""

import torch

torch.set_num_threads(1)
