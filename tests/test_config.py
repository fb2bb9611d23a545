"""The Hydra config: every group option composes and instantiates; types and choices are
checked; run names and records come out of the overrides."""

import inspect
from dataclasses import fields
from pathlib import Path

import lightning as L
import pytest
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from attnlab.config.plain import to_plain
from attnlab.config.schema import HARNESS_MODEL_KEYS, ModelConfig
from attnlab.config.trainer_schema import ATTNLAB_SETS, TrainerConfig
from attnlab.data.configs import SYNTHETIC_ALGORITHMS
from attnlab.model import Transformer, TransformerConfig
from attnlab.pipeline.build import build
from attnlab.runs.dotted import flatten
from attnlab.runs.loggers import build_loggers
from attnlab.runs.record import ABLATION_KEYS, ablation_config, run_name
from attnlab.training.optimizer import optimizer_from_config
from attnlab.training.schedules import Schedule, schedule_from_config
from build_utils import dry_build
from conftest import model_config

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def test_groups_have_the_required_options():
    assert {"small", "lm_small", "transformer_base", "transformer_big"} <= set(_options("model"))
    assert {"copy", "reverse", "sort"} <= set(_options("data"))
    assert {"cpu", "gpu", "ddp"} <= set(_options("trainer"))
    assert {"wandb", "csv", "none", "tensorboard"} <= set(_options("logger"))
    assert {"noam", "inverse_sqrt", "cosine", "constant"} <= set(_options("scheduler"))
    for group in ("optim", "callbacks", "experiment"):
        assert _options(group)


@pytest.mark.slow
def test_defaults_compose_to_the_small_reverse_run(compose):
    cfg = compose()
    assert cfg.model.name == "small" and cfg.data.name == "reverse"
    assert cfg.trainer.accelerator == "cpu" and cfg.logger.wandb is not None
    assert cfg.name == "default" and cfg.run_name is None and cfg.group is None
    for key in ABLATION_KEYS:
        assert OmegaConf.select(cfg, key, throw_on_missing=True) is not None or key.endswith("d_k")


@pytest.mark.slow
@pytest.mark.parametrize("option", _options("model"))
def test_every_model_option_builds(compose, option):
    cfg = compose([f"model={option}"])
    dry_build(cfg)
    tc = model_config(cfg.model, vocab_size=100, pad_id=0)
    decoder_only = option.startswith("lm") or option.endswith("decoder_only")
    assert tc.arch == ("decoder_only" if decoder_only else "encoder_decoder")
    if tc.d_model <= 512:  # the big model (213M parameters) is only validated
        assert Transformer(tc).num_parameters() > 0


@pytest.mark.slow
def test_paper_table_3_values(compose):
    base = compose(["model=transformer_base"]).model
    big = compose(["model=transformer_big"]).model
    assert (base.n_encoder_layers, base.d_model, base.d_ff, base.n_heads, base.dropout) == (
        6,
        512,
        2048,
        8,
        0.1,
    )
    assert (big.d_model, big.d_ff, big.n_heads, big.dropout) == (1024, 4096, 16, 0.3)
    paper = compose(["experiment=paper_base"])
    assert paper.scheduler.warmup_steps == 4000 and paper.loss.label_smoothing == 0.1
    assert list(paper.optim.betas) == [0.9, 0.98] and paper.optim.eps == 1e-9


def test_model_schema_defaults_are_transformer_config_defaults():
    defaults = TransformerConfig()
    for f in fields(ModelConfig):
        if f.name not in HARNESS_MODEL_KEYS:
            default = f.default_factory() if callable(f.default_factory) else f.default
            assert str(
                getattr(ModelConfig, f.name, default).value
                if hasattr(default, "value")
                else default
            ) == str(getattr(defaults, f.name)), f.name


@pytest.mark.slow
@pytest.mark.parametrize("option", _options("data"))
def test_every_data_option_instantiates(compose, option):
    dm = instantiate(to_plain(compose([f"data={option}"]).data))
    assert isinstance(dm, L.LightningDataModule)
    assert dm.task in ("seq2seq", "lm") and (dm.pad_id, dm.bos_id, dm.eos_id) == (0, 2, 3)


