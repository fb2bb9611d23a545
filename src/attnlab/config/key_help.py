"""Each config key's one-line meaning, read from the schema's own comments, for `--help`.

The classes that declare the options (attnlab.config.schema's dataclasses, the model's
TransformerConfig, the trainer's and the data's schemas) comment their fields where they are
declared: a comment at the end of the field's line, or the comment lines just above it. This
module reads those comments (Python's tokenize on the class's source; nothing is declared a
second time) and writes them beside the keys of the YAML that `attnlab-train --help` prints:

    model:
      n_heads: 4          # h: parallel attention heads (Sec. 3.2.2)

A key whose class has no comment for it gets none; a trainer key without one says it is a
lightning.Trainer argument.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import re
import tokenize
from functools import cache

WIDTH = 100  # an annotated line is cut to this many characters
_FIELD = re.compile(r"^\s*(\w+)\s*:")


def field_comments(cls: type) -> dict[str, str]:
    """{field: the first sentence of its comment} for a class's annotated fields: the comment
    ending the field's line, else the block of comment lines right above it."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    lines = source.splitlines()
    names = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    out: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        match = _FIELD.match(line)
        if not match or match.group(1) not in names or match.group(1) in out:
            continue
        text = comments.get(number) if not line.lstrip().startswith("#") else None
        if not text:  # the comment block above the field
            block, above = [], number - 1
            while above >= 1 and lines[above - 1].lstrip().startswith("#"):
                block.insert(0, comments.get(above, ""))
                above -= 1
            text = " ".join(block)
        if text:
            out[match.group(1)] = first_sentence(text)
    return out


def first_sentence(text: str) -> str:
    """The text up to its first full stop that ends a sentence (one followed by a capital; not
    e.g.'s or i.e.'s, nor "Sec. 3"'s), without the stop."""
    cut = re.split(r"(?<!\be\.g)(?<!\bi\.e)\.\s+(?=[A-Z])", text, maxsplit=1)[0]
    return cut if cut.endswith("...") else cut.rstrip(".")


@cache
def meanings(data_target: str | None = None) -> dict[str, str]:
    """{dotted key: meaning} for every commented field of the composed config's classes; the
    data keys those of the DataModule `data_target` names (None: every module's)."""
    from attnlab.config import schema
    from attnlab.config.trainer_schema import TrainerConfig
    from attnlab.data.configs import DATA_CONFIGS
    from attnlab.model.config import TransformerConfig

    out = _walk(schema.TrainConfig, "")
    out |= {f"model.{k}": v for k, v in field_comments(TransformerConfig).items()}
    out |= {f"model.{k}": v for k, v in MODEL_HARNESS.items()}
    trainer = field_comments(TrainerConfig)
    for f in dataclasses.fields(TrainerConfig):
        own = trainer.get(f.name)
        out[f"trainer.{f.name}"] = "lightning.Trainer's argument" + (f"; {own}" if own else "")
    out["data._target_"] = "the DataModule class (the data group's choice sets it)"
    for options, target in DATA_CONFIGS.values():
        if data_target not in (None, target):
            continue
        for cls in reversed(options.__mro__):  # a subclass's comment wins
            if dataclasses.is_dataclass(cls):
                out |= {f"data.{k}": v for k, v in field_comments(cls).items()}
    return out


MODEL_HARNESS = {  # attnlab.config.schema.HARNESS_MODEL_KEYS: the harness's, not the model's
    "name": "the model preset's name (conf/model)",
    "compile": "torch.compile the model inside the LightningModule",
    "compile_mode": "torch.compile's mode (default, reduce-overhead, max-autotune)",
}


def _walk(cls: type, prefix: str) -> dict[str, str]:
    """The comments of `cls`'s fields and of its nested dataclasses' (`X` or `X | None`)."""
    import typing

    out = {f"{prefix}{k}": v for k, v in field_comments(cls).items()}
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an annotation that does not resolve: no nested keys from it
        return out
    for f in dataclasses.fields(cls):
        tp = hints.get(f.name)
        nested = [c for c in (tp, *typing.get_args(tp)) if dataclasses.is_dataclass(c)]
        if nested:
            out |= _walk(nested[0], f"{prefix}{f.name}.")
    return out


def _target_of(group: str, yaml_text: str) -> str | None:
    found = re.search(rf"^{group}:\n(?:[ ].*\n)*?  _target_: (\S+)", yaml_text, re.MULTILINE)
    return found.group(1) if found else None


def _target_meanings(group: str, target: str | None) -> dict[str, str]:
    """A `_target_` group's keys: an attnlab class's own field comments (a schedule's), else
    '<target>'s argument' for every key (torch's optimizers are not imported for --help)."""
    if target is None:
        return {}
    out = {f"{group}._target_": "the class built (the group's choice sets it)"}
    out[f"{group}._partial_"] = "built later with the run's parameters (Hydra's partial)"
    if target.startswith("attnlab."):
        import importlib

        module, _, name = target.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            return out
        for base in reversed(getattr(cls, "__mro__", ())):
            if dataclasses.is_dataclass(base):
                out |= {f"{group}.{k}": v for k, v in field_comments(base).items()}
        return out
    return out | {f"{group}.*": f"{target}'s argument"}


def annotate(yaml_text: str, known: dict[str, str] | None = None) -> str:
    """The YAML with `# meaning` after each key that has one (block style, two-space indents,
    as OmegaConf.to_yaml writes it); other lines unchanged. The data keys' meanings are those of
    the DataModule the YAML's `data._target_` names."""
    if known is None:
        known = dict(meanings(_target_of("data", yaml_text)))
        known |= _target_meanings("scheduler", _target_of("scheduler", yaml_text))
        known |= _target_meanings("optim", _target_of("optim", yaml_text))
    path: list[tuple[int, str]] = []
    out = []
    for line in yaml_text.splitlines():
        match = re.match(r"^(\s*)(?:- )?([\w@.-]+):(\s|$)", line)
        if not match or line.lstrip().startswith("#"):
            out.append(line)
            continue
        indent = len(match.group(1))
        while path and path[-1][0] >= indent:
            path.pop()
        path.append((indent, match.group(2)))
        dotted = ".".join(k for _, k in path)
        meaning = known.get(dotted) or (len(path) == 2 and known.get(f"{path[0][1]}.*"))
        if meaning:
            line = f"{line.rstrip():<{max(32, len(line.rstrip()) + 2)}}# {meaning}"
            line = line if len(line) <= WIDTH else line[: WIDTH - 3] + "..."
        out.append(line)
    return "\n".join(out) + ("\n" if yaml_text.endswith("\n") else "")
