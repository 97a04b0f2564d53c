"""The built-in prototype methods: one module each, registered by its ``SPEC`` (a :class:`~chillfl.prototypes.spec.PrototypeSpec`).

A method's name is its module's name; :mod:`chillfl.settings.prototypes` lists them without
importing them and loads one as it loads a plugin's spec, by import path.
"""
