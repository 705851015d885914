#!/usr/bin/env bash
# The whole GPU verification in one command, on an offline Linux x86-64 GPU machine that has
# Python, CUDA 13's nvcc, PyTorch, CuPy, Numba + numba-cuda, JAX and the cuDNN/cuBLAS wheels:
#
#   bench/gpu-check.sh OUT_DIR WHEEL_DIR        (WHEEL_DIR: made by bench/gpu-wheels.sh)
#
#  1 install   what the machine lacks, from WHEEL_DIR only (pip --no-index), into a fresh venv
#              layered over the machine's Python (its packages stay visible, nothing of it changes)
#  2 build     lenet._native with LENET_CUDA=ON for the GPU present (nvidia-smi's compute_cap)
#    -- here it stops, exit 3 and one line, when no usable GPU is found --
#  3 pytest    pytest -m gpu, file by file, each with a timeout        } side by side: both only
#  4 sanitize  compute-sanitizer memcheck and racecheck over the         } check correctness
#              raw-kernel forward at batch 1, 7, 64
#  5 devmem    device memory over 10 000 predictions per GPU backend (python -m lenet.bench.devmem)
#  6 bench     python -m lenet.bench --backend all --device gpu (floors, CPU floor line included)
# Logs, results JSON, table and plots go to OUT_DIR (and all of it to OUT_DIR/gpu-check.tar.gz);
# a summary table comes last. Every phase has a timeout; a failing phase is logged and the
# script goes on. Exit: 0 every phase passed, 1 a phase failed, 2 bad arguments, 3 no GPU.
#
# GPU_CHECK_PYTHON   the machine's Python (default python3)
# GPU_CHECK_WORK     venv and build directory (default /tmp/lenet-gpu-check)
# GPU_CHECK_BUILD=0  keep the lenet._native already in python/lenet/ (a re-run on the same machine)
# GPU_CHECK_PHASES   which of the GPU phases to run (default "pytest sanitize devmem bench"; a second
#                    call on a warm machine: GPU_CHECK_BUILD=0 GPU_CHECK_PHASES=bench BENCH_REPEATS=3)
# GPU_CHECK_BUDGET   seconds for the whole run (default 470); each phase's timeout leaves the later
#                    phases their share (devmem 80 s, bench 200 s) and the bench gets the rest
# BENCH_REPEATS      interleaved runs of each backend in the benchmark (default 1; each run takes
#                    1 000+ latency samples and 2+ s of them); BENCH_ARGS more flags for it, e.g.
#                    "--variant all" or "--batch-sizes 1,64"
# DEVMEM_PREDICTIONS predictions per backend in the memory check (default 10000)
set -uo pipefail
start=$(date +%s)
repo=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: bench/gpu-check.sh OUT_DIR WHEEL_DIR"
die() { echo "gpu-check: error: $1" >&2; exit "${2:-2}"; }

