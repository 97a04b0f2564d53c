"""Small Vision Transformer from FLex&Chill Table 8 (flexchill.txt, Sec. 4.8).

Patch embedding Conv2d(C, 256, k=4, s=4) -> flatten -> CLS token + learned
positional embedding -> 3 encoder layers (d_model 256, 4 heads, MLP 1024 with
GELU, dropout 0.1, LayerNorm) -> LayerNorm(256) -> Linear(256, classes) on the
CLS token. At 3x32x32 and 10 classes it has 2,401,802 parameters.

Attention is written with plain tensor ops (no fused fast path) so the model
works under ``torch.func.functional_call`` and ``vmap``.

Choices
-------
* Table 8 lists attention, MLP and LayerNorm per layer plus a final LayerNorm
  but not where the per-layer norms sit. We default to pre-norm (the ViT
  paper's layout, which is what makes a final LayerNorm necessary);
  ``norm_first = false`` gives post-norm. The table's argument names
  (``d_model``, ``nhead``, ``dim_feedforward``, ``normalized_shape``) are those
  of PyTorch's ``TransformerEncoderLayer``/``TransformerEncoder(norm=...)``,
  whose default is post-norm, so the authors may well have run
  ``norm_first = false``; no code of theirs for the ViT is public to settle it.
* Dropout (0.1) is applied to the attention output and inside the MLP; by
  default not to the attention weights, which ``TransformerEncoderLayer`` also
  drops at the same rate: ``attn_dropout = 0.1`` does that too.
* The number of positional embeddings follows the input: (H/p)*(W/p) + 1; a
  patch that does not divide H and W is refused (the patch conv would drop the
  last rows and columns without a word).

Checked against: FLex&Chill Table 8 (every width, depth, head count and
dropout rate) and torch's ``TransformerEncoderLayer`` (layout of each sublayer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from chillfl.errors import ConfigError
from chillfl.models.common import (
    MAX_LAYERS,
    MAX_WIDTH,
    Shape,
    conv_out,
    require_image,
    require_min_size,
)
from chillfl.options import require, require_range


class SelfAttention(nn.Module):
    """Multi-head self-attention, softmax(QK^T / sqrt(d_head)) V."""

    def __init__(self, dim: int, heads: int, attn_dropout: float = 0.0) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.drop = nn.Dropout(attn_dropout) if attn_dropout > 0 else nn.Identity()  # on the attention weights

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        weights = torch.softmax(q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5, dim=-1)
        return self.proj((self.drop(weights) @ v).transpose(1, 2).reshape(b, n, d))


class EncoderLayer(nn.Module):
    """Attention and GELU MLP, each with a residual connection and a LayerNorm."""

    def __init__(self, dim: int, heads: int, mlp_dim: int, dropout: float, norm_first: bool, attn_dropout: float = 0.0) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.attn = SelfAttention(dim, heads, attn_dropout)
        self.norm1 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp_dim)
        self.fc2 = nn.Linear(mlp_dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(F.gelu(self.fc1(x)))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.norm_first:
            x = x + self.drop(self.attn(self.norm1(x)))
            return x + self._mlp(self.norm2(x))
        x = self.norm1(x + self.drop(self.attn(x)))
        return self.norm2(x + self._mlp(x))


class ViT(nn.Module):
    """Patch embedding, CLS token, positional embedding, encoder, LayerNorm, linear head."""

    def __init__(self, input_shape: Shape, num_classes: int, options: ViTOptions) -> None:
        super().__init__()
        c, h, w = input_shape
        p, dim = options.patch, options.dim
        self.patch_embed = nn.Conv2d(c, dim, p, stride=p)
        tokens = (h // p) * (w // p) + 1
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, tokens, dim))
        nn.init.trunc_normal_(self.cls, std=0.02)
        nn.init.trunc_normal_(self.pos, std=0.02)
        self.layers = nn.Sequential(
            *(EncoderLayer(dim, options.heads, options.mlp_dim, options.dropout, options.norm_first, options.attn_dropout)
              for _ in range(options.depth))
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def head_name(self) -> str:
        """The classifier head (:class:`~chillfl.models.parts.DeclaresHead`)."""
        return "head"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.norm(self.layers(x))
        return self.head(x[:, 0])


@dataclass(frozen=True)
class ViTOptions:
    """Defaults are FLex&Chill Table 8: patch 4, dim 256, depth 3, 4 heads, MLP 1024, dropout 0.1; ``attn_dropout`` on the attention weights (0: none);
    ``patch`` must divide the image's height and width."""

    patch: int = 4
    dim: int = 256
    depth: int = 3
    heads: int = 4
    mlp_dim: int = 1024
    dropout: float = 0.1
    norm_first: bool = True
    attn_dropout: float = 0.0

    def validate(self, section: str) -> None:
        for name in ("patch", "dim", "heads", "mlp_dim"):
            require_range(getattr(self, name), 1, MAX_WIDTH, f"{section}.{name}")
        require_range(self.depth, 1, MAX_LAYERS, f"{section}.depth")
        require(self.dim % self.heads == 0, f"{section}.heads", f"must divide dim={self.dim}, got {self.heads}")
        require(0.0 <= self.dropout < 1.0, f"{section}.dropout", f"must be in [0, 1), got {self.dropout}")
        require(0.0 <= self.attn_dropout < 1.0, f"{section}.attn_dropout", f"must be in [0, 1), got {self.attn_dropout}")


def build_vit(input_shape: Shape, num_classes: int, options: ViTOptions, section: str) -> ViT:
    """FLex&Chill Table 8 ViT; needs inputs of at least one patch."""
    _, h, w = require_image("vit", input_shape, section)
    require_min_size("vit", (h, w), lambda s: conv_out(s, options.patch, stride=options.patch), section)
    if h % options.patch or w % options.patch:  # the stride-p patch conv would drop the last rows/columns unseen
        fits = [p for p in range(1, math.gcd(h, w) + 1) if math.gcd(h, w) % p == 0]
        raise ConfigError(f"{section}.patch", f"must divide the {h}x{w} image (patches that do not fit would leave its last pixels unseen), "
                                              f"got {options.patch}; patches that divide it: {', '.join(map(str, fits))}")
    return ViT(input_shape, num_classes, options)
