"""The data layer's constants, in one light module (no torch, no Lightning). The choices of each
data option are declared with the option, in attnlab.data.configs."""

from __future__ import annotations

# The batch format each architecture trains on: sentence pairs {src, tgt_in, tgt_out} for an
# encoder-decoder, one sequence {tokens, targets} for a decoder-only model.
TASK_OF_ARCH = {"encoder_decoder": "seq2seq", "decoder_only": "lm"}
SPLITS = ("train", "val", "test")


def task_for_arch(arch: str) -> str:
    """ "seq2seq" for an encoder_decoder, "lm" for a decoder_only model."""
    try:
        return TASK_OF_ARCH[arch]
    except KeyError:
        raise ValueError(
            f"model.arch={arch!r} is not valid; expected one of: {', '.join(TASK_OF_ARCH)}"
        ) from None
