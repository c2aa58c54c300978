/*
 * runtime.h - host-side runtime helpers of the kernels: the current device's properties, looked
 * up once per device, the cluster launch, and the TMA tensor-map encoder. Host code only; runtime.hip defines them
 * (beside the backend name, error strings and device selection of radiance_gpu.h).
 */
#ifndef RADIANCE_RUNTIME_H
#define RADIANCE_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "compat.h"

/* Multiprocessor count of the current device (1 on failure, so grids stay valid). */
int rad_sm_count(void);

/* Compute capability major.minor * 10 of the current device (NVIDIA), 0 on AMD or on failure. */
int rad_device_sm(void);

/* The WMMA layout of the current device: 12 for RDNA4 (gfx12), 11 for RDNA3 (gfx11), 0 for every
 * other GPU (NVIDIA, CDNA) or on failure. */
int rad_wmma_arch(void);

/* 1 where the current device has CDNA's bf16 MFMA layout that apply_mfma.hip is built for (gfx90a,
 * gfx940-gfx942), 0 for every other GPU (NVIDIA, RDNA) or on failure. */
int rad_mfma_arch(void);

/* The current device's name (and AMD architecture) for messages; "unknown GPU" on failure. */
void rad_device_name(char *buf, size_t size);

/* Largest dynamic shared memory a block may opt in to on the current device (0 on failure). */
int rad_smem_optin(void);

/* Registers per thread of a compiled kernel (cudaFuncGetAttributes), -1 where it cannot be read
 * (AMD, or no binary for the current device). */
int rad_func_num_regs(const void *kernel);
/* The virtual architecture (e.g. 80, 90) of the device pass that made `kernel`'s code for the
 * current device, -1 where the runtime cannot say (HIP): an sm_80 build runs on an sm_90 GPU
 * through its compute_80 code, whose passes lack every sm_90 feature the GPU itself has. */
int rad_func_ptx_version(const void *kernel);

/* F(key) for the current device, looked up once per device and key in [0, KEYS) (F answers >= 0;
 * a key out of range is asked of F every time). Threads may race to fill an entry: each computes
 * the same value for the same device, so relaxed atomics suffice (the atomics only make the
 * concurrent reads and writes defined). */
template <int (*F)(int), int KEYS>
int per_device_cached(int key)
{
    static std::atomic<int> cache[64][KEYS];
    int dev = 0;
    if (key < 0 || key >= KEYS || rad_get_device(&dev) != RAD_SUCCESS || dev < 0 || dev >= 64) return F(key);
    int entry = cache[dev][key].load(std::memory_order_relaxed);
    if (entry == 0) { /* 0: not looked up yet; entries hold F(key) + 1 */
        entry = F(key) + 1;
        cache[dev][key].store(entry, std::memory_order_relaxed);
    }
    return entry - 1;
}

template <int (*F)(void)>
int ignore_key(int)
{
    return F();
}

/* F() for the current device, looked up once per device (F answers >= 0). */
template <int (*F)(void)>
int per_device_cached(void)
{
    return per_device_cached<ignore_key<F>, 1>(0);
}

/* Launches `kernel` (a __global__ function) on `stream` in clusters of cluster_x blocks along x
 * (NVIDIA sm_90: RAD_HAS_CLUSTER_LAUNCH), grid x block threads, smem bytes of dynamic shared
 * memory; args as for a kernel launch by pointer (one void * per parameter, pointing at it).
 * Returns the launch's error; elsewhere an error without launching. */
rad_error_t rad_launch_clusters(const void *kernel, unsigned grid, unsigned block, size_t smem, unsigned cluster_x,
                                rad_stream_t stream, void **args);

/* How many clusters of cluster_x blocks of `kernel`, block threads and smem bytes each, the current
 * device runs at once; 0 where it cannot say (or has no clusters). */
int rad_max_active_clusters(const void *kernel, unsigned block, size_t smem, unsigned cluster_x);

/* Describes a row-major [rows, cols] matrix of 2-byte (bf16) or 4-byte (int32) elements at base,
 * read in boxes of box_cols x box_rows, with the 128-byte swizzle that wgmma's shared-memory
 * operands use (swizzle128) or none; boxes past the end read as zeros. Returns 0 on success, -1
 * where there is no such engine or the driver refuses (the planner then takes a path without). */
int rad_tma_encode_2d(rad_tma_desc_t *desc, const void *base, int elem_bytes, uint64_t rows, uint64_t cols,
                      uint32_t box_rows, uint32_t box_cols, int swizzle128);

#endif /* RADIANCE_RUNTIME_H */
