"""Positional information as components: Section 3.5 (sinusoidal) and its rivals.

Each encoding is one module of this package, named as users type it (`model.pos_encoding=rope`
is rope.py), holding one PositionalEncoding subclass (base.py) exported as `ENCODING`. A new
encoding is a new module here (and its test): the choices (NAMES) are the modules found in this
folder, read without importing them, so the config schema and `attnlab-train --help` stay free of
torch; `encoding_class(name)` imports the one a model uses.

What an encoding gives the model (base.PositionalEncoding):
- absolute positions, added to the scaled token embeddings at the bottom of each stack
  (sinusoidal, learned);
- relative positions for self-attention: a rotation of queries and keys (RoPE) or a bias added
  to the scores (ALiBi);
- or nothing (none).
None acts in encoder-decoder cross-attention: a target position and a source position live on
different axes, so their "distance" has no meaning (the decoder still sees word order through its
own self-attention, and the encoder through its own).
"""

from __future__ import annotations

import importlib

from attnlab.components import module_names

# The paper's encoding first, then its rivals in the order the report discusses them; encodings
# added later follow, by name.
NAMES: tuple[str, ...] = module_names(__file__, ("sinusoidal", "learned", "rope", "alibi", "none"))


def encoding_class(name: str):
    """The PositionalEncoding subclass of `name`, one of NAMES: the choice a TransformerConfig
    checked when it was made (the one check of model.pos_encoding)."""
    return importlib.import_module(f"{__name__}.{name}").ENCODING
