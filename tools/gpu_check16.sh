#!/usr/bin/env bash
# The 16-bit GPU checks in one call of about seven minutes, for a machine lent for a short
# while: three runs of tools/gpu_run.sh from one bundle, each packing its logs.
#
#   tools/gpu_check16.sh BUNDLE.tar.xz [OUT_DIR]      (OUT_DIR: default $OUT, else ./gpu-check16)
#
#   OUT_DIR/attention/gpu-run-logs.tar.xz   every CUDA test (CudaConsistency.*, Nccl.*: the
#       16-bit and channels-last layers, the fused batch norm, cuDNN's fused attention
#       against the CPU), then ViT-B/16 in bf16 against PyTorch's autocast without and with
#       cuDNN's fused attention (TESSERA_CUDA_FUSED_ATTENTION=1)
#   OUT_DIR/resnet/gpu-run-logs.tar.xz      ResNet-50 against PyTorch's autocast, NCHW and
#       channels_last, in bf16, fp16 and fp32 (in that order: a cut-off run keeps the
#       16-bit rows), training and inference, with each side's peak memory
#   OUT_DIR/profile/gpu-run-logs.tar.xz     per-layer times of a ResNet-50 step, batch 128,
#       in fp16 and bf16
#
# Each step has its own time limit (the side-by-sides 100 and 210 s, the profiles 70 s
# each), so one that hangs still leaves the others' logs. Exits non-zero when any run does.
set -uo pipefail

bundle=$(realpath "${1:?usage: tools/gpu_check16.sh BUNDLE.tar.xz [OUT_DIR]}") || exit 1
out=${2:-${OUT:-$PWD/gpu-check16}}
mkdir -p "$out/attention" "$out/resnet" "$out/profile" && out=$(realpath "$out") || exit 1
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1 # gpu_run.sh runs from the repository root
export GPU_RUN_PACK=1 GPU_RUN_SKIP_LENET=1 GPU_RUN_SKIP_BENCH=1 GPU_RUN_SIDE_REPS=1 GPU_RUN_LENET_LIMIT=70
status=0
# Only the runs after the first repeat one quick test: gpu_run.sh always starts with the suite.
quick=Nccl.WithoutAGpuOrNcclIsAClearError

GPU_RUN_SKIP_PROFILE=1 GPU_RUN_SUITE_FILTER='CudaConsistency.*:Nccl.*' GPU_RUN_SIDE=vit-b16 \
  GPU_RUN_SIDE_PRECISION=bf16 GPU_RUN_SIDE_NCHW_ONLY=1 GPU_RUN_FUSED_ATTENTION=1 GPU_RUN_VARIANT_PRECISION=bf16 \
  GPU_RUN_SIDE_LIMIT=100 tools/gpu_run.sh "$bundle" "" "$out/attention" || status=1

GPU_RUN_SKIP_PROFILE=1 GPU_RUN_SUITE_FILTER=$quick GPU_RUN_SIDE=resnet50 GPU_RUN_SIDE_PRECISION=bf16,fp16,fp32 \
  GPU_RUN_SIDE_LIMIT=210 tools/gpu_run.sh "$bundle" "" "$out/resnet" || status=1

GPU_RUN_SUITE_FILTER=$quick GPU_RUN_PROFILE=resnet50:128 GPU_RUN_PROFILE_PRECISION="fp16 bf16" \
  tools/gpu_run.sh "$bundle" "" "$out/profile" || status=1

exit $status
