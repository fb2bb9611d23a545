"""attnlab-eval: score a checkpoint (or the average of several) on a split or on explicit files.

    attnlab-eval ckpt=outputs/.../checkpoints/last.ckpt                      # the run's test split
    attnlab-eval ckpt=outputs/.../checkpoints                  # average its periodic step=*.ckpt
    attnlab-eval ckpt=[a.ckpt,b.ckpt,c.ckpt] split=val decode.beam_size=1   # averaged, greedy
    attnlab-eval ckpt=last.ckpt src_file=newstest.en ref_file=newstest.de out=eval/newstest

Options (key=value): ckpt (a file, a list of files, or a checkpoints directory: its step=<n>.ckpt
files; `last=N` keeps the newest N), split (test | val | train, from the run's data config),
src_file + ref_file (instead of split), data.<key> (override the run's data config, e.g.
data.root=...), decode.beam_size / length_penalty / max_len_a / max_len_b (default: the run's
callbacks.translation_quality settings, else beam 4, length penalty 0.6, a=1, b=50; beam 1 is
greedy), batch_size, device (auto | cpu | cuda), out.

Prints BLEU and chrF (sacreBLEU on detokenized text, through torchmetrics), perplexity
(teacher-forced, on the references) and writes <out>.json and <out>.hyp (one hypothesis per
source line, in the input order). By default <out> is <run_dir>/eval/<split>. The run directory
(the checkpoint's nearest parent holding config.yaml) must hold tokenizer.model.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import MISSING, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException
from tqdm import tqdm

from attnlab.data.text import ParallelTextDataset, collate_seq2seq, read_lines
from attnlab.data.tokenizer import Tokenizer
from attnlab.model import Transformer, TransformerConfig
from attnlab.model.decoding import beam_search, greedy_decode, max_output_lengths
from attnlab.training.averaging import average_checkpoints

USAGE = __doc__


@dataclass
class DecodeConfig:
    beam_size: int = 4
    length_penalty: float = 0.6
    max_len_a: float = 1.0
    max_len_b: int = 50


@dataclass
class EvalConfig:
    ckpt: Any = MISSING  # one path, a list of paths (averaged) or a checkpoints directory
    last: int | None = None  # with a directory: average only its newest `last` checkpoints
    split: str = "test"
    src_file: str | None = None
    ref_file: str | None = None
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    batch_size: int = 64  # sentences per decoding batch
    device: str = "auto"
    out: str | None = None
    data: dict = field(default_factory=dict)  # overrides of the run's data config (e.g. root)


class EvalError(Exception):
    """A problem with the user's input, reported in one line."""


def parse_args(argv: list[str]) -> EvalConfig:
    """The command line as an EvalConfig: `ckpt` expanded into a list of files, and decoding
    settings defaulting to the run's own (callbacks.translation_quality in its config.yaml)."""
    options = ", ".join(f.name for f in fields(EvalConfig))
    try:
        cli = OmegaConf.from_dotlist(argv)
        cfg = OmegaConf.merge(OmegaConf.structured(EvalConfig), cli)
        if OmegaConf.is_missing(cfg, "ckpt"):
            raise EvalError("ckpt=<checkpoint file, [list] or checkpoints directory> is required")
        paths = checkpoint_paths(cfg.ckpt, cfg.last)
        run_decode = _run_decode_settings(find_run_dir(Path(paths[0])))
        cfg = OmegaConf.merge(OmegaConf.structured(EvalConfig), {"decode": run_decode}, cli)
        cfg.ckpt = [str(p) for p in paths]
    except ConfigKeyError as err:
        raise EvalError(f"{err.full_key} is not an option; expected one of: {options}") from None
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or ""
        message = str(err).splitlines()[0]
        raise EvalError(f"{key}: {message}" if key else message) from None
    if (cfg.src_file is None) != (cfg.ref_file is None):
        raise EvalError("src_file and ref_file go together: give both or neither")
    if cfg.decode.beam_size < 1:
        raise EvalError(f"decode.beam_size={cfg.decode.beam_size}: expected an integer >= 1")
    if cfg.batch_size < 1:
        raise EvalError(f"batch_size={cfg.batch_size}: expected an integer >= 1")
    return OmegaConf.to_object(cfg)


_STEP_CKPT = re.compile(r"step=(\d+)\.ckpt$")


