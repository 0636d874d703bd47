#!/usr/bin/env bash
# One call's worth of GPU checks from a bundle (tools/bundle.sh), for a machine that has a
# GPU but not Tessera's packages. Run from the repository root:
#
#   tools/gpu_run.sh BUNDLE.tar.xz [DATA_DIR] [OUT_DIR]
#
# Unpacks the bundle, then writes to OUT_DIR (default: $OUT, else ./gpu-run) one log per
# step, each starting with the device (nvidia-smi -L), the bundle's commit and the command:
#   suite.log   the whole test suite (CUDA tests must run, not skip), or the tests that
#               GPU_RUN_SUITE_FILTER selects (a --gtest_filter pattern)
#   lenet.log   tessera train --model lenet --epochs 10 --seed 1 --device cuda on DATA_DIR
#               (the four Fashion-MNIST IDX files), when given
#   lenet-fp16.log, lenet-bf16.log   the same with --precision fp16 / bf16
#   lenet-unpinned.log   the fp32 run with batches in ordinary memory (--no-pin-memory)
#   nccl.log    2 epochs of it as a single-rank data-parallel job over NCCL (TESSERA_NCCL_SIZE=1)
#   determinism.log   two seeded 1-epoch runs, saved and compared, with and without --deterministic
#               (the LeNet, NCCL and determinism steps are skipped when GPU_RUN_SKIP_LENET is set)
#   train.log   with GPU_RUN_TRAIN="ARGS" (say "--model vit-tiny --epochs 10"): tessera train ARGS
#               --data DATA --seed 1 --device cuda, DATA being GPU_RUN_TRAIN_DATA (say
#               text:DIR) or else DATA_DIR
#   profile.log tessera profile MODEL --device cuda --batch B --depth 1, in fp32 and bf16 (or
#               the precisions GPU_RUN_PROFILE_PRECISION lists, say "fp16 bf16"), for
#               each MODEL:B in GPU_RUN_PROFILE (default resnet50:64; the depth from
#               GPU_RUN_PROFILE_DEPTH; skipped when GPU_RUN_SKIP_PROFILE is set)
#   bench.log   the Gpu/ benchmarks matching GPU_RUN_BENCH_FILTER (default: all of them;
#               skipped when GPU_RUN_SKIP_BENCH is set)
#   side.log    with GPU_RUN_SIDE=MODELS (say resnet50): tools/bench/pytorch_side_by_side.py
#               --device cuda on those models in GPU_RUN_SIDE_PRECISION (default
#               fp32,fp16,bf16), GPU_RUN_SIDE_REPS repetitions (default 3), against the
#               PyTorch of the machine's python3, in NCHW and (unless GPU_RUN_SIDE_NCHW_ONLY
#               is set) channels_last; GPU_RUN_SIDE_FOLD set: the inference rows with each
#               batch norm folded into its convolution on both sides (--fold)
#   side-carry16.log   with GPU_RUN_SIDE and GPU_RUN_CARRY16 set: the same in fp16 and bf16
#               with 16-bit activations carried but plain layouts
#               (TESSERA_CUDA_16BIT_ACTIVATIONS=1 TESSERA_CUDA_CHANNELS_LAST=0)
#   side-off.log   with GPU_RUN_SIDE and GPU_RUN_OFF set: the same with both CUDA switches
#               off (float32 activations between layers, plain layouts: bundles before
#               they were on by default)
#   side-fused.log   with GPU_RUN_SIDE and GPU_RUN_FUSED_ATTENTION set: the same in fp16 and
#               bf16 with cuDNN's fused attention on (TESSERA_CUDA_FUSED_ATTENTION=1)
#               (GPU_RUN_VARIANT_PRECISION: other precisions for these; GPU_RUN_SIDE_VARIANTS_ONLY
#               set: only these variants, not side.log)
#   suite-switches.log   with GPU_RUN_SUITE_SWITCHES set: the CudaConsistency tests again with
#               both switches off (TESSERA_CUDA_16BIT_ACTIVATIONS=0 TESSERA_CUDA_CHANNELS_LAST=0),
#               or under the assignments GPU_RUN_SUITE_SWITCHES holds when it is not 1
#   kernels-*.log   with GPU_RUN_KERNELS="WORKLOAD:MODE:PRECISION ..." (say resnet50:train:bf16):
#               tools/bench/gpu_kernels.py on both sides (or on those GPU_RUN_KERNELS_SIDES
#               names: tessera, pytorch), one training or inference step's kernels, Tessera's
#               under the environment assignments in GPU_RUN_KERNELS_ENV
# With GPU_RUN_PACK set, the logs end up in one OUT_DIR/gpu-run-logs.tar.xz.
# Exits non-zero when the suite fails or any CUDA test skips.
set -uo pipefail

