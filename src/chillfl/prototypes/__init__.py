"""The prototype family: methods whose clients share per-class knowledge about their representations (or logits).

:mod:`.spec` is the seam (:class:`~.spec.PrototypeSpec`, :class:`~.spec.PrototypeHooks`, the
:class:`~.spec.ClassRows` a client releases, the server's :class:`~.spec.Knowledge`);
:mod:`.maths` the maths every method shares (class means, their aggregation, the distance
term, nearest-prototype inference); :mod:`.methods` the built-ins (FedProto, FedHKD, ...), one
module each, registered by its ``SPEC`` and found by :mod:`chillfl.settings.prototypes` exactly
as a plugin's spec is. The protocol that runs them is :mod:`chillfl.protocols.prototypes`.
"""
