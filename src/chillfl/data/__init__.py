"""Datasets, partitioners and federated splits.

``load_dataset`` gives an in-memory :class:`ArrayDataset`; ``partition`` splits
its train labels over clients; ``build_federated_data`` combines both with
per-client evaluation splits, feature noise and a public pool.
"""

from chillfl.data.datasets import DATASETS, ArrayDataset, dataset_names, load_dataset
from chillfl.data.federated import FederatedData, build_federated_data
from chillfl.data.partition import PARTITIONERS, Partition, partition, partitioner_names
from chillfl.data.show import describe, plot_class_heatmap

__all__ = [
    "DATASETS",
    "PARTITIONERS",
    "ArrayDataset",
    "FederatedData",
    "Partition",
    "build_federated_data",
    "dataset_names",
    "describe",
    "load_dataset",
    "partition",
    "partitioner_names",
    "plot_class_heatmap",
]