bundle=${1:?usage: tools/gpu_run.sh BUNDLE.tar.xz [DATA_DIR] [OUT_DIR]}
data=${2:-}
out=${3:-${OUT:-$PWD/gpu-run}}
mkdir -p "$out"
work=$(mktemp -d)
tar -C "$work" -xJf "$bundle" || { echo "gpu_run: cannot unpack $bundle" >&2; exit 1; }
root=$work/tessera

# The cuDNN the bundle's programs load: the first python3's pip package (tools/bundle.sh), as PyTorch's.
cudnn_version=$(python3 -c 'import torch; print(torch.backends.cudnn.version())' 2>/dev/null || echo unknown)

header() { # $1: the command
  if command -v nvidia-smi >/dev/null; then echo "device: $(nvidia-smi -L | tr '\n' ' ')"; else echo "device: no nvidia-smi"; fi
  echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "cudnn: $cudnn_version"
  grep '^commit:' "$root/MANIFEST.txt"
  echo "command: $1"
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo
}

# The suite's Fashion-MNIST test reads Debian's dataset directory; on a machine without
# the package, point it at DATA_DIR when we may.
fmnist=/usr/share/datasets/fashion-mnist
if [[ -n $data && ! -e $fmnist ]] && mkdir -p "$(dirname "$fmnist")" 2>/dev/null; then
  ln -s "$(cd "$data" && pwd)" "$fmnist" && echo "gpu_run: $fmnist -> $data"
fi

# Each step has a time limit (seconds), so that one hang still leaves the other logs.
limit_suite=${GPU_RUN_SUITE_LIMIT:-300}
limit_lenet=${GPU_RUN_LENET_LIMIT:-150}
limit_bench=${GPU_RUN_BENCH_LIMIT:-300}

status=0
filter=${GPU_RUN_SUITE_FILTER:-*}
cmd="TESSERA_SOURCE_DIR=$PWD OMP_WAIT_POLICY=passive bin/tessera_tests --gtest_filter=$filter"
{ header "$cmd"; TESSERA_SOURCE_DIR=$PWD OMP_WAIT_POLICY=passive timeout "$limit_suite" "$root/bin/tessera_tests" \
    --gtest_filter="$filter" 2>&1; } >"$out/suite.log"
suite=$?
skipped=$(grep -o '^\[  SKIPPED \] CudaConsistency\.[A-Za-z0-9_]*' "$out/suite.log" | sort -u | wc -l)
echo "suite: exit $suite, $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$out/suite.log" | tr '\n' ' ')"
if ((suite != 0)); then status=1; fi
if ((skipped > 0)); then
  echo "gpu_run: $skipped CudaConsistency tests skipped: no GPU seen" >&2
  status=1
fi

# The device tests again with the CUDA switches off (or as GPU_RUN_SUITE_SWITCHES says).
if [[ -n ${GPU_RUN_SUITE_SWITCHES:-} ]]; then
  switches=$GPU_RUN_SUITE_SWITCHES
  [[ $switches == 1 ]] && switches="TESSERA_CUDA_16BIT_ACTIVATIONS=0 TESSERA_CUDA_CHANNELS_LAST=0"
  cmd="$switches TESSERA_SOURCE_DIR=$PWD OMP_WAIT_POLICY=passive bin/tessera_tests --gtest_filter=CudaConsistency.*"
  # shellcheck disable=SC2086 # $switches is a list of assignments
  { header "$cmd"; env $switches TESSERA_SOURCE_DIR="$PWD" OMP_WAIT_POLICY=passive timeout "$limit_suite" \
      "$root/bin/tessera_tests" --gtest_filter='CudaConsistency.*' 2>&1; } >"$out/suite-switches.log" || status=1
  echo "suite under switches: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$out/suite-switches.log" | tr '\n' ' ')"