@pytest.mark.slow
@pytest.mark.parametrize("task", SYNTHETIC_ALGORITHMS)
@pytest.mark.parametrize("model", ["small", "lm_small"])
def test_synthetic_data_follows_the_model_arch(compose, task, model):
    dm = instantiate(to_plain(compose([f"data={task}", f"model={model}"]).data))
    dm.setup()
    assert dm.task == ("seq2seq" if model == "small" else "lm")
    assert dm.vocab_size > dm.eos_id and dm.tokenizer.decode([4, 5]) == "a b"
    batch = next(iter(dm.train_dataloader()))
    expected = {"src", "tgt_in", "tgt_out"} if dm.task == "seq2seq" else {"tokens", "targets"}
    assert expected <= set(batch)


@pytest.mark.slow
@pytest.mark.parametrize("option", _options("scheduler"))
def test_every_scheduler_option_builds(compose, option):
    """Each conf/scheduler option names a schedule class whose fields are the option's keys (so
    every key it shows can be overridden and nothing it takes is hidden) plus the run's facts."""
    cfg = compose([f"scheduler={option}"])
    s = to_plain(cfg.scheduler)
    schedule = schedule_from_config(s, cfg.model.d_model, cfg.trainer.max_steps)
    assert isinstance(schedule, Schedule) and 0 < schedule(100) < 1
    fields = set(inspect.signature(type(schedule)).parameters) - {"d_model"}
    assert fields == set(s) - {"_target_", "_partial_"}


@pytest.mark.slow
@pytest.mark.parametrize("option", _options("optim"))
def test_every_optim_option_is_a_torch_adam_with_paper_betas(compose, option):
    import torch

    optim = to_plain(compose([f"optim={option}"]).optim)
    assert optim["betas"] == [0.9, 0.98] and optim["eps"] == 1e-9
    built = optimizer_from_config(Transformer(TransformerConfig(vocab_size=9, d_model=8,
                                  n_heads=2, d_ff=16, n_encoder_layers=1, n_decoder_layers=1)),
                                  optim)  # fmt: skip
    assert isinstance(built, torch.optim.Adam | torch.optim.AdamW)


@pytest.mark.slow
@pytest.mark.parametrize("option", _options("trainer"))
def test_every_trainer_option_is_trainer_kwargs(compose, option):
    kwargs = to_plain(compose([f"trainer={option}"]).trainer)
    assert kwargs.pop("_target_") == "lightning.Trainer"
    assert set(kwargs) <= set(inspect.signature(L.Trainer.__init__).parameters)
    if option == "cpu":
        trainer = L.Trainer(**kwargs, logger=False, use_distributed_sampler=False)
        assert trainer.max_steps == 1000
    if option == "ddp":
        assert kwargs["strategy"] == "ddp" and kwargs["devices"] == 2


def test_trainer_keys_are_exactly_the_arguments_of_lightning_trainer():
    keys = {f.name for f in fields(TrainerConfig)} - {"_target_"}
    assert not keys & set(ATTNLAB_SETS)
    assert keys | set(ATTNLAB_SETS) == set(inspect.signature(L.Trainer.__init__).parameters) - {
        "self"
    }


class CountingTrainer(L.Trainer):
    """A Trainer of one's own, named by trainer._target_."""

    made = 0

    def __init__(self, *args, **kwargs):
        type(self).made += 1
        super().__init__(*args, **kwargs)


@pytest.mark.slow
def test_the_trainer_is_the_class_its_target_names_and_a_bad_target_is_one_line(compose, tmp_path):
    from attnlab.config.plain import plain_config
    from attnlab.pipeline.build import ConfigRefused, attach

    target = f"trainer._target_={__name__}.CountingTrainer"
    cfg = plain_config(compose(["debug=tiny", "logger=none", target, f"paths.run_dir={tmp_path}"]))
    built = attach(build(cfg, tmp_path), cfg, tmp_path, "run")
    assert (
        type(built.trainer) is CountingTrainer
        and built.trainer.max_steps == cfg["trainer"]["max_steps"]
    )
    assert CountingTrainer.made >= 2  # the arguments' check built one too
    with pytest.raises(
        ConfigRefused, match=r"^trainer._target_='lightning.Trainr' cannot be found"
    ):
        dry_build(compose(["trainer._target_=lightning.Trainr"]))


