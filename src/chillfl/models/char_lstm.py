"""``char_lstm``: the next-character LSTM of LEAF's and FedProx's Shakespeare benchmark.

Embedding (8) -> stacked LSTM (2 layers of 256) -> linear read-out of the last
time step, over the vocabulary. Inputs are ``[B, L]`` character indices stored
as floats (``flwr_shakespeare`` gives ``L = 80`` indices in ``0..79``).

Choices
-------
* Reference sizes (LEAF ``models/shakespeare/stacked_lstm.py``, FedProx's
  copy): ``embed_dim = 8``, ``hidden = 256``, ``layers = 2``; options change
  them (the tests use a small hidden size).
* The LSTM is written out (gates ``i, f, g, o`` as in ``nn.LSTM``, one matmul
  of the inputs for all steps, then a loop over the fixed sequence length)
  instead of calling ``nn.LSTM``: every chillfl model must run under
  ``torch.func.functional_call`` and ``vmap`` (the vectorised executor), which
  the fused cuDNN/oneDNN kernels do not support. Initialisation is
  ``nn.LSTM``'s (uniform in +-1/sqrt(hidden) for every weight and bias); LEAF's
  TensorFlow cells use Glorot weights, which is not reproduced.
* ``forget_bias`` (default 0, as ``nn.LSTM`` and the PyTorch ports): a constant
  added to the forget gate's pre-activation. LEAF's and FedProx's
  ``BasicLSTMCell`` add 1 (``c = c * sigmoid(f + 1) + ...``), so their forget
  gates start near 0.73 instead of 0.5; ``forget_bias = 1`` is that cell.
* Parameters: 819,920 at 80 classes. LEAF's TensorFlow model has 817,872: its
  cells have one bias per gate where ``nn.LSTM`` (and this model) has two
  (``b_ih + b_hh``, 2 x 1024 more), which spans the same functions.
* Indices arrive as floats so that every input path (precision casts, device
  moves, stacking with other datasets' tensors) treats them like any input;
  they are exact integers below 2**24 in float32 (and below 256 in bf16).
  The spec declares that the model reads indices (``ModelSpec.reads_indices``),
  so a run refuses, before it starts, inputs that are not whole numbers (a
  standardised float dataset), indices outside ``0..vocab-1`` in any row, and a partitioner that adds
  noise to the inputs (``feature_noise``), each in one line naming the field.
  The forward pass still clamps to ``0..vocab-1``: a call from outside a run
  (a user's own batch) must not become a device-side assert on CUDA.
* ``vocab = 0`` (default) means the dataset's class count: Shakespeare
  predicts a character of the same 80-letter alphabet it reads.

Checked against: LEAF ``models/shakespeare/stacked_lstm.py`` (embedding 8, two
256-unit ``BasicLSTMCell``, dense read-out of ``outputs[:, -1, :]``) and
``torch.nn.LSTM`` (gate for gate, tests/test_leaf_parquet.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from chillfl.errors import ConfigError
from chillfl.models.common import MAX_LAYERS, MAX_WIDTH, Shape
from chillfl.models.spec import ModelSpec
from chillfl.options import require, require_range

MAX_FORGET_BIAS = 100.0


@dataclass(frozen=True)
class CharLSTMOptions:
    """LEAF/FedProx sizes: ``embed_dim`` 8, ``hidden`` 256, ``layers`` 2; ``vocab`` 0 = the class count; ``forget_bias`` 1 = LEAF's TF cell."""

    embed_dim: int = 8
    hidden: int = 256
    layers: int = 2
    vocab: int = 0
    forget_bias: float = 0.0

    def validate(self, section: str) -> None:
        require(1 <= self.embed_dim <= MAX_WIDTH, f"{section}.embed_dim", f"must be in [1, {MAX_WIDTH}], got {self.embed_dim}")
        require(1 <= self.hidden <= MAX_WIDTH, f"{section}.hidden", f"must be in [1, {MAX_WIDTH}], got {self.hidden}")
        require(1 <= self.layers <= MAX_LAYERS, f"{section}.layers", f"must be in [1, {MAX_LAYERS}], got {self.layers}")
        require(0 <= self.vocab <= MAX_WIDTH, f"{section}.vocab", f"must be in [0, {MAX_WIDTH}] (0: the class count), got {self.vocab}")
        require_range(self.forget_bias, -MAX_FORGET_BIAS, MAX_FORGET_BIAS, f"{section}.forget_bias")


