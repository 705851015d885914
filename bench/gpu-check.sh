#!/usr/bin/env bash
# The whole GPU check in one command, made for one lent GPU machine (no network, 16 cores, one
# H100, Python 3.12 with torch, cupy, numba-cuda, jax, cuDNN; docs/gpu-check.md):
#
#   bash bench/gpu-check.sh OUT_DIR WHEEL_DIR      (WHEEL_DIR: from bench/gpu-wheels.sh, carried as .whl)
#
#   install   WHEEL_DIR's wheels, pip --no-index --no-deps --target WORK/site (put on PYTHONPATH,
#             so the machine's own site-packages and their .pth files stay as they are)
#   build     lenet._native with LENET_CUDA=ON, in the background, into a staged copy of
#             python/lenet (the checkout is never written)
#   lanes     side by side (correctness only): each GPU backend's agreement tests with the
#             oracle (cudnn once the build is done; cupy, pycuda, numba, torch, torch-compile,
#             keras on jax and on torch) and compute-sanitizer memcheck, racecheck, synccheck,
#             initcheck over bench/sanitize_forward.py (the raw kernels)
#   alone     device-tests (device-wide gpu tests: memory, FMA rate), ncu (the raw kernels' bytes),
#             bench (the GPU benchmark, --quick), the report rebuilt from bench/raw/ whatever
#             happened, then devmem
#   host-cpu  only when GPU_CHECK_PHASES names it: the host CPU's goals (csrc/NOTES.md), pinned to two
#             vCPUs: three runs of the CPU goals command, each line of OUT/host-cpu.txt one run
# Every phase has its own timeout; a failing phase never stops the others; each row of OUT/summary.txt
# and the tarball are written as phases end. OUT ends with at most 8 files, no folders:
# summary.txt, environment.txt, sanitizers.txt, results.json, results.md, bench-summary.txt,
# host-cpu.txt and gpu-check.tar.gz (everything: logs, raw results, plots). Exit: 0 every phase ok (a rehearsal:
# ok or skipped with its reason), 1 otherwise, 2 bad arguments.
#
# GPU_CHECK_PHASES    the phases to run (default: all but host-cpu; e.g. "cudnn bench" to redo what failed)
# GPU_CHECK_REHEARSE=1  on a machine without a GPU: each phase runs what this machine has
#                     instead (the raw kernels on the CPU emulator, cudnn_net.cu on the cuDNN stand-in,
#                     numba's kernels on its simulator, torch and keras on the CPU) or is
#                     skipped, naming why. Nothing in it ran on a GPU and none of its times is a GPU time.
# GPU_CHECK_BUDGET    seconds the run ends within (default 570): the lanes end by 316, each phase's
#                     timeout is cut to what is left, 30 s always left for the report. A rehearsal
#                     gives every timeout and the default budget SLACK (4) times as long: its lanes
#                     share a few CPU cores, not 16 cores and a GPU, and may share them with other work
# GPU_CHECK_PYTHON    the Python (default python3);  GPU_CHECK_WORK  scratch directory (default: a new one in /tmp)
# BENCH_ARGS          flags for python -m lenet.bench instead of the sized --quick default below
set -uo pipefail
start=$(date +%s)
repo=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "gpu-check: error: $1" >&2; exit 2; }
LANES="cudnn cupy pycuda numba torch torch-compile keras-jax keras-torch memcheck racecheck synccheck initcheck"
ALONE="device-tests ncu bench devmem"
OPT_IN="host-cpu"      # run only when GPU_CHECK_PHASES names it (the CPU, not the GPU; it outlasts the budget's spare)
CUDA_BUILT="cudnn device-tests devmem bench"   # the phases that need lenet._native with its CUDA path

