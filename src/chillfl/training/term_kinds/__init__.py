"""The built-in loss terms of ``[objective] terms``, one module each, each registering its :class:`~chillfl.training.terms.TermSpec`
next to its code: every module of this package is imported on the first lookup, so a new built-in term is a new module here and
no list is edited (``proximal``, which ``[objective] proximal_mu`` sets, lives with the objective in :mod:`chillfl.training.objective`)."""
