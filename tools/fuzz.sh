#!/usr/bin/env bash
# Fuzzes Tessera's file readers with libFuzzer under AddressSanitizer and
# UndefinedBehaviorSanitizer: the IDX reader, the blueprint JSON parser and factory, the
# HDF5 model loader, the checkpoint loader and the ONNX importer (tools/fuzz/fuzz_*.cpp).
#
#   tools/fuzz.sh SECONDS       build build-fuzz (clang), then run each fuzzer SECONDS
#   TESSERA_FUZZ_READERS="idx hdf5" tools/fuzz.sh 60    only these
#   TESSERA_FUZZ_JOBS=n         fuzzers run side by side (default: all cores)
#   TESSERA_FUZZ_RUNS=n         each stops after n executions, if that comes before SECONDS
#   TESSERA_FUZZ_READERS="hdf5 hdf5"  a reader named twice runs twice side by side, both
#                               growing its one corpus (a long run of a slow reader on two cores)
#   TESSERA_FUZZ_SEED=n         libFuzzer's random seed (a second instance of a reader n+1, ...):
#                               a run from a clean build-fuzz then repeats the same mutations
#                               (CI sets it, so that what passed on a clean clone passes again;
#                               unset, each run draws its own seed and explores anew)
#
# Each starts from the seed corpus fuzz_seeds writes plus the kept findings under
# tests/data/fuzz/<reader>/, and grows its corpus in build-fuzz/corpus/<reader>/ (kept
# between runs). A bad file must end in one of Tessera's errors; a crash, a sanitizer
# report, any other exception (std::bad_alloc included), an input taking over 10 s, more
# than 2 GB resident or a single allocation over 1 GB is a finding, written to
# build-fuzz/findings/<reader>/<run>/. Prints each fuzzer's executions, and each finding
# (up to 256 KB) in base64 so that a log from another machine can repeat it; exits 1 on any
# finding.
set -euo pipefail

seconds=${1:?usage: tools/fuzz.sh SECONDS}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$repo/build-fuzz
readers=${TESSERA_FUZZ_READERS:-idx blueprint hdf5 checkpoint onnx image dataset archive}
jobs=${TESSERA_FUZZ_JOBS:-$(nproc)}

mkdir -p "$build"
TESSERA_BUILD_DIR=$build \
  TESSERA_CMAKE_ARGS="-DCMAKE_CXX_COMPILER=clang++ -DTESSERA_FUZZ=ON -DTESSERA_USE_CUDA=OFF -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_BENCHMARKS=OFF" \
  bash "$repo/tools/setup.sh" >"$build/setup.log" 2>&1 || { tail -50 "$build/setup.log"; exit 1; }
echo "[fuzz] built in $build (log: $build/setup.log)"

# Blocks libhdf5 itself allocates and loses on some corrupt files are its own leaks (its
# frames are the whole allocation stack; none reproduces outside a long fuzzing run):
# suppressed for libhdf5 only. A leak with any frame of Tessera's is still a finding.
suppressions=$build/lsan.supp
echo "leak:libhdf5_serial.so" >"$suppressions"
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$suppressions}
# One allocation over 1 GB fails (returns null) wherever it happens, also in the child
# processes the HDF5 readers run libhdf5 in: libhdf5 then reports an error, and the
# harness counts a failed allocation of Tessera's own (std::bad_alloc, "out of host
# memory") as a finding.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:max_allocation_size_mb=1024}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMP_NUM_THREADS=1
# libhdf5 loops forever on some corrupt files; the HDF5 readers stop it sooner here (a
# valid seed reads in a few milliseconds; at 0.5 s the stopped loops took most of the time).
export TESSERA_HDF5_READ_TIMEOUT=${TESSERA_HDF5_READ_TIMEOUT:-0.05}
# ONNX's shape inference (in its own process) is taken to hang after 2 s, not 30: a model it
# spins on is then a clean error, not a wait past the 10 s an input may take (the seeds infer
# in milliseconds).
export TESSERA_ONNX_SHAPE_TIMEOUT=${TESSERA_ONNX_SHAPE_TIMEOUT:-2}
seeds=$build/seeds
rm -rf "$seeds"
"$build/tools/fuzz/fuzz_seeds" "$seeds" >/dev/null

run_one() {
  local r=$1 instance=$2
  local corpus=$build/corpus/$r findings=$build/findings/$r/${instance:-1} log=$build/fuzz-$r$instance.log
  rm -rf "$findings"
  mkdir -p "$corpus" "$findings"
  local dirs=("$corpus" "$seeds/$r")
  [[ -d $repo/tests/data/fuzz/$r ]] && dirs+=("$repo/tests/data/fuzz/$r")
  local rc=0 extra=() start=$SECONDS
  # Blueprints: small inputs keep it fast (the kept 78 KB nesting case is read whole when replayed).
  [[ $r == blueprint ]] && extra=(-max_len=4096)
  [[ -n ${TESSERA_FUZZ_RUNS:-} ]] && extra+=(-runs="$TESSERA_FUZZ_RUNS")
  [[ -n ${TESSERA_FUZZ_SEED:-} ]] && extra+=(-seed=$((TESSERA_FUZZ_SEED + ${instance:-1} - 1)))
  "$build/tools/fuzz/fuzz_$r" "${dirs[@]}" "${extra[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=2048 -artifact_prefix="$findings/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  local execs found elapsed=$((SECONDS - start))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  found=$(find "$findings" -type f | wc -l)
  printf '%-11s %10s executions in %5ss, corpus %5s files, exit %s, findings %s\n' "$r$instance" "${execs:-?}" "$elapsed" \
    "$(find "$corpus" -type f | wc -l)" "$rc" "$found"
  ((found == 0)) || rc=1
  if ((rc != 0)); then
    grep -E 'ERROR|SUMMARY|==[0-9]+==|terminate|what\(\)|timeout' "$log" | head -20
    # The finding itself, so that a run on another machine (CI) can be repeated here:
    # `base64 -d > FILE` of the lines below, then `build-fuzz/tools/fuzz/fuzz_<reader> FILE`.
    local f
    while IFS= read -r f; do
      if (($(stat -c %s "$f") <= 262144)); then
        echo "[fuzz] $r$instance finding $(basename "$f") ($(stat -c %s "$f") bytes), base64:"
        base64 -w 120 "$f"
        echo "[fuzz] end of $(basename "$f")"
      else
        echo "[fuzz] $r$instance finding $f ($(stat -c %s "$f") bytes, too large to print)"
      fi
    done < <(find "$findings" -type f)
  fi
  return $rc
}

status=0
pids=()
names=()
declare -A seen=()
for r in $readers; do
  while (($(jobs -rp | wc -l) >= jobs)); do sleep 1; done
  # The first run of a reader is fuzz-<reader>.log; a second one side by side, fuzz-<reader>2.log.
  seen[$r]=$((${seen[$r]:-0} + 1))
  instance=$( ((seen[$r] > 1)) && echo "${seen[$r]}" || true)
  run_one "$r" "$instance" &
  pids+=($!)
  names+=("$r$instance")
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { status=1; echo "[fuzz] ${names[$i]}: FINDING (see $build/fuzz-${names[$i]}.log)"; }
done
exit $status
