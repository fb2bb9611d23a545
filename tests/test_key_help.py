"""attnlab.config.key_help: each config key's one-line meaning, from the comments where its
class declares it, beside the key in `attnlab-train --help` (the help itself: test_cli_errors)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from attnlab.config import key_help
from attnlab.data.configs import DATA_CONFIGS
from attnlab.model.config import TransformerConfig


@dataclass
class _Options:
    width: int = 4  # the width (Sec. 3); more text. Ignored
    # The depth, e.g. 6 layers. A second sentence
    # that continues here.
    depth: int = 6
    bare: int = 0
    note = "not a field"  # a class attribute's comment is not a field's


def test_a_fields_meaning_is_its_trailing_comment_else_the_block_above_first_sentence_only():
    assert key_help.field_comments(_Options) == {
        "width": "the width (Sec. 3); more text",
        "depth": "The depth, e.g. 6 layers",
    }


def test_annotate_writes_the_meaning_of_the_nested_key_and_leaves_the_rest():
    yaml_text = "seed: 1\nmodel:\n  seed: 2\n  d_model: 64\nother:\n- 1\n"
    known = {"seed": "the seed", "model.d_model": "the width", "model": "the model"}
    lines = key_help.annotate(yaml_text, known).splitlines()
    assert lines[0].startswith("seed: 1 ") and lines[0].endswith("# the seed")
    assert lines[1].endswith("# the model") and lines[2] == "  seed: 2"  # not model.seed
    assert lines[3].endswith("# the width") and lines[4:] == ["other:", "- 1"]


def test_every_model_and_data_option_has_a_meaning():
    """A new option without a comment where it is declared fails here: --help would show it
    bare. (vocab_size and pad_id come from the data; they are not config keys.)"""
    meanings = key_help.meanings()
    for f in dataclasses.fields(TransformerConfig):
        assert f"model.{f.name}" in meanings, f.name
    for options, target in DATA_CONFIGS.values():
        own = key_help.meanings(target)
        missing = [f.name for f in dataclasses.fields(options) if f"data.{f.name}" not in own]
        allowed = {"seed", "num_workers", "val_size", "test_size"}  # self-explaining, shared
        assert set(missing) <= allowed, (options.__name__, missing)
