"""An anti-collapse term on an encoder's features: VICReg's variance and covariance terms.

PART's window features concentrate in a few effective dimensions (``docs/part.md``); VICReg
(Bardes et al. 2022) keeps every feature dimension alive with two terms on a batch of features
``z: [M, D]``:

* **variance**: ``mean_d relu(1 - sqrt(Var(z_d) + eps))``, a hinge on every dimension's standard
  deviation (target 1, ``eps = 1e-4``);
* **covariance**: ``sum_{d != e} Cov(z)_{de}^2 / D``, the squared off-diagonal covariances,
  which decorrelate the dimensions.

``PretrainConfig.variance_weight`` and ``covariance_weight`` add them to PART's loss (0: off).
"""

from __future__ import annotations

import torch
from torch import Tensor

from partnd._validation import check

__all__ = ["VARIANCE_EPS", "variance_covariance_terms"]

#: Added to every variance before the square root (VICReg's).
VARIANCE_EPS = 1e-4


def variance_covariance_terms(features: Tensor) -> tuple[Tensor, Tensor]:
    """VICReg's variance and covariance terms of a batch of features.

    Args:
        features: [M, D] features (M >= 2), any float dtype (computed in float32).

    Returns:
        ``(variance, covariance)`` scalar float32 tensors (see the module docstring); variances
        and covariances are unbiased (divided by ``M - 1``).
    """
    check(
        features.dim() == 2 and features.shape[0] >= 2,
        "features",
        "a tensor [M, D] with M >= 2",
        features,
    )
    z = features.float()
    z = z - z.mean(dim=0)
    count, dim = z.shape
    std = torch.sqrt(z.var(dim=0) + VARIANCE_EPS)
    variance = torch.relu(1.0 - std).mean()
    covariance = z.T @ z / (count - 1)
    off_diagonal = covariance - torch.diag(torch.diagonal(covariance))
    return variance, off_diagonal.square().sum() / dim
