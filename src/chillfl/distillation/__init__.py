"""Soft-label methods (DS-FL, SCARLET, CFD, COMET, Selective-FD, FedMD): their maths and their specs.

:mod:`.methods` holds one module per method (its options, its two halves, its ``SPEC``); the
maths they use is engine-independent:

* :mod:`.era` -- ERA (DS-FL, SCARLET Eq. 2) and Enhanced ERA (Eq. 4), entropy;
* :mod:`.fedmd` -- FedMD's consensus and digest loss;
* :mod:`.quantize` -- CFD quantisation and delta coding;
* :mod:`.selective` -- Selective-FD client/server selectors;
* :mod:`.comet` -- COMET clustering, cluster targets and regulariser;
* :mod:`.analysis` -- Fig. 3 / Fig. 4 simulations and plots (imports
  matplotlib, so it is not imported here).

The protocol they plug into, with its messages and the synchronized cache (Algorithm 2), is
:mod:`chillfl.protocols.softlabels`; the shared ``[distillation]`` options are
:mod:`chillfl.settings.distillation`.
"""

from .comet import cluster_clients, cluster_targets, comet_regularizer, comet_targets, kmeans
from .era import enhanced_era, entropy, era, mean_soft_labels, power_sharpen, tempered_softmax
from .quantize import DeltaCoder, compress, dequantize, payload_bytes, quantize
from .selective import KuLSIF, client_keep_mask, client_threshold, masked_mean, server_keep_mask

__all__ = [
    "DeltaCoder",
    "KuLSIF",
    "client_keep_mask",
    "client_threshold",
    "cluster_clients",
    "cluster_targets",
    "comet_regularizer",
    "comet_targets",
    "compress",
    "dequantize",
    "enhanced_era",
    "entropy",
    "era",
    "kmeans",
    "masked_mean",
    "mean_soft_labels",
    "payload_bytes",
    "power_sharpen",
    "quantize",
    "server_keep_mask",
    "tempered_softmax",
]
