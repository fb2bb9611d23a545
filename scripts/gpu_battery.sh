#!/usr/bin/env bash
# The GPU battery (issue 13, docs/benchmark.md): on one lent H100 / H200, in steps that each end
# well inside the device tool's 10-minute limit per command: about 21 minutes of device time on an
# H100 on 2026-11-22 (multi30k 825 s, bench 3.5 min, attention and tests 30 s each, the start).
#
# Here, on the development machine (it has the network), once:
#     scripts/gpu_battery.sh prepare     # hydra-core wheels into .whl/, Multi30k into .battery/
# There, one `run` per step, each carrying .whl and .battery, the machine kept warm in between
# (a machine is held 30 minutes at most, so run multi30k first, on a fresh machine):
#     scripts/gpu_battery.sh multi30k-start   # experiment=multi30k in its own session, watched for
#     scripts/gpu_battery.sh multi30k-watch   #   9 minutes a call: repeat -watch until "completed"
#                                        # (825 s on an H100); or, stopping and resuming instead:
#     scripts/gpu_battery.sh multi30k    # experiment=multi30k, 9 minutes a call: repeat the call
#                                        # until it says "completed"; test_2016 BLEU, wall time
#     scripts/gpu_battery.sh bench       # the paper's base model, ~25k tokens a batch, bf16,
#                                        # eager and compiled: tokens/s, MFU, peak memory, the
#                                        # ratio to torch.nn.Transformer; activation checkpointing
#     scripts/gpu_battery.sh attention   # attention 128..8192, fused against reference memory
#     scripts/gpu_battery.sh tests       # the tests marked gpu (mixed precision on a GPU)
#     scripts/gpu_battery.sh probe       # FIRST when a GPU is lent (issue 48), < 8 minutes: the
#                                        # base model compiled, each switch on and off (5
#                                        # repeats), then sweeps/gpu_probe_trials.yaml's 12
#                                        # trials at once against one at a time: trials/hour;
#                                        # battery-probe.json and battery-probe.md
# Each step writes battery-<step>.json / .log into $OUT (the device tool brings $OUT back).
# W&B is not used there (nothing can be reached from the machine): runs log to metrics.csv.
#
# DRY_RUN=1 scripts/gpu_battery.sh <step> runs the same commands on a CPU with tiny sizes: it
# checks the wiring (overrides, resumption, files written), not the figures; the probe's six
# attnlab-bench variants run with their same arguments in one Python process (one import of
# torch and Lightning instead of six: ~1 minute less on 2 cores). EXTRA_OVERRIDES
# adds Hydra overrides to every step; STEP_SECONDS is one multi30k call's budget (540).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-battery-out}
mkdir -p "$OUT"
DRY_RUN=${DRY_RUN:-0}
PY=${PYTHON:-python3}

# The paper's base model (Table 3: d_model 512, 6+6 layers, 8 heads, d_ff 2048, a shared
# vocabulary of 37000) on batches of 960 sentence pairs of 25 + 26 tokens: ~25k source and
# ~25k target tokens a step (Sec. 5.1), from the synthetic copy task (no data to carry).
BASE=(model=transformer_base data=copy data.n_symbols=36996 "data.train_len=[25,25]"
      "data.eval_len=[25,25]" data.batch_size=960 trainer=gpu trainer.precision=bf16-mixed
      torch_threads=null logger=none)
BENCH=(--steps 10 --repeats 5)
MULTI30K=(experiment=multi30k data.root=.battery/multi30k logger=csv paths.root=outputs/battery)
STEP_SECONDS=${STEP_SECONDS:-540}
# The probe's switches: name and the overrides that turn it off (the base has each on: those
# off by default are turned on in PROBE_ON).
PROBE_ON=(loss.fused_output=true model.compile_mode=reduce-overhead)
PROBE_SWITCHES=("skip_padding model.skip_padding=false" "fused_adam optim.fused=false"
                "fused_output loss.fused_output=false" "cuda_graphs model.compile_mode=default"
                "autocast trainer.precision=bf16-true")  # no autocast: bf16 weights, fp32 masters
