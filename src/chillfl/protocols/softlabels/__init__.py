"""The soft-label round protocol (DS-FL / SCARLET family), SCARLET Algorithms 1 and 2.

Every client keeps its own model across rounds; models never travel. It runs
in the one round loop (:func:`chillfl.engine.loop.run_rounds`) under every
executor: the server side (:class:`SoftLabelProtocol`) builds each client's
typed downlink, and the client side (:class:`SoftLabelClient`) is a pure client
update that yields its distillation and training jobs. Read top to bottom,
round t (1-based, as in Algorithm 1) is::

    sampled = sample_clients(seed, t)                    # sorted client ids
    I^t     = sorted seeded draw of |P^t| public indices
    I_req^t = cache.request(t, I^t)                      # = I^t without a cache
    for k in sampled (client update, any executor; its state travels with its task):
        receive   I_req^t; and, if t > 1, round t-1's downlink (+ a catch-up
                  delta if k missed rounds) -> rebuild zhat^{t-1} over P^{t-1};
                  the server checks (by digest) it equals its own, row for row
        distil    KL(target || softmax(f(x))) on P^{t-1}, E_dist epochs, eta_dist   (Eq. 3)
        train     on private data, the ONE local step (train_client), at the
                  temperature policy's T (a per-client policy: the client's own, from its state,
                  decayed after its local evaluation)
        upload    softmax outputs on I_req^t (method: quantised, selected, ...)
    server: aggregate (ERA Eq. 2, Enhanced ERA Eq. 4, ...), update the cache
            (gamma^t), train the server model on P^t with zhat^t, evaluate it

Metrics per round: ``global_acc``/``global_loss`` (alias ``server_acc``/
``server_loss``) are the SERVER model on the global test set; ``local_acc`` is
each client's own model after its private training, on its own split (drawn
from the test set with its class proportions, SCARLET Fig. 6), averaged;
``local_val_acc`` the same model on the client's own validation split (with
``eval.validation > 0``: what ``compare``'s ``local_*`` tuning rules read);
``bytes_up``/``bytes_down``/``bytes_cumulative`` count every message in both
directions (the one-time public-set download excluded, SCARLET Sec. IV-A);
``bytes_detail`` splits the round's bytes by ``direction.kind``.

Choices
-------
* **Who receives what.** Clients not sampled in round t receive nothing in t.
  A sampled client receives I_req^t and round t-1's downlink (gamma^{t-1},
  zhat_req^{t-1}, I^{t-1}). With the cache, a client that missed rounds first
  gets the catch-up delta of :meth:`ServerCache.sync` (kind ``sync``); with
  full participation it is always empty (0 bytes). Without the cache there is
  nothing to catch up: the downlink carries every soft-label the client needs.
* **Distillation** is :func:`train_client` with a soft-target KL base loss
  (``batchmean``; shuffled minibatches of ``distill_batch_size``, plain SGD
  step as configured in ``[client]``, no lr decay). The same call trains the
  server model on P^t (``server_epochs``, default E = client epochs, as in
  Algorithm 1). Clients start from the same initial model as the server.
* **Uploads** are softmax outputs at T = 1 of the client's model in eval mode
  right after its private training (Algorithm 1).
* **No collaboration** (a spec with ``collaborative = False``) trains the sampled
  clients on private data only; it has no server model, so ``global_acc`` is
  absent and every byte count is 0.
* **Client state store**: ``client_store = "disk"`` (or ``"auto"`` above
  ``max_clients_in_memory`` clients) keeps each client's model, cache,
  method state and temperature entries in one ``torch.save`` file under a temporary directory
  (``state_dir`` or the system temp dir), removed when the run ends; only the
  round's clients are in memory. Memory and disk give bit-identical runs.
* **Bytes.** The downlink counts its own bytes when the server builds it
  (the method prices its soft-labels: quantised bits, several rows per sample);
  the uplink is priced by the method on arrival (a delta coder is the
  server's copy of what each client last sent). The cache check digest is a
  simulation check, not a message, and costs nothing.
* No aggregator is built: ``[algorithm]`` must be ``fedavg`` (its default: FedProx, SCAFFOLD, ... are
  rejected), and so is every ``[objective]`` term, a batch term such as ``decorr`` too: the clients train
  with the base loss only (the refusal names the term and its field).

Layout
------
:mod:`.messages` (every message), :mod:`.cache` (the synchronized cache, Algorithm 2),
:mod:`.method` (the seam a method implements: :class:`SoftLabelSpec` and its two halves),
:mod:`.labels` (shared soft-label arithmetic and losses), :mod:`.public` (the public pool),
:mod:`.state` / :mod:`.store` (what a client keeps), :mod:`.client` / :mod:`.server` (the two
sides of a round), :mod:`.build` (checks and construction). No module here names a method.
"""

from __future__ import annotations

from .build import build_soft_label_sharing, check_distillation, make_client_half, make_method, pretrain_server
from .cache import CacheOptions, CacheOutOfSyncError, CacheUpdate, ClientCache, OnExpire, RequestRule, ServerCache, is_served, is_valid
from .client import ClientArchs, PublicPretraining, SoftLabelClient, rows_digest
from .labels import entropy, masked_mean, mean_soft_labels, predict_proba, soft_target_kl, weighted_kl
from .messages import CacheSignal, CacheSyncDelta, SoftLabelDownlink, SoftLabelReport, SoftLabelRequest, SoftLabelRoundDownlink, SoftLabelUplink
from .method import (
    Aggregate,
    MethodState,
    NoState,
    Pretraining,
    SoftLabelClientHalf,
    SoftLabelClientHooks,
    SoftLabelMethod,
    SoftLabelSpec,
    StoredState,
    spec_of,
    stack_uplinks,
)
from .public import draw_public_subset, public_inputs, public_labels
from .server import Broadcast, SoftLabelProtocol
from .state import ClientPayload, ClientState
from .store import ClientStore

__all__ = [
    "Aggregate", "Broadcast", "CacheOptions", "CacheOutOfSyncError", "CacheSignal", "CacheSyncDelta", "CacheUpdate", "ClientArchs",
    "ClientCache", "ClientPayload", "ClientState", "ClientStore", "MethodState", "NoState", "OnExpire", "Pretraining", "PublicPretraining",
    "RequestRule", "ServerCache", "SoftLabelClient", "SoftLabelClientHalf", "SoftLabelClientHooks", "SoftLabelDownlink", "SoftLabelMethod",
    "SoftLabelProtocol", "SoftLabelReport", "SoftLabelRequest", "SoftLabelRoundDownlink", "SoftLabelSpec", "SoftLabelUplink",
    "StoredState", "build_soft_label_sharing", "check_distillation", "make_client_half", "make_method", "draw_public_subset", "entropy", "is_served", "is_valid", "masked_mean",
    "mean_soft_labels", "predict_proba", "pretrain_server", "public_inputs", "public_labels", "rows_digest", "soft_target_kl",
    "spec_of", "stack_uplinks", "weighted_kl",
]
