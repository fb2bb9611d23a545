"""attnlab-train: train, validate and test one model from a Hydra config (conf/train.yaml).

    attnlab-train                                   # small model on `reverse`, CPU, ~1-2 min
    attnlab-train model.pos_encoding=rope model.n_heads=2 scheduler.warmup_steps=200
    attnlab-train -m model.norm_position=pre,post seed=1,2,3
    attnlab-train --help                            # config groups and options

Each run writes its directory (config.yaml, metrics.csv, checkpoints/, results.json, wandb/;
see docs/architecture.md). `train(cfg)` runs a composed config in-process (used by the tests).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import warnings
from pathlib import Path
from urllib.parse import urlsplit

import hydra
import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from attnlab.checkpointing import checkpoint_problem, find_resume_checkpoint, periodic_checkpoints
from attnlab.config import (
    exact_match_enabled,
    flatten,
    to_plain,
    transformer_config,
    validate_config,
)
from attnlab.data.resumable import make_resumable
from attnlab.exit_codes import EXIT_CODES
from attnlab.run_identity import RunConfigChanged, config_drift, run_dir_name, wandb_run_id
from attnlab.run_record import RunRecord, ablation_config, run_name
from attnlab.training.callbacks import Preemption, RNGState
from attnlab.training.module import module_for

PROG = "attnlab-train"

# Lightning 2.6 on torch 2.13 warns on every run about its own use of a torch internal.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")


def _run_dir_resolver(name: str, seed: int, resume: str) -> str:
    """${attnlab_run_dir:${name},${seed},${resume}} in conf/train.yaml's hydra.run.dir."""
    from hydra.core.hydra_config import HydraConfig

    overrides = list(HydraConfig.get().overrides.task)
    return run_dir_name(str(name), overrides, int(seed), fresh=str(resume) == "never")


OmegaConf.register_new_resolver("attnlab_run_dir", _run_dir_resolver, replace=True)


def conf_dir() -> Path:
    """conf/ at the repository root, or $ATTNLAB_CONF_DIR."""
    return Path(os.environ.get("ATTNLAB_CONF_DIR") or Path(__file__).resolve().parents[2] / "conf")


