"""The built-in privacy mechanisms, one module each, each exporting its :class:`~chillfl.privacy.spec.MechanismSpec` as ``SPEC``.

A module's name, ``_`` written ``-``, is the mechanism's name in ``[privacy] mechanism``; a user's comes in the
same way, by import path.
"""