def checkpoint_paths(ckpt: Any, last: int | None = None) -> list[Path]:
    """`ckpt` (a path, a list of paths, or a directory) as the list of checkpoint files to
    average. A directory stands for its periodic checkpoints step=<n>.ckpt, oldest first, of
    which `last` keeps the newest."""
    given = list(ckpt) if isinstance(ckpt, list | tuple) or OmegaConf.is_list(ckpt) else [ckpt]
    if not given:
        raise EvalError("ckpt=[] names no checkpoint")
    if last is not None and last < 1:
        raise EvalError(f"last={last}: expected an integer >= 1")
    paths: list[Path] = []
    for item in given:
        path = Path(str(item)).expanduser()
        if path.is_dir():
            found = sorted(
                (p for p in path.glob("step=*.ckpt") if _STEP_CKPT.search(p.name)),
                key=lambda p: int(_STEP_CKPT.search(p.name).group(1)),
            )
            if not found:
                raise EvalError(f"ckpt: {path} holds no periodic step=<n>.ckpt checkpoints")
            paths += found[-last:] if last else found
        elif not path.is_file():
            raise EvalError(f"ckpt: file not found: {path}")
        else:
            paths.append(path)
    return paths


def find_run_dir(ckpt: Path) -> Path:
    """The run directory of a checkpoint: its nearest parent holding config.yaml (a checkpoint
    copied elsewhere: the parent of its folder, where tokenizer.model is then looked for)."""
    ckpt = ckpt.resolve()
    for parent in list(ckpt.parents)[:3]:
        if (parent / "config.yaml").is_file():
            return parent
    return ckpt.parent.parent


def _run_decode_settings(run_dir: Path) -> dict:
    """The decoding settings the run used for val/ and test/bleu, if it logged BLEU."""
    cfg_path = run_dir / "config.yaml"
    if not cfg_path.is_file():
        return {}
    tq = OmegaConf.select(OmegaConf.load(cfg_path), "callbacks.translation_quality") or {}
    return {k: tq[k] for k in ("beam_size", "length_penalty", "max_len_a", "max_len_b") if k in tq}


