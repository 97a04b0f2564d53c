"""The built-in attacks, one module each, each exporting its :class:`~chillfl.attacks.spec.AttackSpec` as ``SPEC``.

A module's name is the kind's name in ``[attack] kind``; a user's attack comes in the same way, by import path.
"""
