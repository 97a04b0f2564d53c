"""Typed settings of the protocol tables (``[distillation]``, ``[prototypes]``).

They sit below :mod:`chillfl.config`, which parses each table once and keeps the
result, and above :mod:`chillfl.options`: the parts that use them
(``chillfl.distillation``, ``chillfl.protocols``) import them from here, so
config validation never imports the protocols or methods it configures.
"""
