"""Each config file read and parsed once per process, not once per compose.

Hydra's compose reads and parses every YAML file of its defaults list anew (its own cache,
CachingConfigRepository, lives for one compose), so a process that composes many configs (the
preflight of a `-m` sweep: each job; attnlab-sweep's check: each arm; attnlab-train: the
preflight, then Hydra's own run) spends about a quarter of each compose after the first reading
the same files again. `install()` wraps Hydra's ConfigRepository.load_config (a private method:
tests/test_private_apis.py) so that what a file config source gives for a config path is kept,
by the file's bytes (read each time: cheap; parsing them is not) and Hydra's version base (the
defaults list's reading depends on it), and each load gets a deep copy of it (Hydra merges into
what it loads, and a composed config can hold a loaded node itself). A changed file is parsed
again, however soon after (a file that changed while Hydra read it is not kept); a file that
fails to load is not kept (its error is raised each time); configs of other sources (Hydra's
ConfigStore: the schemas, which code may register later) are loaded as Hydra loads them. At most
MAX_KEPT results are kept (then the cache starts again): a process that composes many temporary
config folders does not grow without bound.
"""

from __future__ import annotations

import copy
import hashlib
import os
import threading

from hydra import version
from hydra._internal.config_repository import ConfigRepository
from hydra.core.object_type import ObjectType

MAX_KEPT = 4096
# (config path, source, file, its bytes' digest, version base) -> ConfigResult
_LOADED: dict[tuple, object] = {}
_LOCK = threading.Lock()


def _file_key(repository: ConfigRepository, config_path: str) -> tuple | None:
    """The cache key of `config_path` where a file source has it; None otherwise."""
    source = repository._find_object_source(config_path, ObjectType.CONFIG)
    if source is None or source.scheme() != "file":  # (Hydra's plugin scan loads its own copy
        return None  # of FileConfigSource's module: its class is not the one imported here)
    path = os.path.realpath(os.path.join(source.path, source._normalize_file_name(config_path)))
    try:
        with open(path, "rb") as f:
            digest = hashlib.blake2b(f.read()).hexdigest()
    except OSError:  # Hydra's own load says what is wrong
        return None
    return (config_path, source.provider, source.path, path, digest, str(version.getbase()))


def install() -> None:
    """Wrap ConfigRepository.load_config (once per process; a second call does nothing)."""
    load = ConfigRepository.load_config
    if getattr(load, "attnlab_file_cache", False):
        return

    def load_config(self, config_path: str):
        key = _file_key(self, config_path)
        if key is None:
            return load(self, config_path)
        with _LOCK:
            kept = _LOADED.get(key)
        if kept is None:
            kept = load(self, config_path)  # raises as Hydra does: nothing kept
            if kept is None or _file_key(self, config_path) != key:  # changed while read
                return kept
            with _LOCK:
                if len(_LOADED) >= MAX_KEPT:
                    _LOADED.clear()
                _LOADED[key] = kept
        return copy.deepcopy(kept)

    load_config.attnlab_file_cache = True
    load_config.__wrapped__ = load
    ConfigRepository.load_config = load_config


def clear() -> None:
    """Forget every kept file (the next load of each reads it again)."""
    with _LOCK:
        _LOADED.clear()
