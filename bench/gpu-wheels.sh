#!/usr/bin/env bash
# Fill WHEEL_DIR (the lease command carries it as .whl/) with CPython 3.12 manylinux x86-64 wheels
# for exactly what the lent GPU machine's image lacks (bench/gpu-image-packages.txt lists what it
# has), one pinned version of each, on a machine with network:
#
#   bench/gpu-wheels.sh .whl
#
#  - PyCUDA, built HERE from its source release by a Python 3.12 against the CUDA 13 toolkit that
#    holds nvcc's cuda.h (building it on the GPU machine would cost minutes of the lease);
#  - binary wheels, each downloaded alone (pip download --no-deps --only-binary=:all: for Python
#    3.12 on manylinux x86-64), of Keras and its missing dependencies, scipy-openblas32 (the
#    native build's BLAS), pygount (lines of code) and jsonschema with theirs, PyCUDA's own.
# Then every wheel's dependencies (Requires-Dist, evaluated for Python 3.12 on Linux) must be in
# the image or among the wheels, at a version the wheel asks for; the wheels and their total size
# are printed last (at most 40 MB: they travel with the tree, 64 MiB in all).
#
# GPU_PYTHON       a Python 3.12 to build PyCUDA with (default: python3.12 on PATH, else pyenv's 3.12)
# CUDA_HOME        the toolkit PyCUDA is built against (default: the one holding nvcc's cuda.h)
# GPU_WHEELS_PYCUDA=0  leave PyCUDA out (its build takes minutes), e.g. to check the rest quickly
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "gpu-wheels: error: $*" >&2; exit 2; }

PYCUDA=pycuda==2026.1
WHEELS=(keras==3.15.1 namex==0.1.0 optree==0.20.0 scipy-openblas32==0.3.34.481.3
        pygount==3.2.0 chardet==5.2.0 gitpython==3.2.1 gitdb==4.0.12 smmap==5.0.3
        jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
        pytools==2026.1.1 siphash24==1.9 platformdirs==4.14.8 mako==1.4.3)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)

[ $# -eq 1 ] || die "usage: bench/gpu-wheels.sh WHEEL_DIR"
out=$1
{ mkdir -p "$out" 2>/dev/null && [ -w "$out" ]; } || die "cannot write to wheel directory $out"
out=$(cd "$out" && pwd)

py=
for c in "${GPU_PYTHON:-python3.12}" ~/.pyenv/versions/3.12*/bin/python3.12; do
  [ "$("$c" -c 'import sys; print(sys.version_info[:2] == (3, 12))' 2>/dev/null)" = True ] && { py=$c; break; }
done
[ -n "$py" ] || die "no Python 3.12, the GPU machine's version (set GPU_PYTHON; python3.12 on PATH or pyenv's)"
pip=("$py" -m pip --disable-pip-version-check -q)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
platforms=(); for p in "${PLATFORMS[@]}"; do platforms+=(--platform "$p"); done
echo "gpu-wheels: downloading ${#WHEELS[@]} wheels for CPython 3.12 on manylinux x86-64" >&2
"${pip[@]}" download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
  -d "$tmp/all" "${WHEELS[@]}" 2> >(grep -v "is ignored: it is neither" >&2) || die "pip download failed (network?)"

if [ "${GPU_WHEELS_PYCUDA:-1}" != 0 ]; then
  cuda=${CUDA_HOME:-}
  for c in "$cuda" "${CUDA_PATH:-}" /usr/local/cuda "$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /x/x/x)")")")"; do
    [ -n "$c" ] && [ -f "$c/include/cuda.h" ] && { cuda=$c; break; }
  done
  [ -f "$cuda/include/cuda.h" ] || die "no CUDA toolkit found (set CUDA_HOME to the directory holding include/cuda.h)"
  grep -q '#define CUDA_VERSION 13' "$cuda/include/cuda.h" || die "$cuda/include/cuda.h is not CUDA 13's (set CUDA_HOME)"
  echo "gpu-wheels: building $PYCUDA with $py against $cuda (minutes)" >&2
  "${pip[@]}" download --no-deps --no-binary pycuda -d "$tmp/src" "$PYCUDA" 2> >(grep -v "is ignored" >&2)
  tar -xzf "$tmp"/src/pycuda-*.tar.gz -C "$tmp"
  src=$(ls -d "$tmp"/pycuda-*/)
  # PyCUDA links libcuda.so, which only a driver install provides. Link a stub with the driver's
  # soname that defines every driver API function of this toolkit's headers (an empty one would be
  # dropped by --as-needed); the GPU machine's driver is what loads at run time. No CURAND (the
  # project does not use pycuda.curandom), no debug info.
  mkdir -p "$tmp/stub"
  printf '#include <cuda.h>\n#include <cudaProfiler.h>\n' | cc -E -P -I"$cuda/include" -x c - | tr '\n' ' ' \
    | grep -oE '\bCUresult +cu[A-Za-z0-9_]+ *\(' | sed -E 's/CUresult +//; s/ *\(//' | sort -u \
    | sed 's/.*/int &(void) { return 0; }/' > "$tmp/stub/cuda_stub.c"
  cc -shared -o "$tmp/stub/libcuda.so" "$tmp/stub/cuda_stub.c" -Wl,-soname,libcuda.so.1
  (cd "$src" && "$py" configure.py --cuda-root="$cuda" --cudadrv-lib-dir="$tmp/stub" --no-cuda-enable-curand \
     --cxxflags=-g0 >/dev/null && "${pip[@]}" wheel --no-deps -w "$tmp/all" . 2> >(grep -v "is ignored" >&2)) \
    || die "the PyCUDA build failed"
  wheel=$(ls "$tmp"/all/pycuda-*.whl)
  case $(basename "$wheel") in *-cp312-cp312-linux_x86_64.whl) ;; *) die "unexpected PyCUDA wheel $(basename "$wheel")";; esac
  "$py" -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); z.extractall(sys.argv[2], [n for n in z.namelist() if "/_driver" in n])' \
    "$wheel" "$tmp/check" || die "cannot read the PyCUDA wheel $wheel"
  readelf -d "$tmp"/check/pycuda/_driver*.so | grep -q 'NEEDED.*libcuda\.so\.1' \
    || die "the PyCUDA wheel's _driver does not load libcuda.so.1"