@pytest.mark.slow
@pytest.mark.parametrize(
    "override",
    ["trainer.fast_dev_run=true", "trainer.profiler=simple", "trainer.overfit_batches=2",
     "trainer.detect_anomaly=true", "trainer.accumulate_grad_batches=2", "trainer.min_steps=3"],
)  # fmt: skip
def test_lightning_switches_need_no_plus(compose, override):
    key, value = override.split("=")
    assert str(OmegaConf.select(compose([override]), key)).lower() == value


@pytest.mark.slow
@pytest.mark.parametrize(
    "option", [*_options("logger"), "[wandb,tensorboard]", "[csv,tensorboard]"]
)
def test_every_logger_option_builds(compose, option, tmp_path, monkeypatch):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    cfg = compose([f"logger={option}"])
    names = [type(lg).__name__ for lg in build_loggers(cfg, tmp_path, "run")]
    wandb.finish()
    assert names[0] == "ContinuingCSVLogger"  # metrics.csv, always
    assert ("ReplayingWandbLogger" in names) == ("wandb" in option)
    assert ("ReplayingTensorBoardLogger" in names) == ("tensorboard" in option)
    monkeypatch.setenv("WANDB_MODE", "disabled")  # W&B off, whatever the config says
    names = [type(lg).__name__ for lg in build_loggers(cfg, tmp_path / "off", "run")]
    assert "ReplayingWandbLogger" not in names


def _quiet_module_class():
    from attnlab.training.module import TransformerModule

    class QuietSeq2Seq(TransformerModule):
        """A researcher's own LightningModule, named by module._target_."""

    return QuietSeq2Seq


QuietSeq2Seq = _quiet_module_class()


@pytest.mark.slow
def test_the_module_is_the_class_its_target_names(compose, tmp_path):
    from attnlab.config.plain import plain_config
    from attnlab.tasks.lm import LanguageModeling
    from attnlab.tasks.seq2seq import Seq2Seq
    from attnlab.training.module import TransformerModule

    class_name = f"{__name__}.QuietSeq2Seq"
    for overrides, expected, task in (
        ([], TransformerModule, Seq2Seq),
        ([f"module._target_={class_name}"], QuietSeq2Seq, Seq2Seq),
        (["model=lm_small"], TransformerModule, LanguageModeling),  # the data's task
    ):
        cfg = plain_config(compose([f"paths.run_dir={tmp_path}", *overrides]))
        module = build(cfg, tmp_path).module
        assert type(module) is expected and type(module.task) is task
        assert module.hparams.scheduler["peak_lr"] == cfg["scheduler"]["peak_lr"]  # either way


def _own_module_class():
    import lightning as L

    class OwnModule(L.LightningModule):
        """A LightningModule of one's own, not a TransformerModule: it keeps what it is given."""

        def __init__(self, model, task, optim, scheduler, **rest):
            super().__init__()
            self.model, self.task, self.optim, self.scheduler, self.rest = (
                model, task, optim, scheduler, rest
            )  # fmt: skip

    return OwnModule


OwnModule = _own_module_class()


@pytest.mark.slow
def test_module_target_gets_the_built_model_task_and_partials(compose, tmp_path):
    """module._target_ may name any LightningModule: it is given the built model, the data's
    task and the optimizer and schedule as partials; TransformerModule keeps their configs, so
    its checkpoint's hyper-parameters are plain values."""
    import functools

    import torch

    from attnlab.config.plain import plain_config
    from attnlab.model import Transformer
    from attnlab.tasks.base import Task
    from attnlab.training.module import TransformerModule

    cfg = plain_config(
        compose([f"paths.run_dir={tmp_path}", f"module._target_={__name__}.OwnModule"])
    )
    module = build(cfg, tmp_path).module
    assert type(module) is OwnModule and isinstance(module.model, Transformer)
    assert isinstance(module.task, Task) and module.task.name == "seq2seq"
    optimizer = module.optim(module.model.parameters(), lr=1.0)
    assert isinstance(module.optim, functools.partial) and isinstance(optimizer, torch.optim.Adam)
    assert optimizer.defaults["betas"] == (
        0.9,
        0.98,
    )  # the config's, a tuple or list as torch keeps it
    assert isinstance(module.scheduler, functools.partial)
    assert module.rest["max_steps"] == cfg["trainer"]["max_steps"]

    ours = TransformerModule(
        module.model, module.optim, module.scheduler, task=module.task, max_steps=1000
    )
    h = ours.hparams
    assert h.model == module.model.config.to_dict() and h.task == "seq2seq"
    assert h.optim["_target_"] == "torch.optim.adam.Adam" and h.optim["_partial_"] is True
    assert h.scheduler["_target_"].endswith("schedules.Cosine")
    again = TransformerModule(**h)  # what load_from_checkpoint does with them
    assert again.config == ours.config and again.peak_lr() == ours.peak_lr()


