"""Aggregation rules (server side of the parameter-sharing protocol)."""

from chillfl.aggregation.base import Aggregator, ClientResult, Downlink, FedAvg, Params, sample_weights, weighted_average

__all__ = ["Aggregator", "ClientResult", "Downlink", "FedAvg", "Params", "sample_weights", "weighted_average"]