def load_model(paths: list[str]) -> tuple[Transformer, dict, Path]:
    """The (averaged) model, the training hyper-parameters and the run directory."""
    try:
        state = average_checkpoints(paths)  # loads each safely, checks they match
        first = torch.load(paths[0], map_location="cpu", weights_only=True)
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        raise EvalError(f"ckpt: {str(err).strip().splitlines()[0]}") from None
    hparams = first.get("hyper_parameters", {}) if isinstance(first, dict) else {}
    if "model" not in hparams:
        raise EvalError(f"ckpt: {paths[0]} has no model hyper-parameters (not an attnlab run?)")
    model = Transformer(TransformerConfig(**hparams["model"]))
    weights = {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")}
    model.load_state_dict(weights)
    return model.eval(), hparams, find_run_dir(Path(paths[0]))


def split_files(run_dir: Path, split: str, data_overrides: dict) -> tuple[Path, Path]:
    """The source/reference files of `split`, from the run's own data config."""
    from hydra.utils import instantiate

    cfg_path = run_dir / "config.yaml"
    if not cfg_path.is_file():
        raise EvalError(f"{cfg_path} not found: give src_file and ref_file instead of split")
    try:
        data_cfg = OmegaConf.merge(OmegaConf.load(cfg_path).data, data_overrides)
        datamodule = instantiate(OmegaConf.to_container(data_cfg, resolve=True))
    except Exception as err:  # a bad data.<key> override: instantiate wraps the cause
        cause = err.__cause__ or err
        raise EvalError(f"data: {str(cause).splitlines()[0]}") from None
    if not hasattr(datamodule, "split_files"):
        raise EvalError(f"data {data_cfg.get('name')!r} has no text splits to translate")
    try:
        return datamodule.split_files(split)
    except (KeyError, ValueError) as err:
        raise EvalError(str(err).strip("'")) from None


def translate(model, tokenizer, dataset, cfg: EvalConfig, device, bos_id, eos_id) -> list[str]:
    """Hypotheses in dataset order; batches are formed by source length for speed."""
    order = sorted(range(len(dataset)), key=lambda i: dataset.src_lens[i])
    hyps: list[str] = [""] * len(dataset)
    d = cfg.decode
    progress = tqdm(total=len(order), desc="decoding", unit="sent", file=sys.stderr)
    for start in range(0, len(order), cfg.batch_size):
        idx = order[start : start + cfg.batch_size]
        src = collate_seq2seq([dataset[i] for i in idx])["src"].to(device)
        if d.beam_size == 1:
            limits = max_output_lengths(src, model.config.pad_id, d.max_len_a, d.max_len_b)
            out = greedy_decode(model, src, bos_id, eos_id, limits)
        else:
            out = beam_search(
                model, src, bos_id, eos_id, d.beam_size, d.length_penalty, d.max_len_a, d.max_len_b
            )
        for i, text in zip(idx, tokenizer.decode_batch(out.tolist()), strict=True):
            hyps[i] = text
        progress.update(len(idx))
    progress.close()
    return hyps


@torch.no_grad()
def perplexity(model, dataset, device, batch_size: int) -> tuple[float, float]:
    """exp of the mean per-token NLL of the references (teacher forcing, EOS included)."""
    total, count = 0.0, 0
    for start in range(0, len(dataset), batch_size):
        batch = collate_seq2seq(
            [dataset[i] for i in range(start, min(len(dataset), start + batch_size))]
        )
        logits = model(batch["src"].to(device), batch["tgt_in"].to(device))
        target = batch["tgt_out"].to(device)
        total += F.cross_entropy(
            logits.flatten(0, 1).float(),
            target.flatten(),
            ignore_index=model.config.pad_id,
            reduction="sum",
        ).item()
        count += int(target.ne(model.config.pad_id).sum())
    nll = total / max(count, 1)
    return math.exp(min(nll, 50.0)), nll


def bleu_and_chrf(hyps: list[str], refs: list[str]) -> tuple[float, float]:
    from torchmetrics.text import CHRFScore, SacreBLEUScore

    wrapped = [[r] for r in refs]
    bleu = SacreBLEUScore(tokenize="13a")(hyps, wrapped).item() * 100
    chrf = CHRFScore()(hyps, wrapped).item() * 100
    return bleu, chrf


def evaluate(cfg: EvalConfig) -> dict:
    started = time.perf_counter()
    model, hparams, run_dir = load_model(cfg.ckpt)
    if model.config.arch != "encoder_decoder":
        raise EvalError(
            "attnlab-eval translates with encoder_decoder checkpoints; "
            f"{cfg.ckpt[0]} is {model.config.arch}"
        )
    device = torch.device(
        ("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device
    )
    model.to(device)
    if cfg.src_file:
        src_path, ref_path = Path(cfg.src_file), Path(cfg.ref_file)
        name = src_path.name.removesuffix(".gz")
    else:
        src_path, ref_path = split_files(run_dir, cfg.split, cfg.data)
        name = cfg.split
    for p in (src_path, ref_path):
        if not Path(p).is_file():
            raise EvalError(f"file not found: {p}")
    tok_path = run_dir / "tokenizer.model"
    if not tok_path.is_file():
        raise EvalError(f"{tok_path} not found: the run directory must hold its tokenizer")
    tokenizer = Tokenizer.from_file(tok_path)
    srcs, refs = read_lines(src_path), read_lines(ref_path)
    if len(srcs) != len(refs):
        raise EvalError(f"{src_path} has {len(srcs)} lines but {ref_path} has {len(refs)}")
    max_len = model.config.max_len
    dataset = ParallelTextDataset(
        srcs,
        refs,
        tokenizer,
        max_src_len=max_len,
        max_tgt_len=max_len,
        filter_long=False,
        name=name,
    )
    bos, eos = hparams.get("bos_id", 2), hparams.get("eos_id", 3)
    hyps = translate(model, tokenizer, dataset, cfg, device, bos, eos)
    bleu, chrf = bleu_and_chrf(hyps, refs)
    ppl, nll = perplexity(model, dataset, device, cfg.batch_size)

    out = Path(cfg.out) if cfg.out else run_dir / "eval" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    hyp_path, json_path = out.with_name(out.name + ".hyp"), out.with_name(out.name + ".json")
    hyp_path.write_text("\n".join(hyps) + "\n", encoding="utf-8")
    results = {
        "bleu": round(bleu, 2),
        "chrf": round(chrf, 2),
        "perplexity": ppl,
        "nll": nll,
        "n_sentences": len(hyps),
        "source": str(Path(src_path).resolve()),
        "reference": str(Path(ref_path).resolve()),
        "checkpoints": [str(Path(p).resolve()) for p in cfg.ckpt],
        "averaged": len(cfg.ckpt) > 1,
        "decode": OmegaConf.to_container(OmegaConf.structured(cfg.decode)),
        "hypotheses": str(hyp_path),
        "json": str(json_path),
        "wall_time_s": round(time.perf_counter() - started, 2),
    }
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    return results


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        sys.exit(0 if argv else 2)
    try:
        cfg = parse_args(argv)
        results = evaluate(cfg)
    except EvalError as err:
        print(f"attnlab-eval: error: {err}", file=sys.stderr)
        sys.exit(2)
    print(
        f"BLEU {results['bleu']:.2f}  chrF {results['chrf']:.2f}  "
        f"perplexity {results['perplexity']:.2f}  ({results['n_sentences']} sentences, "
        f"beam {cfg.decode.beam_size}, {len(cfg.ckpt)} checkpoint(s))"
    )
    print(f"results: {results['json']}")
    print(f"hypotheses: {results['hypotheses']}")


if __name__ == "__main__":
    main()
