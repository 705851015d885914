#!/usr/bin/env bash
# Prepare WHEEL_DIR for bench/gpu-check.sh on an offline GPU machine: on a machine with network
# and the CUDA toolkit (nvcc), build a PyCUDA wheel and download the other Python packages the
# project needs there, for that machine's Python; leave out what its image already holds
# (bench/gpu-image-packages.txt). Prints the wheels and their total size (at most 60 MB).
#
#   bench/gpu-wheels.sh WHEEL_DIR
#
# GPU_PYTHON      interpreter of the GPU machine's Python version (default: python3.12 on PATH,
#                 else pyenv's newest 3.12); the wheels are for its version
# PYCUDA_VERSION  default 2026.1
# CUDA_HOME       the toolkit PyCUDA is built against (default: the one holding nvcc's cuda.h)
# GPU_WHEELS_PYCUDA=0  skip the PyCUDA build (minutes), e.g. to check the rest quickly
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "gpu-wheels: error: $*" >&2; exit 2; }

[ $# -eq 1 ] || die "usage: bench/gpu-wheels.sh WHEEL_DIR"
out=$1
{ mkdir -p "$out" 2>/dev/null && [ -w "$out" ]; } || die "cannot write to wheel directory $out"
out=$(cd "$out" && pwd)

py=
for c in ${GPU_PYTHON:-python3.12 $(ls -d ~/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null)}; do
  "$c" -c "" 2>/dev/null && { py=$c; break; }
done
[ -n "$py" ] || die "no Python for the GPU machine's version (set GPU_PYTHON; no working python3.12 found)"
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
cuda=${CUDA_HOME:-}
for c in "$cuda" "${CUDA_PATH:-}" /usr/local/cuda "$(dirname "$(dirname "$(command -v nvcc || echo /x/x)")")"; do
  [ -n "$c" ] && [ -f "$c/include/cuda.h" ] && { cuda=$c; break; }
done
[ -f "$cuda/include/cuda.h" ] || die "no CUDA toolkit found (set CUDA_HOME to the directory holding include/cuda.h)"
# What the project needs on the GPU machine beyond its image: PyCUDA (built below), Keras,
# pygount (lines of code), jsonschema (report validation), OpenBLAS for the native build.
packages=(pycuda "keras>=3.5" "pygount>=1.8" "jsonschema>=4" "scipy-openblas32>=0.3.27")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pip=("$py" -m pip --disable-pip-version-check -q)

if [ "${GPU_WHEELS_PYCUDA:-1}" = 0 ]; then
  packages=("${packages[@]:1}")
else
  echo "gpu-wheels: PyCUDA ${PYCUDA_VERSION:-2026.1} for Python $pyver against $cuda" >&2
  "${pip[@]}" download --no-deps --no-binary pycuda -d "$tmp/src" "pycuda==${PYCUDA_VERSION:-2026.1}"
  tar -xzf "$tmp"/src/pycuda-*.tar.gz -C "$tmp"
  src=$(ls -d "$tmp"/pycuda-*/)
  # PyCUDA links libcuda.so, which only a driver install provides. Link against a stub with the
  # driver's soname that defines every driver API function of this toolkit's headers (what the
  # toolkit's lib64/stubs is for; an empty one would be dropped by --as-needed); the GPU machine's
  # driver is what loads at run time. CURAND is left out (the project does not use
  # pycuda.curandom); no debug info.
  mkdir -p "$tmp/stub"
  printf '#include <cuda.h>\n#include <cudaProfiler.h>\n' | cc -E -P -I"$cuda/include" -x c - | tr '\n' ' ' \
    | grep -oE '\bCUresult +cu[A-Za-z0-9_]+ *\(' | sed -E 's/CUresult +//; s/ *\(//' | sort -u \
    | sed 's/.*/int &(void) { return 0; }/' > "$tmp/stub/cuda_stub.c"
  cc -shared -o "$tmp/stub/libcuda.so" "$tmp/stub/cuda_stub.c" -Wl,-soname,libcuda.so.1
  (cd "$src" && "$py" configure.py --cuda-root="$cuda" --cudadrv-lib-dir="$tmp/stub" --no-cuda-enable-curand \
     --cxxflags=-g0 >/dev/null && "${pip[@]}" wheel --no-deps -w "$tmp/all" .)
  wheel=("$tmp"/all/pycuda-*.whl)
  "$py" -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); z.extractall(sys.argv[2], [n for n in z.namelist() if "/_driver" in n])' \
    "${wheel[0]}" "$tmp/check" || die "cannot read the PyCUDA wheel ${wheel[0]}"
  readelf -d "$tmp"/check/pycuda/_driver*.so | grep -q 'NEEDED.*libcuda\.so\.1' \
    || die "the PyCUDA wheel's _driver does not load libcuda.so.1"
fi

echo "gpu-wheels: downloading ${packages[*]} and every dependency (binary wheels only)" >&2
"${pip[@]}" download --only-binary=:all: -d "$tmp/all" --find-links "$tmp/all" "${packages[@]}"

# Keep only what the image lacks.
norm() { tr 'A-Z_.' 'a-z--'; }
have=$(grep -v '^#' "$here/gpu-image-packages.txt" | norm)
rm -f "$out"/*.whl
for w in "$tmp"/all/*.whl; do
  name=$(basename "$w" | cut -d- -f1 | norm)
  grep -qxF "$name" <<<"$have" || cp "$w" "$out/"
done
wheels=("$out"/*.whl)
for w in "${wheels[@]}"; do basename "$w"; done
total=$(du -cb "${wheels[@]}" | tail -1 | cut -f1)
echo "gpu-wheels: ${#wheels[@]} wheels, $((total / 1000)) kB in $out"
[ "$total" -le 60000000 ] || die "wheels total $((total / 1000000)) MB, over the 60 MB budget"
