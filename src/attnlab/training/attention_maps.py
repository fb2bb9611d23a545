"""Attention maps: what each head attends to, as heatmaps and as arrays.

`collect_attention` runs one forward pass with `Transformer.record_attention()` and returns
{module name: (B, H, T, S)} (names like `decoder.layers.0.cross_attn`); `render_maps` draws one
figure per module, one panel per head, the query tokens down the side and the key tokens along
the bottom; `save_npz` writes the arrays. The `AttentionMaps` callback does this every
`every_n_steps` optimizer steps and at the end of training for fixed validation examples, into
<run_dir>/attention/step=<N>/ and W&B; the `attnlab-attention` command for any sentence.

Masked positions get exactly zero weight (the reference path's softmax over -inf): above the
diagonal of a causal map, and the columns of source padding.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import numpy as np
import torch

from attnlab.data.vocab import BOS_ID, EOS_ID, NUM_SPECIAL, PAD_ID, UNK_ID
from attnlab.training.hooks import SkipEmptyHooks

_SPECIALS = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}


def kind_of(name: str) -> str:
    """'encoder self-attention', 'decoder self-attention' or 'cross-attention'."""
    if name.startswith("encoder."):
        return "encoder self-attention"
    return "cross-attention" if name.endswith("cross_attn") else "decoder self-attention"


@torch.no_grad()
def collect_attention(model, src: torch.Tensor, tgt_in: torch.Tensor | None = None) -> dict:
    """{module name: float32 numpy (B, H, T, S)} of one forward pass (eval mode): the model's
    forward(src, tgt_in) (encoder-decoder) or forward(src) (decoder-only: src are the tokens)."""
    was_training = model.training
    model.eval()
    try:
        with model.record_attention():
            model(src) if tgt_in is None else model(src, tgt_in)
            weights = model.attention_weights()
        return {name: w.float().cpu().numpy() for name, w in weights.items()}
    finally:
        model.train(was_training)


def save_npz(path: Path, weights: dict[str, np.ndarray]) -> Path:
    """One array per attention module name, e.g. `decoder.layers.0.self_attn`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:  # np.savez would append .npz to a name without it
        np.savez(f, **weights)
    return path


def token_labels(ids, tokenizer=None, sep_id: int | None = None) -> list[str]:
    """Tick labels: SentencePiece pieces for text; for synthetic tasks the symbol numbers
    0 .. n_symbols - 1 (token id - NUM_SPECIAL, as attnlab-attention takes them); specials by
    name."""
    labels = []
    for i in (int(t) for t in ids):
        if i in _SPECIALS:
            labels.append(_SPECIALS[i])
        elif i == sep_id:
            labels.append("<sep>")
        elif tokenizer is not None and hasattr(tokenizer, "sp"):
            labels.append(tokenizer.sp.id_to_piece(i))
        else:
            labels.append(str(i - NUM_SPECIAL))
    return labels


def axes_labels(name: str, src_labels: list[str], tgt_labels: list[str] | None):
    """(query labels, key labels) of a module: the encoder reads the source, the decoder's
    self-attention the target, cross-attention target queries over source keys. Decoder-only
    models have only the source (their tokens)."""
    if tgt_labels is None or name.startswith("encoder."):
        return src_labels, src_labels
    return tgt_labels, (src_labels if name.endswith("cross_attn") else tgt_labels)


