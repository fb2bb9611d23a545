"""OmegaConf resolvers for presets whose values follow from others (registered on import of
attnlab.config.schema, so every composed config can use them):

    ${attnlab_world:${trainer.devices},${trainer.num_nodes}}   processes of the run (devices x
                                                               nodes; 1 where unknown, e.g. auto)
    ${attnlab_mul:a,b,...}                                     the product of integers
    ${attnlab_accumulation:tokens_per_step,${data.max_tokens}} gradient accumulation: the number
                                                               of forward passes of max_tokens
                                                               that make about tokens_per_step

experiment=paper_base uses them for the paper's ~25,000 source + 25,000 target tokens per step:
data.max_tokens = 6250 per device x the world size (each forward pass, over all devices), and
trainer.accumulate_grad_batches = round(50000 / data.max_tokens).
"""

from __future__ import annotations

import math

from omegaconf import OmegaConf


def world(devices, num_nodes=1) -> int:
    """trainer.devices x trainer.num_nodes as attnlab.config.validate.world_size counts them
    (an integer or a list of device ids), or 1 where the config does not say ("auto", -1)."""
    from attnlab.config.validate import world_size

    n = world_size(OmegaConf.create({"devices": devices, "num_nodes": int(num_nodes)}))
    return n or 1


def mul(*factors) -> int:
    return math.prod(int(f) for f in factors)


def accumulation(tokens_per_step, max_tokens) -> int:
    """Forward passes of max_tokens per optimizer step: round(tokens_per_step / max_tokens),
    at least 1."""
    return max(1, round(int(tokens_per_step) / int(max_tokens)))


def register() -> None:
    for name, fn in (
        ("attnlab_world", world),
        ("attnlab_mul", mul),
        ("attnlab_accumulation", accumulation),
    ):
        OmegaConf.register_new_resolver(name, fn, replace=True)
