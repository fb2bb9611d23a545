"""Every grid point of every sweep file in sweeps/ composes with conf/train.yaml and validates:
a renamed config key or an impossible value (e.g. d_model not divisible by n_heads) fails here,
not hours into a sweep."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

import attnlab.config.schema  # noqa: F401 (the schemas in Hydra's ConfigStore: compose needs them)
from attnlab.sweeps import expand_sweep
from attnlab.sweeps.spec import override_key
from sweep_utils import compose_arm, dry_build_sharing_models, is_search, sweep_trials

REPO = Path(__file__).resolve().parents[1]
SWEEP_FILES = sorted((REPO / "sweeps").glob("*.yaml"))


def _points(one_seed: bool = False, files=SWEEP_FILES) -> list[tuple[str, list[str]]]:
    """(label, Hydra overrides without hydra.*) of every trial of the sweep files; with
    `one_seed`, of one trial per arm (the first seed): trials that differ only in `seed=`
    compose alike, and composing each of the 457 took minutes of the suite's time."""
    points, seen = [], set()
    for path in files:
        for trial in sweep_trials(path):
            overrides = [o for o in trial.overrides if not override_key(o).startswith("hydra.")]
            arm = (path.stem, *(o for o in overrides if override_key(o) != "seed"))
            if one_seed and arm in seen:
                continue
            seen.add(arm)
            points.append((f"{path.stem}/{trial.label}", overrides))
    return points


@pytest.mark.slow
def test_there_are_sweep_files():
    assert {p.stem for p in SWEEP_FILES} >= {"heads", "norm_warmup", "pos_encoding"}
    assert len(_points()) >= 54
    arms = _points(one_seed=True)  # every arm is still composed below, once
    assert len(arms) == len({(label.split("/")[0], *o) for label, o in arms}) >= 54 // 3
    assert {label.split("/")[0] for label, _ in arms} == {p.stem for p in SWEEP_FILES}


def _data_paths(tmp_path: Path) -> list[str]:
    """Tiny line-aligned files for the sweeps whose data is given by path (paper_base: WMT14)."""
    paths = []
    for split in ("train", "val", "test"):
        for side in ("src", "tgt"):
            path = tmp_path / f"{split}.{side}"
            path.write_text("".join(f"a sentence number {i}\n" for i in range(4)))
            paths.append(f"data.{split}_{side}={path}")
    return paths


@pytest.mark.slow
@pytest.mark.parametrize("path", SWEEP_FILES, ids=lambda p: p.stem)
def test_every_grid_point_composes_and_validates(tmp_path, path):
    failures = []
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        for label, overrides in _points(one_seed=True, files=[path]):
            try:
                paths = _data_paths(tmp_path) if "experiment=paper_base" in overrides else []
                cfg, choices = compose_arm([*overrides, *paths])  # (arms shared: sweep_utils)
                dry_build_sharing_models(cfg)
            except Exception as err:  # collect every bad point, then fail once
                failures.append(f"{label}: {type(err).__name__}: {err}")
                continue
            for override in overrides:  # each value arrived where it was meant to go
                key, _, value = override.lstrip("+").partition("=")
                if key in choices:  # a config group (model=lm_small, +table3=A1): its choice
                    assert choices[key] == value, (label, override, choices[key])
                    continue
                if "${" in value:  # an interpolation (lr_width's d_ff): resolved, not itself
                    continue
                actual = OmegaConf.select(cfg, key)
                if OmegaConf.is_config(actual):
                    actual = OmegaConf.to_container(actual)
                assert actual == yaml.safe_load(value), (label, override, actual)
    assert not failures, "\n".join(failures)


@pytest.mark.slow
def test_a_plain_value_set_on_a_composed_arm_fails_as_compose_fails():
    """compose_arm's shortcut: a mistyped key and a value of the wrong type are still refused,
    with compose's error."""
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        composed = {}
        cfg, _ = compose_arm(["scheduler.peak_lr=1e-3"], composed)
        assert compose_arm(["scheduler.peak_lr=2e-3"], composed)[0].scheduler.peak_lr == 2e-3
        assert cfg.scheduler.peak_lr == 1e-3 and len(composed) == 1  # one compose, copies apart
        with pytest.raises(ConfigCompositionException, match="peak_lrr"):  # a new key: composed
            compose_arm(["scheduler.peak_lrr=2e-3"], composed)
        compose_arm(["model.d_model=64"], composed)
        with pytest.raises(ConfigCompositionException, match="model.d_model=abc") as err:
            compose_arm(["model.d_model=abc"], composed)  # a copy of that compose, then refused
        assert isinstance(err.value.__cause__, ValidationError) and len(composed) == 2


