"""The shipped sweep files are fair ablations: their arms differ only in the swept variable,
each names an unsmoothed metric, the warmup ablation holds the peak learning rate and the decay
horizon fixed, reaches every peak, clips nothing and is deep; the heads sweep states its
(h, d_k) pairs correctly."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest
import yaml
from hydra import initialize_config_dir

from attnlab.config.compose import compose_config
from attnlab.config.plain import plain_config, to_plain
from attnlab.runs.dotted import flatten
from attnlab.sweeps import expand_sweep
from attnlab.sweeps.spec import override_key, swept_keys
from attnlab.training.schedules import schedule_from_config
from sweep_utils import compose_arm, sweep_trials

REPO = Path(__file__).resolve().parents[1]
SWEEPS = sorted((REPO / "sweeps").glob("*.yaml"))  # the shipped files (a user's: sweeps/local/)
UNSMOOTHED = {"val/nll_best", "val/nll", "val/bleu_best", "val/exact_match_best", "val/chrf"}
# Keys that name or place a run, never what it learns.
PLUMBING = re.compile(r"^(name|group|tags|run_name|paths\.|hydra\.|logger\.)")
# Keys that follow from a swept config group by interpolation (data.arch: ${model.arch}).
DERIVED = {"data.arch": "model", "model.d_ff": "model.d_model"}  # d_ff = 4 d_model (lr_width*)


def _spec(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


@cache  # composed once for the several tests that read a sweep's arms
def _arms(name: str) -> dict[tuple, dict]:
    """{swept values (the file's first seed): flat composed config} of every arm of
    sweeps/<name>.yaml (the tests only read them)."""
    path = REPO / "sweeps" / f"{name}.yaml"
    arms = {}
    trials = sweep_trials(path)
    first_seed = min(t.params.get("seed", 1) for t in trials)  # heads_best's seeds start at 2
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        for trial in trials:
            if trial.params.get("seed", 1) != first_seed:
                continue
            overrides = [o for o in trial.overrides if not override_key(o).startswith("hydra.")]
            cfg, _ = compose_arm(overrides)  # the arms test_sweep_compose.py composes, shared
            cfg.paths.run_dir = "run"  # (on compose_arm's copy) as paths.run_dir=run sets it
            key = tuple(v for k, v in trial.params.items() if k != "seed")
            arms[key] = flatten(plain_config(cfg))
    return arms


# Sweeps that are checks, not comparisons, and say so where they are reported: fewer seeds.
# section 3's learning-rate check: 1 seed per rate
# A search picks a configuration on one seed (docs/sweeps.md: rerun its best over seeds).
FEWER_SEEDS = {
    "heads_lr": 1,
    "heads_lr_high": 1,
    "heads_rate": 1,
    "lr_search": 1,
    "norm_lr_search": 1,
    # section 2 across width: 2 seeds x 9 rates per arm and width (the design); each
    # sensitivity pools its arm's nine rates, and the report states the seeds
    "lr_width": 2,
    "lr_width_nowarmup": 2,
    # seeds 3 and 4 of two of those arms at two widths: with seeds 1-2, 4 per cell
    "lr_width_seeds": 2,
    # seeds 2 and 3 at the chosen rate: with the rate grid's seed-1 run, 3 per arm
    "arch_matched_multi30k_best": 2,
}


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_every_sweep_names_an_unsmoothed_metric_and_three_seeds(path):
    spec = _spec(path)
    assert spec["metric"]["name"] in UNSMOOTHED, "a smoothed val/loss biases the ranking"
    higher_is_better = any(m in spec["metric"]["name"] for m in ("bleu", "exact", "chrf"))
    assert spec["metric"]["goal"] == ("maximize" if higher_is_better else "minimize")
    if "tune" in spec:  # a study: tuned on an unsmoothed validation metric, seeds in stage 2
        assert spec["tune"]["metric"] in UNSMOOTHED
        assert len(spec["seeds"]) >= FEWER_SEEDS.get(path.stem, 3)
        return
    seeds = spec["parameters"]["seed"]
    assert len(seeds.get("values", [seeds.get("value")])) >= FEWER_SEEDS.get(path.stem, 3)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [p.stem for p in SWEEPS if p.stem != "table3"],  # table3's rows are bundles
)
def test_arms_differ_only_in_the_swept_variable(name):
    swept = [k.lstrip("+") for k in swept_keys(_spec(REPO / "sweeps" / f"{name}.yaml"))]
    arms = list(_arms(name).values())
    assert arms, f"{name}: no arm composed"
    keys = set().union(*arms)
    differing = {k for k in keys if len({repr(a.get(k)) for a in arms}) > 1}
    unexplained = {
        k
        for k in differing
        if not PLUMBING.match(k)
        and not any(k == s or k.startswith(s + ".") for s in swept if s != "seed")
        and DERIVED.get(k) not in swept
    }
    assert not unexplained, f"{name}: arms also differ in {sorted(unexplained)}"


@pytest.mark.slow
def test_warmup_ablation_holds_peak_and_horizon_reaches_every_peak_and_clips_nothing():
    arms = _arms("norm_warmup")
    assert {k[1] for k in arms} >= {0, 100, 300} and {k[0] for k in arms} == {"pre", "post"}
    peaks, ends = set(), set()
    for (_norm, warmup), flat in arms.items():
        cfg = _nested(flat)
        max_steps = cfg["trainer"]["max_steps"]
        schedule = schedule_from_config(cfg["scheduler"], cfg["model"]["d_model"], max_steps)
        lrs = [schedule(s) for s in range(1, max_steps + 1)]
        peak = max(lrs)
        assert lrs.index(peak) + 1 == max(warmup, 1) <= max_steps // 2  # reached, then decays
        assert lrs[-1] < 0.05 * peak  # the decay ends with the run, in every arm
        peaks.add(peak)
        ends.add(cfg["scheduler"].get("max_steps") or max_steps)
        assert cfg["trainer"]["gradient_clip_val"] is None
        assert cfg["model"]["n_encoder_layers"] >= 6 and cfg["model"]["n_decoder_layers"] >= 6
    assert max(peaks) == pytest.approx(min(peaks), rel=1e-4) and len(ends) == 1
    # (without warmup the cosine's first step is already 1/600 into the decay: 2e-3 * 0.99999)


def test_gpu_warmup_ablation_holds_each_peak_and_the_horizon_and_clips_nothing():
    """sweeps/gpu_norm_warmup.yaml: within each peak learning rate, every arm (norm x warmup)
    reaches that peak (at its warmup's end) and decays to 0 at the same step; no clipping."""
    arms = _arms("gpu_norm_warmup")
    assert {k[0] for k in arms} == {"pre", "post"} and {k[1] for k in arms} == {0, 4000}
    by_peak: dict[float, set] = {}
    for (_norm, _warmup, peak_lr), flat in arms.items():
        cfg = _nested(flat)
        max_steps = cfg["trainer"]["max_steps"]
        schedule = schedule_from_config(cfg["scheduler"], cfg["model"]["d_model"], max_steps)
        lrs = [schedule(s) for s in range(1, max_steps + 1, 10)]
        assert max(lrs) == pytest.approx(peak_lr, rel=1e-3)
        assert lrs[-1] < 0.01 * peak_lr and cfg["scheduler"]["max_steps"] == max_steps
        assert cfg["trainer"]["gradient_clip_val"] is None
        assert cfg["model"]["d_model"] == 512
        by_peak.setdefault(peak_lr, set()).add(max_steps)
    assert len(by_peak) == 2 and all(len(horizons) == 1 for horizons in by_peak.values())
    assert min(by_peak) == pytest.approx(512**-0.5 * 4000**-0.5, rel=1e-2)  # the paper's peak


@pytest.mark.parametrize("name", ["gpu_heads", "gpu_pos_encoding", "gpu_label_smoothing"])
def test_gpu_sweeps_use_the_multi30k_model_and_one_budget_with_five_seeds(name):
    spec = _spec(REPO / "sweeps" / f"{name}.yaml")
    assert len(spec["parameters"]["seed"]["values"]) >= 5  # the minimum on a GPU
    for flat in _arms(name).values():
        assert flat["model.d_model"] == 512 and flat["trainer.max_steps"] == 6000
        assert flat["trainer.precision"] == "bf16-mixed"


@pytest.mark.slow
def test_the_bug_sweeps_are_unsmoothed_and_the_scale_sweep_widens_d_k():
    """classic_bugs.yaml and attn_scale.yaml: label smoothing 0 (no nll floor), the default
    run's budget; attn_scale crosses the scale with d_k = 16, 64, 128."""
    for name in ("classic_bugs", "attn_scale"):
        for flat in _arms(name).values():
            assert flat["loss.label_smoothing"] == 0 and flat["trainer.max_steps"] == 1000
    arms = _arms("attn_scale")
    assert set(arms) == {(d, s) for d in (16, 64, 128) for s in ("sqrt_dk", "none")}
    assert {k for k in _arms("classic_bugs")} == {
        (p, f) for p in (True, False) for f in (True, False)
    }


@pytest.mark.parametrize("name", ["heads", "gpu_heads"])
def test_heads_sweep_states_its_h_and_d_k_at_constant_compute(name):
    text = (REPO / "sweeps" / f"{name}.yaml").read_text()
    stated_line = re.search(r"^# \(h, d_k\): (.*)$", text, re.M).group(1)
    stated = set(ast.literal_eval(f"[{stated_line}]"))
    composed = set()
    for flat in _arms(name).values():
        h, d_model = flat["model.n_heads"], flat["model.d_model"]
        d_k = flat["model.d_k"] or d_model // h
        assert h * d_k == d_model  # constant compute
        composed.add((h, d_k))
    assert composed == stated


@pytest.mark.parametrize(
    "name",
    [
        "heads_lr",
        "heads_lr_high",
        "heads_rate",
        "heads_best",
        "heads_best_more",
        "heads_rate_study",
    ],
)
def test_heads_rate_grids_run_the_heads_sweeps_recipe(name):
    """A rate grid's points join the heads sweep's (its seed-1 run at 2e-3 is each h's fourth
    rate): the commands may differ only in the run's group, tags and folder."""

    spec = _spec(REPO / "sweeps" / f"{name}.yaml")
    grid = {k.lstrip("+") for k in spec["parameters"]} | {spec.get("tune", {}).get("key")}

    def recipe(stem: str) -> list[str]:
        command = _spec(REPO / "sweeps" / f"{stem}.yaml")["command"]
        keys = [override_key(c) or "" for c in command]
        return [
            c for c, k in zip(command, keys, strict=True) if not PLUMBING.match(k) and k not in grid
        ]

    assert recipe(name) == recipe("heads")


def _nested(flat: dict) -> dict:
    out: dict = {}
    for key, value in flat.items():
        node = out
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return out


def test_plain_config_helpers_agree():  # the helpers above read what training reads
    cfg = compose_config(REPO / "conf", ["scheduler.peak_lr=1.0e-3", "paths.run_dir=run"])
    assert _nested(flatten(plain_config(cfg)))["scheduler"] == to_plain(cfg.scheduler)


@pytest.mark.slow
def test_lr_sensitivity_sweep_reaches_each_swept_peak_over_one_horizon_unsmoothed_unclipped():
    """sweeps/lr_sensitivity.yaml: every arm (norm x warmup x qk_norm x rate) peaks at its swept
    scheduler.peak_lr and decays to 0 at the same step; no clipping, no label smoothing (the
    nll has no floor), the paper's depth; the grid spans three decades."""
    arms = _arms("lr_sensitivity")
    assert {k[:3] for k in arms} == {
        (n, w, q) for n in ("post", "pre") for w in (0, 300) for q in (False, True)
    }
    rates = sorted({k[3] for k in arms})
    assert rates[-1] / rates[0] >= 1000
    for (_norm, warmup, _qk, peak_lr), flat in arms.items():
        cfg = _nested(flat)
        max_steps = cfg["trainer"]["max_steps"]
        schedule = schedule_from_config(cfg["scheduler"], cfg["model"]["d_model"], max_steps)
        lrs = [schedule(s) for s in range(1, max_steps + 1)]
        assert max(lrs) == pytest.approx(peak_lr, rel=1e-4)
        assert lrs.index(max(lrs)) + 1 == max(warmup, 1) and lrs[-1] < 0.01 * peak_lr
        assert cfg["scheduler"]["max_steps"] == max_steps == 600
        assert cfg["trainer"]["gradient_clip_val"] is None and cfg["loss"]["label_smoothing"] == 0
        assert cfg["model"]["n_encoder_layers"] == cfg["model"]["n_decoder_layers"] == 6


@pytest.mark.slow
def test_the_guides_own_sweep_file_runs_as_documented():
    """docs/sweeps.md's "Your own sweep in five minutes" file: valid, 18 trials, every one
    accepted by attnlab-train's preflight, and an LR study for attnlab-compare."""
    from attnlab.sweeps.check import check_trials

    guide = (REPO / "docs" / "sweeps.md").read_text()
    block = guide.split("### Your own sweep in five minutes", 1)[1].split("```yaml\n", 1)[1]
    spec = yaml.safe_load(block.split("```", 1)[0])
    trials = expand_sweep(spec)
    assert len(trials) == 18 and trials[3].name == "pos_encoding_sinusoidal-peak_lr_0.003-seed_1"
    assert check_trials(trials, REPO / "conf") == []
    assert "scheduler.peak_lr" in spec["parameters"] and spec["metric"]["name"] in UNSMOOTHED


@pytest.mark.slow
def test_lr_width_is_section_2s_protocol_at_each_width_on_one_grid():
    """sweeps/lr_width*.yaml: at d_model 64 every arm is section 2's run of that arm and rate
    (lr_sensitivity.yaml) in everything that trains; both files share one nine-rate grid; the
    d_model override scales d_ff to 4 d_model."""
    section2 = _arms("lr_sensitivity")
    width = {(n, 300, q, lr): flat for (n, q, lr), flat in _arms("lr_width").items()}
    width |= {("post", 0, False, lr): flat for (lr,), flat in _arms("lr_width_nowarmup").items()}
    assert len(width) == 5 * 9 and {k[3] for k in width} >= {k[3] for k in section2}
    plumbing = lambda flat: {k: v for k, v in flat.items() if not PLUMBING.match(k)}  # noqa: E731
    for key, flat in width.items():
        if key in section2:
            assert plumbing(flat) == plumbing(section2[key]), key
    trial = sweep_trials(REPO / "sweeps" / "lr_width.yaml")[0]
    overrides = [o for o in trial.overrides if not override_key(o).startswith("hydra.")]
    for d_model in (32, 128):
        cfg = compose_config(
            REPO / "conf", [*overrides, f"model.d_model={d_model}", "paths.run_dir=run"]
        )
        assert (cfg.model.d_ff, cfg.model.n_heads) == (4 * d_model, 4)


def _all_but_the_model(arms: dict, rate: float) -> list[dict]:
    """Each arm's flat config at `rate` without the model's keys (and data.arch, which follows
    the model) and the plumbing: what must be equal between two architectures' arms."""
    return [
        {
            k: v
            for k, v in flat.items()
            if not k.startswith(("model.", "data.arch")) and not PLUMBING.match(k)
        }
        for (_m, r), flat in arms.items()
        if r == rate
    ]


@pytest.mark.slow
def test_arch_matched_copy_arms_have_the_same_size_and_protocol():
    """sweeps/arch_matched_copy.yaml: the encoder-decoder and the decoder-only model hold the
    same number of parameters (within 5%; built as a run builds them, on the copy task's
    vocabulary), and differ in nothing else that trains but the model preset."""
    from attnlab.pipeline.build import build

    arms = _arms("arch_matched_copy")
    sizes = {}
    for model, rate in arms:
        trial = [f"{k}={v}" for k, v in (("model", model), ("scheduler.peak_lr", rate))]
        cfg = compose_config(REPO / "conf", ["experiment=length_extrapolation", *trial,
                                             "paths.run_dir=run"])  # fmt: skip
        built = build(cfg, dry=True)
        sizes[model] = sum(p.numel() for p in built.module.model.parameters())
    assert sizes["small"] == pytest.approx(sizes["small_decoder_only"], rel=0.05), sizes
    rest = _all_but_the_model(arms, 1.0e-3)
    assert len(rest) == 2 and rest[0] == rest[1]


@pytest.mark.slow
def test_arch_matched_multi30k_arms_have_the_same_size_and_protocol():
    """sweeps/arch_matched_multi30k.yaml: the multi30k_cpu encoder-decoder and its decoder-only
    match hold the same number of parameters (within 5%, on the sweep's 4000-token vocabulary),
    train the same steps, schedule and clipping, and differ in nothing else that trains but the
    model preset; the encoder-decoder is experiment=multi30k_cpu's model."""
    from attnlab.model import Transformer
    from attnlab.pipeline.build import model_config

    arms = _arms("arch_matched_multi30k")
    sizes = {}
    for (model, _rate), flat in arms.items():
        plain = {k.removeprefix("model."): v for k, v in flat.items() if k.startswith("model.")}
        config = model_config(plain, flat["data.vocab_size"], 0)
        sizes[model] = Transformer(config).num_parameters()
        assert flat["trainer.max_steps"] == flat["scheduler.max_steps"] == 1800
        assert flat["trainer.gradient_clip_val"] == 1.0 and flat["trainer.max_time"] is None
    assert sizes["multi30k_cpu"] == pytest.approx(sizes["multi30k_cpu_decoder_only"], rel=0.05)
    rest = _all_but_the_model(arms, 5.0e-3)
    assert len(rest) == 2 and rest[0] == rest[1]
    preset_cfg = compose_config(REPO / "conf", ["experiment=multi30k_cpu", "paths.run_dir=run"])
    preset = flatten(plain_config(preset_cfg))
    encoder_decoder = arms[("multi30k_cpu", 5.0e-3)]
    for key in ("d_model", "n_heads", "d_ff", "n_encoder_layers", "n_decoder_layers", "dropout"):
        assert encoder_decoder[f"model.{key}"] == preset[f"model.{key}"], key


def test_arch_matched_multi30k_seeds_run_the_grids_command_at_a_rate_of_the_grid():
    """sweeps/arch_matched_multi30k_best.yaml (seeds 2 and 3 at the rate chosen on the grid's
    seed 1) is the grid's file but for its name, its folder and its parameters' values, which
    are points of the grid: its seed-1 runs join these as each arm's first seed."""
    names = ("arch_matched_multi30k", "arch_matched_multi30k_best")
    grid, best = (_spec(REPO / "sweeps" / f"{n}.yaml") for n in names)

    def rest(spec: dict) -> dict:
        command = [c for c in spec["command"] if override_key(c) != "hydra.run.dir"]
        return {
            **{k: v for k, v in spec.items() if k not in ("name", "parameters")},
            "command": command,
        }

    assert rest(best) == rest(grid)
    assert list(best["parameters"]) == list(grid["parameters"])
    for key, values in best["parameters"].items():
        assert set(values["values"]) <= set(grid["parameters"][key]["values"]), key
    assert 1 not in best["parameters"]["seed"]["values"]  # the grid's seed 1 is every arm's first