fi

train_data=${GPU_RUN_TRAIN_DATA:-$data}
if [[ -n $train_data && -n ${GPU_RUN_TRAIN:-} ]]; then
  cmd="bin/tessera train $GPU_RUN_TRAIN --data $train_data --seed 1 --device cuda"
  # shellcheck disable=SC2086 # GPU_RUN_TRAIN is a list of arguments
  { header "$cmd"; timeout "${GPU_RUN_TRAIN_LIMIT:-240}" "$root/bin/tessera" train $GPU_RUN_TRAIN --data "$train_data" \
      --seed 1 --device cuda 2>&1; } >"$out/train.log" || status=1
  grep -E 'final (test accuracy|validation loss)' "$out/train.log" | sed 's/^/train: /' || echo "train: no final result (see train.log)"
fi

if [[ -n $data && -z ${GPU_RUN_SKIP_LENET:-} ]]; then
  for precision in fp32 fp16 bf16; do
    log=$out/lenet.log
    [[ $precision == fp32 ]] || log=$out/lenet-$precision.log
    cmd="bin/tessera train --model lenet --data $data --epochs 10 --seed 1 --device cuda --precision $precision"
    { header "$cmd"; timeout "$limit_lenet" "$root/bin/tessera" train --model lenet --data "$data" --epochs 10 --seed 1 \
        --device cuda --precision $precision 2>&1; } >"$log" || status=1
    grep -E 'final test accuracy' "$log" | sed "s/^/lenet $precision: /" || echo "lenet $precision: no final accuracy (see $log)"
  done
  # Batches from ordinary memory, copied at each step, against the page-locked default above.
  cmd="bin/tessera train --model lenet --data $data --epochs 10 --seed 1 --device cuda --no-pin-memory"
  { header "$cmd"; timeout "$limit_lenet" "$root/bin/tessera" train --model lenet --data "$data" --epochs 10 --seed 1 \
      --device cuda --no-pin-memory 2>&1; } >"$out/lenet-unpinned.log" || status=1
  grep -E 'final test accuracy' "$out/lenet-unpinned.log" | sed 's/^/lenet unpinned: /' || echo "lenet unpinned: no result"
  # The trainer's data-parallel path over NCCL, in a single-rank job.
  cmd="TESSERA_NCCL_SIZE=1 bin/tessera train --model lenet --data $data --epochs 2 --seed 1 --device cuda"
  { header "$cmd"; TESSERA_NCCL_SIZE=1 timeout "$limit_lenet" "$root/bin/tessera" train --model lenet --data "$data" \
      --epochs 2 --seed 1 --device cuda 2>&1; } >"$out/nccl.log" || status=1
  grep -E 'data parallel|final test accuracy' "$out/nccl.log" | sed 's/^/nccl: /' || echo "nccl: no result (see nccl.log)"
  # Run-to-run reproducibility: two seeded 1-epoch runs saved and compared byte for byte,
  # with the default algorithm choice and with --deterministic.
  {
    for mode in default deterministic; do
      flag=; [[ $mode == deterministic ]] && flag=--deterministic
      for run in 1 2; do
        cmd="bin/tessera train --model lenet --data $data --epochs 1 --seed 1 --device cuda $flag --save $mode-$run.h5"
        header "$cmd"
        timeout "$limit_lenet" "$root/bin/tessera" train --model lenet --data "$data" --epochs 1 --seed 1 --device cuda \
          $flag --save "$work/$mode-$run.h5" 2>&1 | tail -2
      done
      # Compared by datasets (python3 with h5py and NumPy), which also measures how far
      # apart they are (bundles up to edfdd99 also wrote HDF5's time stamps).
      python3 - "$mode" "$work/$mode-1.h5" "$work/$mode-2.h5" <<'PY' || echo "$mode: cannot compare (python3 with h5py and numpy?)"
import sys, h5py, numpy as np
def arrays(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, v: out.__setitem__(name, v[()]) if isinstance(v, h5py.Dataset) else None)
    return out
a, b = arrays(sys.argv[2]), arrays(sys.argv[3])
differ = [k for k in a if k not in b or not np.array_equal(a[k], b[k])]
if not differ and a.keys() == b.keys():
    print(f"{sys.argv[1]}: the two saved models are identical ({len(a)} datasets)")
else:
    worst = max((float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64))))
                 for k in differ if k in b and a[k].shape == b[k].shape and a[k].dtype.kind == "f"), default=float("nan"))
    print(f"{sys.argv[1]}: the two saved models differ in {len(differ)} of {len(a)} datasets (largest difference {worst:.3g})")
