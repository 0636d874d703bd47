#!/usr/bin/env bash
# Makes a relocatable tarball of a built Tessera: unpack it anywhere, on a machine without
# Tessera's Debian packages, and run bin/tessera (or the test and benchmark programs).
#
#   tools/bundle.sh [BUILD_DIR [OUT]]     defaults: build/ and BUILD_DIR/tessera-bundle.tar.xz
#
# The tarball holds one directory, tessera/:
#   bin/       launchers: tessera, tessera_tests, tessera_bench, train_mlp
#   libexec/   the programs themselves (RUNPATH $ORIGIN/../lib)
#   lib/       libtessera and every shared library the programs need beyond glibc and the
#              CUDA libraries, each with RUNPATH $ORIGIN; OpenBLAS is among them (libtessera
#              loads the copy beside itself)
#   include/, lib/cmake/   the headers and the CMake package, as `cmake --install` makes them
#   MANIFEST.txt           commit, build options, the libraries and where each came from,
#                          the newest glibc symbol version the bundle needs
#
# A launcher puts the CUDA libraries on the search path before running its program:
# the directories in TESSERA_CUDA_LIBS (colon-separated) when set, else pip's
# site-packages/nvidia/*/lib of the first python3 on PATH and the lib64 beside nvcc.
# docs/gpu.md says more.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
out=${2:-$build/tessera-bundle.tar.xz}

for tool in patchelf ldd tar xz; do
  command -v "$tool" >/dev/null || { echo "bundle: $tool is missing (tools/setup.sh installs it)" >&2; exit 1; }
