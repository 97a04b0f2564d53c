"""Where each real dataset comes from: official URLs, mirrors, checksums, sizes and on-disk layout.

This table is what ``chillfl data download NAME`` reads; the loaders in
:mod:`chillfl.data.loaders` read the folders it produces (``Source.folder``
under ``data_dir``).

Checksums are the publishers' own where they give one, otherwise the values
that torchvision (and other widely used loaders) pin and that match the
publishers' files byte for byte; ``docs/datasets.md`` names where each value
was checked. A file whose checksum could not be verified has ``md5 = sha256 =
None``: it is downloaded, its sha256 is printed, and a warning says that it
was not verified. Sizes are in bytes; ``None`` where no verified value exists
(they only feed the progress bar and the docs, never a check).

Checked against (2026-12): torchvision's pinned md5s and sizes (CIFAR-10/100, SVHN, MNIST, Fashion-MNIST, EMNIST, Caltech-256) and cs231n's Tiny-ImageNet md5.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import PurePath
from typing import Literal

Unpack = Literal["none", "tar", "zip"]


@dataclass(frozen=True)
class RemoteFile:
    """One file to fetch: tried at each URL in turn, checked against ``md5``/``sha256``."""

    name: str
    urls: tuple[str, ...]
    md5: str | None = None
    sha256: str | None = None
    size: int | None = None
    unpack: Unpack = "none"
    nested: tuple[str, ...] = ()
    """Archives inside this one to unpack too (UCI's zip wraps ``UCI HAR Dataset.zip``)."""


@dataclass(frozen=True)
class Source:
    """A downloadable dataset: its files and the folder (under ``data_dir``) they make."""

    name: str
    folder: str
    files: tuple[RemoteFile, ...]
    homepage: str
    note: str = ""


SEE_DOCS = "see docs/datasets.md"
"""What a listing says of a dataset it has no words of its own for."""

DATA_DIR = "DATA_DIR"
"""The placeholder for the data folder in what chillfl says of a dataset it does not download (shell-safe as it is)."""


@dataclass(frozen=True)
class ManualSource:
    """A dataset with no direct download: ``instructions`` say how to build its files."""

    name: str
    folder: str
    homepage: str
    instructions: str
    """Said with :data:`DATA_DIR` for the folder: :meth:`for_dir` names the user's."""
    listed: str = SEE_DOCS
    """The instructions in a few words, for ``chillfl list experiments``' data column."""

    def for_dir(self, data_dir: str | PurePath) -> str:
        """The instructions for ``data_dir``: in each `command` of them one shell word, quoted where a shell would split
        it (``--data-dir "/tmp/my data"`` was printed bare, and the pasted command wrote to ``/tmp/my``), and ``./-x`` for a
        folder ``-x`` (a command line reads ``-x`` as a flag); in prose as is."""
        folder = str(data_dir)
        word = f"./{folder}" if folder.startswith("-") else folder  # in a command, not a flag (as shell_path)
        spans = self.instructions.split("`")
        return "`".join(shlex.join(w.replace(DATA_DIR, word) for w in shlex.split(span)) if i % 2 else span.replace(DATA_DIR, folder)
                        for i, span in enumerate(spans))


def _at(bases: tuple[str, ...], name: str) -> tuple[str, ...]:
    return tuple(base + name for base in bases)


_CIFAR = "https://www.cs.toronto.edu/~kriz/"
_SVHN = "http://ufldl.stanford.edu/housenumbers/"
_MNIST = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/")
_FASHION = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/", "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/")
_IDX = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
_MNIST_MD5 = ("f68b3c2dcbeaaa9fbdd348bbdeb94873", "d53e105ee54ea40749a09fcbcd1e9432", "9fb629c4189551a2d022fa330f9573f3", "ec29112dd5afa0611ce80d1b7f02629c")
_MNIST_SIZE = (9912422, 28881, 1648877, 4542)
_FASHION_MD5 = ("8d4fb7e6c68d591d4c3dfef9ec88bf0d", "25c81989df183df01b3e8a0aad5dffbe", "bef4ecab320f06d8554ea6380940ec79", "bb300cfdad3c16e7a12a480ee83cd310")
_FASHION_SIZE = (26421880, 29515, 4422102, 5148)

SOURCES: dict[str, Source] = {
    "cifar10": Source(
        "cifar10",
        "cifar-10-batches-py",
        (RemoteFile("cifar-10-python.tar.gz", (_CIFAR + "cifar-10-python.tar.gz",), md5="c58f30108f718f92721af3b95e74349a", size=170498071, unpack="tar"),),
        "https://www.cs.toronto.edu/~kriz/cifar.html",
    ),
    "cifar100": Source(
        "cifar100",
        "cifar-100-python",
        (RemoteFile("cifar-100-python.tar.gz", (_CIFAR + "cifar-100-python.tar.gz",), md5="eb9058c3a382ffc7106e4002c42a8d85", size=169001437, unpack="tar"),),
        "https://www.cs.toronto.edu/~kriz/cifar.html",
    ),
    "svhn": Source(
        "svhn",
        "svhn",
        (
            RemoteFile("train_32x32.mat", (_SVHN + "train_32x32.mat",), md5="e26dedcc434d2e4c54c9b2d4a06d8373", size=182040794),
            RemoteFile("test_32x32.mat", (_SVHN + "test_32x32.mat",), md5="eb5a983be6a315427106f1b164d9cef3", size=64275384),
        ),
        "http://ufldl.stanford.edu/housenumbers/",
    ),
    "mnist": Source(
        "mnist",
        "mnist",
        tuple(RemoteFile(f, _at(_MNIST, f), md5=m, size=s) for f, m, s in zip(_IDX, _MNIST_MD5, _MNIST_SIZE)),
        "http://yann.lecun.com/exdb/mnist/",
        "the first URL is the mirror torchvision uses (LeCun's site often refuses downloads)",
    ),
    "fashion_mnist": Source(
        "fashion_mnist",
        "fashion_mnist",
        tuple(RemoteFile(f, _at(_FASHION, f), md5=m, size=s) for f, m, s in zip(_IDX, _FASHION_MD5, _FASHION_SIZE)),
        "https://github.com/zalandoresearch/fashion-mnist",
    ),
    "emnist": Source(
        "emnist",
        "emnist",
        (RemoteFile("gzip.zip", ("https://biometrics.nist.gov/cs_links/EMNIST/gzip.zip",), md5="58c8d27c78d21e728a6bc7b3cc06412e", unpack="zip"),),
        "https://www.nist.gov/itl/products-and-services/emnist-dataset",
        "all six EMNIST splits as gzipped idx files (about 560 MB)",
    ),
    "uci_har": Source(
        "uci_har",
        "UCI HAR Dataset",
        (
            RemoteFile(
                "human+activity+recognition+using+smartphones.zip",
                ("https://archive.ics.uci.edu/static/public/240/human+activity+recognition+using+smartphones.zip",),
                unpack="zip",
                nested=("UCI HAR Dataset.zip",),
            ),
        ),
        "https://archive.ics.uci.edu/dataset/240/human+activity+recognition+using+smartphones",
        "UCI publishes no checksum: the sha256 of what was fetched is printed, unverified",
    ),
    "tiny_imagenet": Source(
        "tiny_imagenet",
        "tiny-imagenet-200",
        (RemoteFile("tiny-imagenet-200.zip", ("http://cs231n.stanford.edu/tiny-imagenet-200.zip",), md5="90528d7ca1a48142e341f4ef8d21d0de", size=248100043, unpack="zip"),),
        "http://cs231n.stanford.edu/",
    ),
    "caltech256": Source(
        "caltech256",
        "256_ObjectCategories",
        (
            RemoteFile(
                "256_ObjectCategories.tar",
                ("https://data.caltech.edu/records/nyy15-4j048/files/256_ObjectCategories.tar?download=1",),
                md5="67b4f42ca05d46448c6bb8ecd2220f6d",
                unpack="tar",
            ),
        ),
        "https://data.caltech.edu/records/nyy15-4j048",
        "about 1.2 GB; images are decoded with Pillow (pip install 'chillfl[images]')",
    ),
}

@dataclass(frozen=True)
class HubSource:
    """A dataset read from its Hugging Face hub copy: huggingface_hub's ``hf download`` fetches it, not chillfl, into
    ``data_dir/<repo>``, where its loader's default ``path`` finds it offline (``chillfl.data.leaf_hub``)."""

    name: str
    repo: str
    """The hub dataset (``owner/name``), also the folder under ``data_dir``."""

    def command(self, data_dir: str = "data") -> str:
        """The one command that puts it under ``data_dir``."""
        return hub_download_command(self.repo, data_dir)


def shell_path(path: str | PurePath) -> str:
    """``path`` as one shell word that no command line reads as a flag: quoted (a space split it) and, when it starts
    with ``-`` (``--data-dir -x`` is refused by argparse as a missing value), written ``./-x``, the same folder."""
    text = str(path)
    return shlex.quote(f"./{text}" if text.startswith("-") else text)


def hub_download_command(repo: str, data_dir: str | PurePath = "data") -> str:
    """huggingface_hub's command that puts hub dataset ``repo`` under ``data_dir/<repo>``, where a loader's ``path = repo``
    finds it offline: one writer of it, for the listing, the hints and the instructions."""
    return f"hf download {repo} --repo-type dataset --local-dir {shell_path(PurePath(data_dir) / repo)}"


HUB: dict[str, HubSource] = {
    "flwr_femnist": HubSource("flwr_femnist", "flwrlabs/femnist"),
    "flwr_shakespeare": HubSource("flwr_shakespeare", "flwrlabs/shakespeare"),
}
"""Datasets ``chillfl data download`` does not fetch but lists, with the command that does."""


MANUAL: dict[str, ManualSource] = {
    "femnist": ManualSource(
        "femnist",
        "femnist",
        "https://leaf.cmu.edu/",
        "FEMNIST needs no build step: use dataset.name = 'flwr_femnist', which reads the Flower Datasets parquet files; "
        f"fetch them once with `{hub_download_command('flwrlabs/femnist', DATA_DIR)}` "
        "(or run online with pip install 'chillfl[hf]': they load from the hub). 'femnist' reads LEAF's JSON "
        "(DATA_DIR/femnist/all_data/ or train/ and test/) if you already have it, or from CHILLFL_DATA_MIRROR "
        "serving femnist/all_data.zip with a --checksums manifest.",
        f"dataset.name = 'flwr_femnist' (`{hub_download_command('flwrlabs/femnist')}`), or LEAF's JSON under data/femnist "
        "(docs/datasets.md)",
    ),
}

MIRRORED_ONLY: dict[str, Source] = {
    "femnist": Source(
        "femnist",
        "femnist",
        (RemoteFile("all_data.zip", (), unpack="zip"),),
        "https://leaf.cmu.edu/",
        "a zip of LEAF's all_data/*.json, served only by a mirror (CHILLFL_DATA_MIRROR)",
    ),
}
"""Sources that exist only on a mirror: their layout is fixed here, their URL and checksum come from the user."""




def downloadable() -> list[str]:
    return sorted({*SOURCES, *MANUAL})


def fetched_from(name: str) -> str:
    """Where ``chillfl data download NAME`` fetches the files from: each folder URL of its files, in the order tried
    (``"A, then B"``). The loaders' hints name it, so that they and the downloader tell one story."""
    folders = dict.fromkeys(url.rsplit("/", 1)[0] + "/" for f in SOURCES[name].files for url in f.urls)
    return ", then ".join(folders)


def download_command(name: str, data_dir: str = "data") -> str:
    """The one command that fetches dataset ``name`` into ``data_dir`` (quoted where a shell would split it)."""
    return f"chillfl data download {name} --data-dir {shell_path(data_dir)}"

