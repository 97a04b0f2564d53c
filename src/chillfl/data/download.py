"""``chillfl data download``: fetch a real dataset, check it, unpack it where the loaders look.

Why it is built this way
------------------------
* Resumable: a file is written to ``data_dir/.downloads/NAME.part``; a rerun
  (or a retry after a dropped connection) asks for the rest with an HTTP
  ``Range`` header. A server that ignores ``Range`` (answers 200) is read from
  the start again, over the old part.
* Checked: every file's md5/sha256 (see :mod:`chillfl.data.sources`) is
  compared before anything is unpacked; a mismatch removes the file.
* Read where installed: what an archive unpacked is moved into place only
  where the loader's own presence test (:func:`chillfl.data.loaders.find_root`,
  which the listing uses too) finds it; a repacked archive's one top folder of
  another name is taken as the dataset's folder, anything else is refused.
* Atomic: archives are unpacked into a temporary folder beside the target,
  moved into place with one ``rename``, and the marker ``.chillfl-download``
  is written last, listing every file installed. A folder without the marker is never taken as complete, and
  a folder of ours that lost a listed file (deleted by hand) is fetched again whole, without ``--force``.
* Safe: tar and zip members that would land outside the folder (absolute
  paths, ``..``, links, devices) are refused.
* Overridable: ``CHILLFL_DATA_MIRROR`` (or ``mirror=``) replaces every URL by
  ``MIRROR/<dataset>/<file>``; ``checksums=`` (a ``sha256sum``-style manifest
  of ``<hex>  <dataset>/<file>`` lines, md5 or sha256 by length) replaces the
  table's checksums, for a mirror that repacks files and for tests.

Every failure is a :class:`DownloadError`, one line: exit status 1 in the CLI (the network, the disk, a file that
fails its check: the request was right, the run could not finish it), or 2 for a :class:`DownloadRequestError`
(an unknown name, a mirror that is no URL, a malformed manifest: bad input) and an :class:`ArchiveError` (an archive
that passed the check it was given but does not unpack: bad input, the bytes the mirror or manifest vouched for, which
a rerun cannot mend). Each class says its own status (``exit_status``). A failed download leaves nothing under a
final name: a file is a ``.part`` until it passes its check (kept, so that a rerun resumes), and the folders it made
for a file that never arrived are removed. An archive that passes its check but is refused or unreadable when unpacked
(an :class:`ArchiveError`) is deleted with the folders it emptied: kept, every rerun took it again and failed the same way.

Checked against (2026-12): the checksums of chillfl.data.sources; tar members through tarfile's 'data' filter, zip members outside the folder refused.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import logging
import lzma
import os
import shutil
import socket
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; concurrent downloads of one dataset are not guarded there
    fcntl = None  # type: ignore[assignment]

from chillfl.data.loaders import IDX_FILES, IDX_PUBLISHED, IDX_SETS, find_root, idx_count, idx_file, local_source, named_idx_set, read_where, table_files
from chillfl.errors import ConfigError
from chillfl.data.sources import DATA_DIR, HUB, MANUAL, HubSource, MIRRORED_ONLY, SOURCES, RemoteFile, Source, downloadable
from chillfl.paths import make_temp_dir
from chillfl.progress import NoBar, Progress, as_mode

log = logging.getLogger(__name__)

MIRROR_ENV = "CHILLFL_DATA_MIRROR"
MIRROR_SCHEMES = ("http", "https", "ftp", "file")
"""What urllib can fetch a mirror's files from."""
MARKER = ".chillfl-download"
DOWNLOADS = ".downloads"
CHUNK = 1 << 20
RETRIES = 3
TIMEOUT_S = 60.0
USER_AGENT = "chillfl-data-download"


class DownloadError(Exception):
    """A download that cannot finish (no network, a full disk, a file that fails its check); the message is one line for the user."""

    exit_status: ClassVar[int] = 1
    """The CLI's exit status: 1, the request was right but could not be finished (a rerun may succeed)."""