done
[[ -f $build/CMakeCache.txt ]] || { echo "bundle: $build is not a configured build directory" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/tessera

echo "[bundle] installing $build into a staging directory"
cmake --install "$build" --prefix "$root" >/dev/null
cmake --install "$build" --prefix "$root" --component bundle >/dev/null
# The programs go to libexec/; bin/ gets a launcher of the same name for each.
mkdir -p "$root/libexec"
mv "$root/bin/"* "$root/libexec/"
libdir=$(cd "$root" && find . -maxdepth 2 -name 'libtessera.so*' -printf '%h\n' | head -1)
[[ -n $libdir ]] || { echo "bundle: no libtessera in the install" >&2; exit 1; }
if [[ $libdir != ./lib ]]; then # a multiarch libdir: keep one flat lib/
  mv "$root/$libdir/"* "$root/lib/" 2>/dev/null || true
fi
for exe in "$root/libexec/"*; do patchelf --set-rpath '$ORIGIN/../lib' "$exe"; done

cuda_build=0
if grep -q '^TESSERA_CUDNN_LIBRARY:FILEPATH=/' "$build/CMakeCache.txt"; then cuda_build=1; fi

# What stays outside: glibc's libraries (the target's own must be used) and the CUDA
# libraries (they come with the target's driver, toolkit or pip packages).
system='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec|libpthread|libdl\.so|librt\.so|libresolv|libutil\.so|libanl)'
cuda='^(libcuda\.so|libcudart|libcublas|libcudnn|libnccl|libnvrtc|libnvJitLink|libcufft|libcurand|libcusparse|libcusolver|libnvToolsExt)'

# OpenBLAS is loaded at run time (dlopen), so no ELF names it: start the walk with it.
openblas=$(sed -n 's/^TESSERA_OPENBLAS_PATH:INTERNAL=//p' "$build/CMakeCache.txt")
[[ -f $openblas ]] || { echo "bundle: cannot find the OpenBLAS library the build uses ($openblas)" >&2; exit 1; }
cp -L "$openblas" "$root/lib/libopenblas.so.0"

manifest_libs=()
declare -A seen=()
changed=1
while ((changed)); do
  changed=0
  for elf in "$root/libexec/"* "$root/lib/"*.so*; do
    [[ -f $elf && ! -L $elf ]] || continue
    while read -r name arrow path _; do
      [[ $arrow == "=>" ]] || continue
      [[ $name =~ $system || $name =~ $cuda ]] && continue
      [[ -n ${seen[$name]:-} ]] && continue
      if [[ $path == "not" ]]; then
        echo "bundle: $(basename "$elf") needs $name, which is not found here" >&2
        exit 1
      fi
      seen[$name]=1
      [[ -e $root/lib/$name ]] && continue # libtessera itself
      cp -L "$path" "$root/lib/$name"
      manifest_libs+=("$name  <-  $path")
      changed=1
    done < <(LD_LIBRARY_PATH="$root/lib" ldd "$elf" 2>/dev/null || true)
  done
done
for lib in "$root/lib/"*.so*; do
  [[ -L $lib ]] && continue
  chmod u+w "$lib"
  [[ $(basename "$lib") == libtessera.so* ]] || patchelf --set-rpath '$ORIGIN' "$lib"
done

# The newest glibc symbol version anything in the bundle needs: the target's glibc must
# be at least that.
glibc=$(for f in "$root/libexec/"* "$root/lib/"*.so*; do
          [[ -L $f ]] || objdump -T "$f" 2>/dev/null
        done | grep -o 'GLIBC_[0-9.]*' | sort -t. -k1,1 -k2,2n -k3,3n -u | tail -1)

for exe in "$root/libexec/"*; do
  name=$(basename "$exe")
  cat >"$root/bin/$name" <<EOF
#!/bin/sh
# Runs libexec/$name from this bundle with the CUDA libraries on the search path.
root=\$(cd "\$(dirname "\$(readlink -f "\$0")")/.." && pwd)
needs_cuda=$cuda_build
if [ "\$needs_cuda" = 1 ]; then
  if [ -n "\${TESSERA_CUDA_LIBS+set}" ]; then
    cuda=\$TESSERA_CUDA_LIBS
  else
    cuda=
    # pip's CUDA packages (nvidia-cudnn-*, nvidia-cublas-*, ...) of the first python3
    if command -v python3 >/dev/null 2>&1; then
      cuda=\$(python3 -c 'import glob, os, nvidia; print(":".join(d for p in nvidia.__path__ for d in sorted(glob.glob(os.path.join(p, "*", "lib")))))' 2>/dev/null) || cuda=
    fi
    # the toolkit beside nvcc
    if command -v nvcc >/dev/null 2>&1; then
      tk=\$(cd "\$(dirname "\$(readlink -f "\$(command -v nvcc)")")/.." && pwd)
      for d in "\$tk/lib64" "\$tk/lib"; do [ -d "\$d" ] && cuda=\${cuda:+\$cuda:}\$d; done
    fi
  fi
  if [ -n "\$cuda" ]; then
    LD_LIBRARY_PATH=\${LD_LIBRARY_PATH:+\$LD_LIBRARY_PATH:}\$cuda
    export LD_LIBRARY_PATH
  fi
fi
exec "\$root/libexec/$name" "\$@"
EOF
  chmod +x "$root/bin/$name"
done

{
  echo "Tessera bundle"
  echo "commit: $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built on: $(. /etc/os-release && echo "$PRETTY_NAME"), $(uname -m)"
  echo "CUDA backend: $([[ $cuda_build == 1 ]] && echo yes || echo no)"
  echo "needs: glibc with ${glibc:-GLIBC_?}$([[ $cuda_build == 1 ]] && echo ', CUDA 13 runtime, cuBLAS 13, cuDNN 9')"
  echo "programs: $(cd "$root/libexec" && echo *)"
  echo "libraries copied:"
  echo "  libopenblas.so.0  <-  $openblas"
  printf '  %s\n' "${manifest_libs[@]}"
} >"$root/MANIFEST.txt"

mkdir -p "$(dirname "$out")"
tar -C "$work" -cf - tessera | xz -T0 -6 >"$out.part"
mv "$out.part" "$out"
echo "[bundle] wrote $out ($(du -h "$out" | cut -f1); ${#manifest_libs[@]} libraries besides libtessera and OpenBLAS; needs ${glibc:-?})"
