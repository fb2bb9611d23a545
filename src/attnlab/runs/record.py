"""results.json, the machine-readable record of a run (format: docs/architecture.md), its run
name, and the git commit it ran from. Imports neither torch nor Lightning."""

from __future__ import annotations

import json
import math
import os
import subprocess
from enum import Enum
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from attnlab.runs.overrides import in_name
from attnlab.runs.status import STATUSES, Status

# The keys an ablation varies: always recorded in results.json (with any overridden key).
ABLATION_KEYS = (
    "model.n_heads",
    "model.d_k",
    "model.norm_position",
    "model.pos_encoding",
    "scheduler._target_",
    "scheduler.warmup_steps",
    "seed",
)

# Short names for the run name: model.pos_encoding=rope -> pe=rope.
ALIASES = {
    "model.pos_encoding": "pe",
    "model.norm_position": "norm",
    "model.n_heads": "h",
    "model.d_k": "dk",
    "scheduler": "sched",
    "scheduler.warmup_steps": "wu",
    "seed": "s",
}


def git_commit(path: Path | str | None = None) -> str | None:
    """HEAD of the git checkout holding `path` (default: this package), or None."""
    where = Path(path) if path else Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def machine() -> dict[str, Any]:
    """The machine a run ran on (results.json's "machine"): CPU model and the cores this process
    may use, GPU name and count, torch and Python versions. torch is read only where the run
    has imported it (this module does not import it)."""
    import platform
    import sys

    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    info: dict[str, Any] = {"cpu": cpu or platform.processor() or platform.machine(),
                            "cores": cores, "gpu": None, "gpus": 0, "torch": None,
                            "python": platform.python_version()}  # fmt: skip
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch"] = str(torch.__version__)
        if torch.cuda.is_available():
            info["gpus"] = torch.cuda.device_count()
            info["gpu"] = torch.cuda.get_device_name(0)
    return info


def machine_label(info: Any) -> str:
    """One line for a table: 'Intel Xeon ... x2, torch 2.13.0+cpu' (+ GPUs); 'not recorded'
    for a run made before results.json held its machine."""
    if not isinstance(info, dict) or not info.get("cpu"):
        return "not recorded"
    text = f"{info['cpu']} x{info.get('cores')}"
    if info.get("gpus"):
        text += f", {info['gpus']} x {info.get('gpu')}"
    return text + (f", torch {info['torch']}" if info.get("torch") else "")


def _split_override(override: str) -> tuple[str, str]:
    key, _, value = override.partition("=")
    return key.lstrip("+~"), value


def looks_like_path(value: str) -> bool:
    """'/data/multi30k', 'data/x.en', '~/d', 'C:\\d': a file or folder, not a value to show."""
    value = value.strip("'\"")
    return "/" in value or "\\" in value or value.startswith("~")


def run_name(overrides: list[str], default: str) -> str:
    """'pe=rope-norm=pre-h=8-s=1' from the overrides that change what is learned, in their
    order (a key given twice counts once, where it was last given), with the ALIASES (other
    keys by their last part); `default` if there are none. Paths are left out (the run
    directory's hash covers them)."""
    parts: dict[str, str] = {}
    for override in overrides:
        key, value = _split_override(override)
        if not value or not in_name(key):
            continue
        parts.pop(key, None)
        if looks_like_path(value):
            continue
        short = ALIASES.get(key, key.split(".")[-1])
        value = value.strip("'\"").replace(" ", "")
        parts[key] = f"{short}={value}"
    return "-".join(parts.values()) or default


def ablation_config(cfg: DictConfig, overrides: list[str]) -> dict[str, Any]:
    """The ablation keys and every overridden key, dotted, with their resolved values; a group
    choice (data=copy) is recorded as the choice."""
    config = {key: _plain(OmegaConf.select(cfg, key, default=None)) for key in ABLATION_KEYS}
    for override in overrides:
        key, value = _split_override(override)
        if not key or key.startswith("hydra") or key in config:
            continue
        node = OmegaConf.select(cfg, key.replace("/", "."), default=None)
        config[key] = value if OmegaConf.is_dict(node) or node is None else _plain(node)
    return config


def _plain(value: Any) -> Any:
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True, enum_to_str=True)
    return value.value if isinstance(value, Enum) else value


def write_atomic(path: str | Path, text: str) -> None:
    """`text` into `path` whole or not at all (a temporary file beside it, then os.replace): an
    interrupt never leaves half a file where an earlier one stood."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _json_number(value: Any) -> Any:
    """Tensors to floats; NaN / inf to None (JSON has no such numbers)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RunRecord:
    """Writes <run_dir>/results.json; every `write` replaces the file atomically."""

    def __init__(
        self,
        run_dir: Path | str,
        *,
        name: str,
        seed: int,
        overrides: list[str],
        config: dict[str, Any],
    ) -> None:
        self.path = Path(run_dir) / "results.json"
        self.data: dict[str, Any] = {
            "status": Status.RUNNING.value,
            "metrics": {},
            "overrides": list(overrides),
            "config": config,
            "steps": 0,
            "wall_time_s": 0.0,
            "seed": seed,
            "git_commit": git_commit(),
            "machine": machine(),
            "wandb_run_id": None,
            "run_dir": str(Path(run_dir).resolve()),
            "name": name,
            "error": None,
        }

    @staticmethod
    def read(run_dir: Path | str) -> dict[str, Any] | None:
        """The results.json of an earlier attempt at this run, or None."""
        path = Path(run_dir) / "results.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def write(self, status: str | None = None, **fields: Any) -> dict[str, Any]:
        if status is not None:
            if status not in STATUSES:
                raise ValueError(f"status={status!r}; expected one of: {', '.join(STATUSES)}")
            self.data["status"] = str(status)  # a plain string, also for W&B
        if "metrics" in fields:
            fields["metrics"] = {k: _json_number(v) for k, v in sorted(fields["metrics"].items())}
        self.data.update(fields)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=2) + "\n")
        os.replace(tmp, self.path)
        return self.data
