"""attnlab-bench runs and writes sane figures (the figures themselves come from the command,
not from tests); its FLOP formula is the FLOPs the model executes."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

import forked
from attnlab.bench.flops import forward_flops, gpu_peak_tflops
from attnlab.model import Transformer, TransformerConfig


def _positive(x) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


def _timing(stats: dict) -> None:
    assert _positive(stats["median_s"]) and stats["min_s"] <= stats["median_s"] <= stats["max_s"]
    assert stats["repeats"] >= 1 and stats["spread_pct"] >= 0


@pytest.mark.slow
def test_quick_bench_writes_every_section(tmp_path):
    out = tmp_path / "bench.json"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "WANDB_MODE": "disabled", "TMPDIR": str(tmp)}
    cmd = [sys.executable, "-m", "attnlab.cli.bench", "--quick", "debug=tiny", "logger=none"]
    # a fresh Python (not forked, tests/forked.py: the memory profiler would see the forking
    # interpreter's blocks and warn on stderr); its harness section starts attnlab-train
    proc = subprocess.run(
        [*cmd, "--json", str(out)], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == "", "without -v the bench prints its tables and nothing else"
    assert not list(tmp.glob("attnlab-bench-*")), "the bench leaves its work folder behind"
    r = json.loads(out.read_text())
    assert r["machine"]["device"] == "cpu" and len(r["machine"]["load_average"]) == 3
    # the ISA and native bf16 tell apart two machines that /proc/cpuinfo names alike
    assert r["machine"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert isinstance(r["machine"]["native_bf16"], bool)
    assert "training step, attnlab vs torch.nn.Transformer" in proc.stdout

    (size,) = r["vs_torch_nn"]  # one size: the configured model
    assert size == r["config"]["size"] == "d32-1+1"
    vs = r["vs_torch_nn"][size]
    assert vs["parameters"]["attnlab"] == vs["parameters"]["torch_nn"]
    # debug=tiny's reversal batches have sentences of several lengths: pads that attnlab skips
    assert vs["padding"] == r["config"]["padding"] and set(vs["padding"]) == {"src", "tgt_in"}
    assert all(0 < share < 1 for share in vs["padding"].values())
    assert vs["skip_padding"] is True
    assert "padded positions (attnlab skips them, eager): d32-1+1: src" in proc.stdout
    for name in ("attnlab", "torch_nn"):
        _timing(vs["eager"][name])
        assert _positive(vs["eager"][name]["tokens_per_s"])
    assert _positive(vs["eager"]["ratio"]) and "compiled" not in vs  # --quick: eager only
    assert r["mfu"]["mfu"] is None and _positive(r["mfu"]["achieved_tflops"])

    h = r["harness"]
    _timing(h["attnlab_train"]), _timing(h["plain_loop"])
    assert math.isfinite(h["overhead_pct"]) and 0 < h["first_step_s"] < 300 and h["help_s"] > 0

    att = r["attention"]
    assert list(att["lengths"]) == ["128", "256"] and att["dtype"] == "float32"
    for length in att["lengths"].values():
        # the reference path holds (T, T) weights, the fused one does not: more memory
        assert length["reference"]["peak_bytes"] > length["fused"]["peak_bytes"] > 0
        _timing(length["fused"])

    dec = r["decoding"]
    for search in ("greedy", "beam4"):
        for cache in ("cached", "uncached"):
            assert _positive(dec[search][cache]["sentences_per_s"])

    ac = r["memory"]["activation_checkpointing"]
    assert 0 < ac["on"]["peak_bytes"] < ac["off"]["peak_bytes"] and ac["saving_pct"] > 0


@pytest.mark.slow
def test_decoding_of_a_decoder_only_model_on_pairs(tmp_path, capsys):
    """debug=tiny's reversal pairs batched for a decoder-only model: greedy cached and not,
    beam 4 continuing the prompt (always cached). attnlab-bench's main in this process (-v: the
    libraries' warnings left as this process has them; the command itself runs in
    test_quick_bench_writes_every_section)."""
    from attnlab.cli import bench

    out = tmp_path / "bench.json"
    bench.main(["-v", "--decoding", "--quick", "debug=tiny", "model.arch=decoder_only",
                "--json", str(out)])  # fmt: skip
    stdout = capsys.readouterr().out
    dec = json.loads(out.read_text())["decoding"]
    assert _positive(dec["greedy"]["uncached"]["sentences_per_s"])
    assert _positive(dec["beam4"]["cached"]["sentences_per_s"]) and "uncached" not in dec["beam4"]
    assert "beam4   " in stdout and "n/a" in stdout


@pytest.mark.slow
def test_a_bad_override_is_one_line_and_exit_2():
    proc = forked.run([sys.executable, "-m", "attnlab.cli.bench", "model.n_head=3"], timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("attnlab-bench: error: model.n_head is not a key of model")


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_flop_formula_counts_what_the_model_computes(arch):
    """torch's FLOP counter over the reference attention path (explicit matmuls) equals the
    formula, except that the counter also counts the causal mask's hidden half."""
    from torch.utils.flop_counter import FlopCounterMode

    cfg = TransformerConfig(
        vocab_size=50,
        d_model=64,
        n_heads=4,
        d_ff=128,
        n_encoder_layers=2,
        n_decoder_layers=3,
        dropout=0.0,
        arch=arch,
    )
    model = Transformer(cfg)
    b, s, t = 3, 7, 5
    src, tgt = torch.randint(4, 50, (b, s)), torch.randint(4, 50, (b, t))
    with model.record_attention(), FlopCounterMode(display=False) as counter:
        model(src, tgt) if arch == "encoder_decoder" else model(tgt)
    batch = {"src": src, "tgt_in": tgt} if arch == "encoder_decoder" else {"tokens": tgt}
    hidden = cfg.n_decoder_layers * b * (4 * 64 * t * t - 2 * 64 * t * (t + 1))
    assert forward_flops(cfg, batch, pad_id=0) + hidden == counter.get_total_flops()


