#!/usr/bin/env bash
# Spark GPU discovery script: prints {"name":"gpu","addresses":["0","1",...]} for the GPUs this
# executor may use (nvidia-smi, narrowed by CUDA_VISIBLE_DEVICES when set).
set -euo pipefail
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "get-gpus-resources.sh: nvidia-smi not found: this host has no NVIDIA GPU/driver; use the cpu profile here" >&2
  exit 1
fi
ids=$(nvidia-smi --query-gpu=index --format=csv,noheader | tr -d ' ')
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then ids=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n'); fi
[ -n "$ids" ] || { echo "get-gpus-resources.sh: no GPU listed by nvidia-smi" >&2; exit 1; }
printf '{"name":"gpu","addresses":[%s]}\n' "$(echo "$ids" | sed 's/.*/"&"/' | paste -sd, -)"