[ $# -eq 2 ] || die "usage: bench/gpu-check.sh OUT_DIR WHEEL_DIR|none"
out=$1 wheels=$2 rehearse=${GPU_CHECK_REHEARSE:-0}
[[ $rehearse == [01] ]] || die "GPU_CHECK_REHEARSE must be 0 or 1, not '$rehearse'"
if [ "$wheels" != none ] && { [ "$rehearse" = 0 ] || [ -e "$wheels" ]; }; then
  [ -d "$wheels" ] || die "wheel directory $wheels does not exist (make it with bench/gpu-wheels.sh $wheels)"
  compgen -G "$wheels/*.whl" >/dev/null || die "wheel directory $wheels holds no wheels (make it with bench/gpu-wheels.sh $wheels)"
  wheels=$(cd "$wheels" && pwd)
fi
{ mkdir -p "$out" 2>/dev/null && [ -w "$out" ]; } || die "cannot write to output directory $out"
[ -z "$(ls -A "$out")" ] || die "output directory $out is not empty (only 8 files come back from it)"
out=$(cd "$out" && pwd)
phases=" ${GPU_CHECK_PHASES:-$LANES $ALONE} "
for p in $phases; do [[ " $LANES $ALONE $OPT_IN " == *" $p "* ]] || die "unknown phase '$p' in GPU_CHECK_PHASES (known: $LANES $ALONE $OPT_IN)"; done
slack=$((rehearse ? 4 : 1))      # a rehearsal's timeouts: the same phases on a few CPU cores
budget=${GPU_CHECK_BUDGET:-$((570 * slack))}
{ [[ $budget =~ ^[0-9]+$ ]] && (( budget >= 60 )); } || die "GPU_CHECK_BUDGET must be a whole number of seconds >= 60, not '$budget'"
deadline=$((start + budget)) lanes_end=$((start + budget * 5 / 9))
end_by=$((deadline - 30))     # what phase() cuts each timeout to; the lanes and the report set their own
py=${GPU_CHECK_PYTHON:-python3}
command -v "$py" >/dev/null || die "no Python ($py) on PATH (set GPU_CHECK_PYTHON)"
work=${GPU_CHECK_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/lenet-gpu-check.XXXXXX")}
mkdir -p "$work/logs" "$work/py" || die "cannot create work directory $work"
cd "$repo" || die "cannot enter $repo"
logs=$work/logs summary=$out/summary.txt

# The lanes' environment: the staged package and the wheels first; Keras on jax unless a lane says
# otherwise; JAX takes GPU memory as needed (not 75% of it); GitPython (pygount) imports without git.
cp -r python/lenet "$work/py/" && rm -f "$work"/py/lenet/_native*.so
mkdir -p "$work/py/lenet/shipped" && cp weights/lenet-mnist.safetensors "$work/py/lenet/shipped/"   # as installed
# lenet._native finds OpenBLAS at $ORIGIN/../scipy_openblas32/lib, as beside an installed wheel
ln -s ../site/scipy_openblas32 "$work/py/scipy_openblas32"
export PYTHONPATH=$work/py:$work/site PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 MPLBACKEND=Agg \
  KERAS_BACKEND=jax XLA_PYTHON_CLIENT_PREALLOCATE=false GIT_PYTHON_REFRESH=quiet

if [ "$rehearse" = 1 ]; then
  echo "REHEARSAL on ${HOSTNAME:-this machine}, without a GPU: nothing below ran on a GPU, and no time in it is a GPU time." > "$summary"
else
  echo "GPU check on ${HOSTNAME:-the GPU machine}, $(date -u +%FT%TZ)" > "$summary"
fi
printf '%-14s %-9s %5s  %s\n' phase status s note >> "$summary"

row() { printf '%-14s %-9s %5s  %s\n' "$1" "$2" "$3" "$4" >> "$summary"; }
skip() { row "$1" skipped 0 "$2"; }
wanted() { [[ $phases == *" $1 "* ]]; }
pack() {    # the tarball of everything so far, replaced whole (a cut run still returns one)
  local part=$out/gpu-check.tar.gz.part
  [ -f "$work/bench/results.json" ] && cp "$work/bench/results.json" "$work/bench/results.md" "$out/" 2>/dev/null
  cp "$summary" "$logs/summary.txt"
  (flock 9; tar -czf "$part" -C "$work" --exclude=./py --exclude=./site --exclude=./site312 --exclude=./build --exclude=./pack.lock . \
     && mv -f "$part" "$out/gpu-check.tar.gz") 9> "$work/pack.lock" 2>/dev/null
}
# phase NAME LIMIT CMD...: log to logs/NAME.log, one summary row, the tarball refreshed; never stops
# the script. The timeout is LIMIT or what is left before $end_by, whichever is less.
phase() {
  local name=$1 limit=$2 t0 rc status note tally; shift 2
  t0=$(date +%s) limit=$((limit * slack))
  (( end_by - t0 < limit )) && limit=$((end_by - t0))
  if (( limit < 5 )); then
    row "$name" FAIL 0 "not started: the run's ${budget} s were spent (GPU_CHECK_BUDGET)"
    return
  fi
  echo "== $name (timeout ${limit}s)" >&2
  echo "\$ KERAS_BACKEND=$KERAS_BACKEND $*" > "$logs/$name.log"
  timeout -k 5 "$limit" "$@" >> "$logs/$name.log" 2>&1
  rc=$?
  note=$(tail -n +2 "$logs/$name.log" | grep -v '^\s*$' | tail -1 | cut -c1-110)
  status=ok
  if (( rc == 124 || rc == 137 )); then
    tally=$(grep -cE '(PASSED|FAILED|SKIPPED|ERROR) *(\[|$)' "$logs/$name.log")
    status=FAIL note="timed out after ${limit}s (${tally} tests had ended: logs/$name.log)"
  elif (( rc != 0 )); then
    status=FAIL:$rc
  elif [[ $note =~ ^=*\ *[0-9]+\ (skipped|deselected) ]] && [[ $note != *passed* ]]; then
    status=skipped note="all skipped: $(grep -m1 '^SKIPPED' "$logs/$name.log" | sed 's/^SKIPPED \[[0-9]*\] [^ ]*: //' | cut -c1-90)"
  fi
  row "$name" "$status" $(($(date +%s) - t0)) "$note"
  pack
}
# pytest per lane: isolated modules run in this process (LENET_ISOLATED_CHILD: the lane is its own
# process) and report each test as it ends; with pytest-timeout one slow test fails alone.
per_test=()
"$py" -c 'import pytest_timeout' 2>/dev/null && per_test=(--timeout $((100 * slack)))
tests() {
  local name=$1 limit=$2; shift 2
  phase "$name" "$limit" env LENET_ISOLATED_CHILD="$logs/$name.jsonl" "$py" -m pytest -p no:cacheprovider -v -rfEs \
    "${per_test[@]}" "$@"
}

# install --------------------------------------------------------------------------------------------
pip_install=("$py" -m pip --disable-pip-version-check install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade)
if [ "$wheels" = none ]; then
  skip install "WHEEL_DIR none: this Python has the packages already (pip install from the index)"
elif [ "$rehearse" = 1 ] && [ ! -d "$wheels" ]; then
  skip install "no $wheels here (bench/gpu-wheels.sh $wheels makes it): this machine's packages serve"
elif [ "$rehearse" = 1 ]; then     # cp312 wheels for the GPU machine: installed for 3.12, into a scratch folder
  platforms=(); for p in linux_x86_64 manylinux1_x86_64 manylinux2014_x86_64 manylinux_2_{17..28}_x86_64; do platforms+=(--platform "$p"); done
  phase install 60 "${pip_install[@]}" --target "$work/site312" --python-version 3.12 --implementation cp \
    --only-binary=:all: "${platforms[@]}" "$wheels"/*.whl
else
  phase install 60 "${pip_install[@]}" --target "$work/site" "$wheels"/*.whl
fi

# environment record (in the background) --------------------------------------------------------------
record() {
  echo "# $(head -1 "$summary")"
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv \
    || echo "nvidia-smi: none"
  nvcc --version | tail -2 || echo "nvcc: none"
  command -v compute-sanitizer ncu || true
  grep -m3 -E '^(model name|cpu family|model)\s' /proc/cpuinfo || echo "/proc/cpuinfo: no CPU model"
  "$py" - <<'EOF'
import importlib, importlib.metadata as m, os, platform, sys
print("python", sys.version.split()[0], sys.executable, "|", platform.platform(), "|", os.cpu_count(), "cores")
for p in ("torch", "jax", "jaxlib", "cupy-cuda13x", "numba", "numba-cuda", "pycuda", "keras", "nvidia-cudnn-cu13",
          "nvidia-cublas", "numpy", "onnxruntime", "tensorflow", "scipy-openblas32", "pygount", "jsonschema"):
    try: print(f"{p} {m.version(p)}")
    except m.PackageNotFoundError: print(f"{p} not installed")
for mod in ("numba.cuda", "lenet", "keras"):    # numba.cuda must be numba-cuda's (its .pth redirector ran)
    try: print(mod, "from", importlib.import_module(mod).__file__)
    except Exception as e: print(mod, "does not import:", type(e).__name__, e)
for v in ("PYTHONPATH", "KERAS_BACKEND", "XLA_PYTHON_CLIENT_PREALLOCATE", "GIT_PYTHON_REFRESH"):
    print(f"{v}={os.environ.get(v, '')}")
print("cuda:", __import__("lenet").backends.cuda_unavailable() or "usable")
EOF
}
record > "$logs/environment.txt" 2>&1 &

# build (in the background) ----------------------------------------------------------------------------
# With the CUDA path where a GPU phase needs lenet._native; for host-cpu alone, the CPU path only (faster).
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
# shellcheck disable=SC2317,SC2329   # run by name (bash -c build), in the background
build() {
  local cuda=(-DLENET_CUDA=OFF) prefix so
  if [ "$cuda_build" = 1 ]; then
    prefix=$("$py" -c 'import os, nvidia; print(";".join(os.path.join(p, d) for p in nvidia.__path__ for d in ("cudnn", "cu13", "cublas")))') || return 1
    cuda=(-DLENET_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${arch:-90}" -DCMAKE_PREFIX_PATH="$prefix")
  fi
  cmake -S "$repo" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda[@]}" \
    -DPython_EXECUTABLE="$(command -v "$py")" -Dpybind11_DIR="$("$py" -m pybind11 --cmakedir)" || return 1
  cmake --build "$work/build" || return 1
  so=$(ls "$work"/build/_native*.so) && cp "$so" "$work/py/lenet/"
}
needs_build=0 cuda_build=0
for p in $CUDA_BUILT; do wanted "$p" && needs_build=1 cuda_build=1; done
wanted host-cpu && needs_build=1
export -f build; export py repo work arch cuda_build
tools=(cmake ninja) modules=pybind11 packages=pybind11   # the modules the build imports, the packages that give them
((cuda_build)) && tools+=(nvcc) modules+=", nvidia.cudnn" packages+=" or nvidia-cudnn-cu13"
missing=$(for t in "${tools[@]}"; do command -v "$t" >/dev/null || echo -n "$t "; done
          "$py" -c "import $modules" 2>/dev/null || echo -n "$packages")
if (( needs_build == 0 )); then
  skip build "no phase asked for needs lenet._native"; touch "$work/build.done"
elif [ "$rehearse" = 1 ] && [ -n "$missing" ]; then
  skip build "this machine lacks ${missing% }: the phases use the lenet._native installed here"; touch "$work/build.done"
else
  (end_by=$lanes_end; phase build 170 bash -c build; touch "$work/build.done") &
fi
after_build() { until [ -e "$work/build.done" ]; do sleep 1; done; }

# lanes, side by side ----------------------------------------------------------------------------------
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
lane() {
  local name=$1
  if [ "$rehearse" = 0 ]; then
    case $name in
      cudnn)         after_build; tests cudnn 120 -m "gpu and not device_wide" tests/test_cudnn.py ;;
      cupy|pycuda)   tests "$name" 120 -m gpu -k "$name" tests/test_cuda_kernels.py ;;
      numba)         tests numba 120 -m gpu tests/test_numba.py ;;
      torch)         tests torch 120 -m gpu -k "not compile" tests/test_torch.py ;;
      torch-compile) tests torch-compile 150 -m gpu -k compile tests/test_torch.py ;;
      keras-*)       KERAS_BACKEND=${name#keras-} tests "$name" 120 -m gpu tests/test_keras.py ;;
      *check)        if [ -n "$sanitizer" ]; then
                       # kernel errors only: numba-cuda's driver set-up asks cuGetProcAddress for entry points
                       # the driver lacks ("invalid argument": host API errors, not the kernels'); racecheck,
                       # the slowest (150 s covered only v3 at batches 1 and 7 on the H100), at batch 1
                       local batches=() limit=150; [ "$name" = racecheck ] && batches=(--batches 1) limit=200
                       phase "$name" "$limit" "$sanitizer" --tool "$name" --report-api-errors no --error-exitcode 1 \
                         "$py" bench/sanitize_forward.py "${batches[@]}"
                     else row "$name" FAIL 0 "compute-sanitizer not found (PATH, /usr/local/cuda/bin)"; fi ;;
    esac
    return
  fi
  case $name in        # the rehearsal: the same code on what this machine has, or why not
    cudnn)         after_build; tests cudnn 170 -m emu -k "test_forward_agrees and emu-1-" tests/test_cudnn.py ;;
    cupy)          tests cupy 170 -m emu -k "fused_forward_exact and emu-1 or maxpool" tests/test_cuda_kernels.py ;;
    pycuda)        skip pycuda "needs a GPU: its launch sequence (CudaNet, shared with cupy) ran on the emulator in lane cupy" ;;
    numba)         tests numba 170 -k "strict_layer or forward_fused" tests/test_numba_simulator.py ;;
    torch)         tests torch 170 -m "not gpu and not slow" -k "forward_agrees or sgd_step" tests/test_torch.py ;;
    torch-compile) skip torch-compile "torch.compile on the CPU takes minutes (its test is marked slow)" ;;
    keras-*)       KERAS_BACKEND=${name#keras-} tests "$name" 170 -m "not gpu" -k "forward_agrees and call-cpu" tests/test_keras.py ;;
    memcheck)      phase memcheck 170 "$py" bench/sanitize_forward.py --emu --batches 1 ;;
    *check)        skip "$name" "compute-sanitizer needs a GPU; the emulator's race, bounds and barrier checks ran in memcheck" ;;
  esac
}
end_by=$lanes_end
for name in $LANES; do wanted "$name" && lane "$name" & done
wait
end_by=$((deadline - 30))

# alone on the GPU: device-wide checks, then the timed phases ---------------------------------------------
if wanted device-tests; then      # the lanes' free-memory test of cudnn failed beside the other lanes on an H200
  after_build
  tests device-tests 60 -m "gpu and device_wide" tests/test_floors.py tests/test_gpu_script.py tests/test_cudnn.py
fi
# ncu: what cupy's forward kernels move at batch 7 (v3, v2, v1, then the graph variants' replays), against
# python -m lenet.emu --batch 7's counted bytes; caches flushed before each kernel (ncu's default), so DRAM
# bytes are first touches (the per-thread sass__inst_executed_* counters came back n/a on an H200).
ncu_kernels='regex:^(conv_forward|maxpool_forward|dense_forward|gemm_v2|lenet_forward_v3)'
ncu_metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum
ncu_metrics+=,l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum,l1tex__t_bytes_pipe_lsu_mem_global_op_st.sum
ncu_metrics+=,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed_op_global_ld.sum
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
if ! wanted ncu; then :
elif [ "$rehearse" = 1 ]; then
  skip ncu "needs a GPU's counters; the emulator's counted bytes: python -m lenet.emu --batch 7"
elif [ -z "$ncu" ]; then
  row ncu FAIL 0 "ncu not found (PATH, /usr/local/cuda/bin)"
else
  phase ncu 45 "$ncu" --csv --kernel-name "$ncu_kernels" --metrics "$ncu_metrics" \
    "$py" bench/sanitize_forward.py --backend cupy --batches 7
fi
if wanted bench; then
  read -ra bench_args <<< "${BENCH_ARGS:---quick --variant all --epochs 2 --batch-sizes 1,8,64,256,1024 --timeout 90}"
  phase bench 330 "$py" -m lenet.bench --backend all --device gpu --repeats 1 --out "$work/bench" "${bench_args[@]}"
  if [ -d "$work/bench/raw" ]; then       # the table from raw/, also when the benchmark was cut
    end_by=$deadline phase report 30 "$py" -m lenet.bench.report "$work/bench"
    "$py" bench/gpu_summary.py "$work/bench/results.json" > "$out/bench-summary.txt" 2>&1
  fi
fi
# devmem last: each backend in turn, its row written as it ends (2,000 predictions: run 1's 10,000 per
# backend, keras's 5 ms each among them, outlasted 60 s)
if ! wanted devmem; then :
elif [ "$rehearse" = 1 ]; then
  skip devmem "needs a GPU (device-wide free memory); its no-GPU error is tested in tests/test_gpu_script.py"
else
  phase devmem 90 "$py" -m lenet.bench.devmem --predictions 2000 --timeout 40 --json "$work/devmem.json"
fi

# host-cpu last, alone: the host CPU's goals on two of its vCPUs, three runs of the goals command (csrc/NOTES.md;
# a rehearsal: one --quick run), each into its own folder, then one line per run in OUT/host-cpu.txt
if wanted host-cpu; then
  after_build
  pin=; (( $(nproc) > 2 )) && command -v taskset >/dev/null && pin="taskset -c 0,1"
  goals="--backend cblas/threads,torch/eager,onnxruntime/default --mode latency,layers,train --device cpu --no-plots"
  if [ "$rehearse" = 1 ]; then runs=(1) goals+=" --quick --repeats 1"; else runs=(1 2 3) goals+=" --repeats 3"; fi
  export pin goals
  # shellcheck disable=SC2016   # expanded by the inner bash
  phase host-cpu 400 bash -c 'rc=0; for r; do echo "== run $r"; $pin "$py" -m lenet.bench $goals \
    --out "$work/host-cpu/run-$r" > /dev/null || rc=$?; done; exit $rc' host-cpu "${runs[@]}"
  docs=()
  for r in "${runs[@]}"; do     # a run cut short: its table from what it wrote as it went
    d=$work/host-cpu/run-$r; docs+=("$d/results.json")
    [ -d "$d/raw" ] && [ ! -f "$d/results.json" ] && "$py" -m lenet.bench.report "$d" --no-plots >/dev/null 2>&1
  done
  "$py" bench/gpu_summary.py --host-cpu "${docs[@]}" > "$out/host-cpu.txt" 2>&1
  pack
fi

# the files that come back -----------------------------------------------------------------------------------
wait
cp "$logs/environment.txt" "$out/"
for t in memcheck racecheck synccheck initcheck; do
  [ -f "$logs/$t.log" ] && { echo "== $t"; grep -E 'SUMMARY|batch [0-9]+:|unavailable|Error|WRONG' "$logs/$t.log" | head -40; }
done > "$out/sanitizers.txt"
pack
echo "== wall $(($(date +%s) - start)) s; everything in $out/gpu-check.tar.gz"
[ -z "${GPU_CHECK_WORK:-}" ] && rm -rf "$work"         # the scratch directory this run made
[ -f "$out/bench-summary.txt" ] && cat "$out/bench-summary.txt" && echo
[ -f "$out/host-cpu.txt" ] && cat "$out/host-cpu.txt" && echo
cat "$summary"
failed=$(awk -v rehearse="$rehearse" 'NR > 2 && ($2 ~ /^FAIL/ || ($2 == "skipped" && rehearse == 0 && $1 !~ /^(install|build)$/)) {print $1}' "$summary")
[ -z "$failed" ] && exit 0
redo=" "            # what to run again: install or build failing spoils what needs them
for name in $failed; do
  case $name in install) redo+="$LANES $ALONE $OPT_IN " ;; build) redo+="$CUDA_BUILT host-cpu " ;;
                report) redo+="bench " ;; *) redo+="$name " ;; esac
done
redo=$(for p in $LANES $ALONE $OPT_IN; do [[ $redo == *" $p "* ]] && wanted "$p" && echo -n "$p "; done)
echo "to redo what did not pass, on a fresh machine: GPU_CHECK_PHASES=\"${redo% }\" and the same command"
exit 1