PROBE_BENCH=(--vs-torch-nn --compile on --steps 10 --repeats 5)
PROBE_TRIALS=(--trials-per-gpu 12 --gpus 0)
PROBE_ONE=(--parallel 1)
PROBE_TRIAL_OVERRIDES=(trainer=gpu)
PROBE_RUN=($PY -m attnlab.cli.bench)  # one process per variant
if [[ $DRY_RUN == 1 ]]; then
  BASE=(debug=tiny data=copy data.n_symbols=60 "data.train_len=[6,6]" data.batch_size=8
        trainer.precision=32-true logger=none)
  BENCH=(--quick)
  MULTI30K+=(trainer=cpu trainer.max_steps=6 trainer.val_check_interval=3 data.vocab_size=400
             data.max_tokens=400 model.d_model=32 model.d_ff=64 model.n_heads=2
             model.n_encoder_layers=1 model.n_decoder_layers=1 checkpoint.every_n_steps=3
             callbacks.translation_quality.val_subset=8 trainer.limit_val_batches=2
             trainer.limit_test_batches=2)
  STEP_SECONDS=${STEP_SECONDS_DRY:-300}
  PROBE_BENCH=(--vs-torch-nn --compile off --quick)
  PROBE_TRIALS=(--parallel 2 --count 2)
  PROBE_ONE=(--parallel 1 --count 1)  # the wiring of one at a time: one trial shows it
  PROBE_TRIAL_OVERRIDES=(trainer=cpu trainer.max_steps=4 trainer.val_check_interval=2
                         model.d_model=16 model.d_ff=32 model.n_heads=2 model.n_decoder_layers=1
                         trainer.limit_val_batches=1 trainer.limit_test_batches=1)
  PROBE_RUN=(probe_queue)  # queued, then run in one process by probe_queued
  PROBE_QUEUE=$OUT/probe-bench.queue
  rm -f "$PROBE_QUEUE"
fi
read -ra EXTRA <<< "${EXTRA_OVERRIDES:-}"  # e.g. EXTRA_OVERRIDES="seed=2": added to every step
BASE+=("${EXTRA[@]}")
MULTI30K+=("${EXTRA[@]}")

prepare() {  # here, with the network: what the machine there lacks
  local versions=()
  for pkg in hydra-core omegaconf antlr4-python3-runtime; do
    versions+=("$pkg==$($PY -m pip show "$pkg" | sed -n 's/^Version: //p')")
  done
  rm -rf .whl && mkdir -p .whl .battery
  # antlr4-python3-runtime 4.9.3 (what omegaconf 2.3 needs) is published as a source archive
  # only: build its pure-Python wheel here.
  $PY -m pip wheel -q --no-deps -w .whl "${versions[@]}"
  rm -rf .battery/multi30k  # .whl/ and .battery/ are git-ignored
  cp -r --no-preserve=mode "${DATA:-../shared/data/multi30k}" .battery/
  ls -l .whl .battery/multi30k
}

setup() {  # there: install the carried wheels beside the image's torch and Lightning
  if [[ $DRY_RUN != 1 ]]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/battery-gpu.txt"
  fi
  export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 WANDB_MODE=disabled
  if [[ $DRY_RUN != 1 ]]; then  # (a dry run's Python is the one it was started from)
    $PY -c "import torch, hydra, lightning; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
  fi
}

bench() {
  $PY -m attnlab.cli.bench --vs-torch-nn --memory --compile both "${BENCH[@]}" "${BASE[@]}" \
    --json "$OUT/battery-bench.json" 2>&1 | tee "$OUT/battery-bench.log"
}

attention() {
  $PY -m attnlab.cli.bench --attention "${BENCH[@]}" "${BASE[@]}" \
    --json "$OUT/battery-attention.json" 2>&1 | tee "$OUT/battery-attention.log"
}

tests() {
  $PY -m pytest -q -m gpu -p no:cacheprovider tests/ 2>&1 | tee "$OUT/battery-tests.log"
}

probe() {
  # 1. the base model compiled, with every switch on, then each switch off (5 repeats each)
  "${PROBE_RUN[@]}" "${PROBE_BENCH[@]}" "${BASE[@]}" "${PROBE_ON[@]}" \
    --json "$OUT/probe-base.json" > "$OUT/probe-base.log" 2>&1
  local entry name overrides
  for entry in "${PROBE_SWITCHES[@]}"; do
    read -r name overrides <<< "$entry"
    "${PROBE_RUN[@]}" "${PROBE_BENCH[@]}" "${BASE[@]}" "${PROBE_ON[@]}" $overrides \
      --json "$OUT/probe-no_$name.json" > "$OUT/probe-no_$name.log" 2>&1
  done
  if [[ $DRY_RUN == 1 ]]; then probe_queued; fi
  # 2. many small trials on one device at once, then the same trials one at a time (their run
  # folders stay there, outside $OUT; the table reads their results.json)
  rm -rf outputs/probe
  local start
  start=$SECONDS
  $PY -m attnlab.cli.sweep sweeps/gpu_probe_trials.yaml "${PROBE_TRIALS[@]}" \
    --out outputs/probe/at-once "${PROBE_TRIAL_OVERRIDES[@]}" > "$OUT/probe-trials.log" 2>&1
  echo "at_once_s $((SECONDS - start))" > "$OUT/probe-trials.txt"
  start=$SECONDS
  $PY -m attnlab.cli.sweep sweeps/gpu_probe_trials.yaml "${PROBE_ONE[@]}" \
    --out outputs/probe/one-at-a-time "${PROBE_TRIAL_OVERRIDES[@]}" >> "$OUT/probe-trials.log" 2>&1
  echo "one_at_a_time_s $((SECONDS - start))" >> "$OUT/probe-trials.txt"
  $PY scripts/probe_table.py "$OUT"
}

