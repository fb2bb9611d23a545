"""attnlab-attention: the attention maps of a trained model on one input.

    attnlab-attention CKPT "a source sentence" [--target "its translation"] [--out DIR]
    attnlab-attention outputs/length_extrapolation/<run>/checkpoints/last.ckpt "5 9 2 7"

Writes, under --out (default <run_dir>/attention/<the input as a folder name>, one folder per
input and target: input_folder), one PNG per attention module (one
panel per head, the tokens as tick labels: encoder self-attention, decoder self-attention,
cross-attention) and attention.npz with one array (H, T, S) per module name
(`decoder.layers.0.self_attn`, ...). Text is tokenized with the run's tokenizer.model; for
synthetic tasks the input is the symbols as space-separated ids, 0 .. data.n_symbols - 1
("5 9 2 7"; the token ids are these plus the 4 special ids). Without --target,
the model's own greedy output is the target (encoder-decoder) or the continuation (decoder-only
synthetic tasks: [BOS] x [SEP] y). --wandb also logs the PNGs into the run's W&B run.
--pad N appends N padding tokens to an encoder-decoder's source, as in a batch whose longest
source is N tokens longer, and prints how much weight each module puts on them: exactly 0 for a
model that masks source padding, and the first sign of a forgotten mask
(model.mask_source_padding=false) otherwise.

    attnlab-attention CKPT "5 9 2 7" --pad 6
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

from attnlab import programs

PROG = programs.ATTENTION


class InputError(Exception):
    """A bad checkpoint or input, reported in one line (exit 2)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("ckpt", help="checkpoint file of an attnlab run")
    p.add_argument("source", help='the input: text, or space-separated ids ("5 9 2 7")')
    p.add_argument("--target", help="the target (default: the model's greedy output)")
    p.add_argument(
        "--out", help="output directory (default: <run_dir>/attention/<the input>, one per input)"
    )
    p.add_argument("--max-len", type=int, default=100, help="greedy decoding limit (tokens)")
    p.add_argument(
        "--pad",
        type=int,
        default=0,
        metavar="N",
        help="append N padding tokens to the source (encoder-decoder); print the weight on them",
    )
    p.add_argument(
        "--wandb",
        action="store_true",
        help="also log the maps as images into the run's W&B run (offline without an API key)",
    )
    return p


def input_folder(args) -> str:
    """The default output folder's name for this input (and target, and pads): the text made
    file-system safe, at most 40 characters, and a short hash of the whole, so two inputs never
    share a folder ("5 9 2 7" -> input-5_9_2_7-<hash>)."""
    whole = "\0".join(str(x) for x in (args.source, args.target, args.pad))
    slug = re.sub(r"[^A-Za-z0-9]+", "_", args.source).strip("_")[:40] or "input"
    return f"input-{slug}-{hashlib.sha1(whole.encode()).hexdigest()[:8]}"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.ckpt = args.ckpt.removeprefix("ckpt=")  # attnlab-eval's spelling, taken here too
    try:
        written = attention_of(args)
    except InputError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    print(f"{len(written) - 1} maps and {written[-1]}")
    for path in written[:-1]:
        print(f"  {path}")
    return 0


def pad_weight_lines(weights: dict, src_ids: list[int], pad_id: int) -> list[str]:
    """For every module whose keys are source positions (encoder self-attention and
    cross-attention), the weight on the source's pad positions: the mean over heads and queries
    of each query's total weight on pads, and the largest such total."""
    import numpy as np

    pads = np.array([t == pad_id for t in src_ids])
    lines = []
    for name, w in weights.items():  # (H, T, S)
        if "cross_attn" not in name and not name.startswith("encoder."):
            continue
        mass = np.asarray(w)[..., pads].sum(-1)  # (H, T): each query's weight on pads
        lines.append(f"  {name}: mean {mass.mean():.3g}, max {mass.max():.3g}")
    return lines


