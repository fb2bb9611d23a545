"""ensure_file: atomic download with sha256 checks, clear errors; the registry's checksums."""

import gzip
import hashlib
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from attnlab.data.download import (
    KNOWN_FILES,
    ChecksumError,
    DownloadError,
    RemoteFile,
    ensure_file,
    fetch_known,
    sha256_file,
)

DATA = Path(__file__).parents[2] / "shared" / "data"


@pytest.fixture
def remote(tmp_path) -> tuple[str, str, bytes]:
    """A local 'upstream' file served by a file:// URL: (url, sha256, content)."""
    content = "Zwei Hunde laufen über den Schnee.\n".encode() * 100
    src = tmp_path / "upstream" / "train.de"
    src.parent.mkdir()
    src.write_bytes(content)
    return src.as_uri(), hashlib.sha256(content).hexdigest(), content


@pytest.fixture
def no_network(monkeypatch):
    def fail(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", fail)


def test_downloads_verifies_and_renames(remote, tmp_path):
    url, sha, content = remote
    dest = tmp_path / "data" / "train.de"
    assert ensure_file(url, dest, sha) == dest
    assert dest.read_bytes() == content
    assert [p.name for p in dest.parent.iterdir()] == ["train.de"]  # no .part left behind


def test_checksum_mismatch_names_file_and_hashes(remote, tmp_path):
    url, sha, _ = remote
    dest = tmp_path / "data" / "train.de"
    wrong = "0" * 64
    with pytest.raises(ChecksumError) as e:
        ensure_file(url, dest, wrong)
    msg = str(e.value)
    assert "\n" not in msg
    assert str(dest) in msg and wrong in msg and sha in msg
    assert not dest.exists() and list(dest.parent.iterdir()) == []


def test_present_file_is_not_downloaded_and_verified_on_request(remote, tmp_path, no_network):
    url, sha, _ = remote
    dest = tmp_path / "train.de"
    dest.write_bytes(b"locally edited\n")
    assert ensure_file(url, dest, sha) == dest  # present: used as is, no network needed
    with pytest.raises(ChecksumError, match="checksum mismatch for .*train.de"):
        ensure_file(url, dest, sha, verify=True)


def test_missing_file_without_network_says_where_to_put_it(tmp_path, no_network):
    dest = tmp_path / "multi30k" / "val.en.gz"
    url = "https://example.org/val.en.gz"
    with pytest.raises(DownloadError) as e:
        ensure_file(url, dest, "0" * 64)
    msg = str(e.value)
    assert "\n" not in msg
    assert str(dest) in msg and url in msg and "place the file" in msg
    assert not dest.exists() and list(dest.parent.iterdir()) == []


def test_missing_upstream_file(tmp_path):
    dest = tmp_path / "x.txt"
    with pytest.raises(DownloadError, match="x.txt is missing and could not be downloaded"):
        ensure_file((tmp_path / "nowhere.txt").as_uri(), dest)


def test_fetch_known_uses_registry(tmp_path, monkeypatch, remote):
    url, sha, content = remote
    monkeypatch.setitem(KNOWN_FILES, "multi30k/val.de.gz", RemoteFile(url, sha))
    assert fetch_known("multi30k/val.de.gz", tmp_path).read_bytes() == content
    with pytest.raises(KeyError, match="unknown data file 'multi30k/val.fr.gz'"):
        fetch_known("multi30k/val.fr.gz", tmp_path)


@pytest.mark.data
@pytest.mark.skipif(not (DATA / "multi30k").is_dir(), reason=f"{DATA} absent")
def test_registry_checksums_match_shared_copies():
    for name, remote in KNOWN_FILES.items():
        if name.startswith("multi30k/"):
            assert sha256_file(DATA / name) == remote.sha256, name
            assert remote.url.endswith(Path(name).name)
    # upstream tinyshakespeare is uncompressed input.txt; the shared copy is its gzip
    with gzip.open(DATA / "tinyshakespeare" / "input.txt.gz", "rb") as f:
        text_sha = hashlib.sha256(f.read()).hexdigest()
    assert text_sha == KNOWN_FILES["tinyshakespeare/input.txt"].sha256
