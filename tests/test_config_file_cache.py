"""attnlab.config.file_cache: each config file parsed once per process; a compose through it
equals Hydra's own, a changed file is read again, a broken one fails every time."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import yaml
from hydra._internal.config_repository import ConfigRepository
from omegaconf import OmegaConf

from attnlab.config import file_cache
from attnlab.config.compose import compose_config

REPO = Path(__file__).resolve().parents[1]


def _conf(root: Path, width: int = 32) -> Path:
    (root / "model").mkdir(parents=True, exist_ok=True)
    (root / "train.yaml").write_text("defaults:\n  - model: small\n  - _self_\nseed: 1\n")
    (root / "model" / "small.yaml").write_text(f"d_model: {width}\nn_heads: 2\n")
    (root / "model" / "big.yaml").write_text("d_model: 512\nn_heads: 8\n")
    return root


class _Parses:
    """The files under `root` that yaml.load parsed (OmegaConf.load parses each config file
    with it; Hydra's own configs, hydra/*, are not under root)."""

    def __init__(self, root: Path):
        self.root, self.files, self._load = str(root), [], yaml.load

    def __enter__(self):
        def load(stream, *args, **kwargs):
            if getattr(stream, "name", "").startswith(self.root):
                self.files.append(Path(stream.name).relative_to(self.root).as_posix())
            return self._load(stream, *args, **kwargs)

        self._patch = mock.patch.object(yaml, "load", load)
        self._patch.start()
        return self

    def __exit__(self, *exc):
        self._patch.stop()


def test_a_second_compose_parses_no_file_and_a_changed_file_is_read_again(tmp_path):
    conf = _conf(tmp_path / "conf")
    file_cache.clear()
    with _Parses(conf) as parsed:
        assert compose_config(conf, []).model.d_model == 32
        assert sorted(parsed.files) == ["model/small.yaml", "train.yaml"]
        assert compose_config(conf, ["seed=2"]).seed == 2
        assert compose_config(conf, ["model=big"]).model.d_model == 512
        assert parsed.files[2:] == ["model/big.yaml"]  # the new file alone
        (conf / "model" / "small.yaml").write_text("d_model: 64\nn_heads: 2\n")  # at once
        assert compose_config(conf, []).model.d_model == 64
        assert parsed.files[3:] == ["model/small.yaml"]


def test_a_broken_file_fails_every_time_and_is_not_kept(tmp_path):
    conf = _conf(tmp_path / "conf")
    (conf / "model" / "small.yaml").write_text("d_model: [32\n")
    file_cache.clear()
    for _ in range(2):
        with pytest.raises(Exception, match="small"):
            compose_config(conf, [])
    assert not any("small" in str(key) for key in file_cache._LOADED)


@pytest.mark.slow
def test_composes_through_the_cache_equal_hydras_own():
    """The shipped configs, composed in turn through the cache (each file's copy merged into by
    the composes before it) and with Hydra's own load: the same configs."""
    overrides = [
        [],
        ["experiment=paper_base"],
        ["model=small_decoder_only", "data=copy", "scheduler=cosine"],
        ["+table3=A1", "model.n_heads=4"],
        [],
    ]
    file_cache.clear()
    cached = [OmegaConf.to_container(compose_config(REPO / "conf", o)) for o in overrides]
    hydras = ConfigRepository.load_config.__wrapped__
    with mock.patch.object(ConfigRepository, "load_config", hydras):
        plain = [OmegaConf.to_container(compose_config(REPO / "conf", o)) for o in overrides]
    assert cached == plain
    assert cached[0] == cached[-1]