def test_padding_adds_no_flops():
    cfg = TransformerConfig(vocab_size=50, d_model=64, n_heads=4, d_ff=128)
    src, tgt = torch.randint(4, 50, (2, 6)), torch.randint(4, 50, (2, 5))
    padded = {
        "src": torch.nn.functional.pad(src, (0, 3)),
        "tgt_in": torch.nn.functional.pad(tgt, (0, 2)),
    }
    assert forward_flops(cfg, padded, 0) == forward_flops(cfg, {"src": src, "tgt_in": tgt}, 0)


def test_gpu_peaks_are_looked_up_by_device_name():
    assert gpu_peak_tflops("NVIDIA H100 80GB HBM3", "bf16-mixed") == 989.0
    assert gpu_peak_tflops("NVIDIA H100 PCIe", "bf16-mixed") == 756.0
    assert gpu_peak_tflops("NVIDIA H200", "32-true") == 67.0
    assert gpu_peak_tflops("NVIDIA A100-SXM4-80GB", "bf16-mixed") == 312.0
    assert gpu_peak_tflops("NVIDIA A10", "bf16-mixed") == 125.0
    assert gpu_peak_tflops("NVIDIA A10G", "bf16-mixed") is None  # not an A10
    assert gpu_peak_tflops("NVIDIA L4", "bf16-mixed") == 121.0
    assert gpu_peak_tflops("Tesla V100-SXM2-16GB", "bf16-mixed") is None  # no bf16
    assert gpu_peak_tflops("Some Future GPU", "bf16-mixed") is None


@pytest.mark.slow
def test_the_harness_run_validates_nothing_inside_its_timed_window(compose, tmp_path):
    """The harness's attnlab-train block must not validate while it is timed: an interval
    longer than the run alone is scaled down to ~5 validations (training/short_runs.py), which
    put the harness overhead at +49% instead of ~+4%."""
    from types import SimpleNamespace

    from attnlab.bench.harness import _config, _StepClock
    from attnlab.config.plain import plain_config
    from attnlab.pipeline.build import attach, build

    ctx = SimpleNamespace(cfg=compose(["debug=tiny", "logger=none"]))
    cfg = plain_config(_config(ctx, 30, tmp_path / "run"))
    built = attach(build(cfg, tmp_path / "run"), cfg, tmp_path / "run", "bench")
    datamodule, module, trainer = built.datamodule, built.module, built.trainer
    validations = []
    module.on_validation_start = lambda: validations.append(trainer.global_step)
    trainer.callbacks.append(_StepClock(5, 30))
    trainer.fit(module, datamodule=datamodule)
    assert trainer.global_step == 30 and validations == []


_GRAPH_BREAK = """
import sys
from attnlab.cli.bench import _quiet_libraries
if sys.argv[1] == "quiet":
    _quiet_libraries()
import torch

@torch.compile(backend="eager")
def f(x):
    return x + 1 if bool(x.sum() > 0) else x  # .item(): a graph break torch warns about

f(torch.ones(3))
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["quiet", "verbose"])
def test_bench_without_v_hides_torch_compiles_graph_break_warnings(mode):
    """attnlab-bench prints its tables only: torch.compile's graph-break warnings (12 lines a
    compiled size) are hidden unless -v; the test fails if torch stops reading TORCH_LOGS."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _GRAPH_BREAK, mode], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("Graph break" in proc.stderr) == (mode == "verbose")


def test_the_overhead_is_the_median_of_paired_rounds_with_an_order_statistic_interval():
    """Round i pairs attnlab-train's block i with the plain loop's block i; the interval is
    (x_(k), x_(n+1-k)) with the largest k covering >= 95%: for 11 rounds k = 2 (98.8%; k = 3
    covers 1 - 2 * 67/2048 = 93.5%); fewer than 6 rounds have none."""
    from attnlab.bench.harness import paired_overhead
    from attnlab.bench.timing import median_interval, median_interval_coverage

    plain = [10.0] * 11
    train = [10.0 + d for d in (0.1, 0.3, 0.2, 0.5, 0.4, 0.0, 0.6, 0.2, 0.3, 0.9, -0.1)]
    result = paired_overhead(train, plain)
    rounds = sorted(result["overhead_rounds_pct"])
    assert result["overhead_pct"] == pytest.approx(3.0)  # the 6th of 11: 0.3 ms -> +3%
    assert result["overhead_ci95_pct"] == pytest.approx([rounds[1], rounds[9]])  # 0.0, 0.6
    assert median_interval_coverage(11, 2) == pytest.approx(1 - 2 * 12 / 2048)
    assert median_interval_coverage(11, 3) == pytest.approx(1 - 2 * 67 / 2048)
    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None  # (min, max) covers 93.75%
    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) == (1.0, 6.0)  # 96.9%


def test_a_loaded_machine_gets_no_overhead_figure(monkeypatch):
    """Above one runnable process per core the harness refuses to time (exit 3 from
    attnlab-bench), rather than print a figure the load has moved."""
    import os
    from types import SimpleNamespace

    from attnlab.bench import harness

    cores = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (cores + 0.5, 0.0, 0.0))
    with pytest.raises(harness.MachineLoaded, match=rf"1-minute load {cores + 0.5:.2f} on {cores}"):
        harness.run_harness(SimpleNamespace(quick=False))
    monkeypatch.setattr(os, "getloadavg", lambda: (cores - 0.5, 0.0, 0.0))
    assert harness.load_problem("now") is None