fi

# Every dependency in the image or among the wheels (one version of each, at a version asked for).
"$py" - "$here/gpu-image-packages.txt" "$tmp"/all/*.whl <<'EOF' || die "the wheels do not fit the image (above)"
import re, sys, zipfile
from pip._vendor.packaging.markers import Marker
from pip._vendor.packaging.requirements import Requirement
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
image = {norm(l.strip()) for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")}
env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux", "platform_system": "Linux",
       "platform_machine": "x86_64", "os_name": "posix", "implementation_name": "cpython", "extra": ""}
wheels, needs, problems = {}, [], []
for path in sys.argv[2:]:
    name, version = path.rsplit("/", 1)[1].split("-")[:2]
    if norm(name) in wheels or norm(name) in image:
        problems.append(f"{name}: {'two versions' if norm(name) in wheels else 'the image has it already'}")
    wheels[norm(name)] = version
    meta = zipfile.ZipFile(path).read(next(n for n in zipfile.ZipFile(path).namelist() if n.endswith(".dist-info/METADATA")))
    needs += [(name, Requirement(l.split(":", 1)[1].strip())) for l in meta.decode().splitlines() if l.startswith("Requires-Dist:")]
for who, req in needs:
    if req.marker and not req.marker.evaluate(env):
        continue
    got = wheels.get(norm(req.name))
    if got is None and norm(req.name) not in image:
        problems.append(f"{who} needs {req}, in neither the image nor the wheels")
    elif got is not None and not req.specifier.contains(got, prereleases=True):
        problems.append(f"{who} needs {req}, the wheels hold {got}")
print("\n".join(f"gpu-wheels: error: {p}" for p in problems), file=sys.stderr)
sys.exit(1 if problems else 0)
EOF

rm -f "$out"/*.whl
cp "$tmp"/all/*.whl "$out/"
wheels=("$out"/*.whl)
for w in "${wheels[@]}"; do basename "$w"; done
total=$(du -cb "${wheels[@]}" | tail -1 | cut -f1)
echo "gpu-wheels: ${#wheels[@]} wheels, $((total / 1000)) kB in $out"
[ "$total" -le 40000000 ] || die "wheels total $((total / 1000000)) MB, over the 40 MB budget"
