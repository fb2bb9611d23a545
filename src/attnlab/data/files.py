"""Data files checked before any work starts: each file a DataModule will read is read in full
(gzip decompressed and CRC-checked, text decoded as strict UTF-8, lines counted as
attnlab.data.text.read_lines counts them). Each problem is one line that starts with the config
key, e.g.

    data.train_tgt: /p/train.de.gz: 28999 lines but data.train_src /p/train.en.gz has 29000; ...
    data.path: /p/x.txt.gz: not a valid gzip file (truncated: ...)

The DataModules name their files (`expected_files`) as DataFile records; a text DataModule's
`check` (attnlab.data.text) runs these checks over them.
"""

from __future__ import annotations

import codecs
import gzip
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from attnlab.problems import present

GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20
_TEXT = "a UTF-8 text file, plain or gzip"


def as_path(value) -> Path | None:
    """A config value naming a file, as an expanded Path (None when unset)."""
    return Path(str(value)).expanduser() if value not in (None, "") else None


@dataclass(frozen=True)
class DataFile:
    """A file a DataModule reads, named by the config key `key`.

    path: None when the key is unset although the file is needed; `required` then says why.
    download: None for files that are never downloaded; otherwise the DataModule's `download`
        argument (a missing file is fine when it is True: it will be fetched).
    kind: "text" (plain or gzip UTF-8) or "sentencepiece" (a tokenizer .model).
    """

    key: str
    path: Path | None
    download: bool | None = None
    kind: str = "text"
    required: str = ""


class DataFileError(ValueError):
    """A data file cannot be used; the message says why (without the file name)."""


def count_lines(path: str | Path) -> int:
    """Lines of a plain or gzip UTF-8 file, counted as read_lines counts them, reading it all.

    Decompresses the whole file (so a bad CRC or a truncated stream is found) and decodes it
    as strict UTF-8 in 1 MiB chunks. Raises DataFileError naming the byte offset (of the
    decompressed text) and line of the first invalid byte.
    """
    with open(path, "rb") as f:
        gz = f.read(2) == GZIP_MAGIC
    opener = gzip.open if gz else open
    decoded = newlines = 0  # bytes decoded so far, and the "\n" among them
    pending = last = b""
    try:
        with opener(path, "rb") as f:
            while True:
                chunk = f.read(_CHUNK)
                data = pending + chunk
                try:
                    _, used = codecs.utf_8_decode(data, "strict", not chunk)
                except UnicodeDecodeError as err:
                    line = newlines + data[: err.start].count(b"\n") + 1
                    where = " of the decompressed text" if gz else ""
                    raise DataFileError(
                        f"not UTF-8 (invalid byte 0x{data[err.start]:02x} at offset "
                        f"{decoded + err.start}{where}, line {line})"
                    ) from None
                newlines += data[:used].count(b"\n")
                decoded += used
                pending = data[used:]
                last = data[used - 1 : used] if used else last
                if not chunk:
                    break
    except EOFError as err:
        raise DataFileError(f"not a valid gzip file (truncated: {err})") from None
    except (gzip.BadGzipFile, zlib.error) as err:
        raise DataFileError(f"not a valid gzip file ({err})") from None
    if decoded == 0:
        raise DataFileError("file is empty" + (" (the gzip stream holds no text)" if gz else ""))
    return newlines + (last != b"\n")


def _check_sentencepiece(path: Path) -> None:
    from attnlab.data.tokenizer import Tokenizer

    try:
        Tokenizer.from_file(path)
    except (RuntimeError, OSError) as err:
        reason = str(err).strip().replace(f" from {path}", "")
        raise DataFileError(f"not a SentencePiece model ({reason})") from None
    except ValueError as err:  # wrong special ids
        raise DataFileError(str(err).replace(f"tokenizer {path} ", "tokenizer ")) from None


def file_problem(file: DataFile) -> tuple[str | None, int | None]:
    """(problem, line count) of one file; the count is None unless it is a valid text file."""
    if file.path is None:
        return f"{file.key}: not set; {file.required}", None
    head = f"{file.key}: {file.path}"
    if not file.path.exists():
        if file.download:
            return None, None  # fetched by prepare_data
        why = (
            "; place it there, or set data.download=true to fetch it"
            if file.download is False
            else ""
        )
        return f"{head}: missing{why}", None
    if file.path.is_dir():
        expected = "a SentencePiece .model" if file.kind == "sentencepiece" else _TEXT
        return f"{head}: is a directory; expected {expected}", None
    try:
        if file.path.stat().st_size == 0:
            raise DataFileError("file is empty")
        if file.kind == "sentencepiece":
            _check_sentencepiece(file.path)
            return None, None
        return None, count_lines(file.path)
    except DataFileError as err:
        return f"{head}: {err}", None
    except OSError as err:
        return f"{head}: cannot be read ({err.strerror or err})", None


def file_problems(groups: Iterable[Sequence[DataFile]]) -> list[str]:
    """Problems of every file; the files of one group must also have equal line counts.
    A file named by several keys (data.train_src = data.val_src) is read and reported once,
    under the first key."""
    problems, seen = [], {}
    for group in groups:
        counts = []
        for file in group:
            same = (file.path, file.kind, file.download) if file.path else file
            if same not in seen:
                seen[same] = file_problem(file)
                problems += present(seen[same][0])
            counts.append(seen[same][1])
        first = group[0]
        for file, n in zip(group[1:], counts[1:], strict=True):
            if n is not None and counts[0] is not None and n != counts[0]:
                problems.append(
                    f"{file.key}: {file.path}: {n} line{'s' * (n != 1)} but {first.key} "
                    f"{first.path} has {counts[0]}; parallel files must be line-aligned"
                )
    return problems
