#!/usr/bin/env bash
# The bundle test: tools/bundle.sh makes a tarball of BUILD_DIR; unpacked in a temporary
# directory and moved once (it must not depend on where it was made or unpacked), its
# programs run with no LD_LIBRARY_PATH, find every library inside the bundle (glibc and
# the CUDA libraries excepted) and load the bundled OpenBLAS.
#   tests/bundle/run.sh BUILD_DIR WORK_DIR
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
bash "$repo/tools/bundle.sh" "$build" "$work/tessera-bundle.tar.xz"

tar -C "$work" -xJf "$work/tessera-bundle.tar.xz"
mv "$work/tessera" "$work/moved"
root=$work/moved
unset LD_LIBRARY_PATH

fail() { echo "bundle test: $*" >&2; exit 1; }

# 1. The CLI from the bundle.
out=$("$root/bin/tessera" check lenet --input 1x1x28x28)
echo "$out"
[[ $out == "ok: lenet, [1, 1, 28, 28] -> [1, 10]"* ]] || fail "tessera check printed: $out"

# 2. Every library resolves inside the bundle, apart from glibc's and CUDA's.
system='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec|libpthread|libdl\.so|librt\.so|libresolv|libutil\.so|libanl)'
cuda='^(libcuda\.so|libcudart|libcublas|libcudnn|libnccl|libnvrtc|libnvJitLink)'
for exe in "$root/libexec/"* "$root/lib/libtessera_cuda.so"; do
  [[ -f $exe ]] || continue
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    [[ $name =~ $system || $name =~ $cuda ]] && continue
    [[ $path == "$root/"* ]] || fail "$(basename "$exe") takes $name from $path, outside the bundle"
  done < <(ldd "$exe")
done
echo "every library of $(ls "$root/libexec" | tr '\n' ' ')resolves inside the bundle"

# 3. The OpenBLAS that runs is the bundled one (it is loaded at run time, not linked, when
#    float32 GEMMs run on it).
TESSERA_FLOAT32_GEMM=openblas OMP_NUM_THREADS=1 LD_DEBUG=files "$root/bin/train_mlp" 1 >"$work/train_mlp.out" 2>"$work/ld_debug.txt" \
  || fail "train_mlp from the bundle failed: $(tail -3 "$work/train_mlp.out")"
grep -q "file=$root/lib/libopenblas.so.0" "$work/ld_debug.txt" \
  || fail "train_mlp did not load $root/lib/libopenblas.so.0: $(grep -o 'file=[^ ]*openblas[^ ]*' "$work/ld_debug.txt" | head -1)"
echo "train_mlp ran on $root/lib/libopenblas.so.0"
grep -q "^needs: glibc with GLIBC_" "$root/MANIFEST.txt" || fail "MANIFEST.txt has no glibc line"

# 4. A CUDA build's copy runs on a host without the CUDA libraries: the CUDA backend is a
#    plugin (lib/libtessera_cuda.so) loaded on the first CUDA request. The libraries are
#    hidden by running the programs through the dynamic loader with its cache inhibited
#    (where /etc/ld.so.conf names the CUDA directory) and nothing on LD_LIBRARY_PATH.
if [[ -f $root/lib/libtessera_cuda.so ]]; then
  ldso=$(readelf -l "$root/libexec/tessera" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
  hidden=("$ldso" --inhibit-cache)
  probe=$("${hidden[@]}" --list "$root/lib/libtessera_cuda.so" 2>&1 || true)
  if grep -q -E 'libcudart[^ ]*( => not found|: cannot open shared object)' <<<"$probe"; then
    "${hidden[@]}" "$root/libexec/tessera" train --model lenet --data fashion-mnist --epochs 1 --limit 500 \
      >"$work/train_hidden.out" 2>&1 || fail "tessera train without the CUDA libraries failed: $(tail -3 "$work/train_hidden.out")"
    grep -q "final test accuracy" "$work/train_hidden.out" || fail "tessera train printed: $(tail -3 "$work/train_hidden.out")"
    echo "tessera train ran on the CPU with the CUDA libraries hidden: $(tail -1 "$work/train_hidden.out")"
    if "${hidden[@]}" "$root/libexec/tessera" train --model lenet --data fashion-mnist --epochs 1 --limit 500 \
         --device cuda >"$work/cuda_hidden.out" 2>&1; then
      fail "--device cuda without the CUDA libraries succeeded"
    fi
    grep -q -- "--device cuda: the CUDA backend (.*libtessera_cuda.so) cannot be loaded: libcu.*: cannot open shared object file" \
      "$work/cuda_hidden.out" || fail "--device cuda without the CUDA libraries said: $(cat "$work/cuda_hidden.out")"
    echo "--device cuda without them: $(cat "$work/cuda_hidden.out")"
  else
    echo "the CUDA libraries are on this loader's default path, so they cannot be hidden: step 4 skipped"
  fi
fi
echo "bundle ok: $(du -h "$work/tessera-bundle.tar.xz" | cut -f1)"
