"""attnlab.config.file_cache: each config file parsed once per process; a compose through it
equals Hydra's own, a changed file is read again, a broken one fails every time."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra._internal.config_repository import ConfigRepository
from omegaconf import OmegaConf

from attnlab.config import file_cache
from attnlab.config.compose import compose_config

REPO = Path(__file__).resolve().parents[1]


def _conf(root: Path, width: int = 32) -> Path:
    (root / "model").mkdir(parents=True, exist_ok=True)
    (root / "train.yaml").write_text(
        "defaults:\n  - model: small\n  - _self_\nseed: 1\ntop:\n  x: 1\n"
    )  # (top: no schema, so a composed config takes the loaded node itself)
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


def test_an_override_never_reaches_a_later_compose(tmp_path):
    """The configs a compose merges into are copies of the kept ones."""
    conf = _conf(tmp_path / "conf")
    file_cache.clear()
    assert compose_config(conf, ["top.x=7"]).top.x == 7
    assert compose_config(conf, []).top.x == 1
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        level = "hydra.job_logging.loggers.attnlab.level"
        assert OmegaConf.select(compose("train", [f"{level}=DEBUG"], True), level) == "DEBUG"
        assert OmegaConf.select(compose("train", [], True), level) == "INFO"


def test_a_file_changed_while_hydra_reads_it_is_not_kept(tmp_path):
    """model/small.yaml rewritten (32 -> 48) between the bytes the key is made of and Hydra's
    own read of them, then put back: the compose after reads 32, not the 48 of the race."""
    conf = _conf(tmp_path / "conf")
    small, load = conf / "model" / "small.yaml", OmegaConf.load

    def racing_load(stream, *args, **kwargs):
        if getattr(stream, "name", "") == str(small):
            small.write_text("d_model: 48\nn_heads: 2\n")
            stream.seek(0)
        return load(stream, *args, **kwargs)

    file_cache.clear()
    with mock.patch.object(OmegaConf, "load", racing_load):
        assert compose_config(conf, []).model.d_model == 48
    small.write_text("d_model: 32\nn_heads: 2\n")
    assert compose_config(conf, []).model.d_model == 32


@pytest.mark.filterwarnings("ignore::UserWarning")  # Hydra's, on version base 1.1 and its style
def test_what_is_kept_is_per_version_base(tmp_path):
    """A defaults list read under one version base is not reused under another."""
    conf = tmp_path / "conf"
    (conf / "extra").mkdir(parents=True)
    (conf / "main.yaml").write_text("defaults:\n  - extra: a\n    optional: true\n")
    (conf / "extra" / "a.yaml").write_text("x: 1\n")
    file_cache.clear()
    with initialize_config_dir(config_dir=str(conf), version_base="1.1"):
        assert compose("main").extra.x == 1  # Hydra 1.0's optional: true, still read
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        with pytest.raises(ValueError, match="Too many keys"):
            compose("main")


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