def attention_of(args: argparse.Namespace) -> list[Path]:
    """Load, build the input, record the weights, write the PNGs and attention.npz."""
    from attnlab.evaluation.checkpoints import EvalError, load_model, run_datamodule
    from attnlab.training.attention_maps import (
        axes_labels,
        collect_attention,
        render_maps,
        save_npz,
        token_labels,
    )

    try:
        model, hparams, run_dir = load_model([args.ckpt])
        datamodule = run_datamodule(run_dir)
    except EvalError as err:  # its examples are attnlab-eval's ckpt=...; here the path alone
        raise InputError(str(err).replace("e.g. ckpt=", "e.g. ")) from None
    inputs = _inputs(model, hparams, datamodule, args)
    weights = collect_attention(model, *inputs)
    weights = {name: w[0] for name, w in weights.items()}  # (H, T, S): one input
    if args.pad:
        pad_id = model.config.pad_id
        print(f"weight on the {args.pad} source pads (per query, summed over the pads):")
        print("\n".join(pad_weight_lines(weights, inputs[0][0].tolist(), pad_id)))
    tokenizer, sep_id = getattr(datamodule, "tokenizer", None), getattr(datamodule, "sep_id", None)
    src = token_labels(inputs[0][0].tolist(), tokenizer, sep_id)
    tgt = token_labels(inputs[1][0].tolist(), tokenizer, sep_id) if len(inputs) > 1 else None
    out = Path(args.out) if args.out else run_dir / "attention" / input_folder(args)
    axes = {name: axes_labels(name, src, tgt) for name in weights}
    paths = render_maps(weights, axes, out)
    if args.wandb:
        _log_wandb(run_dir, paths)
    return [*paths, save_npz(out / "attention.npz", weights)]


def _log_wandb(run_dir: Path, paths: list[Path]) -> None:
    """The PNGs as images `attention_input/<module name>` in the run's own W&B run: the id its
    results.json recorded (a run started by a W&B sweep's agent has the agent's), else the one
    that follows from the run directory, as during training."""
    import wandb
    from omegaconf import OmegaConf

    from attnlab.runs.identity import wandb_run_id
    from attnlab.runs.wandb import wandb_offline_reason

    logger_cfg = OmegaConf.select(OmegaConf.load(run_dir / "config.yaml"), "logger.wandb") or {}
    offline = wandb_offline_reason(force_offline=bool(logger_cfg.get("offline", False)))
    run = wandb.init(
        project=logger_cfg.get("project", "attnlab"),
        entity=logger_cfg.get("entity"),
        id=_recorded_run_id(run_dir) or wandb_run_id(run_dir),
        resume="allow",
        dir=str(run_dir),
        mode="offline" if offline else None,
        settings=wandb.Settings(silent=True),
    )
    run.log({f"attention_input/{p.stem}": wandb.Image(str(p)) for p in paths})
    run.finish()


def _recorded_run_id(run_dir: Path) -> str | None:
    import json

    try:
        return json.loads((run_dir / "results.json").read_text()).get("wandb_run_id")
    except (OSError, ValueError, AttributeError):
        return None


def _inputs(model, hparams, datamodule, args) -> tuple:
    """(src, tgt_in) for an encoder-decoder, (tokens,) for a decoder-only model; each (1, L)."""
    import torch

    from attnlab.model.decoding import generate, greedy_decode

    bos, eos, pad = hparams.get("bos_id", 2), hparams.get("eos_id", 3), model.config.pad_id
    if args.pad and model.config.arch != "encoder_decoder":
        raise InputError(f"--pad {args.pad}: only an encoder-decoder has source padding")
    if args.pad < 0:
        raise InputError(f"--pad {args.pad} is not valid; expected a number of tokens >= 0")
    source = _encode(datamodule, args.source, "source")
    target = _encode(datamodule, args.target, "--target") if args.target is not None else None
    synthetic = hasattr(datamodule, "length_batches")
    if model.config.arch == "encoder_decoder":
        src = torch.tensor([[*source, eos, *[pad] * args.pad]])  # x + [EOS], as the data
        if target is None:
            target = [t for t in greedy_decode(model, src, bos, eos, args.max_len)[0].tolist()]
            target = target[: target.index(eos)] if eos in target else target
        return src, torch.tensor([[bos, *target]])
    if synthetic:  # [BOS] x [SEP] y, as the data packs it
        prompt = torch.tensor([[bos, *source, datamodule.sep_id]])
        if target is None:
            out = generate(model, prompt, max_new_tokens=args.max_len, eos_id=eos)[0].tolist()
            return (torch.tensor([out]),)
        return (torch.cat([prompt, torch.tensor([[*target, eos]])], dim=1),)
    return (torch.tensor([source + (target or [])]),)


def _encode(datamodule, text: str, what: str) -> list[int]:
    """Token ids of `text`: the run's tokenizer for text, space-separated ids for symbols."""
    if not hasattr(datamodule, "length_batches"):
        ids = datamodule.tokenizer.encode(text)
        if not ids:
            raise InputError(f"{what} is empty after tokenization")
        return ids
    from attnlab.data.vocab import NUM_SPECIAL

    n = datamodule.n_symbols
    try:
        symbols = [int(t) for t in text.split()]
    except ValueError:
        symbols = []
    if not symbols or not all(0 <= k < n for k in symbols):
        raise InputError(
            f"{what}={text!r} is not valid; expected space-separated symbols 0..{n - 1} "
            '(e.g. "5 9 2 7")'
        )
    return [NUM_SPECIAL + k for k in symbols]


if __name__ == "__main__":
    sys.exit(main())
