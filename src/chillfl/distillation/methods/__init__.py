"""The built-in soft-label methods, one module each: DS-FL, SCARLET, CFD, COMET, Selective-FD, FedMD, ``individual``.

Each module's ``SPEC`` (a :class:`chillfl.protocols.softlabels.SoftLabelSpec`) is its one registration:
the module's name is the method's name (:func:`chillfl.settings.distillation.method_settings`),
and a plugin's spec is found the same way, by its import path.

The ``[distillation]`` table chooses a method and sets the protocol's shared
options (:class:`~chillfl.settings.distillation.DistillationOptions`) plus that
method's own options, all in one flat table (typed and parsed once, with the
config, in :mod:`chillfl.settings.distillation`)::

    [distillation]
    method = "scarlet"       # dsfl | scarlet | cfd | comet | selective_fd | fedmd | individual
    public_size = 400        # |P|
    subset_size = 100        # |P^t|, drawn each round (SCARLET Sec. IV-A: 1,000 of 10,000)
    beta = 2.0               # SCARLET's own option (Enhanced ERA, Eq. 4)
    cache_duration = 50      # D (Algorithm 2); any method but individual may use the cache

A method only says what differs between the papers (SCARLET Sec. IV-A,
Appendix B, Table V); the round protocol (:mod:`chillfl.protocols.softlabels`) is shared:

============  ======================================  =========================================
method        uplink (client -> server)                aggregation / downlink
============  ======================================  =========================================
dsfl          softmax outputs on I_req^t (float32)     ERA, Eq. (2): softmax(zbar / T)
scarlet       same                                     Enhanced ERA, Eq. (4): zbar^beta / sum, cache D=50
cfd           outputs quantised to ``bits_up`` bits   plain mean, quantised to ``bits_down``
comet         same as dsfl                             mean for the server; per-cluster targets down
selective_fd  only on samples the client's KuLSIF      masked mean over the clients that kept a
              selector finds in-distribution           sample; server selector drops ambiguous ones
fedmd         same as dsfl                             consensus: plain mean (transfer learning first)
individual    nothing                                  nothing (no public data, no server model)
============  ======================================  =========================================

Choices
-------
* **Cache everywhere.** ``cache_duration`` is a shared option: 50 for SCARLET
  (Sec. IV-B), 0 (no cache) for the others; SCARLET Fig. 9 plugs the cache
  into CFD, COMET and Selective-FD with D = 25. SCARLET with D = 0 is DS-FL's
  traffic with Enhanced ERA. COMET can only cache with ``granularity =
  "sample"`` (per-sample centroids, the SCARLET authors' reading): client-level
  cluster targets change with the round's clustering, and a client-level row
  holds every cluster's block while a client downloads (and is billed for) only
  its own, so a cached row would hand a client whose cluster changed a block it
  never paid for; the config refuses the combination.
* **COMET, client granularity** (default, COMET's paper): the server clusters
  the clients of round t on their uploads; a client sampled at t + 1 downloads
  its cluster's target (n x C values; the assignment is free, Appendix B); a
  client that did not upload at t gets the plain mean. The server model
  trains on the plain mean (Appendix B: "we extended the evaluation to include
  server-side training"). **Sample granularity**: c centroids per sample are
  sent (n x c x C) and each client distils towards the centroid nearest its
  own current prediction. The regulariser weight lambda multiplies the
  distillation loss (the distillation phase *is* COMET's regulariser here).
* **CFD** uses the block's quantiser (``quantize.compress``) and counts
  ``payload_bytes``; with ``delta_coding`` the uplink is the delta message
  (change bitmap + changed codes). The server averages the dequantised
  uploads (no ERA). ``downlink = "mean"`` (default): that mean, quantised to
  b_down bits, goes down and the server model trains on the same values.
  ``downlink = "server"``: the server model first distils the plain mean, then
  its own softmax outputs on the kept fresh indices (eval mode), quantised to
  b_down bits, go down -- CFD's two-way distillation as the SCARLET authors'
  ``src/algorithm/cfd.py`` runs it (they take the outputs in train mode during
  the last server epoch). With ``one_bit = "argmax"`` this is their CFD.
* **Selective-FD's client selector** is fitted once per client, at its first
  round: KuLSIF density ratio of the client's private inputs (90 %) against
  uniform noise over the range of those inputs, threshold = the
  ``tau_client`` quantile of the ratios of the other 10 % (SCARLET authors'
  code), evaluated on every public sample; the resulting mask lives in the
  client's state. The uplink then carries the kept samples' indices too.
* Client weights in every mean are uniform (1/K, Eqs. 2 and 4).
"""
