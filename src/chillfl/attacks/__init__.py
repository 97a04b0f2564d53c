"""Adversarial clients (``[attack]``, docs/attacks.md): data poisoning, model poisoning, and what they achieve.

* :mod:`chillfl.attacks.spec`: an attack is an :class:`~chillfl.attacks.spec.AttackSpec`, its options and the
  hooks it has (poisoned data, forged models, soft-label rows or prototypes, a success probe, a run check);
  where it runs follows from them;
* :mod:`chillfl.attacks.kinds`: the built-ins, one module each (``label_flip``, ``backdoor``, ``sign_flip``,
  ``scaling``, ``gaussian``, ``lie``), each exporting its ``SPEC``, as a user's module would;
* :mod:`chillfl.attacks.select`: which clients attack (drawn once from the run's seed, or named);
* :mod:`chillfl.attacks.poison`, :mod:`chillfl.attacks.updates`: the maths of the data attacks and of the
  uploads an attacker sends instead of its honest model (pure functions);
* :mod:`chillfl.attacks.aggregate`: the server-side seam where forged models are applied, before aggregation;
* :mod:`chillfl.attacks.softlabels`, :mod:`chillfl.attacks.prototypes`: the seams under the other two
  protocols (forged soft-label rows, on the client; forged class prototypes, where the server receives them);
* :mod:`chillfl.attacks.protocol`: the round's attackers and the attack's ``attack_success_rate`` in every record;
* :mod:`chillfl.attacks.build`: what the run builder calls; it names no attack, it asks the spec.
"""
