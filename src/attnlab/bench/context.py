"""What every section of attnlab-bench shares: the config composed from the command line's
Hydra overrides (as attnlab-train composes conf/train.yaml), the device, the precision, and a
fixed set of training batches drawn from the configured data, cycled through by every
contender so that all of them see the same shapes."""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig

from attnlab.config.plain import to_plain
from attnlab.model.config import TransformerConfig
from attnlab.tasks import task_named

_AUTOCAST = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


@dataclass
class Context:
    """The composed config and what is derived from it for benchmarking."""

    cfg: DictConfig
    overrides: list[str]
    device: torch.device
    quick: bool
    repeats: int
    steps: int  # timed steps per repeat
    warmup: int  # untimed steps before the first repeat
    work_dir: Path
    task: str = ""  # "seq2seq" or "lm"
    model_config: TransformerConfig | None = None
    batches: list[dict] = field(default_factory=list)
    special_ids: dict[str, int] = field(default_factory=dict)  # pad, bos, eos
    datamodule: object = None

    @property
    def precision(self) -> str:
        return str(self.cfg.trainer.precision)

    def autocast(self, device: torch.device | None = None):
        """The training precision's autocast context (nothing for 32-true)."""
        dtype = _AUTOCAST.get(self.precision)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast((device or self.device).type, dtype=dtype)

    def size_name(self) -> str:
        """'d512-6+6' (encoder-decoder) or 'd512-6' (decoder-only)."""
        c = self.model_config
        layers = f"{c.n_encoder_layers}+{c.n_decoder_layers}"
        return f"d{c.d_model}-" + (
            layers if c.arch == "encoder_decoder" else str(c.n_decoder_layers)
        )

    def target_tokens(self, batch: dict) -> int:
        """Non-PAD targets of a batch: the tokens of tokens-per-second."""
        return int(task_named(self.task).targets(batch).ne(self.special_ids["pad"]).sum())

    def padding_fraction(self) -> dict[str, float]:
        """{input name: the fraction of its positions that are PAD} over the batches, for the
        model's inputs (src and tgt_in, or tokens): what skipping padding can save."""
        task = task_named(self.task)
        names = [key for key in (task.source_key, task.query_key) if key]
        pad = self.special_ids["pad"]
        return {
            name: sum(int(b[name].eq(pad).sum()) for b in self.batches)
            / max(sum(b[name].numel() for b in self.batches), 1)
            for name in names
        }

    def step_batches(self, steps: int) -> list[dict]:
        """The batches of `steps` consecutive steps (the fixed set, cycled)."""
        return [self.batches[i % len(self.batches)] for i in range(steps)]

    def new_model(self, **changes) -> torch.nn.Module:
        """attnlab's Transformer for this config (fields changed by `changes`), on the device,
        seeded so that every call builds the same weights."""
        from dataclasses import replace

        from attnlab.model.transformer import Transformer

        torch.manual_seed(self.cfg.seed)
        return Transformer(replace(self.model_config, **changes)).to(self.device)


def build_context(
    overrides: list[str],
    device: str = "auto",
    quick: bool = False,
    repeats: int | None = None,
    steps: int | None = None,
    n_batches: int | None = None,
) -> Context:
    """Compose the config and build it dry (attnlab.pipeline.preflight raises ConfigError with one
    line), pick the device, and draw the training batches."""
    from attnlab.config.compose import compose_config
    from attnlab.config.location import conf_dir
    from attnlab.pipeline.preflight import check

    check(conf_dir(), overrides)
    cfg = compose_config(conf_dir(), overrides)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    ctx = Context(
        cfg=cfg,
        overrides=list(overrides),
        device=torch.device(device),
        quick=quick,
        repeats=repeats or (3 if quick else 7),
        steps=steps or (3 if quick else 20),
        warmup=2 if quick else 5,
        work_dir=Path(tempfile.mkdtemp(prefix="attnlab-bench-")),
    )
    _load_batches(ctx, n_batches or (2 if quick else 8))
    return ctx


def _load_batches(ctx: Context, n: int) -> None:
    """The datamodule as attnlab-train builds it; its first `n` training batches, on the device;
    the model config sized to its vocabulary."""
    from attnlab.pipeline.build import build_datamodule, model_config

    torch.manual_seed(ctx.cfg.seed)
    datamodule = build_datamodule(to_plain(ctx.cfg.data), to_plain(ctx.cfg.trainer))
    datamodule.setup("fit")
    ctx.task = datamodule.task
    ctx.special_ids = {"pad": datamodule.pad_id, "bos": datamodule.bos_id, "eos": datamodule.eos_id}
    ctx.model_config = model_config(
        to_plain(ctx.cfg.model), datamodule.vocab_size, datamodule.pad_id
    )
    for batch in datamodule.train_dataloader():
        ctx.batches.append({k: v.to(ctx.device) for k, v in batch.items() if torch.is_tensor(v)})
        if len(ctx.batches) == n:
            break
    ctx.datamodule = datamodule