class LSTMLayer(nn.Module):
    """One LSTM layer: ``ih`` maps the inputs of all steps at once, ``hh`` the previous hidden state."""

    def __init__(self, in_features: int, hidden: int, forget_bias: float = 0.0) -> None:
        super().__init__()
        self.hidden = hidden
        self.forget_bias = forget_bias  # a constant, fixed at construction (LEAF's BasicLSTMCell: 1)
        self.ih = nn.Linear(in_features, 4 * hidden)
        self.hh = nn.Linear(hidden, 4 * hidden)
        bound = 1.0 / math.sqrt(hidden)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, L, in] -> [B, L, hidden], from zero initial states."""
        b, steps, _ = x.shape
        gates_x = self.ih(x.reshape(b * steps, -1)).reshape(b, steps, 4 * self.hidden)
        h = x.new_zeros(b, self.hidden)
        c = x.new_zeros(b, self.hidden)
        outs = []
        for t in range(steps):
            i, f, g, o = (gates_x[:, t] + self.hh(h)).chunk(4, dim=1)
            if self.forget_bias:
                f = f + self.forget_bias
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outs.append(h)
        return torch.stack(outs, dim=1)


class CharLSTM(nn.Module):
    """Embedding -> stacked LSTM -> linear read-out of the last step."""

    def __init__(self, vocab: int, embed_dim: int, hidden: int, layers: int, num_classes: int, forget_bias: float = 0.0) -> None:
        super().__init__()
        self.vocab = vocab
        # N(0, 1) as nn.Embedding's own init, drawn by a direct Tensor.normal_: the meta-device sizing
        # (registry._ShapesOnly) can skip it, whereas nn.init.normal_ would import torch._dynamo there
        self.embed = nn.Embedding(vocab, embed_dim, _weight=torch.empty(vocab, embed_dim).normal_())
        self.lstm = nn.ModuleList([LSTMLayer(embed_dim if k == 0 else hidden, hidden, forget_bias) for k in range(layers)])
        self.head = nn.Linear(hidden, num_classes)

    def head_name(self) -> str:
        """The classifier head (:class:`~chillfl.models.parts.DeclaresHead`)."""
        return "head"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.embed(x.flatten(1).long().clamp(0, self.vocab - 1))
        for layer in self.lstm:
            z = layer(z)
        return self.head(z[:, -1])


def build_char_lstm(input_shape: Shape, num_classes: int, options: CharLSTMOptions, section: str) -> CharLSTM:
    """LEAF's Shakespeare LSTM for ``(L,)`` index sequences."""
    if len(input_shape) != 1 or input_shape[0] < 1:
        raise ConfigError(f"{section}.name", f"char_lstm needs (L,) character-index sequences (e.g. flwr_shakespeare), dataset gives {tuple(input_shape)}")
    return CharLSTM(vocab_size(options, num_classes), options.embed_dim, options.hidden, options.layers, num_classes, options.forget_bias)


def vocab_size(options: CharLSTMOptions, num_classes: int) -> int:
    """How many distinct indices the embedding reads: ``vocab``, or the class count when it is 0."""
    return options.vocab or num_classes


SPEC = ModelSpec(CharLSTMOptions, build_char_lstm, reads_indices=vocab_size, summary="LEAF's Shakespeare LSTM: next character from an index sequence")
"""``char_lstm`` in the model registry: it reads character indices below :func:`vocab_size`."""
