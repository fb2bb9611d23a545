"""The tables attnlab-bench prints, one per section (attnlab.analysis.tables formats them)."""

from __future__ import annotations

from attnlab.analysis.tables import fmt_number, text_table


def _ms(stats: dict) -> str:
    return f"{1e3 * stats['median_s']:.4g} ms ±{stats['spread_pct']:.0f}%"


def _mib(n: int | None) -> str:
    if n is None:
        return ""
    mib = n / 2**20
    return f"{mib:,.0f} MiB" if mib >= 1000 else f"{mib:.4g} MiB"  # 18,560 MiB, not 1.856e+04


def vs_torch_nn(section: dict) -> str:
    if "skipped" in section:
        return f"vs torch.nn: skipped ({section['skipped']})"
    rows = [
        [
            "size",
            "mode",
            "attnlab step",
            "torch.nn step",
            "attnlab tok/s",
            "torch.nn tok/s",
            "ratio",
            "attnlab TFLOP/s",
        ]
    ]
    for size, result in section.items():
        for mode in ("eager", "compiled"):
            m = result.get(mode)
            if m is None:
                continue
            if "skipped" in m:
                rows.append([size, mode, m["skipped"][:60], "", "", "", "", ""])
                continue
            a, t = m["attnlab"], m["torch_nn"]
            rows.append(
                [
                    size,
                    mode,
                    _ms(a),
                    _ms(t),
                    f"{a['tokens_per_s']:.0f}",
                    f"{t['tokens_per_s']:.0f}",
                    f"{m['ratio']:.3f}x",
                    fmt_number(a["tflops"]),
                ]
            )
    padding = "; ".join(
        f"{size}: "
        + ", ".join(f"{k} {100 * v:.1f}%" for k, v in result["padding"].items())
        + ("" if result.get("skip_padding", True) else " (model.skip_padding=false: computed)")
        for size, result in section.items()
        if "padding" in result
    )
    return (
        "training step, attnlab vs torch.nn.Transformer (ratio > 1: attnlab faster)\n"
        + text_table(rows)
        + (f"\npadded positions (attnlab skips them, eager): {padding}" if padding else "")
    )


def harness(section: dict) -> str:
    a, p = section["attnlab_train"], section["plain_loop"]
    ci = section.get("overhead_ci95_pct")
    interval = f" [{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else " (too few rounds for an interval)"
    rows = [
        [
            "attnlab-train step",
            "plain loop step",
            "overhead, 95% interval",
            "launch to first step",
            "--help",
        ],  # fmt: skip
        [
            _ms(a),
            _ms(p),
            f"{section['overhead_pct']:+.1f}%{interval}",
            f"{section['first_step_s']:.2f} s",
            f"{section['help_s']:.2f} s",
        ],
    ]
    rounds = len(section.get("overhead_rounds_pct") or [])
    load = section.get("load")
    note = f"\noverhead: median of {rounds} paired rounds, distribution-free interval" + (
        f"; 1-minute load {load:.2f} after the timing" if load is not None else ""
    )
    return "harness (steady state, no validation in the window)\n" + text_table(rows) + note


def attention(section: dict) -> str:
    rows = [
        ["length", "reference time", "fused time", "reference peak", "fused peak", "memory ratio"]
    ]
    for t, r in section["lengths"].items():
        ref, fused = r["reference"], r["fused"]
        ref_time = ref.get("skipped", "")[:40] if "skipped" in ref else _ms(ref)
        rows.append(
            [
                t,
                ref_time,
                _ms(fused),
                _mib(ref.get("peak_bytes")),
                _mib(fused["peak_bytes"]),
                fmt_number(r.get("memory_ratio")),
            ]
        )
    for t, why in section["skipped"].items():
        rows.append([t, why, "", "", "", ""])
    head = (
        f"attention alone, causal, {section['pass']}, {section['heads']} heads x d_k "
        f"{section['d_k']}, {section['dtype']} on {section['device']}"
    )
    return head + "\n" + text_table(rows)


def decoding(section: dict) -> str:
    rows = [["search", "cached sent/s", "uncached sent/s", "cache speedup"]]
    for name in ("greedy", "beam4"):
        r = section.get(name, {})
        if "cached" in r:
            rows.append(
                [
                    name,
                    f"{r['cached']['sentences_per_s']:.4g}",
                    f"{r['uncached']['sentences_per_s']:.4g}" if "uncached" in r else "n/a",
                    f"{r['speedup']:.2f}x" if "speedup" in r else "n/a",
                ]
            )
        elif "skipped" in r:
            rows.append([name, r["skipped"], "", ""])
    head = f"decoding, {section['sentences']} sentences, batches of {section['batch_size']}"
    return head + "\n" + text_table(rows)


def memory(section: dict) -> str:
    r = section["activation_checkpointing"]
    rows = [
        ["activation checkpointing", "peak memory of a step", "step time"],
        ["off", _mib(r["off"]["peak_bytes"]), _ms(r["off"])],
        ["on", _mib(r["on"]["peak_bytes"]), _ms(r["on"])],
    ]
    tail = f"saving {r['saving_pct']:.1f}% of the peak, for {r['time_cost_pct']:+.1f}% step time"
    return "memory\n" + text_table(rows) + "\n" + tail


def mfu(section: dict) -> str:
    if "skipped" in section:
        return f"MFU: skipped ({section['skipped']})"
    line = f"{section['achieved_tflops']:.4g} TFLOP/s achieved"
    line += f" ({section['mode']}, {section['precision']}, {section['tokens_per_s']:.0f} tokens/s)"
    if section.get("mfu") is not None:
        line += f" on {section['device']}: MFU {100 * section['mfu']:.1f}% of "
        line += f"{section['peak_tflops']:g} TFLOP/s"
    elif section.get("reason"):
        line += f"; {section['reason']}"
    line += f"; peak memory of a step {_mib(section['peak_memory_bytes'])}"
    return "model FLOPs utilisation: " + line


PRINTERS = {
    "vs_torch_nn": vs_torch_nn,
    "mfu": mfu,
    "harness": harness,
    "attention": attention,
    "decoding": decoding,
    "memory": memory,
}


def render(results: dict) -> str:
    return "\n\n".join(PRINTERS[name](results[name]) for name in PRINTERS if name in results)
