#!/usr/bin/env bash
# The GPU tests (tests/*_gpu.py) on a machine with an NVIDIA GPU and torch+CUDA but no
# internet: installs ddpdoctor's other dependencies from a carried wheel folder, runs from the tree.
#   DDPDOCTOR_WHEELS=<folder of wheels> bash scripts/gpu_check.sh [pytest args]
# Build the folder where there is internet, for the device's Python:
#   pip download --only-binary=:all: --python-version 3.X -d wheels click psutil nvidia-ml-py ahocorasick-rs py-spy pytest tomli
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WH=${DDPDOCTOR_WHEELS:-.gpuwh}
"$PY" -m pip install -q --disable-pip-version-check --no-index --find-links "$WH" \
  click psutil nvidia-ml-py ahocorasick-rs py-spy pytest 2>&1 | grep -v -i warning | tail -3
"$PY" -m pip install -q --disable-pip-version-check --no-index --find-links "$WH" google-re2 tomli 2>/dev/null || true
export PATH="$HOME/.local/bin:$PATH" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi -L
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count(), 'nccl', torch.cuda.nccl.version())"
exec "$PY" -m pytest -q -p no:cacheprovider -m gpu -rA tests/*_gpu.py "$@"