def csv_beside(run, subdir="tensorboard"):
    """A logger builder with tensorboard_logger's arguments, for the `_target_` test below."""
    from lightning.pytorch.loggers import CSVLogger

    return CSVLogger(run.run_dir / subdir, name=run.name)


@pytest.mark.slow
def test_a_logger_is_the_builder_its_target_names(compose, tmp_path):
    cfg = compose(["logger=tensorboard", f"logger.tensorboard._target_={__name__}.csv_beside"])
    loggers = build_loggers(cfg, tmp_path, "run")
    assert [type(lg).__name__ for lg in loggers] == ["ContinuingCSVLogger", "CSVLogger"]
    assert (
        loggers[1].name == "run" and Path(loggers[1].root_dir) == tmp_path / "tensorboard" / "run"
    )


@pytest.mark.slow
@pytest.mark.parametrize("option", _options("callbacks"))
def test_every_callbacks_option_instantiates(compose, option, tmp_path):
    cfg = compose([f"callbacks={option}", f"paths.run_dir={tmp_path}"])
    callbacks = [instantiate(c) for c in to_plain(cfg.callbacks).values()]
    assert all(isinstance(c, L.Callback) for c in callbacks)
    if option != "none":
        assert any(type(c).__name__ == "ModelCheckpoint" for c in callbacks)


@pytest.mark.slow
@pytest.mark.parametrize("option", _options("experiment"))
def test_every_experiment_composes_and_validates(compose, option, tmp_path):
    cfg = compose([f"experiment={option}"])
    if cfg.data.get("train_src", "") is None:  # data given by path (paper_*: WMT14)
        files = []
        for key in ("train_src", "train_tgt", "val_src", "val_tgt"):
            (tmp_path / key).write_text("a line\nanother line\n")
            files.append(f"data.{key}={tmp_path / key}")
        cfg = compose([f"experiment={option}", *files])
    dry_build(cfg)
    assert cfg.name == option  # presets name their runs


@pytest.mark.slow
def test_types_are_checked_when_composing_and_a_choice_once_by_its_owner_when_built(compose):
    """A choice is its declaring class's rule (TransformerConfig for model.pos_encoding), asked
    when the run is built (the preflight builds it dry), not a second time by the schema."""
    from attnlab.pipeline.build import ConfigRefused

    cfg = compose(["model.pos_encoding=foo"])
    from attnlab.model.config import POS_ENCODINGS

    with pytest.raises(ConfigRefused, match=r"^model.pos_encoding='foo' is not valid; expected "
                       f"one of: {', '.join(POS_ENCODINGS)}"):  # fmt: skip
        dry_build(cfg)
    with pytest.raises(ConfigCompositionException):
        compose(["scheduler=nope"])
    with pytest.raises(ConfigCompositionException):
        compose(["trainer.max_steps=many"])


@pytest.mark.slow
def test_the_mistake_switches_and_fast_paths_reach_the_model_from_the_command_line(compose):
    cfg = compose(
        [
            "model.attn_scale=none",
            "model.mask_source_padding=false",
            "model.activation_checkpointing=true",
        ]
    )
    dry_build(cfg)
    model = model_config(cfg.model, vocab_size=21, pad_id=0)
    assert (model.attn_scale, model.mask_source_padding) == ("none", False)
    assert model.activation_checkpointing is True
    with pytest.raises(
        ValueError, match=r"^model.attn_scale='sqrt' is not valid; expected one of: sqrt_dk, none$"
    ):
        dry_build(compose(["model.attn_scale=sqrt"]))


