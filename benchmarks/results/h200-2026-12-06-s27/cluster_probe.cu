// How many clusters of 2 and of 4 blocks (512 threads, one block per SM by its shared memory) the
// GPU runs at once: a split of k over four blocks loses the SMs that clusters of 4 leave idle.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void probe_kernel(int *out)
{
    extern __shared__ int smem[];
    smem[threadIdx.x] = threadIdx.x;
    if (out) out[blockIdx.x] = smem[threadIdx.x ^ 1];
}

int main()
{
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    int optin = 0;
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
    cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
    cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    printf("%s: %d SMs, opt-in shared memory %d bytes\n", prop.name, prop.multiProcessorCount, optin);
    for (int size : {1, 2, 4, 8}) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(size * 64);
        cfg.blockDim = dim3(512);
        cfg.dynamicSmemBytes = optin;
        cudaLaunchAttribute attr;
        attr.id = cudaLaunchAttributeClusterDimension;
        attr.val.clusterDim.x = size;
        attr.val.clusterDim.y = 1;
        attr.val.clusterDim.z = 1;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        int clusters = 0;
        cudaError_t err = cudaOccupancyMaxActiveClusters(&clusters, probe_kernel, &cfg);
        printf("cluster %d: %d clusters at once, %d SMs busy (%s)\n", size, clusters, clusters * size,
               cudaGetErrorString(err));
    }
    return 0;
}
