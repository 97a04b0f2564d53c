"""Adversarial clients (``[attack]``, docs/attacks.md): data poisoning, model poisoning, and what they achieve.

* :mod:`chillfl.attacks.select`: which clients attack (drawn once from the run's seed, or named);
* :mod:`chillfl.attacks.poison`: attacks on an attacker's training data (``label_flip``, ``backdoor``),
  applied once to the run's data, so they hold under every protocol and executor;
* :mod:`chillfl.attacks.updates`: what an attacker uploads instead of its honest model (``sign_flip``,
  ``scaling``, ``gaussian``, ``lie``), pure functions of the round's models;
* :mod:`chillfl.attacks.aggregate`: the server-side seam where those are applied, before aggregation;
* :mod:`chillfl.attacks.softlabels`, :mod:`chillfl.attacks.prototypes`: ``gaussian`` under the other two
  protocols (noised soft-label rows, on the client; noised class prototypes, where the server receives them);
* :mod:`chillfl.attacks.protocol`: the round's attackers and the backdoor's ``attack_success_rate`` in every record;
* :mod:`chillfl.attacks.build`: what the run builder calls.
"""