@pytest.mark.slow
def test_validate_config_names_model_keys(compose):
    with pytest.raises(ValueError, match=r"model\.d_model=64 is not divisible by model\.n_heads=3"):
        dry_build(compose(["model.n_heads=3"]))
    with pytest.raises(ValueError, match=r"model\.dropout=-0\.1"):
        dry_build(compose(["model.dropout=-0.1"]))
    with pytest.raises(ValueError, match=r"data\.train_len"):
        dry_build(compose(["data.train_len=[4,2]"]))
    with pytest.raises(ValueError, match=r"model\.max_len=10 is shorter .* \(14\)"):
        dry_build(compose(["model.pos_encoding=learned", "model.max_len=10"]))
    with pytest.raises(ValueError, match=r"model\.foo is not a model option"):
        dry_build(compose(["+model.foo=1"]))
    dry_build(compose(["model.n_heads=3", "model.d_k=32"]))  # an explicit d_k decouples


def test_flatten_gives_dotted_keys():
    assert flatten({"model": {"n_heads": 2, "d_k": None}, "seed": 1, "tags": ["a"]}) == {
        "model.n_heads": 2,
        "model.d_k": None,
        "seed": 1,
        "tags": ["a"],
    }


def test_run_name_uses_aliases_and_skips_plumbing():
    overrides = [
        "model.pos_encoding=rope",
        "model.norm_position=pre",
        "model.n_heads=8",
        "trainer.max_steps=10",
        "logger=none",
        "seed=1",
        "data=copy",
        "model.d_model=256",
        "scheduler.warmup_steps=0",
    ]
    assert run_name(overrides, "default") == "pe=rope-norm=pre-h=8-s=1-data=copy-d_model=256-wu=0"
    assert run_name(["trainer.max_steps=5"], "default") == "default"
    assert run_name(["seed=1", "model.n_heads=2", "seed=3"], "x") == "h=2-s=3"  # last one wins


def test_ablation_config_records_keys_and_overrides(compose):
    overrides = ["model.pos_encoding=rope", "data=copy", "trainer.max_steps=7"]
    config = ablation_config(compose(overrides), overrides)
    assert config["model.pos_encoding"] == "rope" and config["model.d_k"] is None
    assert config["data"] == "copy" and config["trainer.max_steps"] == 7
    assert set(ABLATION_KEYS) <= set(config)


def test_conf_dir_is_the_repository_conf_or_the_environment(monkeypatch, tmp_path):
    from attnlab.config.location import conf_dir

    monkeypatch.delenv("ATTNLAB_CONF_DIR", raising=False)
    assert conf_dir() == CONF_DIR
    monkeypatch.setenv("ATTNLAB_CONF_DIR", str(tmp_path))
    assert conf_dir() == tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [[], ["data=multi30k"], ["model=lm_small", "data=lm_text"]])
def test_a_composed_config_pickles(compose, overrides):
    """The schemas made at run time (attnlab.config.structured) are found by pickle, as
    multiprocessing with spawn, torch.save or a launcher without cloudpickle need."""
    import pickle

    cfg = compose(overrides)
    assert pickle.loads(pickle.dumps(cfg)) == cfg


@pytest.mark.slow
def test_an_optimizer_or_schedule_config_without_partial_is_built_as_a_partial(compose, tmp_path):
    """The preflight completes optim and scheduler as partials whether they say `_partial_` or
    not; the build does the same, so such a config cannot pass the preflight and fail later."""
    from attnlab.config.plain import plain_config

    overrides = [f"paths.run_dir={tmp_path}", "~optim._partial_", "~scheduler._partial_"]
    composed = compose(overrides)
    dry_build(composed)
    cfg = plain_config(composed)
    assert "_partial_" not in cfg["optim"] and "_partial_" not in cfg["scheduler"]
    module = build(cfg, tmp_path).module
    optimizer = module.configure_optimizers()["optimizer"]
    assert type(optimizer).__name__ == "Adam" and module.peak_lr() == cfg["scheduler"]["peak_lr"]
