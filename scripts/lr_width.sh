#!/usr/bin/env bash
# Section 2 across width (issue: LR sensitivity against width): sweeps/lr_width.yaml (four arms
# with warmup) and sweeps/lr_width_nowarmup.yaml (Post-LN without warmup) at each d_model,
# narrowest first, each width into its own folders under OUT. Rerunning resumes: attnlab-sweep
# skips the trials a folder already holds. Extra arguments go to every attnlab-sweep call
# (e.g. --dry-run).
#   scripts/lr_width.sh [OUT] [attnlab-sweep options]      (OUT: outputs/sweeps/lr_width)
set -euo pipefail
out=${1:-outputs/sweeps/lr_width}
shift || true
widths=${WIDTHS:-32 64 128}
sweep() {  # attnlab-sweep; its exit code 3 (some trials diverged) is expected at the top rates
  local code=0
  attnlab-sweep "$@" || code=$?
  if [[ $code -ne 0 && $code -ne 3 ]]; then exit "$code"; fi
}
for d in $widths; do
  sweep sweeps/lr_width.yaml "model.d_model=$d" --out "$out/d$d" \
    --parallel 2 torch_threads=1 logger=none "$@"
  sweep sweeps/lr_width_nowarmup.yaml "model.d_model=$d" --out "$out/d$d-nowarmup" \
    --parallel 2 torch_threads=1 logger=none "$@"
done
