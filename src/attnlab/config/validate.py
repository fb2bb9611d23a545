"""Checks between config fields, before anything is built or written.

Types and choices were already checked while composing (attnlab.config.schema). `validate_config`
adds the rules that involve several keys or the data, each a short function below, and raises
ValueError (DataConfigError for the data files) with one line that names the key.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from attnlab.config.data_check import DataConfigError, check_data_config
from attnlab.config.plain import to_plain
from attnlab.config.resolvers import world_size
from attnlab.config.schema import SYNTHETIC_SCHEMA, model_options
from attnlab.config.targets import located_class, target_problem
from attnlab.config.values import check_values
from attnlab.data.options import TASK_OF_ARCH
from attnlab.data.vocab import NUM_SPECIAL
from attnlab.model.config import TransformerConfig, prefix_fields
from attnlab.validation import integer_problem, number_problem, raise_first

__all__ = ["DataConfigError", "validate_config"]


def validate_config(cfg: DictConfig) -> None:
    """Every check below, in turn; the first problem raises. The checks that import the
    builders (and so torch) come last: a typo in a value is answered without loading torch."""
    model = TransformerConfig.from_options(
        model_options(cfg.model), vocab_size=_vocab_size_hint(cfg.data), pad_id=0, prefix="model."
    )
    _check_loss(cfg)
    check_values(cfg)
    _check_optimizer(cfg)
    _check_precision(cfg)
    _check_run_control(cfg)
    _check_task(cfg, model.arch)
    _check_world_size(cfg)
    _check_targets(cfg)
    schedule = _check_schedule(cfg, model.d_model)
    _check_time_horizon(cfg, schedule)
    _check_optimizer_arguments(cfg)
    _check_components(model)
    _check_synthetic_data(cfg, model)
    _check_resume_checkpoint(cfg, model)
    problems = check_data_config(to_plain(cfg.data))  # text data: every file read in full
    if problems:
        raise DataConfigError(problems)


# The groups whose nodes name what builds them (`_target_`), checked before anything is built.
_BUILT_GROUPS = ("data", "module", "optim", "scheduler", "logger", "callbacks")


def _check_targets(cfg: DictConfig) -> None:
    """Each `_target_` names something importable and callable: one line naming the key, not a
    traceback from inside the run."""
    for group in _BUILT_GROUPS:
        node = cfg.get(group)
        if node is None:
            continue
        tree = OmegaConf.to_container(node, resolve=False, enum_to_str=True)
        for key, target in _targets(tree, group):
            problem = target_problem(target)
            if problem:
                raise ValueError(
                    f"{key}={target!r} {problem}; expected the dotted path of a class or "
                    "function (package.module.Name)"
                )


def _targets(tree, path: str):
    """(dotted key, value) of every `_target_` in a plain config tree."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key == "_target_" and value is not None:
                yield f"{path}._target_", value
            else:
                yield from _targets(value, f"{path}.{key}")


def _vocab_size_hint(data: DictConfig) -> int:
    """The vocabulary size the data will have, where the config tells it (synthetic data);
    otherwise a stand-in that only needs to exceed the special ids."""
    if OmegaConf.get_type(data) is SYNTHETIC_SCHEMA:
        return NUM_SPECIAL + int(data.n_symbols) + (str(data.arch) == "decoder_only")
    return int(data.get("vocab_size") or NUM_SPECIAL + 1)


def _check_loss(cfg: DictConfig) -> None:
    raise_first(
        [
            number_problem("loss.label_smoothing", cfg.loss.label_smoothing, 0.0, 1.0),
            number_problem("loss.z_loss", cfg.loss.z_loss, 0.0),
        ]
    )


def _check_schedule(cfg: DictConfig, d_model: int):
    """The schedule checks its own arguments when built (attnlab.training.schedules): built
    here with the run's d_model and horizon, its error is the one line. Returns it."""
    from attnlab.training.schedules import schedule_from_config

    try:
        return schedule_from_config(to_plain(cfg.scheduler), d_model, cfg.trainer.get("max_steps"))
    except TypeError as err:  # a key the schedule's class does not take
        raise ValueError(
            f"scheduler ({cfg.scheduler.get('_target_')}) is not valid: {err}"
        ) from None