def train(cfg: DictConfig, overrides: list[str] | None = None) -> dict:
    """Fit, test and record one run of the composed config `cfg`; return results.json's content.

    `overrides` are the command-line overrides (for the run name and the record). On an
    exception the record says "failed" (or "interrupted") and the exception propagates.
    """
    overrides = list(overrides or [])
    validate_config(cfg)
    run_dir = Path(cfg.paths.run_dir)
    is_rank_zero = rank_zero_only.rank == 0
    previous = RunRecord.read(run_dir)
    resume = str(cfg.get("resume", "auto"))
    ckpt_path = None
    if resume == "auto" and previous is not None:
        _refuse_changed_config(run_dir, cfg)
        if previous.get("status") == "completed":
            if is_rank_zero:
                print(
                    f"{PROG}: already completed: {run_dir / 'results.json'} "
                    "(use resume=never to train it again)"
                )
            return previous
        ckpt_path = find_resume_checkpoint(run_dir, say=lambda m: print(f"{PROG}: {m}"))
    elif resume not in ("auto", "never"):
        ckpt_path = Path(resume)
        problem = checkpoint_problem(ckpt_path)
        if problem:
            raise ValueError(f"resume={resume}: cannot load this checkpoint ({problem})")
    if ckpt_path is not None and is_rank_zero:
        print(f"{PROG}: resuming from {ckpt_path}")
    if is_rank_zero:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    record = RunRecord(
        run_dir,
        name=cfg.name,
        seed=cfg.seed,
        overrides=overrides,
        config=ablation_config(cfg, overrides),
    )
    prior_wall_time = previous.get("wall_time_s", 0.0) if ckpt_path and previous else 0.0
    if is_rank_zero:
        record.write("running")
    name = cfg.run_name or run_name(overrides, default=cfg.name)
    start = time.perf_counter()
    loggers: list[Logger] = []
    trainer = None
    threads = torch.get_num_threads()
    try:
        if cfg.torch_threads:
            torch.set_num_threads(cfg.torch_threads)  # restored below
        L.seed_everything(cfg.seed, workers=True)
        datamodule = instantiate(to_plain(cfg.data))
        make_resumable(datamodule)  # a resumed run continues at the batch where it stopped
        _check_task(cfg, datamodule.task)
        if is_rank_zero and hasattr(datamodule, "save_tokenizer"):
            datamodule.save_tokenizer(run_dir)  # <run_dir>/tokenizer.model decodes checkpoints
        model_config = transformer_config(cfg.model, datamodule.vocab_size, datamodule.pad_id)
        module = module_for(datamodule.task)(
            model=model_config.to_dict(),
            optim=to_plain(cfg.optim),
            scheduler=to_plain(cfg.scheduler),
            label_smoothing=cfg.loss.label_smoothing,
            loss_normalize=to_plain(cfg.loss)["normalize"],
            bos_id=datamodule.bos_id,
            eos_id=datamodule.eos_id,
            max_steps=cfg.trainer.max_steps,
            exact_match=exact_match_enabled(cfg),
        )
        loggers = build_loggers(cfg, run_dir, name)
        callbacks = [instantiate(c) for c in to_plain(cfg.callbacks).values() if c]
        ckpt_dir = run_dir / "checkpoints"
        callbacks += periodic_checkpoints(ckpt_dir, **to_plain(cfg.checkpoint))
        preemption = Preemption(ckpt_dir)
        callbacks += [preemption, RNGState()]
        trainer = L.Trainer(
            **to_plain(cfg.trainer),
            logger=loggers,
            callbacks=callbacks,
            # checkpoints come from a ModelCheckpoint in `callbacks` only (callbacks=none: none)
            enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
            default_root_dir=str(run_dir),
            use_distributed_sampler=False,  # the data modules shard by rank themselves
            plugins=_cluster_plugins(),
        )
        if is_rank_zero:
            _warn_if_bf16_is_emulated(trainer)
        flat_config = flatten(to_plain_safe(cfg))
        flat_config["model.num_parameters"] = module.model.num_parameters()
        for logger in loggers:
            logger.log_hyperparams(flat_config)
        if is_rank_zero:
            record.write(wandb_run_id=_wandb_id(loggers))

        trainer.fit(
            module,
            datamodule=datamodule,
            ckpt_path=str(ckpt_path) if ckpt_path else None,
            weights_only=True,
        )
        metrics = _scalars(trainer.callback_metrics)
        status = "diverged" if module.diverged else "completed"
        if trainer.interrupted or preemption.interrupted:
            status = "interrupted"
        if status == "completed" and not _has_test_split(datamodule):
            print(f"{PROG}: the data has no test split (data.test_src / test_tgt); not testing")
        elif status == "completed":
            checkpoint = trainer.checkpoint_callback
            best = "best" if checkpoint is not None and checkpoint.best_model_path else None
            trainer.test(module, datamodule=datamodule, ckpt_path=best, weights_only=False)
            metrics.update(_scalars(trainer.callback_metrics))
        results = {
            "metrics": metrics,
            "steps": trainer.global_step,
            "wall_time_s": round(prior_wall_time + time.perf_counter() - start, 2),
        }
        if status == "diverged":
            results["diverged_step"] = module.diverged_step
        if is_rank_zero:
            results = record.write(status, **results)
            _finish_wandb(loggers, results)
            print(f"{PROG}: {status}: {_summary(metrics)}; results in {record.path}")
        return results
    except BaseException as err:
        status = "interrupted" if isinstance(err, KeyboardInterrupt | SystemExit) else "failed"
        if is_rank_zero:
            results = record.write(
                status,
                error=f"{type(err).__name__}: {err}",
                steps=trainer.global_step if trainer is not None else 0,
                wall_time_s=round(prior_wall_time + time.perf_counter() - start, 2),
            )
            _finish_wandb(loggers, results, exit_code=1)
        raise
    finally:
        torch.set_num_threads(threads)