PY
      echo
    done
  } >"$out/determinism.log"
  grep -E 'identical|differ' "$out/determinism.log" | sed 's/^/determinism: /'
fi

# Per-layer times on the device (each layer bracketed by synchronisations).
if [[ -z ${GPU_RUN_SKIP_PROFILE:-} ]]; then
  for item in ${GPU_RUN_PROFILE:-resnet50:64}; do
    IFS=: read -r model batch <<<"$item"
    for precision in ${GPU_RUN_PROFILE_PRECISION:-fp32 bf16}; do
      depth=${GPU_RUN_PROFILE_DEPTH:-1}
      cmd="bin/tessera profile $model --device cuda --batch $batch --depth $depth --precision $precision"
      { header "$cmd"; timeout "$limit_lenet" "$root/bin/tessera" profile "$model" --device cuda --batch "$batch" \
          --depth "$depth" --precision "$precision" 2>&1; } >>"$out/profile.log" || status=1
    done
  done
  grep -E '^training step' "$out/profile.log" | sed 's/^/profile: /' || echo "profile: no result (see profile.log)"
fi

if [[ -z ${GPU_RUN_SKIP_BENCH:-} ]]; then
  filter=${GPU_RUN_BENCH_FILTER:-Gpu/}
  cmd="bin/tessera_bench --benchmark_filter=$filter --benchmark_repetitions=5"
  { header "$cmd"; timeout "$limit_bench" "$root/bin/tessera_bench" --benchmark_filter="$filter" --benchmark_repetitions=5 2>&1; } >"$out/bench.log" || status=1
fi

