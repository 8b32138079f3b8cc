#!/usr/bin/env bash
# The whole test suite, with every install it needs, on a fresh Debian machine (run as root for
# the network-namespace lab; elsewhere lab tests skip with a reason unless DDPDOCTOR_REQUIRE_LAB=1).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for tool in iptables:iptables ping:iputils-ping ip:iproute2 slurmctld:slurmctld slurmd:slurmd srun:slurm-client munge:munge nsenter:util-linux ethtool:ethtool chromium:chromium mpirun:openmpi-bin; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need_apt+=("${tool#*:}")
done
if [ ${#need_apt[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
# Pin torch: an unpinned torch pulls several GB of CUDA wheels; 2.13.0 is the CPU build here.
"$PY" -m pip install -q --disable-pip-version-check "torch==${DDPDOCTOR_TORCH:-2.13.0}" 2>&1 | grep -v -i "warning" || true
"$PY" -m pip install -q --disable-pip-version-check -e ".[test]" 2>&1 | grep -v -i "warning" || true
"$PY" -c "import torch, ddpdoctor, psutil, click, pynvml" # fail loudly if an install did not take

# The launchers inspect must see through (accelerate, deepspeed) live in a venv of their own beside
# the system torch, so that the project's environment stays the one users install.
LAUNCHERS=${DDPDOCTOR_LAUNCHERS_VENV:-/tmp/ddpdoctor-launchers}
if [ ! -x "$LAUNCHERS/bin/python" ] || ! "$LAUNCHERS/bin/python" -c "import accelerate, deepspeed" 2>/dev/null; then
  "$PY" -m venv --system-site-packages "$LAUNCHERS" &&
  DS_BUILD_OPS=0 "$LAUNCHERS/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation \
    "accelerate==1.15.0" "deepspeed==0.19.8" 2>&1 | grep -v -i "warning" || true
fi
if "$LAUNCHERS/bin/python" -c "import accelerate, deepspeed" 2>/dev/null; then
  export DDPDOCTOR_LAUNCHER_PYTHON="$LAUNCHERS/bin/python"
fi

# With no arguments the lab (namespaces, Slurm: mostly waiting on real jobs, timeouts and deadlines) runs in two
# pytests of its own beside the other kinds, and all must pass: the whole suite serially took ~46 min on 2
# cores, the lab alone in one pytest ~35. DDPDOCTOR_TEST_SERIAL=1, or any pytest arguments, run one pytest as given. --durations: the slowest
# tests in every log, to keep CI under its 30 minutes.
if [ $# -eq 0 ] && [ "${DDPDOCTOR_TEST_SERIAL:-0}" != 1 ]; then
  # Two lab pytests (watch's, and the rest: each ~15-18 min, mostly waiting) beside the other kinds.
  # bash starts a background command with SIGINT ignored, and that is inherited by every process the lab
  # starts (a watch stopped by SIGINT would never stop): reset it to the default before pytest starts.
  bg() {
    "$PY" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
      "$PY" -m pytest -q -p no:cacheprovider --durations=15 -m lab "$@"
  }
  watchlog=$(mktemp); otherlog=$(mktemp)
  bg tests/test_watch_*.py >"$watchlog" 2>&1 &
  watchpid=$!
  bg --ignore-glob='tests/test_watch_*' tests >"$otherlog" 2>&1 &
  otherpid=$!
  trap 'kill "$watchpid" "$otherpid" 2>/dev/null; rm -f "$watchlog" "$otherlog"' INT TERM
  rest=0
  "$PY" -m pytest -q -p no:cacheprovider --durations=15 -m "not lab" || rest=$?
  lab=0
  wait "$watchpid" || lab=$?
  echo "=== watch lab tests (run beside the others) ==="
  cat "$watchlog"
  wait "$otherpid" || lab=$?
  echo "=== other lab tests (run beside the others) ==="
  cat "$otherlog"
  rm -f "$watchlog" "$otherlog"
  if [ "$rest" != 0 ] || [ "$lab" != 0 ]; then
    echo "tests FAILED: unit+torchjob+gpu exit $rest, lab exit $lab" >&2
    exit 1
  fi
  exit 0
fi
exec "$PY" -m pytest -q -p no:cacheprovider --durations=25 "$@"
