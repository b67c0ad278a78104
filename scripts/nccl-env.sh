# Sourced by the GPU session scripts: NVLink multicast off (the GPU machines forbid it: NCCL,
# PyTorch and NVSHMEM), and libnccl from PyTorch's wheel unless FLASHSAMPLE_NCCL_LIB names one.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ -z "${FLASHSAMPLE_NCCL_LIB:-}" ]; then
  FLASHSAMPLE_NCCL_LIB=$(python3 -c "import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null) &&
    export FLASHSAMPLE_NCCL_LIB
fi
