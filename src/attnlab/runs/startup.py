"""Python's cyclic garbage collector while a run's process starts.

Starting `attnlab-train` allocates about 420,000 objects that live as long as the process: the
modules, classes and functions of torch, Lightning, W&B and Hydra. While they pile up, CPython
(3.11) runs a full collection each time its oldest generation has grown by a quarter. In the
default run's launch that was 7 full collections, 0.7 s of the 3.2 s to the first step (2-core
CPU), and together they found about 10,000 unreachable objects.

So a single run pauses the collector while the command starts (`collector_paused`). Just before
training, `resume_collector` moves every object that exists by then into the permanent
generation (`gc.freeze`), where later collections do not scan it, and turns the collector back
on. Full collections during training then scan only what training allocates.

The price: whatever garbage the start-up left is frozen too and is never freed. That was about
40,000 objects, about 11 MB, in the default run (parsed overrides and composed configs), once
per process. A multirun does not pause, because its preflight composes every job's config and
would freeze all of that garbage.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_paused = False


@contextmanager
def collector_paused(pause: bool = True) -> Iterator[None]:
    """Run the block with the cyclic collector off (if `pause` and it is on) until
    `resume_collector` turns it on. Where the block ends without that (a config error, --help,
    a run that had already completed), the collector is turned on again and nothing is frozen."""
    global _paused
    if pause and gc.isenabled():
        gc.disable()
        _paused = True
    try:
        yield
    finally:
        if _paused:
            _paused = False
            gc.enable()


def resume_collector() -> None:
    """If `collector_paused` turned the collector off: freeze every object that exists now out of
    later collections (gc.freeze) and turn the collector on again. Otherwise do nothing, so a
    second run in the same process, or a caller that never paused, keeps the default collector."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