def _check_time_horizon(cfg: DictConfig, schedule) -> None:
    """A callback setting the schedule's horizon from the time budget (TimeBudgetHorizon) needs
    trainer.max_time and a schedule with a horizon (`schedule`, as _check_schedule built it);
    its own arguments are checked by building it."""
    from attnlab.training.time_horizon import TimeBudgetHorizon, horizon_problem

    for key, node in (cfg.get("callbacks") or {}).items():
        target = str(node.get("_target_", "")) if isinstance(node, DictConfig) else ""
        if not target.endswith(TimeBudgetHorizon.__name__):
            continue
        arguments = {k: v for k, v in to_plain(node).items() if not k.startswith("_")}
        TimeBudgetHorizon(**arguments)  # its arguments: one line naming the argument
        problem = horizon_problem(f"callbacks.{key}", cfg.trainer.get("max_time"), schedule)
        if problem:
            raise ValueError(problem)


def _check_optimizer_arguments(cfg: DictConfig) -> None:
    """The optimizer checks its own arguments (attnlab.training.optimizer.check_optimizer)."""
    from attnlab.training.optimizer import check_optimizer

    check_optimizer(to_plain(cfg.optim))


def _check_optimizer(cfg: DictConfig) -> None:
    """optim.fused and optim.foreach name two implementations: at most one may be true; a
    fused optimizer unscales 16-mixed's gradients inside its step, too late for clipping."""
    if cfg.optim.get("fused") and cfg.optim.get("foreach"):
        raise ValueError(
            "optim.fused=true and optim.foreach=true cannot both be set; expected at most one "
            "of them true (both null: the fastest one torch supports)"
        )
    if cfg.optim.get("fused") and str(cfg.trainer.get("precision")) in _FP16_MIXED:
        raise ValueError(
            f"optim.fused=true does not work with trainer.precision={cfg.trainer.precision} "
            "(its gradient scaler must unscale before clipping); expected optim.fused=null or "
            "false, or trainer.precision=bf16-mixed"
        )


_FP16_MIXED = ("16-mixed", "16")


def _check_precision(cfg: DictConfig) -> None:
    """fp16 mixed precision needs a GPU: on a CPU Lightning would train in bf16-mixed instead
    (emulated on most CPUs, many times slower) with only a warning."""
    precision = str(cfg.trainer.get("precision", "32-true"))
    if precision not in _FP16_MIXED:
        return
    accelerator = str(cfg.trainer.get("accelerator", "auto"))
    if accelerator == "auto":
        import torch

        accelerator = "gpu" if torch.cuda.is_available() else "cpu"
    if accelerator == "cpu":
        raise ValueError(
            f"trainer.precision={precision} is not supported on a CPU (Lightning would use "
            "bf16-mixed instead); expected 32-true or bf16-mixed, or trainer.accelerator=gpu"
        )


def _check_run_control(cfg: DictConfig) -> None:
    """resume and checkpoint.*."""
    resume = str(cfg.get("resume", "auto"))
    if resume not in ("auto", "never") and not Path(resume).is_file():
        raise ValueError(
            f"resume={resume!r} is not valid; expected auto, never or the path of an existing "
            "checkpoint file"
        )
    ckpt = cfg.get("checkpoint")
    if ckpt is None:
        return
    for key in ("every_n_steps", "every_minutes"):
        value = ckpt.get(key)
        if value is not None and value <= 0:
            raise ValueError(
                f"checkpoint.{key}={value} is not valid; expected a positive number or null"
            )
    raise_first([integer_problem("checkpoint.keep_last", ckpt.keep_last, 1)])


def _check_resume_checkpoint(cfg: DictConfig, model: TransformerConfig) -> None:
    """resume=<file>: a readable attnlab checkpoint of this architecture (the vocabulary is
    compared where the config tells it: synthetic data)."""
    resume = str(cfg.get("resume", "auto"))
    if resume in ("auto", "never"):
        return
    from attnlab.runs.checkpoints import resume_problem

    options = model.to_dict()
    if OmegaConf.get_type(cfg.data) is not SYNTHETIC_SCHEMA:
        options.pop("vocab_size")  # known once the tokenizer is built
    problem = resume_problem(Path(resume), options)
    if problem:
        raise ValueError(f"resume={resume} {problem}; expected a checkpoint of this model, or "
                         "resume=auto / never")  # fmt: skip


