"""attnlab-bench: speed and memory figures from one command (attnlab.cli.bench).

    timing.py         interleaved repeats of contenders: median and spread
    memory.py         peak memory of a piece of work, on CPU (profiler) and GPU
    context.py        the composed config, the device and the batches every section uses
    torch_nn.py       torch.nn.Transformer with attnlab's dimensions, embeddings and parameters
    flops.py          the FLOP formula, GPU peaks, MFU (docs/benchmark.md)
    training_step.py  sections vs_torch_nn (and mfu) and memory (activation checkpointing)
    harness.py        section harness: attnlab-train's step against a plain loop, first step
    attention.py      section attention: reference against fused path over lengths
    decoding.py       section decoding: greedy and beam search, with and without the cache
    report.py         the printed tables

Nothing here is a test: figures come from this command (tests/test_bench.py checks that it
runs and that its JSON holds sane numbers, not how fast anything is).
"""