SECOND_POINTS = [  # (first point, second point, composes): the second's config from a copy of
    # the first's (1 compose), or composed itself (2)
    (
        ["scheduler.peak_lr=1e-3", "model.d_model=64"],
        ["scheduler.peak_lr=2e-3", "model.d_model=32"],
        1,
    ),
    (
        ["model=small_decoder_only", "seed=1", "data.eval_lengths=[4,8]"],
        ["model=small_decoder_only", "seed=1", "data.eval_lengths=[4,16]"],
        2,
    ),  # a list: composed
    (
        ["model.d_ff=96", "model.d_ff=${model.d_model}"],
        ["model.d_ff=128", "model.d_ff=${model.d_model}"],
        2,
    ),  # a key set twice: in order, composed
    (["trainer.max_steps=7", "trainer=cpu"], ["trainer.max_steps=9", "trainer=cpu"], 1),
    (
        ["scheduler=cosine", "scheduler.peak_lr=1e-3", "scheduler.warmup_steps=0"],
        ["scheduler=cosine", "scheduler.peak_lr=2e-3", "scheduler.warmup_steps=300"],
        1,
    ),  # values under a group's choice (the defaults list's, composed first): on a copy
    (
        ["model=small_decoder_only", "model.d_model=64", "+table3=C4"],
        ["model=small_decoder_only", "model.d_model=128", "+table3=C4"],
        1,
    ),  # an added group that sets model.d_model too (table3/C4.yaml): the value wins
    (
        ["model=small", "model.d_model=64"],
        ["model=small_decoder_only", "model.d_model=64"],
        2,
    ),  # another choice: composed
]


@pytest.mark.slow
@pytest.mark.parametrize(("first", "second", "composes"), SECOND_POINTS)
def test_a_point_set_on_a_composed_arm_equals_its_own_compose(first, second, composes):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        composed = {}
        compose_arm(first, composed)
        cfg, choices = compose_arm(second, composed)
        assert len(composed) == composes
        whole = compose("train", second, return_hydra_config=True)
        assert choices == dict(whole.hydra.runtime.choices)
        del whole.hydra
    assert OmegaConf.to_container(cfg) == OmegaConf.to_container(whole)


def test_a_sweep_value_in_a_point_is_refused_as_compose_refuses_it():
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        composed = {}
        compose_arm(["scheduler.peak_lr=1e-3"], composed)
        with pytest.raises(ConfigCompositionException, match="[Aa]mbiguous"):
            compose_arm(["scheduler.peak_lr=1e-3,2e-3"], composed)


@pytest.mark.parametrize("path", SWEEP_FILES, ids=lambda p: p.stem)
def test_sweep_file_has_a_grid_of_the_expected_size(path):
    """Guards the test above against a sweep that silently expands to nothing (a search: per
    arm, its check points, search_space.check_points)."""
    spec = yaml.safe_load(path.read_text())
    if is_search(path):
        from attnlab.sweeps import search_space

        arms = search_space.arms({"name": path.stem, **spec})
        points = sum(
            len(search_space.check_points(search_space.distributions(spec, arm)[0])) for arm in arms
        )
        assert len(sweep_trials(path)) == points >= len(arms)
        return
    expected = 1
    for param in spec["parameters"].values():
        expected *= len(param.get("values", [param.get("value")]))
    assert len(expand_sweep(path)) == expected


@pytest.mark.slow
@pytest.mark.parametrize("name", ["heads", "heads_lr", "heads_lr_high", "label_smoothing"])
def test_the_multi30k_sweeps_keep_the_recipe_their_protocol_was_fixed_on(name):
    """These sweeps' runs (docs/REPRODUCTION.md) were made with experiment=multi30k_cpu as it was
    before 79e2da2; they pin that recipe, so that a sweep resumed with more seeds runs what its
    first seeds ran, whatever the preset has become since."""
    (trial, *_) = sweep_trials(REPO / "sweeps" / f"{name}.yaml")
    overrides = [o for o in trial.overrides if not override_key(o).startswith("hydra.")]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("train", overrides)
    assert cfg.scheduler._target_.endswith("InverseSqrt") and cfg.scheduler.warmup_steps == 400
    if name in ("heads", "label_smoothing"):
        assert cfg.scheduler.peak_lr == 2.0e-3
    assert cfg.model.dropout == 0.1 and cfg.torch_threads == 1
    assert cfg.callbacks.translation_quality.length_penalty == 0.6
    assert "time_horizon" not in cfg.callbacks and cfg.trainer.max_steps == 1800
