"""attnlab-eval: score a checkpoint (or the average of several) on a split or on explicit files.

    attnlab-eval ckpt=outputs/.../checkpoints/last.ckpt                      # the run's test split
    attnlab-eval ckpt=outputs/.../checkpoints                  # average step=*.ckpt, final step
    attnlab-eval ckpt=[a.ckpt,b.ckpt,c.ckpt] split=val decode.beam_size=1   # averaged, greedy
    attnlab-eval ckpt=last.ckpt src_file=newstest.en ref_file=newstest.de out=eval/newstest
    attnlab-eval ckpt=<copy run>/checkpoints/last.ckpt eval.lengths=[8,16,32,64]   # per length

Synthetic-task and language-model checkpoints are scored per length instead (length
extrapolation): eval.lengths (default: the run's data.eval_lengths, else the lengths it trained
on: every length of a synthetic task's data.train_len, a language model's block size) one at a
time, each with
exact_match, token_acc and nll (synthetic; eval.n_examples examples of exactly that length) or
perplexity, nll and token_acc (language models: the test text in non-overlapping blocks of that
many tokens); a length that learned positions cannot represent is null with the reason.
Writes <out>.json (default <run_dir>/eval/lengths-<checkpoint>.json) with "extrapolation" as in
results.json.

Options (key=value): ckpt (a file, a list of files, or a checkpoints directory: its step=<n>.ckpt
files and the run's final step where no step= file holds it, the steps averaged printed;
`last=N` keeps the newest N), split (test | val | train, from the run's data config),
src_file + ref_file (instead of split), data.<key> (override the run's data config, e.g.
data.root=...), decode.beam_size / length_penalty / max_len_a / max_len_b (default: the run's
callbacks.translation_quality settings, else beam 4, length penalty 0.6, a=1, b=50; beam 1 is
greedy), batch_size, device (auto | cpu | cuda), out.

Prints BLEU, chrF and chrF++ (sacreBLEU on detokenized text), perplexity
(teacher-forced, on the references) and writes <out>.json and <out>.hyp (one hypothesis per
source line, in the input order). By default <out> is <run_dir>/eval/<split>-<checkpoint>-<decoding>
(test-last-beam4_lp0.6, test-avg5-step1700-1800-greedy, ...), so one evaluation never
overwrites another of the same run. The run directory (the checkpoint's nearest parent holding
config.yaml) must hold tokenizer.model.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from omegaconf import MISSING, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from attnlab import programs
from attnlab.evaluation.checkpoints import EvalError, checkpoint_paths, find_run_dir
from attnlab.runs.record import write_atomic
from attnlab.runs.status import EXIT_CODES, Status

USAGE = __doc__


@dataclass
class DecodeConfig:
    beam_size: int = 4
    length_penalty: float = 0.6
    max_len_a: float = 1.0
    max_len_b: int = 50


@dataclass
class LengthsConfig:
    lengths: list[int] = field(default_factory=list)  # empty: the run's data.eval_lengths
    n_examples: int = 512  # per length (synthetic tasks)


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
    eval: LengthsConfig = field(default_factory=LengthsConfig)  # per-length scoring


def _unknown_option(key: str) -> str:
    """'<key> is not an option; ...' with the closest valid key (decode.beam ->
    decode.beam_size, splt -> split) among the keys of the level the key is at."""
    import difflib

    group, _, _ = key.rpartition(".")
    node: Any = EvalConfig
    for part in group.split(".") if group else []:
        factory = {f.name: f.default_factory for f in fields(node)}.get(part)
        if not is_dataclass(factory):  # under no group of options: the top level's
            node, group = EvalConfig, ""
            break
        node = factory
    choices = [f"{group}.{f.name}" if group else f.name for f in fields(node)]
    close = difflib.get_close_matches(key, choices, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"{key} is not an option{hint}; expected one of: {', '.join(choices)}"


def parse_args(argv: list[str]) -> EvalConfig:
    """The command line as an EvalConfig: `ckpt` expanded into a list of files, and decoding
    settings defaulting to the run's own (callbacks.translation_quality in its config.yaml)."""
    try:
        cli = OmegaConf.from_dotlist(argv)
        cfg = OmegaConf.merge(OmegaConf.structured(EvalConfig), cli)
        if OmegaConf.is_missing(cfg, "ckpt"):
            raise EvalError(
                "ckpt=<checkpoint file, [list] or checkpoints directory> is required, e.g. "
                "ckpt=outputs/default/<run>/checkpoints/last.ckpt"
            )
        paths = checkpoint_paths(cfg.ckpt, cfg.last)
        run_decode = _run_decode_settings(find_run_dir(Path(paths[0])))
        cfg = OmegaConf.merge(OmegaConf.structured(EvalConfig), {"decode": run_decode}, cli)
        cfg.ckpt = [str(p) for p in paths]
    except ConfigKeyError as err:
        raise EvalError(_unknown_option(str(err.full_key))) from None
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or ""
        message = str(err).splitlines()[0]
        raise EvalError(f"{key}: {message}" if key else message) from None
    _check(cfg)
    return OmegaConf.to_object(cfg)