def render_maps(
    weights: dict[str, np.ndarray], queries_keys: dict[str, tuple], out_dir: Path, title: str = ""
) -> list[Path]:
    """<out_dir>/<module name>.png per module of `weights` ({name: (H, T, S)}), one panel per
    head; queries_keys: {name: (query labels, key labels)}, whose lengths cut T and S."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, w in weights.items():
        queries, keys = queries_keys[name]
        w = w[:, : len(queries), : len(keys)]
        n_heads = w.shape[0]
        cols = min(n_heads, 4)
        rows = -(-n_heads // cols)
        side = max(2.5, 0.22 * max(len(queries), len(keys)))
        fig, axes = plt.subplots(rows, cols, figsize=(side * cols, side * rows), squeeze=False)
        image = None
        for h, ax in enumerate(axes.flat):
            if h >= n_heads:
                ax.axis("off")
                continue
            image = ax.imshow(w[h], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            ax.set_title(f"head {h}", fontsize=9)
            ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=7)
            ax.set_yticks(range(len(queries)), queries, fontsize=7)
            if h // cols == rows - 1 or h + cols >= n_heads:  # the bottom panel of its column
                ax.set_xlabel("key (attended to)", fontsize=8)
            if h % cols == 0:
                ax.set_ylabel("query (attending)", fontsize=8)
        fig.suptitle(f"{name} ({kind_of(name)}){title}", fontsize=10)
        fig.tight_layout()
        if image is not None:  # one scale for every head: weights in [0, 1]
            fig.colorbar(image, ax=list(axes.flat), shrink=0.8, label="attention weight")
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


def log_images(loggers, paths: list[Path], step: int) -> None:
    """Each PNG as a W&B image `attention/<module name>` (W&B loggers only)."""
    from lightning.pytorch.loggers import WandbLogger

    for logger in loggers:
        if isinstance(logger, WandbLogger) and paths:
            for path in paths:
                logger.log_image(key=f"attention/{path.stem}", images=[str(path)], step=step)


class AttentionMaps(SkipEmptyHooks, L.Callback):
    """Attention maps of `n_examples` fixed validation examples (the first of the first
    validation batch) every `every_n_steps` optimizer steps and at the end of training (null:
    never): <run_dir>/attention/step=<N>/attention.npz ({name: (B, H, T, S)}, the examples
    padded as in their batch) and, per example, one PNG per module (cut to its `max_tokens`
    first real tokens), also logged to W&B."""

    def __init__(
        self, every_n_steps: int | None = None, n_examples: int = 1, max_tokens: int = 40
    ) -> None:
        self.every_n_steps = every_n_steps
        self.n_examples = n_examples
        self.max_tokens = max_tokens
        self._batch: dict | None = None
        self._rendered_step: int | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if self.every_n_steps and step % self.every_n_steps == 0:
            self._render_once(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.every_n_steps:
            self._render_once(trainer, pl_module)

    def _render_once(self, trainer, pl_module) -> None:
        """At most once per optimizer step (gradient accumulation repeats the batch hooks)."""
        if self._rendered_step != trainer.global_step:
            self._rendered_step = trainer.global_step
            self.render(trainer, pl_module)

    def _examples(self, trainer) -> dict:
        if self._batch is None:
            batch = next(iter(trainer.datamodule.val_dataloader()))
            self._batch = {
                k: v[: self.n_examples].clone() for k, v in batch.items() if torch.is_tensor(v)
            }
        return self._batch

    def render(self, trainer, pl_module) -> list[Path]:
        """Maps of the fixed examples with the current weights (rank zero only)."""
        if not trainer.is_global_zero:
            return []
        batch = {k: v.to(pl_module.device) for k, v in self._examples(trainer).items()}
        weights = collect_attention(pl_module.model, *pl_module.task.inputs(batch))
        out = Path(trainer.default_root_dir) / "attention" / f"step={trainer.global_step}"
        save_npz(out / "attention.npz", weights)
        paths = []
        for i in range(next(iter(batch.values())).size(0)):
            paths += self._render_example(
                trainer, pl_module.task, batch, weights, i, out / f"example{i}"
            )
        log_images(trainer.loggers, paths, trainer.global_step)
        return paths

    def _render_example(self, trainer, task, batch, weights, i: int, out: Path) -> list[Path]:
        dm = trainer.datamodule
        tokenizer, sep_id = getattr(dm, "tokenizer", None), getattr(dm, "sep_id", None)

        def labels(ids):
            ids = ids[ids != PAD_ID][: self.max_tokens]
            return token_labels(ids.tolist(), tokenizer, sep_id)

        src = labels(batch[task.source_key][i])
        tgt = labels(batch[task.query_key][i]) if task.query_key else None
        per_module = {name: w[i] for name, w in weights.items()}
        axes = {name: axes_labels(name, src, tgt) for name in per_module}
        return render_maps(per_module, axes, out, f", step {trainer.global_step}")
