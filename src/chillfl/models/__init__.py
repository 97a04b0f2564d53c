"""Model registry and the papers' architectures (see :mod:`chillfl.models.registry`)."""

from chillfl.models.registry import (
    MODELS,
    ModelSpec,
    build_model,
    count_parameters,
    model_names,
)

__all__ = ["MODELS", "ModelSpec", "build_model", "count_parameters", "model_names"]
