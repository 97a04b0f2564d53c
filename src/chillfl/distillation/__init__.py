"""Distillation-based FL building blocks (DS-FL, SCARLET, CFD, COMET, Selective-FD).

Pure, engine-independent parts; the soft-label round protocol composes them:

* :mod:`.era` -- ERA (DS-FL, SCARLET Eq. 2) and Enhanced ERA (Eq. 4), entropy;
* :mod:`.cache` -- SCARLET's synchronized soft-label cache (Algorithm 2) and
  the typed messages (request, uplink, downlink, catch-up delta);
* :mod:`.quantize` -- CFD quantisation and delta coding;
* :mod:`.selective` -- Selective-FD client/server selectors;
* :mod:`.comet` -- COMET clustering, cluster targets and regulariser;
* :mod:`.analysis` -- Fig. 3 / Fig. 4 simulations and plots (imports
  matplotlib, so it is not imported here).

Byte counting lives in :mod:`chillfl.engine.ledger`; the methods' options (the
``[distillation]`` table) in :mod:`chillfl.settings.distillation`.
"""

from .cache import (
    CacheOptions,
    CacheOutOfSyncError,
    CacheSignal,
    CacheSyncDelta,
    CacheUpdate,
    ClientCache,
    ServerCache,
    SoftLabelDownlink,
    SoftLabelRequest,
    SoftLabelUplink,
    is_valid,
)
from .comet import cluster_clients, cluster_targets, comet_regularizer, comet_targets, kmeans
from .era import enhanced_era, entropy, era, mean_soft_labels, power_sharpen, tempered_softmax
from .quantize import DeltaCoder, compress, dequantize, payload_bytes, quantize
from .selective import KuLSIF, client_keep_mask, client_threshold, masked_mean, server_keep_mask

__all__ = [
    "CacheOptions",
    "CacheOutOfSyncError",
    "CacheSignal",
    "CacheSyncDelta",
    "CacheUpdate",
    "ClientCache",
    "DeltaCoder",
    "KuLSIF",
    "ServerCache",
    "SoftLabelDownlink",
    "SoftLabelRequest",
    "SoftLabelUplink",
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
    "is_valid",
    "kmeans",
    "masked_mean",
    "mean_soft_labels",
    "payload_bytes",
    "power_sharpen",
    "quantize",
    "server_keep_mask",
    "tempered_softmax",
]
