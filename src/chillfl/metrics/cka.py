"""Linear centered kernel alignment (CKA) between two sets of features (FLex&Chill Sec. 4.6, Eq. 6).

For features X [n, p] and Y [n, q] of the same n inputs (Kornblith et al., 2019)::

    X <- X - mean_rows(X),  Y <- Y - mean_rows(Y)             (column centring)
    CKA(X, Y) = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)

CKA is 1 for X = Y, and invariant to orthogonal transforms and isotropic
scaling of either argument (not to arbitrary invertible linear maps).

Choice: FLex&Chill's Eq. 6 prints the formula without the centring step;
the measure it names (*Centered* KA, ref. [18]) centres, and so do we by
default. ``center=False`` evaluates Eq. 6 literally on the raw features.
Kornblith et al.'s debiased estimator (``debiased=True`` in their code, from
Song et al.'s unbiased HSIC) is not offered: FLex&Chill uses the plain one.

Checked against Kornblith et al. 2019 (Sec. 3: linear CKA with
centred features, the (n - 1)^2 of HSIC cancelling) and their demo code
(google-research ``representation_similarity/demo.ipynb``,
``feature_space_linear_cka``, ``debiased=False``: centre the columns, then
||X^T Y||_F^2 / (||X^T X||_F ||Y^T Y||_F)), and papers/flexchill.txt App. E,
Eq. 3, 2026-12-02.
"""

from __future__ import annotations

import torch


def linear_cka(x: torch.Tensor, y: torch.Tensor, *, center: bool = True) -> float:
    """Linear CKA of features ``x`` [n, ...] and ``y`` [n, ...] (flattened to [n, features]); computed in float64.

    NaN when either side has no variance (a constant representation), and centred over fewer than 3 inputs: two
    centred rows are ``x`` and ``-x``, whose CKA is 1 whatever the two representations (it says nothing).
    """
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x and y must describe the same inputs: {x.shape[0]} vs {y.shape[0]} rows")
    if center and x.shape[0] < 3:
        return float("nan")
    a = x.reshape(x.shape[0], -1).double()
    b = y.reshape(y.shape[0], -1).double()
    if center:
        a = a - a.mean(dim=0, keepdim=True)
        b = b - b.mean(dim=0, keepdim=True)
    # For n < features, ||Y^T X||_F^2 = <K_X, K_Y> with the n x n Gram matrices; use the smaller form.
    if a.shape[0] < a.shape[1] + b.shape[1]:
        ka, kb = a @ a.T, b @ b.T
        cross, na, nb = (ka * kb).sum(), ka.norm(), kb.norm()
    else:
        cross, na, nb = (b.T @ a).pow(2).sum(), (a.T @ a).norm(), (b.T @ b).norm()
    denom = float(na * nb)
    return float(cross) / denom if denom > 0 else float("nan")
