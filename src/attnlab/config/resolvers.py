"""attnlab's OmegaConf resolvers, registered on import of attnlab.config.schema (so every
composed config can use them) and by attnlab-train before Hydra runs.

Where a run writes (conf/train.yaml):

    ${attnlab_run_dir:${name},${seed},${resume}}   the run directory's name (attnlab.runs.identity)
    ${attnlab_output_dir:}                         the job's output directory, also where Hydra
                                                   has not set it (--cfg job --resolve)
    ${attnlab_multirun_dir:${paths.multirun_root},${name}}
                                                   a multirun's folder: <root>/<name> for a named
                                                   experiment (rerun: resumed), and a new dated
                                                   <root>/default/<date>_<time> for each unnamed
                                                   one (as Hydra's default), never an overwrite

Values that follow from others (the presets):

    ${attnlab_world:${trainer.devices},${trainer.num_nodes}}   processes of the run (devices x
                                                               nodes; 1 where unknown, e.g. auto)
    ${attnlab_mul:a,b,...}                                     the product of integers
    ${attnlab_accumulation:tokens_per_step,${data.max_tokens}} gradient accumulation: the number
                                                               of forward passes of max_tokens
                                                               that make about tokens_per_step

experiment=paper_base uses them for the paper's ~25,000 source + 25,000 target tokens per step:
data.max_tokens = 6250 per device x the world size (each forward pass, over all devices), and
trainer.accumulate_grad_batches = round(50000 / data.max_tokens).
"""

from __future__ import annotations

import math

from omegaconf import OmegaConf


def world_size(trainer) -> int | None:
    """Processes of the run, trainer.devices x trainer.num_nodes, where the config says it (an
    integer or a list of device ids); None for "auto", -1 and the like."""
    devices = trainer.get("devices", 1)
    if OmegaConf.is_list(devices) or isinstance(devices, list | tuple):
        n = len(devices)
    elif isinstance(devices, int) and not isinstance(devices, bool):
        n = devices
    elif isinstance(devices, str) and devices.strip().isdigit():
        n = int(devices)
    else:
        return None
    return n * int(trainer.get("num_nodes", 1)) if n > 0 else None


def world(devices, num_nodes=1) -> int:
    """trainer.devices x trainer.num_nodes as world_size counts them (an integer or a list of
    device ids), or 1 where the config does not say ("auto", -1)."""
    n = world_size(OmegaConf.create({"devices": devices, "num_nodes": int(num_nodes)}))
    return n or 1


def mul(*factors) -> int:
    return math.prod(int(f) for f in factors)


def accumulation(tokens_per_step, max_tokens) -> int:
    """Forward passes of max_tokens per optimizer step: round(tokens_per_step / max_tokens),
    at least 1."""
    return max(1, round(int(tokens_per_step) / int(max_tokens)))


def _run_dir_resolver(name: str, seed: int, resume: str) -> str:
    """${attnlab_run_dir:${name},${seed},${resume}} in conf/train.yaml's hydra.run.dir."""
    from hydra.core.hydra_config import HydraConfig

    from attnlab.runs.identity import run_dir_name

    overrides = list(HydraConfig.get().overrides.task)
    return run_dir_name(str(name), overrides, int(seed), fresh=str(resume) == "never")


def _output_dir_resolver() -> str:
    """${attnlab_output_dir:} in conf/train.yaml's paths.run_dir: the job's output directory,
    also where Hydra has not set it (--cfg job --resolve prints the config without a job)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    if not OmegaConf.is_missing(hydra_cfg.runtime, "output_dir"):
        return str(hydra_cfg.runtime.output_dir)
    if hydra_cfg.mode == RunMode.MULTIRUN:
        return f"{hydra_cfg.sweep.dir}/{hydra_cfg.sweep.subdir}"
    return str(hydra_cfg.run.dir)


STAMP_ENV = "ATTNLAB_MULTIRUN_STAMP"  # set by attnlab-train -m; jobs in other processes inherit it
_stamp: list[str] = []


def multirun_stamp() -> str:
    """This multirun's date and time, the same in every process of it (the launching process
    sets STAMP_ENV before its launcher starts any job)."""
    import os
    from datetime import datetime

    if os.environ.get(STAMP_ENV):
        return os.environ[STAMP_ENV]
    if not _stamp:
        _stamp.append(datetime.now().strftime("%Y-%m-%d_%H-%M-%S"))
    return _stamp[0]


def _multirun_dir_resolver(root: str, name: str) -> str:
    """${attnlab_multirun_dir:${paths.multirun_root},${name}} in conf/train.yaml's
    hydra.sweep.dir: unnamed multiruns (name=default) get a new dated folder each."""
    if str(name) == "default":
        return f"{root}/default/{multirun_stamp()}"
    return f"{root}/{name}"


def register() -> None:
    for name, fn in (
        ("attnlab_run_dir", _run_dir_resolver),
        ("attnlab_output_dir", _output_dir_resolver),
        ("attnlab_multirun_dir", _multirun_dir_resolver),
        ("attnlab_world", world),
        ("attnlab_mul", mul),
        ("attnlab_accumulation", accumulation),
    ):
        OmegaConf.register_new_resolver(name, fn, replace=True)