def _cluster_plugins() -> list:
    """Under SLURM: requeue on SIGUSR1 (Lightning saves an HPC checkpoint, resubmits the job,
    and the job's rerun resumes)."""
    import signal

    from lightning.pytorch.plugins.environments import SLURMEnvironment

    if SLURMEnvironment.detect():
        return [SLURMEnvironment(auto_requeue=True, requeue_signal=signal.SIGUSR1)]
    return []


def _refuse_changed_config(run_dir: Path, cfg: DictConfig, shown: int = 3) -> None:
    """RunConfigChanged (nothing written) when `run_dir`'s config.yaml differs from `cfg` in a
    key that defines the run: a preset or a default edited since the run was made."""
    stored_path = run_dir / "config.yaml"
    if not stored_path.is_file():
        return
    stored = OmegaConf.to_container(OmegaConf.load(stored_path))
    drift = config_drift(stored, to_plain_safe(cfg))
    if drift:
        more = f" and {len(drift) - shown} more" if len(drift) > shown else ""
        raise RunConfigChanged(
            f"{run_dir} was trained with a different config ({'; '.join(drift[:shown])}{more}), "
            "probably an edited preset or default; add resume=never to train this config in a "
            "new directory"
        )


def to_plain_safe(cfg: DictConfig) -> dict:
    """The resolved config without Hydra's own node (present when composed for a run)."""
    tree = to_plain(cfg)
    tree.pop("hydra", None)
    return tree


def _has_test_split(datamodule) -> bool:
    """False for parallel text configured without test files (they are optional)."""
    try:
        getattr(datamodule, "split_files", lambda split: None)("test")
    except ValueError:
        return False
    return True


def _check_task(cfg: DictConfig, task: str) -> None:
    arch = str(to_plain(cfg.model)["arch"])
    expected = {"encoder_decoder": "seq2seq", "decoder_only": "lm"}[arch]
    if task != expected:
        raise ValueError(
            f"model.arch={arch!r} needs {expected!r} batches, but data gives {task!r} batches; "
            f"choose a data config for {expected}"
        )


def cpu_has_native_bf16() -> bool:
    """Does this CPU compute bf16 natively (AVX512-BF16 or AMX), as oneDNN reports?"""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch build without oneDNN
        return False


def _warn_if_bf16_is_emulated(trainer: L.Trainer) -> None:
    """One stderr line when bf16 autocast runs on a CPU that emulates bf16. On the 2-core AMD
    EPYC (AVX2) where this was written, a d_model=512 training step took 28x longer in
    bf16-mixed than in 32-true (e.g. experiment=multi30k, a GPU preset, with
    trainer.accelerator=cpu)."""
    from lightning.pytorch.accelerators import CPUAccelerator

    precision = str(trainer.precision)
    if isinstance(trainer.accelerator, CPUAccelerator) and "bf16" in precision:
        if not cpu_has_native_bf16():
            print(
                f"{PROG}: warning: trainer.precision={precision} on a CPU without native bf16 "
                "(no AVX512-BF16/AMX) is emulated and many times slower than "
                "trainer.precision=32-true",
                file=sys.stderr,
            )


def _scalars(metrics: dict) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1}


def _summary(metrics: dict[str, float]) -> str:
    keys = ("test/bleu", "test/exact_match", "test/loss", "test/perplexity", "val/loss_best")
    return ", ".join(f"{k}={metrics[k]:.4g}" for k in keys if k in metrics) or "no metrics"


# --- loggers --------------------------------------------------------------------------------


