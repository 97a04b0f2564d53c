"""FedMD (Li & Wang, 2019): transfer learning, then rounds of communicate / aggregate / digest / revisit.

FedMD's Algorithm 1 maps onto the soft-label round protocol (:mod:`chillfl.protocols.softlabels`)
as follows::

    transfer learning   each model trains on the labelled public set D0 (``transfer_epochs``),
                        then on its private data: a client does the first at its first
                        participation, the second is that round's private training
    communicate         class scores f_k(x) on the round's public subset d_t  (the uplink)
    aggregate           consensus  f~(x) = (1/K) sum_k f_k(x)                 (:func:`consensus`)
    distribute          the consensus goes down with the next round's downlink
    digest              train towards f~ on d_t (the protocol's distillation, ``distill_epochs``)
    revisit             train on the private data (the protocol's private training, ``client.epochs``)

Choices (docs/baselines.md):

* **Class scores** are the logits and the digest loss is the mean absolute
  error |f(x) - f~| (the reference code: softmax removed, Keras
  ``mean_absolute_error``); the paper only says "class scores".
  ``scores = "probs"`` uploads softmax outputs and digests with
  KL(f~ || softmax(f(x))) instead, as the other soft-label methods.
* **Order.** The consensus of round t is digested at the start of round t+1
  (before revisiting), as in every method of this protocol; the paper digests
  it in the same round. Each round still runs digest -> revisit -> communicate.
* **Server model.** FedMD has none; here the protocol's server model (the
  ``[model]`` default) also does the transfer learning once, then distils the
  consensus each round, so that ``global_acc`` exists (FedChill's Table 1
  reports one for FedMD).

Checked against: diogenes0319/FedMD_clean ``FedMD.py`` (consensus = mean of the logits model's
outputs on the round's alignment set, digested with one ``fit``) and ``Neural_Networks.py``
(``remove_last_layer``: softmax removed, loss ``mean_absolute_error``).
"""

from __future__ import annotations

from typing import Sequence

import torch

from chillfl.protocols.softlabels.labels import mean_soft_labels


def consensus(scores: Sequence[torch.Tensor]) -> torch.Tensor:
    """FedMD's aggregate: f~ = (1/K) sum_k f_k over the K clients' ``[n, C]`` class scores."""
    return mean_soft_labels(torch.stack(list(scores)))


def mean_absolute_error(logits: torch.Tensor, targets: torch.Tensor, temperature: object = 1.0) -> torch.Tensor:
    """FedMD's digest on logits: mean over samples and classes of |f(x) - f~(x)| (temperature unused)."""
    return (logits - targets).abs().mean()