class ArchiveError(DownloadError):
    """An archive that passed its check but cannot be installed: unreadable, or a member that would land outside its
    folder. :func:`download_dataset` removes what it fetched: kept, a rerun (``--force`` too) took the cached file,
    which passes its check again, and failed the same way. Exit status 2: the bytes were vouched for (by the table, a
    mirror's ``--checksums``) and are not an archive we can install, which no rerun of the same input mends: bad input."""

    exit_status: ClassVar[int] = 2


class DownloadRequestError(DownloadError):
    """A download asked for wrongly (an unknown or hand-fetched dataset, a mirror that is no URL, a malformed checksum
    manifest, a folder not ours without ``--force``): bad input, which the CLI answers with exit status 2, not 1."""

    exit_status: ClassVar[int] = 2


# ---------------------------------------------------------------- sources and overrides


def read_checksums(path: str | Path) -> dict[str, str]:
    """``<hex>  <dataset>/<file>`` lines (``sha256sum`` / ``md5sum`` output) -> {"dataset/file": hex}."""
    out: dict[str, str] = {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DownloadRequestError(f"cannot read checksum manifest {path}: {exc.strerror or exc}") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split(maxsplit=1)
        digest = parts[0].lower()
        if len(parts) != 2 or len(digest) not in (32, 64) or any(c not in "0123456789abcdef" for c in digest):
            raise DownloadRequestError(f"{path}:{number}: expected '<md5 or sha256 hex>  <dataset>/<file>'")
        out[parts[1].strip().lstrip("*")] = digest
    return out


def resolve_source(name: str, mirror: str | None = None, checksums: Mapping[str, str] | None = None, data_dir: str = DATA_DIR) -> Source:
    """The source of ``name`` with the mirror's URLs and the manifest's checksums applied. ``data_dir``: where a dataset
    chillfl does not download goes, in the command its refusal gives (``--data-dir``'s, so the line can be pasted)."""
    given = "--mirror" if mirror is not None else MIRROR_ENV
    mirror = mirror if mirror is not None else os.environ.get(MIRROR_ENV) or None
    if mirror and urllib.parse.urlsplit(mirror).scheme.lower() not in MIRROR_SCHEMES:  # else urllib's ValueError, a traceback, after .downloads/ is made
        raise DownloadRequestError(f"{given}: {mirror!r} is not a URL; give one starting with {', '.join(s + '://' for s in MIRROR_SCHEMES)}")
    if name in SOURCES:
        source = SOURCES[name]
    elif name in MIRRORED_ONLY and mirror:
        source = MIRRORED_ONLY[name]
    elif name in MANUAL:
        raise DownloadRequestError(MANUAL[name].for_dir(data_dir))
    elif name in HUB:
        raise DownloadRequestError(f"{name} comes from the Hugging Face hub, which chillfl does not download from: "
                                   f"`{HUB[name].command(data_dir)}` (huggingface_hub's CLI) puts it where dataset.path finds it, "
                                   "or run online with pip install 'chillfl[hf]'")
    else:
        raise DownloadRequestError(f"unknown dataset {name!r}; downloadable: {', '.join(downloadable())}")
    files = []
    for f in source.files:
        if mirror:
            f = replace(f, urls=(f"{mirror.rstrip('/')}/{name}/{f.name}",))
        digest = (checksums or {}).get(f"{name}/{f.name}")
        if digest is not None:
            f = replace(f, md5=digest if len(digest) == 32 else None, sha256=digest if len(digest) == 64 else None)
        files.append(f)
    return replace(source, files=tuple(files))


# ---------------------------------------------------------------- fetching one file


def _disk_full(path: Path, exc: OSError) -> DownloadError:
    return DownloadError(f"disk full while writing {path} ({exc.strerror}); free space and rerun (a partial download is kept and resumes)")


def _open(url: str, offset: int, timeout: float) -> http.client.HTTPResponse:
    headers = {"User-Agent": USER_AGENT}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    response: http.client.HTTPResponse = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    return response


def _fetch_once(url: str, part: Path, progress: Progress, timeout: float) -> None:
    """Fetch ``url`` into ``part``, continuing from its current size when the server honours Range."""
    offset = part.stat().st_size if part.exists() else 0
    try:
        response = _open(url, offset, timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:  # our part is already >= the file: start over
            part.unlink()
            response = _open(url, 0, timeout)
            offset = 0
        else:
            raise
    with response:
        if offset and response.status != 206:
            offset = 0  # Range ignored: the body is the whole file
        if offset and not response.headers.get("Content-Range", "").startswith(f"bytes {offset}-"):
            part.unlink()  # a 206 for some other range: start over on the retry
            raise http.client.IncompleteRead(b"")
        length = response.headers.get("Content-Length")
        total = offset + int(length) if length is not None and length.isdigit() else None
        name = part.name.removesuffix(".part")
        if as_mode(progress) == "lines":  # the size the server gives (a mirror's repacked file may differ from the official one)
            log.info("fetching %s (%s) from %s%s", name, _size(total), url, f", resuming at {_size(offset)}" if offset else "")
        bar = _bar(name, total, offset, progress)
        try:
            out = open(part, "ab" if offset else "wb")
        except OSError as exc:
            bar.close()
            raise DownloadError(f"cannot write {part}: {exc.strerror or exc}") from exc
        try:
            with out:
                while True:
                    chunk = response.read1(CHUNK)  # what has arrived: a stall keeps the bytes before it
                    if not chunk:
                        break
                    out.write(chunk)
                    bar.update(len(chunk))
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise _disk_full(part, exc) from exc
            raise
        finally:
            bar.close()
        if total is not None and part.stat().st_size < total:
            raise http.client.IncompleteRead(b"", total - part.stat().st_size)


def _bar(desc: str, total: int | None, initial: int, progress: Progress) -> Any:
    """A byte bar for ``progress = "bar"``; else :class:`~chillfl.progress.NoBar` (``tqdm(disable=True)`` still started
    tqdm's monitor thread, which outlived the download)."""
    if as_mode(progress) != "bar":
        return NoBar()
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr, leave=False)


TRANSIENT = (http.client.IncompleteRead, ConnectionResetError, ConnectionAbortedError, socket.timeout, TimeoutError, http.client.RemoteDisconnected)


def _fetch_url(url: str, part: Path, progress: Progress, retries: int, timeout: float, errors: list[str]) -> bool:
    """Try ``url`` (resuming after dropped connections); False, with a reason in ``errors``, to try the next URL."""
    for attempt in range(retries + 1):
        try:
            _fetch_once(url, part, progress, timeout)
            return True
        except urllib.error.HTTPError as exc:
            errors.append(f"HTTP {exc.code} {exc.reason} from {url}")
            return False
        except TRANSIENT as exc:
            have = part.stat().st_size if part.exists() else 0
            if attempt < retries:
                log.info("connection to %s dropped at %d bytes (%s); resuming (%d/%d)", url, have, type(exc).__name__, attempt + 1, retries)
        except urllib.error.URLError as exc:
            errors.append(f"cannot reach {url} ({exc.reason}); check the network, or set {MIRROR_ENV}")
            return False
        except OSError as exc:  # a network error mid-body (reset, TLS): resume like a drop
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise _disk_full(part, exc) from exc
            have = part.stat().st_size if part.exists() else 0
            log.info("connection to %s failed at %d bytes (%s); resuming", url, have, exc)
    have = part.stat().st_size if part.exists() else 0
    errors.append(f"connection to {url} dropped or stalled {retries + 1} times ({have} bytes kept in {part}; rerun to resume)")
    return False


def fetch(file: RemoteFile, folder: Path, *, progress: Progress = False, retries: int = RETRIES, timeout: float = TIMEOUT_S) -> Path:
    """Download ``file`` into ``folder`` (resuming a ``.part``), check it, return its path. ``progress``: True or "bar", a byte
    bar; "lines" (stderr no terminal), a line as each file starts and as it is checked (a bar would pile up in a log)."""
    lines = as_mode(progress) == "lines"
    target = folder / file.name
    if target.is_file() and _verified(target, file):
        return target
    if not file.urls:
        raise DownloadRequestError(f"{file.name} has no URL: set {MIRROR_ENV} to a mirror that serves it")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DownloadError(f"cannot create {folder}: {exc.strerror or exc}") from exc
    part = folder / (file.name + ".part")
    if file.size is not None and part.is_file() and part.stat().st_size == file.size and _verified(part, file):
        part.replace(target)  # complete before an interruption, not yet renamed
        return target
    errors: list[str] = []
    for url in file.urls:
        if not _fetch_url(url, part, progress, retries, timeout, errors):
            continue
        if not _check(part, file):
            part.unlink()
            raise DownloadError(f"checksum mismatch for {file.name} from {url}: the file was removed; rerun to fetch it again")
        part.replace(target)
        if lines:
            log.info("%s: %s", file.name, "checksum verified" if file.sha256 is not None or file.md5 is not None else "fetched (no checksum to verify)")
        return target
    raise DownloadError("; ".join(errors))


def _size(n: int | None) -> str:
    """``170498071`` -> ``162.6 MiB``; None: the size is not known before the server says it."""
    if n is None:
        return "size unknown"
    size = float(n)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def file_digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _check(path: Path, file: RemoteFile) -> bool:
    if file.sha256 is not None:
        return file_digest(path, "sha256") == file.sha256
    if file.md5 is not None:
        return file_digest(path, "md5") == file.md5
    log.warning("%s has no published checksum; not verified (sha256 %s)", file.name, file_digest(path, "sha256"))
    return True


def _verified(path: Path, file: RemoteFile) -> bool:
    return (file.sha256 is not None or file.md5 is not None) and _check(path, file)


# ---------------------------------------------------------------- unpacking


def _inside(name: str) -> bool:
    p = PurePosixPath(name.replace("\\", "/"))
    return bool(name) and not p.is_absolute() and ".." not in p.parts and not (p.parts and p.parts[0].endswith(":"))


def _one_line(exc: BaseException) -> str:
    """``exc`` on one line: tarfile lists each compression it tried on a line of its own."""
    return " ".join(str(exc).split())


UNREADABLE_TAR = (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError)
"""What a tar's bytes raise: tarfile's own errors, and a damaged compressed stream mid-member (deflate/gzip, xz); bz2's
and gzip's own checks raise OSErrors: :func:`_archive_fault`."""
UNREADABLE_ZIP = (zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError, RuntimeError, NotImplementedError)
"""What a zip's bytes raise: zipfile's own errors, a damaged deflate/lzma stream, an encrypted member (RuntimeError:
a password is needed), an unknown compression method (NotImplementedError)."""

ARCHIVE_ERRNOS = (errno.ENOTDIR, errno.EEXIST, errno.EISDIR)
"""A file and a folder of one name in one archive: the archive's fault, not the disk's."""


def _archive_fault(exc: OSError) -> bool:
    """Whether an OSError met while unpacking comes from the archive's bytes (a corrupt gzip or bz2 stream has no errno;
    a file and a folder of one name), so that the archive is removed; the disk's errors (full, read-only) keep it."""
    return exc.errno is None or exc.errno in ARCHIVE_ERRNOS


def unpack_tar(archive: Path, dest: Path) -> None:
    """Extract a (possibly compressed) tar into ``dest``, refusing members that escape it, links and devices."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            for m in members:
                if not _inside(m.name) or not (m.isfile() or m.isdir()):
                    raise ArchiveError(f"refusing {archive.name}: member {m.name!r} is {'a link or device' if _inside(m.name) else 'outside the target folder'}")
            if hasattr(tarfile, "data_filter"):  # Python 3.10.12+, 3.11.4+: the standard library's own check, on top of ours
                tar.extractall(dest, members=members, filter="data")
            else:  # older patch releases, which pyproject allows, have no filter argument (a TypeError): the members were
                for m in members:  # checked above; what "data" does besides, by hand: no setuid, no group/other write, no owner
                    m.mode = (m.mode & 0o755) | (0o600 if m.isfile() else 0o700)
                    if m.isfile() and not m.mode & 0o100:  # a file its owner cannot run: nobody can
                        m.mode &= ~0o111
                    m.uid, m.gid, m.uname, m.gname = os.getuid(), os.getgid(), "", ""
                tar.extractall(dest, members=members)
    except UNREADABLE_TAR as exc:
        raise ArchiveError(f"{archive.name} is not a readable tar archive ({_one_line(exc)})") from exc
    except OSError as exc:
        if not _archive_fault(exc):
            raise
        raise ArchiveError(f"{archive.name} is not a readable tar archive ({_one_line(exc)})") from exc


def unpack_zip(archive: Path, dest: Path) -> None:
    """Extract a zip into ``dest``, refusing members that would land outside it."""
    try:
        with zipfile.ZipFile(archive) as z:
            infos = z.infolist()
            for info in infos:
                if not _inside(info.filename):
                    raise ArchiveError(f"refusing {archive.name}: member {info.filename!r} is outside the target folder")
            root = dest.resolve()
            for info in infos:
                out = (dest / info.filename).resolve()
                if root not in out.parents and out != root:
                    raise ArchiveError(f"refusing {archive.name}: member {info.filename!r} is outside the target folder")
                z.extract(info, dest)
    except UNREADABLE_ZIP as exc:
        raise ArchiveError(f"{archive.name} is not a readable zip archive ({_one_line(exc)})") from exc
    except OSError as exc:
        if not _archive_fault(exc):
            raise
        raise ArchiveError(f"{archive.name} is not a readable zip archive ({_one_line(exc)})") from exc


def _unpack(path: Path, file: RemoteFile, dest: Path) -> None:
    if file.unpack == "tar":
        unpack_tar(path, dest)
    elif file.unpack == "zip":
        unpack_zip(path, dest)
    else:
        shutil.copyfile(path, dest / file.name)
    for inner in file.nested:
        nested = dest / inner
        if nested.is_file():
            unpack_zip(nested, dest)
            nested.unlink()


def _staged(source: Source, fetched: list[Path], unpacked: Path, stage: Path) -> Path:
    """``stage/<folder>``, holding what was unpacked laid out where the loader reads it (its own presence test,
    :func:`find_root`, on ``stage`` as the data folder): the archive's ``<folder>/`` or its whole content (as the
    publishers pack them), else the one top folder of a repacked archive (a mirror's ``cifar10-repacked/``). Else an
    :class:`ArchiveError` naming what the archive holds: installed anyway, the folder was marked downloaded while the
    loader said "not found; fetch it", and the download fetched nothing."""
    stage.mkdir()
    final = stage / source.folder
    tops = sorted(unpacked.iterdir())
    candidates = [unpacked / source.folder] if (unpacked / source.folder).is_dir() else []
    candidates.append(unpacked)
    if len(tops) == 1 and tops[0].is_dir() and tops[0] not in candidates:
        candidates.append(tops[0])
    for candidate in candidates:
        candidate.replace(final)
        found = find_root(stage, source.name)
        if found is not None and (found == final or final in found.parents):
            return final
        final.replace(candidate)
    held = ", ".join(p.name + ("/" if p.is_dir() else "") for p in tops[:4]) + (f" and {len(tops) - 4} more" if len(tops) > 4 else "")
    raise ArchiveError(f"{', '.join(p.name for p in fetched)} unpacked to {held or 'nothing'}, with no {read_where(source.name)} "
                       f"where the {source.name} loader reads it (nothing was installed)")


# ---------------------------------------------------------------- one dataset


def _reads_ours(data_dir: Path, source: Source) -> bool:
    """Whether the loader of ``source`` reads its files from the folder the downloader installs (``data_dir/<folder>``
    or a folder inside it: EMNIST's ``emnist/gzip``), by the loaders' own presence test (:func:`find_root`)."""
    target = data_dir / source.folder
    found = find_root(data_dir, source.name)
    return found is not None and (found == target or target in found.parents)


def is_complete(data_dir: Path, source: Source) -> bool:
    """Installed by us (the marker), no file it lists gone, and where the loader reads it: a folder with the marker but
    its files one level down (a repacked archive unpacked before that was checked) was "already downloaded", while
    the loader said "not found; fetch it", which fetched nothing."""
    return (data_dir / source.folder / MARKER).is_file() and not missing_files(data_dir, source) and _reads_ours(data_dir, source)


def missing_files(data_dir: Path, source: Source) -> list[str]:
    """The files the marker lists that are gone from the folder (a file deleted by hand after the download).

    The marker lists every file it installed (after the dataset's name): without that list a deleted file
    left the folder "already downloaded" and only ``--force`` brought it back. A marker written before the
    list existed names no file, so nothing is known to be missing there."""
    folder = data_dir / source.folder
    try:
        listed = (folder / MARKER).read_text(encoding="utf-8").splitlines()[1:]
    except (OSError, UnicodeDecodeError):
        return []
    return [f for f in listed if f and not (folder / f).is_file()]


def _marker_text(source: Source, target: Path) -> str:
    """The marker: the dataset's name, then the path of every file installed under ``target``, one a line."""
    files = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file() and p.name != MARKER)
    return "".join(f"{line}\n" for line in [source.name, *files] if "\n" not in line)


def dataset_status(data_dir: str | Path) -> list[tuple[str, str, str, str]]:
    """(name, folder, download size, state) of every dataset that lives in ``data_dir``; state: downloaded | incomplete
    (N files missing, or no marker file where the loader reads it) | present (not by us) | missing (with why, when its
    folder is there, or idx files directly in ``data_dir`` are the other set's or nobody's) | ambiguous (such idx files
    of the published sizes: the loader tells them apart by their pixels) | manual (LEAF) | present (LEAF's files); a
    hub dataset (fetched by ``hf download``, not here): present, or ``missing`` (why, when its folder is there) and the
    command. Present or not is the loaders' own test (:func:`find_root`, :func:`table_files`), and the folder shown is
    the one the loader reads (torchvision's ``MNIST/raw/``, say): the listing had a rule of its own (the folder exists).
    docs/datasets.md lists these states."""
    root = Path(data_dir)
    rows = []
    for name in sorted({*downloadable(), *HUB}):
        if name in HUB:
            hub = HUB[name]
            rows.append((name, hub.repo + "/", "hub", _hub_state(root, hub)))
            continue
        source = SOURCES.get(name) or MIRRORED_ONLY[name]
        sizes = [f.size for f in source.files]
        size = "-" if name in MANUAL else f"{sum(s for s in sizes if s) / 1e6:.0f} MB" if all(sizes) else "see docs"
        state, folder = _state(root, source)
        rows.append((name, folder, size, state))
    return rows


def _hub_state(root: Path, hub: HubSource) -> str:
    """The state of a hub dataset for ``root``, by its loader's own tests: the folder its default ``path`` finds
    (:func:`local_source`: ``root/<repo>``, else ``./<repo>`` in the current folder) and the files it reads there
    (:func:`table_files`): the listing said "present" of any folder of that name, empty or not. An unreadable folder is
    its row's state, not the end of the listing."""
    where = local_source(hub.repo, root)
    if where is None:
        return f"missing: {hub.command(str(root))}"
    shown = f"{hub.repo}/" if where == root / hub.repo else f"./{hub.repo}/ (the current folder)"
    try:
        files = table_files(where)
    except ConfigError as exc:
        return f"missing (cannot read {shown}: {exc.message}): {hub.command(str(root))}"
    return "present" if files else f"missing (no .parquet or .csv files in {shown}): {hub.command(str(root))}"


def _flat_idx_state(root: Path, source: Source) -> str | None:
    """The state of MNIST or Fashion-MNIST whose loader found idx files directly in ``root`` (their four file names are
    the same), told as the loader tells it (:func:`chillfl.data.loaders._load_idx_set`): the folder's name, else the
    published sizes (read from the files' headers) and then the pixels, which the listing does not read (47 MB): such a
    folder is "ambiguous", never "present" for both. None: not one of the two sets."""
    spec = next((s for s in IDX_SETS if s.key == source.name), None)
    if spec is None:
        return None
    named = named_idx_set(root)
    if named is spec:
        return "present (not by us)"
    if named is not None:
        return f"missing (the idx files in ./ are {named.key}'s, by the folder's name)"
    sizes = tuple(idx_count(idx_file(root, f)) for f in (IDX_FILES[0], IDX_FILES[2]))
    if sizes != IDX_PUBLISHED:
        whose = " or ".join(f"{s.key}'s" for s in IDX_SETS)
        return f"missing (cannot tell whether the idx files in ./ are {whose}: move them into {source.folder}/)"
    return f"ambiguous: {' or '.join(s.key for s in IDX_SETS)} (the loader tells the idx files in ./ apart by their pixels; move them into {source.folder}/ to be sure)"


def _state(root: Path, source: Source) -> tuple[str, str]:
    """(state, the folder shown) of one dataset the downloader knows, for :func:`dataset_status`."""
    target = root / source.folder
    found = find_root(root, source.name)
    shown = source.folder + "/" if found is None else (found.relative_to(root).as_posix() + "/" if found != root else "./")
    ours = (target / MARKER).is_file()
    missing = len(missing_files(root, source)) if ours else 0
    if missing:
        return f"incomplete ({missing} file{'s' if missing > 1 else ''} missing)", shown
    if ours and _reads_ours(root, source):
        return "downloaded", shown
    if ours:
        return f"incomplete (no {read_where(source.name)})", shown
    if found is not None:
        flat = _flat_idx_state(root, source) if found == root else None
        return flat or ("present" if source.name in MANUAL else "present (not by us)"), shown
    if source.name in MANUAL:
        return "manual (LEAF)", shown
    if target.exists():  # a folder the loader does not read: the downloader leaves it alone without --force
        return f"missing (no {read_where(source.name)}; --force replaces the {source.folder}/ there)", shown
    return "missing", shown


def download_dataset(
    name: str,
    data_dir: str | Path = "data",
    *,
    mirror: str | None = None,
    checksums: Mapping[str, str] | None = None,
    progress: Progress = False,
    force: bool = False,
    retries: int = RETRIES,
    timeout: float = TIMEOUT_S,
) -> Path:
    """Fetch, check and unpack dataset ``name`` into ``data_dir/<folder>``; returns that folder.

    Already complete (marker present, every file it lists there): nothing is fetched. A folder of ours that
    lost a file is fetched again whole. A folder without the
    marker (files placed by hand, or an old layout) is left alone unless ``force``.
    ``timeout`` bounds each connection and each read, in seconds; a dropped or
    stalled connection is resumed up to ``retries`` times.
    """
    source = resolve_source(name, mirror, checksums, str(data_dir))
    root = Path(data_dir)
    made = [p for p in (root, root / DOWNLOADS, root / DOWNLOADS / name) if not p.exists()]
    try:
        with _dataset_lock(root, name):  # a second process waits, then finds the dataset installed
            return _download_locked(name, source, root, progress=progress, force=force, retries=retries, timeout=timeout)
    finally:  # the lock file kept them: remove what this download made and left empty
        _remove_if_empty([p for p in (root / DOWNLOADS / name, root / DOWNLOADS, *([root] if root in made else [])) if p.exists()])


@contextmanager
def _dataset_lock(root: Path, name: str) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``data_dir/.downloads/NAME.lock`` for one dataset's whole fetch and install.

    Why: two jobs downloading one dataset into one ``data_dir`` appended to each other's ``.part``, and one removed
    the folder the other had just installed. The lock file is removed before the lock is released; a waiter that then
    holds a removed file locks the new one instead (checked by inode)."""
    lock = root / DOWNLOADS / f"{name}.lock"
    told = False
    while True:
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        except FileNotFoundError:  # another download removed the empty .downloads just now
            continue
        except OSError as exc:
            raise DownloadError(f"cannot create {lock}: {exc.strerror or exc}") from exc
        try:
            if fcntl is None:
                break
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not told:
                    log.warning("waiting for another download of %s into %s to finish", name, root)
                    told = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # the holder removed this file as it finished: lock the one there now
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)  # still held: a waiter on it sees the inode gone and starts over
        os.close(fd)


def _download_locked(
    name: str, source: Source, root: Path, *, progress: Progress, force: bool, retries: int, timeout: float
) -> Path:
    """:func:`download_dataset` under its lock; checks again whether the dataset is installed (by the download we waited for)."""
    target = root / source.folder
    ours = (target / MARKER).is_file()
    missing = missing_files(root, source) if ours else []
    unread = ours and not missing and not _reads_ours(root, source)
    if ours and not missing and not unread and not force:
        log.info("%s is already in %s", name, target)
        return target
    if target.exists() and not ours and not force:
        raise DownloadRequestError(f"{target} exists but was not completed by `chillfl data download`; remove it or pass --force")
    if missing and not force:  # the archive is gone after unpacking: the whole dataset is fetched and installed again
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        log.warning("%s in %s is incomplete (%s missing): fetching it again", name, target, shown)
    if unread and not force:
        log.warning("%s in %s has no %s where its loader reads it: fetching it again", name, target, read_where(name))
    downloads = root / DOWNLOADS / name
    fetched = [fetch(f, downloads, progress=progress, retries=retries, timeout=timeout) for f in source.files]
    try:
        _install(source, fetched, root, target)
        if as_mode(progress) == "lines":
            log.info("%s unpacked into %s", name, target)
    except ArchiveError as exc:  # the same bytes would fail the same way: a rerun fetches them again instead
        _remove_fetched(fetched, downloads)
        raise ArchiveError(f"{exc}; the download was removed from {downloads}: check the source (mirror, --checksums) and rerun") from exc
    _remove_fetched(fetched, downloads)
    return target


def _remove_fetched(fetched: Iterable[Path], downloads: Path, root: Path | None = None) -> None:
    """Delete the fetched files, then ``data_dir/.downloads/NAME``, ``.downloads`` and ``root`` (the ``data_dir`` this
    download created, if it did) as far as each is left empty."""
    for path in fetched:
        path.unlink(missing_ok=True)
    _remove_if_empty([downloads, downloads.parent, *([root] if root is not None else [])])


def _remove_if_empty(folders: Iterable[Path]) -> None:
    """Remove each of ``folders`` (innermost first) that holds nothing: a ``.part`` with bytes in it is kept, for the rerun."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (a partial download resumes from it), or gone
            return


def _install(source: Source, fetched: list[Path], root: Path, target: Path) -> None:
    """Unpack into a temp folder beside ``target``, check that the loader reads what it holds, rename it into place,
    write the marker last."""
    for stale in root.glob(f".{source.name}.unpacking-*"):  # left by a process killed while unpacking
        shutil.rmtree(stale, ignore_errors=True)
    tmp = make_temp_dir(f".{source.name}.unpacking-", root)  # renamed into place: a plain folder's permissions
    try:
        unpacked = tmp / "unpacked"
        unpacked.mkdir()
        for path, file in zip(fetched, source.files):
            _unpack(path, file, unpacked)
        made = _staged(source, fetched, unpacked, tmp / "staged")
        if target.exists():
            shutil.rmtree(target)
        made.replace(target)
        (target / MARKER).write_text(_marker_text(source, target), encoding="utf-8")
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DownloadError(f"disk full while unpacking {source.name} into {root}; free space and rerun (the checked downloads are kept)") from exc
        raise DownloadError(f"cannot unpack {source.name} into {root}: {exc.strerror or exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