[ $# -eq 2 ] || die "$usage"
out=$1 wheels=$2
[ -d "$wheels" ] || die "wheel directory $wheels does not exist (make it with bench/gpu-wheels.sh)"
ls "$wheels"/*.whl >/dev/null 2>&1 || die "wheel directory $wheels holds no wheels (make it with bench/gpu-wheels.sh)"
mkdir -p "$out/logs" 2>/dev/null && [ -w "$out" ] || die "cannot write to output directory $out"
out=$(cd "$out" && pwd) wheels=$(cd "$wheels" && pwd)
py=${GPU_CHECK_PYTHON:-python3}
command -v "$py" >/dev/null || die "no Python ($py) on PATH (set GPU_CHECK_PYTHON)"
work=${GPU_CHECK_WORK:-/tmp/lenet-gpu-check}
budget=${GPU_CHECK_BUDGET:-470}
reserve=0         # seconds kept back for the phases after the current one
mkdir -p "$work" || die "cannot create work directory $work"
summary=$out/summary.txt
printf '%-34s %-7s %6s  %s\n' phase status s note > "$summary"
phases=" ${GPU_CHECK_PHASES:-pytest sanitize devmem bench} "

left() { echo $((budget - ($(date +%s) - start))); }
# run PHASE TIMEOUT_S CMD... (a command or an exported function): log to logs/PHASE.log, one
# summary row; never stops the script. The timeout never eats into $reserve.
run() {
  local name=$1 limit=$2; shift 2
  local t0 rc note
  (( $(left) - reserve < limit )) && limit=$(( $(left) - reserve ))
  t0=$(date +%s)
  if (( limit < 5 )); then
    rc=124 note="skipped: time budget spent"
  else
    echo "== $name (timeout ${limit}s)" >&2
    timeout -k 10 "$limit" bash -c '"$@"' "$name" "$@" > "$out/logs/$name.log" 2>&1
    rc=$?
    note=$(grep -v '^\s*$' "$out/logs/$name.log" | tail -1 | cut -c1-100)
    (( rc == 124 || rc == 137 )) && note="timed out after ${limit}s"
  fi
  printf '%-34s %-7s %6d  %s\n' "$name" "$([ $rc -eq 0 ] && echo ok || echo FAIL:$rc)" $(($(date +%s) - t0)) "$note" >> "$summary"
  return $rc
}

# 1 install ------------------------------------------------------------------------------------
venv=$work/venv
do_install() {
  rm -rf "$venv" && "$py" -m venv --without-pip "$venv" || return 1
  local site
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || return 1
  "$py" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))))' \
    > "$site/gpu-check-parent.pth"
  "$py" -m pip --disable-pip-version-check --python "$venv/bin/python" install --no-index --find-links "$wheels" \
    "$wheels"/*.whl
}
export -f do_install; export py venv wheels
run install 120 do_install
vpy=$venv/bin/python
[ -x "$vpy" ] || vpy=$py
export PYTHONPATH=$repo/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
cd "$repo"

# 2 build --------------------------------------------------------------------------------------
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
do_build() {
  echo "CMAKE_CUDA_ARCHITECTURES=${arch:-90}${arch:+ (nvidia-smi)}${arch:- (no nvidia-smi: the project default)}"
  local prefix
  prefix=$("$vpy" -c 'import os, nvidia; print(";".join(os.path.join(p, d) for p in nvidia.__path__ for d in ("cudnn", "cu13", "cublas")))') || return 1
  cmake -S "$repo" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLENET_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${arch:-90}" -DPython_EXECUTABLE="$vpy" \
    -Dpybind11_DIR="$("$vpy" -m pybind11 --cmakedir)" -DCMAKE_PREFIX_PATH="$prefix" || return 1
  cmake --build "$work/build" || return 1
  local so
  so=$(ls "$work"/build/_native*.so) && cp "$so" "$repo/python/lenet/.new.so" \
    && mv -f "$repo/python/lenet/.new.so" "$repo/python/lenet/$(basename "$so")"      # new inode: safe for running processes
}
if [ "${GPU_CHECK_BUILD:-1}" = 0 ]; then
  printf '%-34s %-7s %6d  %s\n' build skipped 0 "GPU_CHECK_BUILD=0: the lenet._native in python/lenet/" >> "$summary"
else
  export -f do_build; export vpy repo work arch
  run build 240 do_build
fi

# -- the GPU from here on ----------------------------------------------------------------------
reason=$("$vpy" -c 'from lenet.backends import cuda_unavailable; print(cuda_unavailable() or "")' 2>&1 | tail -1)
if [ -n "$reason" ]; then
  printf '%-34s %-7s %6d  %s\n' gpu "NONE" 0 "$reason" >> "$summary"
  cat "$summary" >&2
  die "no usable GPU, stopping before the GPU phases: $reason" 3
fi
{ nvidia-smi; nvidia-smi --query-gpu=name,driver_version,compute_cap,clocks.sm,clocks.mem,clocks.max.sm --format=csv
  nvcc --version; "$vpy" -m pip --version
  "$vpy" -m pip list 2>/dev/null | grep -iE '^(torch|jax|jaxlib|cupy|numba|numba-cuda|pycuda|keras|nvidia-cudnn|nvidia-cublas|numpy|onnxruntime) '
} > "$out/logs/environment.log" 2>&1

# 3 + 4, side by side: pytest -m gpu file by file; compute-sanitizer over the raw-kernel forward ---
pytest_files() {
  for f in $(grep -l "mark.gpu" tests/test_*.py); do
    run "pytest-$(basename "$f" .py)" 120 "$vpy" -m pytest -q -m gpu -p no:cacheprovider "$f"
  done
}
sanitize() {
  local sanitizer d tool
  sanitizer=$(command -v compute-sanitizer || true)
  for d in "$(dirname "$(readlink -f "$(command -v nvcc || echo /none/nvcc)")")" "${CUDA_HOME:-/usr/local/cuda}/bin" \
           /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do
    [ -z "$sanitizer" ] && [ -x "$d/compute-sanitizer" ] && sanitizer=$d/compute-sanitizer
  done
  for tool in memcheck racecheck; do
    if [ -n "$sanitizer" ]; then
      run "sanitizer-$tool" 150 "$sanitizer" --tool "$tool" --error-exitcode 1 "$vpy" bench/sanitize_forward.py
    else
      printf '%-34s %-7s %6d  %s\n' "sanitizer-$tool" FAIL 0 "compute-sanitizer not found (PATH, next to nvcc)" >> "$summary"
    fi
  done
}
reserve=0
[[ $phases == *" devmem "* ]] && reserve=$((reserve + 80))
[[ $phases == *" bench "* ]] && reserve=$((reserve + 200))
[[ $phases == *" pytest "* ]] && pytest_files &
[[ $phases == *" sanitize "* ]] && sanitize &
wait

# 5 device memory over 10 000 predictions per GPU backend (alone: it reads device-wide free memory)
reserve=0
[[ $phases == *" bench "* ]] && reserve=200
[[ $phases == *" devmem "* ]] &&
  run devmem 150 "$vpy" -m lenet.bench.devmem --predictions "${DEVMEM_PREDICTIONS:-10000}" --json "$out/devmem.json"

# 6 the benchmark, alone --------------------------------------------------------------------------
# shellcheck disable=SC2086
reserve=10
[[ $phases == *" bench "* ]] &&
  run bench $(( $(left) - 10 )) "$vpy" -m lenet.bench --backend all --device gpu --repeats "${BENCH_REPEATS:-1}" \
    --timeout 150 --out "$out/bench" ${BENCH_ARGS:-}

# summary ---------------------------------------------------------------------------------------
[ -f "$out/bench/results.json" ] && "$vpy" bench/gpu_summary.py "$out/bench/results.json" > "$out/bench-summary.txt" 2>&1
tar -czf "$out/gpu-check.tar.gz" --exclude=gpu-check.tar.gz -C "$out" . 2>/dev/null
echo "== wall $(($(date +%s) - start)) s; logs, results and plots in $out (all of it in $out/gpu-check.tar.gz)"
[ -f "$out/bench-summary.txt" ] && cat "$out/bench-summary.txt" && echo
cat "$summary"
! grep -qE ' (FAIL|skipped: time)' "$summary"
