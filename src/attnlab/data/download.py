"""Fetch data files once, atomically, with sha256 verification.

`ensure_file` is the only function that touches the network. A file that is already at its
destination is used as is (checked against its sha256 only with `verify=True`); a missing one is
downloaded to a temporary file next to the destination, verified, then renamed into place, so
an interrupted download never leaves a half-written file behind.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_CHUNK = 1 << 20


class DownloadError(RuntimeError):
    """A missing file could not be downloaded (no network, bad URL, HTTP error)."""


class ChecksumError(ValueError):
    """A file's sha256 differs from the one expected for it."""


@dataclass(frozen=True)
class RemoteFile:
    """A file published upstream: where to get it and the sha256 of exactly those bytes."""

    url: str
    sha256: str


MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{name}"
TINYSHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)

# Multi30K task 1 raw files (gzip, as served upstream) and the uncompressed tinyshakespeare
# corpus. The sha256 values were computed from copies of the upstream files.
KNOWN_FILES: dict[str, RemoteFile] = {
    "multi30k/train.en.gz": RemoteFile(
        MULTI30K_URL.format(name="train.en.gz"),
        "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    ),
    "multi30k/train.de.gz": RemoteFile(
        MULTI30K_URL.format(name="train.de.gz"),
        "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    ),
    "multi30k/val.en.gz": RemoteFile(
        MULTI30K_URL.format(name="val.en.gz"),
        "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    ),
    "multi30k/val.de.gz": RemoteFile(
        MULTI30K_URL.format(name="val.de.gz"),
        "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    ),
    "multi30k/test_2016_flickr.en.gz": RemoteFile(
        MULTI30K_URL.format(name="test_2016_flickr.en.gz"),
        "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    ),
    "multi30k/test_2016_flickr.de.gz": RemoteFile(
        MULTI30K_URL.format(name="test_2016_flickr.de.gz"),
        "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    ),
    "tinyshakespeare/input.txt": RemoteFile(
        TINYSHAKESPEARE_URL,
        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    ),
}


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _check(path: Path, expected: str, name: Path, url: str | None = None) -> None:
    """Raise ChecksumError naming `name` (the destination) if `path`'s sha256 differs."""
    actual = sha256_file(path)
    if actual != expected.lower():
        source = f" (downloaded from {url})" if url else ""
        raise ChecksumError(
            f"checksum mismatch for {name}{source}: expected sha256 {expected}, got {actual}"
        )


def ensure_file(
    url: str, dest: str | Path, sha256: str | None = None, verify: bool = False
) -> Path:
    """Return `dest`, downloading it from `url` first if it is missing.

    A freshly downloaded file is always checked against `sha256` (when given); a file that was
    already present is checked only with `verify=True`. Raises DownloadError (one line naming
    the file and the URL) when the download fails, ChecksumError on a hash mismatch.
    """
    dest = Path(dest).expanduser()
    if dest.exists():
        if verify and sha256:
            _check(dest, sha256, dest)
        return dest

    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    log.info("downloading %s -> %s", url, dest)
    try:
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as resp:
                while chunk := resp.read(_CHUNK):
                    out.write(chunk)
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise DownloadError(
                f"{dest} is missing and could not be downloaded from {url} ({reason}); "
                f"without network access, place the file at {dest}"
            ) from None
        if sha256:
            _check(tmp, sha256, dest, url)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def fetch_known(name: str, root: str | Path, verify: bool = False) -> Path:
    """`ensure_file` for an entry of KNOWN_FILES, stored as root / <file name>.

    `name` is a registry key such as "multi30k/train.en.gz"; `root` is the dataset's folder.
    """
    if name not in KNOWN_FILES:
        raise KeyError(f"unknown data file {name!r}; known: {', '.join(sorted(KNOWN_FILES))}")
    remote = KNOWN_FILES[name]
    return ensure_file(remote.url, Path(root) / Path(name).name, remote.sha256, verify=verify)
