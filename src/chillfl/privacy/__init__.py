"""Differential privacy for every protocol: the ``[privacy]`` table's mechanisms and their accountant (docs/privacy.md).

* :mod:`~chillfl.privacy.accounting`: epsilon from Opacus's RDP (or PRV) accountant, one history per
  privacy unit, kept in checkpoints;
* :mod:`chillfl.clipping` (beside the package: norm bounding uses it too): clipping and the seeded Gaussian noise every mechanism adds;
* :mod:`~chillfl.privacy.aggregate`: ``dp-fedavg`` and ``local``, a wrapper around a weighted-average aggregator;
* :mod:`~chillfl.privacy.dpsgd`: ``dp-sgd``'s per-sample clipped, noised gradients in the one local step;
* :mod:`~chillfl.privacy.build`: the hooks the run builder calls, the budget's checks, ``target_epsilon``.
"""