def _check(cfg) -> None:
    from attnlab.problems import integer_problem

    if (cfg.src_file is None) != (cfg.ref_file is None):
        raise EvalError(
            "src_file and ref_file go together: give both or neither, e.g. "
            "src_file=newstest.en ref_file=newstest.de"
        )
    checks = [("decode.beam_size", cfg.decode.beam_size), ("batch_size", cfg.batch_size)]
    checks += [("eval.n_examples", cfg.eval.n_examples)]
    checks += [("eval.lengths", n) for n in cfg.eval.lengths]
    for key, value in checks:
        problem = integer_problem(key, value, 1)
        if problem:
            raise EvalError(problem)


def _run_decode_settings(run_dir: Path) -> dict:
    """The decoding settings the run used for val/ and test/bleu, if it logged BLEU."""
    cfg_path = run_dir / "config.yaml"
    if not cfg_path.is_file():
        return {}
    tq = OmegaConf.select(OmegaConf.load(cfg_path), "callbacks.translation_quality") or {}
    return {k: tq[k] for k in ("beam_size", "length_penalty", "max_len_a", "max_len_b") if k in tq}


def evaluate(cfg: EvalConfig) -> dict:
    """Translate and score the (averaged) checkpoint; write <out>.hyp and <out>.json. Synthetic
    tasks and language models (or eval.lengths given): score per length instead."""
    from attnlab.evaluation.checkpoints import device_of, load_model
    from attnlab.evaluation.lengths import evaluate_checkpoint_lengths, is_length_task

    started = time.perf_counter()
    model, hparams, run_dir = load_model(cfg.ckpt)
    if cfg.eval.lengths or is_length_task(run_dir):
        return evaluate_checkpoint_lengths(model, hparams, run_dir, cfg, started)
    device = device_of(cfg.device)
    model.to(device)
    src_path, ref_path, name = _sources(cfg, run_dir)
    max_len = model.config.max_len
    if max_len and model.config.arch == "decoder_only":
        max_len //= 2  # a pair is one sequence [BOS] x [SEP] y: at most twice either side
    tokenizer, dataset, refs = _dataset(run_dir, src_path, ref_path, name, max_len)
    scores = _score(model, tokenizer, dataset, refs, cfg, device, hparams)
    out = Path(cfg.out) if cfg.out else run_dir / "eval" / default_name(name, cfg)
    return _write(out, scores, cfg, src_path, ref_path, started)


def default_name(source: str, cfg: EvalConfig) -> str:
    """<split or source file>-<checkpoint>-<decoding>, e.g. test-last-beam4_lp0.6 or
    test-avg5-step1700-1800-greedy: two evaluations of a run differ in their file names."""
    from attnlab.evaluation.lengths import checkpoint_name

    d = cfg.decode
    decode = "greedy" if d.beam_size == 1 else f"beam{d.beam_size}_lp{d.length_penalty:g}"
    return f"{source}-{checkpoint_name(cfg.ckpt)}-{decode}"


def _sources(cfg: EvalConfig, run_dir: Path) -> tuple[Path, Path, str]:
    """(source file, reference file, name of the output files)."""
    from attnlab.evaluation.translation import split_files

    if cfg.src_file:
        src_path, ref_path = Path(cfg.src_file), Path(cfg.ref_file)
        name = src_path.name.removesuffix(".gz")
    else:
        src_path, ref_path = split_files(run_dir, cfg.split, cfg.data)
        name = cfg.split
    for p in (src_path, ref_path):
        if not Path(p).is_file():
            raise EvalError(f"file not found: {p}")
    return src_path, ref_path, name


def _dataset(run_dir: Path, src_path: Path, ref_path: Path, name: str, max_len: int | None):
    """The run's tokenizer, the tokenized sentence pairs (none dropped) and the raw references."""
    from attnlab.data.text import ParallelTextDataset, read_lines
    from attnlab.data.tokenizer import Tokenizer

    tok_path = run_dir / "tokenizer.model"
    if not tok_path.is_file():
        raise EvalError(f"{tok_path} not found: the run directory must hold its tokenizer")
    tokenizer = Tokenizer.from_file(tok_path)
    srcs, refs = read_lines(src_path), read_lines(ref_path)
    if len(srcs) != len(refs):
        raise EvalError(f"{src_path} has {len(srcs)} lines but {ref_path} has {len(refs)}")
    dataset = ParallelTextDataset(
        srcs,
        refs,
        tokenizer,
        max_src_len=max_len,
        max_tgt_len=max_len,
        filter_long=False,
        name=name,
    )
    return tokenizer, dataset, refs