def build_loggers(cfg: DictConfig, run_dir: Path, name: str) -> list[Logger]:
    """CSV (always: <run_dir>/metrics.csv) and W&B when cfg.logger.wandb is set."""
    # The run directory already holds config.yaml: not a stale log directory.
    warnings.filterwarnings(
        "ignore", message="Experiment logs directory .* exists and is not empty"
    )
    loggers: list[Logger] = [CSVLogger(save_dir=str(run_dir), name="", version="")]
    wandb_cfg = cfg.logger.get("wandb")
    if wandb_cfg is not None:
        import wandb

        offline_reason = wandb_offline_reason(force_offline=wandb_cfg.offline)
        # Offline, wandb's own console output is replaced by the one line printed below.
        settings = wandb.Settings(silent=offline_reason is not None)
        logger = WandbLogger(
            name=name,
            project=wandb_cfg.project,
            entity=wandb_cfg.entity,
            group=cfg.group,
            tags=list(cfg.tags),
            save_dir=str(run_dir),
            offline=offline_reason is not None,
            log_model=wandb_cfg.log_model,
            settings=settings,
            id=wandb_run_id(run_dir),  # the same run directory continues the same W&B run
            resume="allow",
        )
        loggers.append(logger)
        if offline_reason and rank_zero_only.rank == 0 and _wandb_mode() != "disabled":
            run_path = Path(logger.experiment.dir).parent  # .../wandb/offline-run-<id>
            print(
                f"{PROG}: W&B is offline ({offline_reason}); upload later with: "
                f"wandb sync {run_path}"
            )
    return loggers


def _wandb_mode() -> str:
    return os.environ.get("WANDB_MODE", "").lower()


def wandb_offline_reason(force_offline: bool = False) -> str | None:
    """Why W&B must run offline (None: it can go online): WANDB_MODE, logger.wandb.offline,
    no API key (env WANDB_API_KEY or ~/.netrc), or api.wandb.ai unreachable."""
    mode = _wandb_mode()
    if mode in ("offline", "dryrun"):
        return f"WANDB_MODE={mode}"
    if mode == "disabled":
        return "WANDB_MODE=disabled"
    if force_offline:
        return "logger.wandb.offline=true"
    base_url = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    if not _has_wandb_api_key(base_url):
        return "no W&B API key: set WANDB_API_KEY or run `wandb login`"
    if not _reachable(base_url):
        return f"cannot reach {base_url}"
    return None


def _has_wandb_api_key(base_url: str) -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        from wandb.sdk.lib.wbauth import read_netrc_auth

        return bool(read_netrc_auth(host=base_url))
    except Exception:  # no netrc, unreadable netrc, or an older wandb layout
        return False


def _reachable(url: str, timeout: float = 2.0) -> bool:
    """Can we open a TCP connection to the host of `url` within `timeout` (DNS included)?"""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    ok = []

    def connect() -> None:
        try:
            socket.create_connection((parts.hostname, port), timeout=timeout).close()
            ok.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(ok)


def _wandb_id(loggers: list[Logger]) -> str | None:
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            return logger.experiment.id
    return None


def _finish_wandb(loggers: list[Logger], results: dict, exit_code: int = 0) -> None:
    """Final and best metrics and the status into the W&B summary; close the run (multirun
    jobs share one process)."""
    for logger in loggers:
        if isinstance(logger, WandbLogger) and logger._experiment is not None:
            import wandb

            summary = {**results.get("metrics", {}), "status": results["status"]}
            if results.get("diverged_step") is not None:
                summary["diverged_step"] = results["diverged_step"]
            logger.experiment.summary.update(summary)
            wandb.finish(exit_code=exit_code)


# --- command line ---------------------------------------------------------------------------


def _task(cfg: DictConfig) -> dict:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN and cfg.group is None:
        cfg.group = cfg.name  # the jobs of a sweep share a W&B group (set `group` to choose)
    try:
        results = train(cfg, overrides=list(hydra_cfg.overrides.task))
    except RunConfigChanged as err:  # nothing was written: one line, exit 2
        print(f"{PROG}: error: {err}", file=sys.stderr)
        _EXIT_STATUSES.append("config_error")
        return {"status": "config_error", "error": str(err)}
    _EXIT_STATUSES.append(results.get("status", "failed"))
    return results


def main() -> None:
    """Console entry point: preflight the overrides (one-line errors, exit 2), then Hydra."""
    from attnlab.cli_errors import preflight

    preflight(sys.argv[1:], conf_dir(), prog=PROG)
    hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="train")(_task)()
    # The worst status of the run (or of the multirun's jobs) decides the exit code.
    codes = [EXIT_CODES.get(status, 1) for status in _EXIT_STATUSES]
    sys.exit(max(codes, default=0))


_EXIT_STATUSES: list[str] = []


if __name__ == "__main__":
    main()
