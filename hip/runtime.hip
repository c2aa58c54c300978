/*
 * runtime.hip - host code only: the backend name, error strings and device selection of the C
 * surface (radiance_gpu.h), and the runtime helpers of runtime.h that the kernels' launchers and
 * the apply planner use.
 */
#include <stdio.h>
#include <string.h>

#include "compat.h"
#include "radiance/radiance_gpu.h"

#include "runtime.h"

#if defined(RAD_CUDA)
#include <cudaTypedefs.h> /* the driver's function types, for its entry points */
#endif

extern "C" const char *radiance_gpu_backend(void) { return RAD_BACKEND_NAME; }

extern "C" const char *radiance_gpu_error_string(int code)
{
    if (code == 0) return "no error";
    if (code == RADIANCE_GPU_EINVAL) return "invalid argument for a radiance GPU kernel";
    return rad_error_name((rad_error_t)code);
}

extern "C" int radiance_gpu_device_count(int *count)
{
    if (count == NULL) return RADIANCE_GPU_EINVAL;
    int n = 0;
    rad_error_t err = rad_get_device_count(&n);
    if (err != RAD_SUCCESS) {
        (void)rad_get_last_error(); /* a machine without a GPU is not an error state to keep */
        *count = 0;
        return (int)err;
    }
    *count = n;
    return 0;
}

extern "C" int radiance_gpu_get_device(int *device)
{
    if (device == NULL) return RADIANCE_GPU_EINVAL;
    return (int)rad_get_device(device);
}

extern "C" int radiance_gpu_set_device(int device)
{
    if (device < 0) return RADIANCE_GPU_EINVAL;
    return (int)rad_set_device(device);
}

/*
 * Whether `device` has an active primary context, without making one: 1 yes, 0 no, -1 where this
 * cannot be told (the caller then treats the device as having one, as before). On CUDA the driver's
 * cuDevicePrimaryCtxGetState, like the tensor-map encoder below, is reached through the runtime's
 * driver entry point, so that the library needs no link to libcuda.
 */
#if defined(RAD_CUDA)
namespace {
struct primary_ctx_api {
    PFN_cuDeviceGet_v2000 device_get;
    PFN_cuDevicePrimaryCtxGetState_v7000 get_state;
};

/* The driver's `symbol` with its ABI as of CUDA 12.0 (the PFN_*_v* types below), or NULL. */
void *driver_entry_point(const char *symbol)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult status;
#if CUDART_VERSION >= 12050
    const cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &status);
#else
    const cudaError_t e = cudaGetDriverEntryPoint(symbol, &fn, cudaEnableDefault, &status);
#endif
    if (e == cudaSuccess && status == cudaDriverEntryPointSuccess) return fn;
    (void)cudaGetLastError();
    return NULL;
}

primary_ctx_api lookup_primary_ctx_api(void)
{
    primary_ctx_api api;
    api.device_get = (PFN_cuDeviceGet_v2000)driver_entry_point("cuDeviceGet");
    api.get_state = (PFN_cuDevicePrimaryCtxGetState_v7000)driver_entry_point("cuDevicePrimaryCtxGetState");
    return api;
}
} // namespace
#endif

extern "C" int radiance_gpu_device_has_context(int device)
{
    if (device < 0) return -1;
    unsigned int flags = 0;
    int active = 0;
#if defined(RAD_CUDA)
    static const primary_ctx_api api = lookup_primary_ctx_api(); /* thread-safe static init */
    CUdevice dev;
    if (api.device_get == NULL || api.get_state == NULL || api.device_get(&dev, device) != CUDA_SUCCESS ||
        api.get_state(dev, &flags, &active) != CUDA_SUCCESS)
        return -1;
#else
    hipDevice_t dev;
    if (hipDeviceGet(&dev, device) != hipSuccess || hipDevicePrimaryCtxGetState(dev, &flags, &active) != hipSuccess) {
        (void)hipGetLastError();
        return -1;
    }
#endif
    return active ? 1 : 0;
}

int rad_sm_count(void)
{
    int dev = 0, count = 0;
    if (rad_get_device(&dev) != RAD_SUCCESS) return 1;
    if (rad_device_get_attribute(&count, RAD_DEV_ATTR_SM_COUNT, dev) != RAD_SUCCESS || count < 1) return 1;
    return count;
}

int rad_device_sm(void)
{
#if defined(RAD_CUDA)
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) return 0;
    return major * 10 + minor;
#else
    return 0;
#endif
}

#if defined(RAD_HIP)
/* The current device's properties into prop; false (the error cleared) where the runtime cannot
 * say */
static bool current_device_props(hipDeviceProp_t *prop)
{
    int dev = 0;
    if (hipGetDevice(&dev) != hipSuccess || hipGetDeviceProperties(prop, dev) != hipSuccess) {
        (void)hipGetLastError();
        return false;
    }
    return true;
}
#endif

