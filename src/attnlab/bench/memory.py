"""Peak memory of a piece of work above what was allocated before it.

GPU: torch.cuda.max_memory_allocated after reset_peak_memory_stats (the caching allocator's
own count). CPU: the CPU allocator keeps no peak, and the process RSS mixes in the allocator's
caches and other libraries, so the work runs once under torch.profiler with profile_memory=True,
which records every allocation and free of torch's CPU allocator with its size and time; the
peak is the maximum of their running sum. Profiling slows the work down: time it separately.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch


def peak_bytes(run: Callable[[], None], device: torch.device) -> int:
    """Bytes allocated at the peak of run(), above what was allocated when it started."""
    if device.type == "cuda":
        return _cuda_peak(run, device)
    return _cpu_peak(run)


def _cuda_peak(run: Callable[[], None], device: torch.device) -> int:
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    run()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def _cpu_peak(run: Callable[[], None]) -> int:
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # no start / stop lines from the profiler
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    events = [
        e
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    ]
    current = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        current += event.nbytes()
        peak = max(peak, current)
    return peak


def available_bytes(device: torch.device) -> int | None:
    """Memory the work may still take: free GPU memory, or the kernel's MemAvailable (None
    where unknown). Used to skip sizes that would exhaust it instead of crashing."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