# Against PyTorch on the same GPU (its python3), when GPU_RUN_SIDE names the models.
if [[ -n ${GPU_RUN_SIDE:-} ]]; then
  precisions=${GPU_RUN_SIDE_PRECISION:-fp32,fp16,bf16}
  layouts=--torch-channels-last
  [[ -n ${GPU_RUN_SIDE_NCHW_ONLY:-} ]] && layouts=
  [[ -n ${GPU_RUN_SIDE_FOLD:-} ]] && layouts+=" --fold"
  cmd="python3 tools/bench/pytorch_side_by_side.py --device cuda --bench bin/tessera_bench --reps ${GPU_RUN_SIDE_REPS:-3} --models $GPU_RUN_SIDE --precision $precisions $layouts"
  # shellcheck disable=SC2086 # $layouts is one flag or none
  [[ -n ${GPU_RUN_SIDE_VARIANTS_ONLY:-} ]] || { header "$cmd"; timeout "${GPU_RUN_SIDE_LIMIT:-300}" python3 tools/bench/pytorch_side_by_side.py --device cuda \
      --bench "$root/bin/tessera_bench" --reps ${GPU_RUN_SIDE_REPS:-3} --models "$GPU_RUN_SIDE" --precision "$precisions" $layouts 2>&1; } >"$out/side.log" || status=1
  # The same under other settings of the CUDA switches: NAME:ENVIRONMENT:PRECISIONS.
  variants=()
  [[ -n ${GPU_RUN_CARRY16:-} ]] && variants+=("carry16:TESSERA_CUDA_16BIT_ACTIVATIONS=1 TESSERA_CUDA_CHANNELS_LAST=0:${GPU_RUN_VARIANT_PRECISION:-fp16,bf16}")
  [[ -n ${GPU_RUN_OFF:-} ]] && variants+=("off:TESSERA_CUDA_16BIT_ACTIVATIONS=0 TESSERA_CUDA_CHANNELS_LAST=0:${GPU_RUN_VARIANT_PRECISION:-fp16,bf16}")
  [[ -n ${GPU_RUN_FUSED_ATTENTION:-} ]] && variants+=("fused:TESSERA_CUDA_FUSED_ATTENTION=1:${GPU_RUN_VARIANT_PRECISION:-fp16,bf16}")
  for variant in "${variants[@]}"; do
    IFS=: read -r name environment vprecisions <<<"$variant"
    cmd="$environment python3 tools/bench/pytorch_side_by_side.py --device cuda --bench bin/tessera_bench --reps ${GPU_RUN_SIDE_REPS:-3} --models $GPU_RUN_SIDE --precision $vprecisions $layouts"
    # shellcheck disable=SC2086 # $environment is a list of assignments, $layouts one flag or none
    { header "$cmd"; env $environment timeout "${GPU_RUN_SIDE_LIMIT:-300}" python3 tools/bench/pytorch_side_by_side.py \
        --device cuda --bench "$root/bin/tessera_bench" --reps ${GPU_RUN_SIDE_REPS:-3} --models "$GPU_RUN_SIDE" \
        --precision "$vprecisions" $layouts 2>&1; } >"$out/side-$name.log" || status=1
  done
fi
# Where one training step's GPU time goes, kernel by kernel (Nsight Compute), for each
# WORKLOAD:MODE:PRECISION in GPU_RUN_KERNELS (say resnet50:train:bf16), on both sides.
for item in ${GPU_RUN_KERNELS:-}; do
  IFS=: read -r workload mode precision <<<"$item"
  for side in ${GPU_RUN_KERNELS_SIDES:-tessera pytorch}; do
    environment=; [[ $side == tessera ]] && environment=${GPU_RUN_KERNELS_ENV:-}
    cmd="${environment:+$environment }tools/bench/gpu_kernels.py $side --bench bin/tessera_bench --workload $workload --mode $mode --precision $precision --top 40"
    # shellcheck disable=SC2086 # $environment is a list of assignments
    { header "$cmd"; env $environment timeout "${GPU_RUN_KERNELS_LIMIT:-120}" python3 tools/bench/gpu_kernels.py "$side" \
        --bench "$root/bin/tessera_bench" --workload "$workload" --mode "$mode" --precision "$precision" --top 40 2>&1; } \
      >"$out/kernels-$workload-$mode-$precision-$side.log" || status=1
    grep -m1 'kernel time' "$out/kernels-$workload-$mode-$precision-$side.log" | sed "s/^/kernels $item $side: /"
  done
done

# The fused cuDNN forms the CUDA backend falls back from (batch norm + add + ReLU, forward
# and backward) say so once per process on stderr: count them here, so that the run's own
# output tells whether they ran.
grep -h "^tessera: cuDNN's fused" "$out"/*.log 2>/dev/null | sed 's/ for \[.*//' | sort | uniq -c | sed 's/^ */fallback: /'
echo "logs in $out${GPU_RUN_SKIP_BENCH:+ (benchmarks skipped: GPU_RUN_SKIP_BENCH)}"
# One file instead of many, for transports that bring back only a few (GPU_RUN_PACK set).
if [[ -n ${GPU_RUN_PACK:-} ]]; then
  (cd "$out" && tar -cJf gpu-run-logs.tar.xz -- *.log && rm -f -- *.log) && echo "packed into $out/gpu-run-logs.tar.xz"
fi
rm -rf "$work"
exit $status
