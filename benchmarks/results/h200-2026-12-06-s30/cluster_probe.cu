// How many clusters of 1-8 blocks the GPU runs at once, for a block of the folding kernel's size
// (512 threads, 227 KB of dynamic shared memory, one block per SM): cudaOccupancyMaxActiveClusters.
// nvcc -arch=sm_90a -o cluster_probe cluster_probe.cu && ./cluster_probe
#include <cstdio>
#include <cuda_runtime.h>

__global__ void probe(float *out)
{
    extern __shared__ float s[];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    if (out != nullptr) out[blockIdx.x] = s[0];
}

int main()
{
    const int smem = 227 * 1024;
    cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
    for (int c = 1; c <= 8; c++) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = c;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.gridDim = dim3(c);
        cfg.blockDim = dim3(512);
        cfg.dynamicSmemBytes = smem;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        int n = -1;
        cudaError_t e = cudaOccupancyMaxActiveClusters(&n, probe, &cfg);
        printf("clusters of %d: %d at once (%d blocks)%s%s\n", c, n, n * c, e == cudaSuccess ? "" : " error ",
               e == cudaSuccess ? "" : cudaGetErrorString(e));
    }
    return 0;
}