# DRY_RUN: each variant's attnlab-bench arguments are queued (NUL after each argument, one more
# after the last), then run by attnlab.cli.bench.main in one process, output to the same .log
# files; the first that fails stops it with its exit code and its log's tail.
probe_queue() { printf '%s\0' "$@" >> "$PROBE_QUEUE"; printf '\0' >> "$PROBE_QUEUE"; }

probe_queued() {
  $PY - "$PROBE_QUEUE" <<'PY'
import contextlib, sys
from pathlib import Path
from attnlab.cli import bench
queue = Path(sys.argv[1])
records = queue.read_text().split("\0\0")[:-1]
queue.unlink()
for args in (record.split("\0") for record in records):
    log = Path(args[args.index("--json") + 1]).with_suffix(".log")
    with open(log, "w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        try:
            bench.main(args)
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    if code:
        tail = log.read_text()[-3000:]
        print(f"attnlab-bench {' '.join(args)}: exit {code}\n{tail}", file=sys.stderr)
        sys.exit(code)
PY
}

multi30k() {
  # One call trains for STEP_SECONDS, then SIGTERM: the run checkpoints and stops
  # ("interrupted", exit 4); the next call's resume=auto continues it where it stopped.
  local code=0
  timeout --preserve-status -s TERM -k 60 "$STEP_SECONDS" $PY -m attnlab.cli.train "${MULTI30K[@]}" \
    >> "$OUT/battery-multi30k.log" 2>&1 || code=$?
  tail -c 3000 "$OUT/battery-multi30k.log" | tr '\r' '\n' | tail -n 5
  multi30k_summary
  return $(( code == 4 ? 0 : code ))  # interrupted by the time budget: call again
}

# How the 2026-11-22 figures were taken: the run in its own session (setsid), so that it trains on
# between calls instead of stopping and resuming; each call waits up to STEP_SECONDS and brings the
# log and the summary back. Call multi30k-watch again within the machine's 30 idle seconds.
MULTI30K_STATE=${MULTI30K_STATE:-/tmp/attnlab-battery-multi30k}
multi30k-start() {
  mkdir -p "$MULTI30K_STATE"
  setsid nohup $PY -m attnlab.cli.train "${MULTI30K[@]}" > "$MULTI30K_STATE/log" 2>&1 < /dev/null &
  echo $! > "$MULTI30K_STATE/pid"
  multi30k-watch
}

multi30k-watch() {
  local pid end=$((SECONDS + STEP_SECONDS))
  pid=$(cat "$MULTI30K_STATE/pid")
  while (( SECONDS < end )) && kill -0 "$pid" 2>/dev/null; do sleep 5; done
  cp "$MULTI30K_STATE/log" "$OUT/battery-multi30k.log"
  tr '\r' '\n' < "$MULTI30K_STATE/log" | grep -v '^[[:space:]]*$' | tail -n 5
  if kill -0 "$pid" 2>/dev/null; then
    echo "multi30k: still training; call multi30k-watch again"
  else
    multi30k_summary
  fi
}

multi30k_summary() {
  $PY - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
(record,) = sorted(Path("outputs/battery/multi30k").glob("*/results.json"))[-1:] or [None]
if record is None:
    sys.exit("multi30k: no run directory yet")
r = json.loads(record.read_text())
m = r.get("metrics", {})
keep = {k: m.get(k) for k in ("test/bleu", "test/chrf", "test/loss", "val/bleu", "train/tokens_per_sec")}
summary = {"status": r["status"], "steps": r.get("steps"), "wall_time_s": r.get("wall_time_s"), **keep}
(out / "battery-multi30k.json").write_text(json.dumps(summary, indent=2) + "\n")
print("multi30k:", json.dumps(summary))
PY
}

step=${1:?usage: scripts/gpu_battery.sh prepare|probe|multi30k|multi30k-start|multi30k-watch|bench|attention|tests}
case $step in
  prepare) prepare ;;
  probe|bench|attention|multi30k|multi30k-start|multi30k-watch|tests) setup; $step ;;
  *) echo "gpu_battery.sh: unknown step '$step'; expected prepare, probe, multi30k, multi30k-start, multi30k-watch, bench, attention or tests" >&2; exit 2 ;;
esac
