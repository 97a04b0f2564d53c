"""chillfl: federated learning on non-IID data.

Logit chilling (FLex&Chill), FedChill, PA3Fed and SCARLET, with the baselines
they compare against, composed from orthogonal parts by configuration.
"""

__version__ = "0.1.0"
