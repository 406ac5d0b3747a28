# Sourced by scripts/gpu/check-*.sh on the GPU machine (the device tool's
# Ubuntu VM): bcc/bpftrace from the carried kit, the Python packages some
# checks need (prometheus_client) from carried wheels, results under $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source .gpukit/env.sh
if [ -d .whl ] && [ ! -e /tmp/site/.done ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.done
fi
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/cudaprobe-gpu-out}
mkdir -p "$OUT" build
TORCH_PY=/opt/torch/.venv/bin/python
cudaprobe() { python3 -m cudaprobe "$@"; }

# Nsight Systems, wherever this machine keeps it
find_nsys() {
  command -v nsys && return
  local c
  for c in /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys \
           /opt/nvidia/nsight-systems*/*/bin/nsys /usr/lib/nsight-systems*/bin/nsys \
           /usr/lib/nsight-systems*/nsys /usr/local/cuda*/nsight-systems*/bin/nsys \
           /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys; do
    [ -x "$c" ] && { echo "$c"; return; }
  done
}

# pack_out ARCHIVE KEEP...: every file under $OUT but ARCHIVE and the KEEP names
# (the summary, small results) moved into $OUT/ARCHIVE, a .tar.gz: the device tool
# brings back only about 8 files of $OUT (gpu-run1 of check-gputime.sh lost 28).
# Read it back with: tar -xzf ARCHIVE -C DIR
pack_out() {
  local archive=$1 f name files=()
  shift
  for f in "$OUT"/*; do
    [ -e "$f" ] || continue
    name=$(basename "$f")
    [[ " $archive $* " == *" $name "* ]] || files+=("$name")
  done
  [ ${#files[@]} -gt 0 ] || return 0
  tar -czf "$OUT/$archive" -C "$OUT" "${files[@]}" \
    && (cd "$OUT" && rm -rf -- "${files[@]}")
}

# build_oracle: the CUPTI callback counter (benchmarks/oracle/cupti_counter.c) as
# $ORACLE, for CUDA_INJECTION64_PATH=$ORACLE CUPTI_COUNTER_OUT=FILE (or DIR/%p.cupti)
ORACLE=/tmp/cupti_counter.so
build_oracle() {
  local lib
  lib=$(dirname "$(find /usr/local/cuda/ /usr/local/cuda-*/ -name 'libcupti.so' 2>/dev/null | head -1)")
  gcc -O2 -shared -fPIC -o $ORACLE benchmarks/oracle/cupti_counter.c -I/usr/local/cuda/include \
    -I/usr/local/cuda/extras/CUPTI/include -L"$lib" -lcupti -Wl,-rpath,"$lib"
}

# serve_kit: what the serve checks want: prometheus_client (from the carried
# .whl where the kit's Python has none) and $LIBCUDA, the host's driver
serve_kit() {
  python3 -c 'import prometheus_client' 2>/dev/null || python3 -m pip install -q --no-index \
    --no-deps --target /tmp/site .whl/prometheus_client-*.whl
  LIBCUDA=${LIBCUDA:-/usr/local/nvidia/lib64/libcuda.so.1}
  [ -e "$LIBCUDA" ] || LIBCUDA=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
}
