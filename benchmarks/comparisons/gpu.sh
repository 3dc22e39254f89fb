#!/usr/bin/env bash
# rlvr and TRL on W1 and W2 on a CUDA machine, bf16, one table (benchmarks/comparisons/gpu.py says what it measures).
#
#   benchmarks/comparisons/gpu.sh [--gsm8k-path TRAIN.jsonl]     # on the CUDA machine, about 10 minutes at most
#   benchmarks/comparisons/gpu.sh --dry-run                      # anywhere: the same path on the CPU, tiny sizes
#
# It uses the torch, vLLM and TRL the Python it runs finds ($PYTHON, else python3). Only where vllm
# or trl is missing, not a dry run, RLVR_GPU_NO_INSTALL is unset and a package index answers within
# 5 seconds does it `pip install -e ".[vllm]"` / `".[bench]"` first (vllm brings the torch it needs).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python3}"
dry_run="${RLVR_GPU_DRY_RUN:-0}"
for arg in "$@"; do if [[ "$arg" == "--dry-run" ]]; then dry_run=1; fi; done

missing_extras() {
  "$PYTHON" - <<'EOF'
import importlib.util
print(" ".join(extra for module, extra in (("vllm", "vllm"), ("trl", "bench")) if importlib.util.find_spec(module) is None))
EOF
}

index_answers() {
  local index="${PIP_INDEX_URL:-https://pypi.org/simple}"
  timeout 5 "$PYTHON" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=4)" "$index" \
    >/dev/null 2>&1
}

if [[ "$dry_run" != "1" && -z "${RLVR_GPU_NO_INSTALL:-}" ]]; then
  extras="$(missing_extras)"
  if [[ -n "$extras" ]]; then
    if index_answers; then
      echo "installing the missing extras: $extras"
      "$PYTHON" -m pip install -q -e ".[${extras// /,}]" || echo "install failed; running with what is here"
    else
      echo "no package index reachable in 5 s; not installing: $extras"
    fi
  fi
fi

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
RLVR_GPU_DRY_RUN="$dry_run" exec "$PYTHON" benchmarks/comparisons/gpu.py "$@"