def _score(model, tokenizer, dataset, refs, cfg: EvalConfig, device, hparams) -> dict:
    from attnlab.evaluation.translation import pair_reader, perplexity, sacrebleu_scores, translate

    bos, eos = hparams.get("bos_id", 2), hparams.get("eos_id", 3)
    task, collate = pair_reader(model, tokenizer, hparams)
    hyps = translate(
        model, task, collate, tokenizer, dataset, cfg.decode, cfg.batch_size, device, bos, eos
    )
    ppl, nll = perplexity(model, task, collate, dataset, device, cfg.batch_size)
    return {"hyps": hyps, **sacrebleu_scores(hyps, refs), "perplexity": ppl, "nll": nll}


def _write(out: Path, scores: dict, cfg: EvalConfig, src_path, ref_path, started: float) -> dict:
    out.parent.mkdir(parents=True, exist_ok=True)
    hyp_path, json_path = out.with_name(out.name + ".hyp"), out.with_name(out.name + ".json")
    write_atomic(hyp_path, "\n".join(scores["hyps"]) + "\n")
    results = {
        "bleu": round(scores["bleu"], 2),
        "chrf": round(scores["chrf"], 2),
        "chrf++": round(scores["chrf++"], 2),
        "perplexity": scores["perplexity"],
        "nll": scores["nll"],
        "n_sentences": len(scores["hyps"]),
        "source": str(Path(src_path).resolve()),
        "reference": str(Path(ref_path).resolve()),
        "checkpoints": [str(Path(p).absolute()) for p in cfg.ckpt],  # links as named
        "averaged": len(cfg.ckpt) > 1,
        "decode": OmegaConf.to_container(OmegaConf.structured(cfg.decode)),
        "hypotheses": str(hyp_path),
        "json": str(json_path),
        "wall_time_s": round(time.perf_counter() - started, 2),
    }
    write_atomic(json_path, json.dumps(results, indent=2) + "\n")
    return results


def _averaging_line(cfg) -> str | None:
    """Which steps are scored, and a warning when the newest is before the run's last step."""
    import json

    from attnlab.evaluation.checkpoints import averaging_note

    paths = [Path(p) for p in cfg.ckpt]
    record = find_run_dir(paths[0]) / "results.json"
    try:
        run_steps = json.loads(record.read_text()).get("steps")
    except (OSError, ValueError):
        run_steps = None
    return averaging_note(paths, run_steps if isinstance(run_steps, int) else None)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        sys.exit(0 if argv else 2)
    try:
        cfg = parse_args(argv)
        note = _averaging_line(cfg)
        if note:
            print(note)
        results = _interruptible(evaluate, cfg)
    except EvalError as err:
        print(f"{programs.EVAL}: error: {err}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: its files are written whole or not at all
        print(f"{programs.EVAL}: interrupted; nothing of this evaluation was written (earlier "
              "results stand): the same command starts it again", file=sys.stderr)  # fmt: skip
        sys.exit(EXIT_CODES[Status.INTERRUPTED])
    if "extrapolation" in results:
        _print_lengths(results, cfg)
        return
    print(
        f"BLEU {results['bleu']:.2f}  chrF {results['chrf']:.2f}  chrF++ {results['chrf++']:.2f}  "
        f"perplexity {results['perplexity']:.2f}  ({results['n_sentences']} sentences, "
        f"beam {cfg.decode.beam_size}, {len(cfg.ckpt)} checkpoint(s))"
    )
    print(f"results: {results['json']}")
    print(f"hypotheses: {results['hypotheses']}")


def _interruptible(fn, *args):
    """fn(*args) with SIGTERM raised as KeyboardInterrupt, as Ctrl-C is."""
    import signal

    def stop(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        return fn(*args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _print_lengths(record: dict, cfg: EvalConfig) -> None:
    """The per-length table, then where the JSON went."""
    from attnlab.analysis.tables import fmt_number, text_table

    names = record["metrics"]
    rows = [["length", *names, "note"]]
    for length in record["lengths"]:
        entry = record["extrapolation"][str(length)]
        rows.append(
            [str(length), *(fmt_number(entry.get(m)) for m in names), entry.get("reason", "")]
        )
    print(f"per length ({len(cfg.ckpt)} checkpoint(s)):")
    print(text_table(rows))
    print(f"results: {record['json']}")


if __name__ == "__main__":
    main()
