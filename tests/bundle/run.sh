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
for exe in "$root/libexec/"*; do
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
echo "bundle ok: $(du -h "$work/tessera-bundle.tar.xz" | cut -f1)"
