"""The GPU probe's one JSON and one table (scripts/gpu_battery.sh probe, issue 48).

Reads <out>/probe-base.json and <out>/probe-no_<switch>.json (attnlab-bench --vs-torch-nn
--compile on, the base model with every switch on, then each switch off), <out>/probe-trials.txt
(the seconds of sweeps/gpu_probe_trials.yaml's trials at once and one at a time) and the trials'
results.json under outputs/probe/; writes <out>/battery-probe.json and battery-probe.md.

    python scripts/probe_table.py <out>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _bench_row(name: str, path: Path) -> dict:
    figures = json.loads(path.read_text())
    (size,) = figures["vs_torch_nn"].values()
    mode = "compiled" if "compiled" in size else "eager"  # --compile on; a CPU dry run: eager
    cell = size[mode]
    return {
        "variant": name,
        "mode": mode,
        "attnlab_step_ms": 1e3 * cell["attnlab"]["median_s"],
        "attnlab_spread_pct": cell["attnlab"]["spread_pct"],
        "tokens_per_s": cell["attnlab"]["tokens_per_s"],
        "torch_nn_step_ms": 1e3 * cell["torch_nn"]["median_s"],
        "speed_vs_torch_nn": 1 / cell["ratio"] if cell.get("ratio") else None,
        "mfu": figures.get("mfu", {}).get("mfu"),
        "peak_memory_gib": cell["attnlab"].get("peak_memory_bytes", 0) / 2**30,
    }


def _trials(out: Path) -> dict:
    seconds = dict(line.split() for line in (out / "probe-trials.txt").read_text().splitlines())
    result = {}
    for key, folder in (("at_once", "at-once"), ("one_at_a_time", "one-at-a-time")):
        records = [
            json.loads(p.read_text()) for p in Path("outputs/probe", folder).glob("*/results.json")
        ]
        wall = float(seconds[f"{key}_s"])
        done = [r for r in records if r.get("status") == "completed"]
        result[key] = {
            "trials": len(records),
            "completed": len(done),
            "wall_s": wall,
            "trials_per_hour": 3600 * len(done) / wall if wall else None,
        }
    one, many = result["one_at_a_time"]["trials_per_hour"], result["at_once"]["trials_per_hour"]
    result["speedup"] = many / one if one and many else None
    return result


def main(out: Path) -> None:
    rows = [_bench_row("base (every switch on)", out / "probe-base.json")]
    rows += [
        _bench_row(p.stem.removeprefix("probe-"), p) for p in sorted(out.glob("probe-no_*.json"))
    ]
    machine = json.loads((out / "probe-base.json").read_text())["machine"]
    trials = _trials(out)
    (out / "battery-probe.json").write_text(
        json.dumps({"machine": machine, "switches": rows, "trials": trials}, indent=2) + "\n"
    )
    lines = [
        "| variant | mode | step ms (spread %) | tokens/s | MFU | x compiled torch.nn | peak GiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        speed = f"{r['speed_vs_torch_nn']:.2f}" if r["speed_vs_torch_nn"] else "n/a"
        step = f"{r['attnlab_step_ms']:.2f} ({r['attnlab_spread_pct']:.0f})"
        lines.append(
            f"| {r['variant']} | {r['mode']} | {step} | {r['tokens_per_s']:.0f} | {mfu} "
            f"| {speed} | {r['peak_memory_gib']:.2f} |"
        )
    lines += ["", "| trials | completed | wall s | trials/hour |", "|---|---|---|---|"]
    for key in ("at_once", "one_at_a_time"):
        t = trials[key]
        per_hour = f"{t['trials_per_hour']:.0f}" if t["trials_per_hour"] else "n/a"
        name = f"{key.replace('_', ' ')} ({t['trials']})"
        lines.append(f"| {name} | {t['completed']} | {t['wall_s']:.0f} | {per_hour} |")
    speedup = trials["speedup"]
    lines.append(
        f"\nmany at once: {speedup:.2f}x the trials per hour of one at a time" if speedup else ""
    )
    (out / "battery-probe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "battery-out"))
