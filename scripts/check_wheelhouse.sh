#!/usr/bin/env bash
# Proves the offline install of a cluster GPU node (docs/gpu.md, "offline GPU nodes"): a fresh Python $PY venv
# that already holds a torch (as the node's own CUDA build would be), then this package and every other
# dependency installed from the wheelhouse with --no-index, then a 2-step run. Needs PyPI for torch only.
#   make wheelhouse PY=3.12 && make check-wheelhouse PY=3.12
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-3.12}
WHEELS=${WHEELHOUSE:-wheelhouse}/py$PY
TORCH=${TORCH:-torch==2.13.0}
PYTHON_WHEELS=${PYTHON_WHEELS:-python$PY}

[[ -f $WHEELS/requirements.txt ]] || { echo "check-wheelhouse: no $WHEELS; run make wheelhouse PY=$PY first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PYTHON_WHEELS" -m venv "$work/venv"
py=$work/venv/bin/python
echo "== $($py --version) venv in $work/venv; installing $TORCH first (the node's own torch)"
$py -m pip install -q "$TORCH"
echo "== offline: pip install --no-index --find-links $WHEELS -e .[dev]"
# only the wheelhouse: no index, and none of this machine's own pip settings (extra indexes, find-links)
env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL PIP_CONFIG_FILE=/dev/null \
  $py -m pip install -q --no-index --find-links "$WHEELS" -e ".[dev]"
$py -c "import torch, hydra, wandb, datasets, tokenizers; print('== imports ok: torch', torch.__version__)"
echo "== python -m mbexp.train train.steps=2 logger=none"
$py -m mbexp.train train.steps=2 train.eval_every=1 train.progress=false logger=none \
  results_dir="$work/results" data.cache_dir="$work/data_cache"
summary=$(find "$work/results/runs" -name summary.json | head -1)
$py - "$summary" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["status"] == "completed" and s["steps"] == 2, s
print(f"== check-wheelhouse: ok (status {s['status']}, {s['steps']} steps, final val log-ppl {s['final_val_loss']:.3f})")
EOF