def _check_world_size(cfg: DictConfig) -> None:
    """trainer.num_nodes >= 1; data.batch_size (a global batch) divisible by the world size."""
    from attnlab.data.batching import per_rank_batch_size

    raise_first([integer_problem("trainer.num_nodes", cfg.trainer.get("num_nodes", 1), 1)])
    world = world_size(cfg.trainer)
    batch_size = cfg.data.get("batch_size")
    if world and isinstance(batch_size, int) and not isinstance(batch_size, bool):
        per_rank_batch_size(batch_size, world)


def _check_task(cfg: DictConfig, arch: str) -> None:
    """An encoder-decoder cannot train on a token stream (language-model data). Sentence pairs
    serve both architectures (synthetic and translation data: the datamodule's `task` follows
    model.arch, attnlab.data.pairs)."""
    target = OmegaConf.select(cfg, "data._target_", default=None)
    cls = located_class(target)
    if cls is None:
        return  # instantiate reports an unknown _target_
    name = target.rpartition(".")[2]
    option = getattr(cls, "option", "") or name
    _task_fits(arch, getattr(cls, "task", None), OmegaConf.select(cfg, "data.name", default=option))


# What to train on data of a task instead: (model option, experiment preset or None).
_FITS = {
    "lm": {
        "lm_text": ("model=lm_small", None),
        "tinyshakespeare": ("model=lm_small", "tinyshakespeare"),
    },
}


def _task_fits(arch: str, task: str | None, data_name: str) -> None:
    """ValueError unless data of `task` ("seq2seq" or "lm") can train a model.arch=`arch`;
    the message names a model (and an experiment preset) that can."""
    needed = TASK_OF_ARCH[arch]
    if isinstance(task, str) and task and task != needed:
        model, preset = _FITS.get(task, {}).get(data_name, (None, None))
        other = "decoder_only" if task == "lm" else "encoder_decoder"
        article = "an" if other[0] in "ae" else "a"
        hint = (
            f"; for data={data_name} use {article} {other} model such as {model}" if model else ""
        )
        hint += f" or experiment={preset}" if preset else ""
        raise ValueError(
            f"model.arch={arch!r} cannot train on data={data_name!r} ({task} data): "
            f"{'an' if arch[0] in 'ae' else 'a'} {arch} model needs {needed} data{hint}"
        )


def _check_synthetic_data(cfg: DictConfig, model: TransformerConfig) -> None:
    """The synthetic DataModule's own argument rules, and positions enough for its longest
    sequence (an encoding with a limit: learned)."""
    if OmegaConf.get_type(cfg.data) is not SYNTHETIC_SCHEMA:
        return
    from attnlab.data.configs import SyntheticDataConfig, options_of
    from attnlab.data.synthetic import SyntheticDataModule, max_positions

    kwargs = to_plain(cfg.data)
    kwargs.pop("_target_")
    options = options_of(SyntheticDataConfig, kwargs, SyntheticDataModule.__name__)
    raise_first(SyntheticDataModule.own_problems(options))  # the module's own rules, unbuilt
    raise_first([positions_problem(model, max_positions(options))])


def positions_problem(model: TransformerConfig, needed: int) -> str | None:
    """Unless the model's positional encoding represents `needed` positions (the one home of
    the rule; attnlab.model.positions: only learned positions have a limit, model.max_len)."""
    from attnlab.model.positions import encoding_class

    limit = encoding_class(model.pos_encoding).limit(model)
    if limit is None or limit >= needed:
        return None
    return (
        f"model.max_len={limit} is shorter than the longest sequence of the data ({needed}); "
        f"{model.pos_encoding} positions need model.max_len >= {needed}"
    )


def _check_components(model: TransformerConfig) -> None:
    """The model's components' own rules (its positional encoding's: attnlab.model.positions),
    asked without building them; errors name `model.<field>`."""
    from attnlab.model.positions import encoding_class

    problems = encoding_class(model.pos_encoding).problems(model)
    if problems:
        raise ValueError(prefix_fields(problems[0], "model."))