int rad_wmma_arch(void)
{
#if defined(RAD_HIP)
    hipDeviceProp_t prop;
    if (!current_device_props(&prop)) return 0;
    /* "gfx1201:sramecc-:xnack-" and the like: the family is in the first digits */
    if (strncmp(prop.gcnArchName, "gfx12", 5) == 0) return 12;
    if (strncmp(prop.gcnArchName, "gfx11", 5) == 0) return 11;
    return 0;
#else
    return 0;
#endif
}

int rad_mfma_arch(void)
{
#if defined(RAD_HIP)
    hipDeviceProp_t prop;
    if (!current_device_props(&prop)) return 0;
    /* "gfx942:sramecc+:xnack-" and the like; gfx908 (MI100) has no bf16_1k MFMA, gfx950 is not built */
    static const char *const kNames[] = {"gfx90a", "gfx940", "gfx941", "gfx942"};
    for (const char *name : kNames)
        if (strncmp(prop.gcnArchName, name, strlen(name)) == 0 &&
            (prop.gcnArchName[strlen(name)] == '\0' || prop.gcnArchName[strlen(name)] == ':'))
            return 1;
    return 0;
#else
    return 0;
#endif
}

void rad_device_name(char *buf, size_t size)
{
    snprintf(buf, size, "unknown GPU");
#if defined(RAD_HIP)
    hipDeviceProp_t prop;
    if (current_device_props(&prop)) snprintf(buf, size, "%s, %s", prop.name, prop.gcnArchName);
#else
    int dev = 0;
    cudaDeviceProp prop;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
        snprintf(buf, size, "%s", prop.name);
    else
        (void)cudaGetLastError();
#endif
}

int rad_smem_optin(void)
{
    int dev = 0, v = 0;
    if (rad_get_device(&dev) != RAD_SUCCESS ||
        rad_device_get_attribute(&v, RAD_DEV_ATTR_SMEM_OPTIN, dev) != RAD_SUCCESS) {
        (void)rad_get_last_error();
        return 0;
    }
    return v;
}

#if defined(RAD_CUDA)
namespace {
/* One field of a kernel's cudaFuncAttributes, -1 where they cannot be read */
int func_attribute(const void *kernel, int cudaFuncAttributes::*field)
{
    cudaFuncAttributes attr;
    if (cudaFuncGetAttributes(&attr, kernel) == cudaSuccess) return attr.*field;
    (void)cudaGetLastError();
    return -1;
}
} // namespace

int rad_func_num_regs(const void *kernel) { return func_attribute(kernel, &cudaFuncAttributes::numRegs); }
int rad_func_ptx_version(const void *kernel) { return func_attribute(kernel, &cudaFuncAttributes::ptxVersion); }
#else
int rad_func_num_regs(const void *) { return -1; }
int rad_func_ptx_version(const void *) { return -1; }
#endif

#if defined(RAD_HAS_CLUSTER_LAUNCH)
namespace {
cudaLaunchConfig_t cluster_config(unsigned grid, unsigned block, size_t smem, unsigned cluster_x, rad_stream_t stream,
                                  cudaLaunchAttribute *attr)
{
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = cluster_x;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}
} // namespace

rad_error_t rad_launch_clusters(const void *kernel, unsigned grid, unsigned block, size_t smem, unsigned cluster_x,
                                rad_stream_t stream, void **args)
{
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t cfg = cluster_config(grid, block, smem, cluster_x, stream, attr);
    return cudaLaunchKernelExC(&cfg, kernel, args);
}

int rad_max_active_clusters(const void *kernel, unsigned block, size_t smem, unsigned cluster_x)
{
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t cfg = cluster_config(cluster_x, block, smem, cluster_x, NULL, attr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return clusters;
}
#else
rad_error_t rad_launch_clusters(const void *, unsigned, unsigned, size_t, unsigned, rad_stream_t, void **)
{
    return hipErrorNotSupported;
}

int rad_max_active_clusters(const void *, unsigned, size_t, unsigned) { return 0; }
#endif

#if defined(RAD_HAS_TMA_ENCODE)
int rad_tma_encode_2d(rad_tma_desc_t *desc, const void *base, int elem_bytes, uint64_t rows, uint64_t cols,
                      uint32_t box_rows, uint32_t box_cols, int swizzle128)
{
    static const PFN_cuTensorMapEncodeTiled_v12000 encode =
        (PFN_cuTensorMapEncodeTiled_v12000)driver_entry_point("cuTensorMapEncodeTiled"); /* thread-safe init */
    if (encode == NULL || (elem_bytes != 2 && elem_bytes != 4)) return -1;
    const cuuint64_t dims[2] = {cols, rows};
    const cuuint64_t strides[1] = {cols * (cuuint64_t)elem_bytes};
    const cuuint32_t box[2] = {box_cols, box_rows};
    const cuuint32_t elem_strides[2] = {1, 1};
    const CUresult r = encode(desc, elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_INT32,
                              2, (void *)base, dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? 0 : -1;
}
#else
int rad_tma_encode_2d(rad_tma_desc_t *desc, const void *, int, uint64_t, uint64_t, uint32_t, uint32_t, int)
{
    memset(desc, 0, sizeof *desc);
    return -1;
}
#endif
