// read_probe.cu - how fast can the H200 read an int4 head with a given access pattern?
//
//   nvcc -O3 -arch=sm_90a benchmarks/harness/read_probe.cu -o /tmp/read_probe && /tmp/read_probe
//
// The head is n rows x rb bytes (248320 x 2560 = the packed 248320 x 5120 int4 head). Each
// kernel reads every byte once, XOR-folds it and writes one word per warp, so the time is the
// read time of that pattern. Patterns:
//   contig     a warp reads 512 contiguous bytes per load instruction (the best case)
//   rows16x64  a warp owns 16 rows and reads 64 bytes of each per step (lane g, t: rows g and
//              g + 8, bytes 16 t): the pattern of the mma stream kernel
//   rows16x512 a warp owns 16 rows and reads 512 contiguous bytes of one row per instruction
//   rows256x64 a block of 256 threads owns 256 rows, 64 bytes of each per step (4 threads per
//              row): the pattern of the pipelined wgmma kernel
// Each is run with UNROLL independent 16-byte loads per lane in flight.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        cudaError_t e = (x);                                                                       \
        if (e != cudaSuccess) {                                                                    \
            printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e));                       \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

__device__ __forceinline__ uint4 ld_stream(const void *p)
{
    uint4 v;
    asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

template <int UNROLL>
__global__ void contig(const unsigned char *p, int64_t bytes, uint32_t *out)
{
    const int64_t nwarps = (int64_t)gridDim.x * blockDim.x / 32;
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    uint32_t acc = 0;
    for (int64_t base = warp * 512 * UNROLL; base < bytes; base += nwarps * 512 * UNROLL) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) v[u] = ld_stream(p + base + 512 * u + 16 * lane);
#pragma unroll
        for (int u = 0; u < UNROLL; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x12345678u) out[warp] = acc;
}

template <int UNROLL>
__global__ void rows16x64(const unsigned char *p, int64_t n, int64_t rb, uint32_t *out)
{
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (warp * 16 >= n) return;
    const unsigned char *r0 = p + (warp * 16 + g) * rb + 16 * t, *r1 = r0 + 8 * rb;
    uint32_t acc = 0;
    for (int64_t c = 0; c < rb; c += 64 * UNROLL) {
        uint4 v[UNROLL][2];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            v[u][0] = ld_stream(r0 + c + 64 * u);
            v[u][1] = ld_stream(r1 + c + 64 * u);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) acc ^= v[u][0].x ^ v[u][0].y ^ v[u][1].z ^ v[u][1].w;
    }
    if (acc == 0x12345678u) out[warp] = acc;
}

template <int UNROLL>
__global__ void rows16x512(const unsigned char *p, int64_t n, int64_t rb, uint32_t *out)
{
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (warp * 16 >= n) return;
    const unsigned char *r = p + warp * 16 * rb + 16 * lane;
    uint32_t acc = 0;
    for (int64_t c = 0; c < rb; c += 512) {
        for (int r0 = 0; r0 < 16; r0 += UNROLL) {
            uint4 v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) v[u] = ld_stream(r + (r0 + u) * rb + c);
#pragma unroll
            for (int u = 0; u < UNROLL; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
        }
    }
    if (acc == 0x12345678u) out[warp] = acc;
}

template <int UNROLL>
__global__ void rows256x64(const unsigned char *p, int64_t n, int64_t rb, uint32_t *out)
{
    const int tid = threadIdx.x;
    const int64_t row0 = (int64_t)blockIdx.x * 256;
    uint32_t acc = 0;
    for (int64_t c = 0; c < rb; c += 64 * UNROLL) {
        uint4 v[UNROLL][4];
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int64_t row = row0 + (tid >> 2) + 64 * j;
                row = row < n ? row : n - 1;
                v[u][j] = ld_stream(p + row * rb + c + 64 * u + 16 * (tid & 3));
            }
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc ^= v[u][j].x ^ v[u][j].w;
    }
    if (acc == 0x12345678u) out[blockIdx.x] = acc;
}


// A block of 256 threads owns R rows (R / 8 per warp) and visits V contiguous bytes of each row
// per step: one load instruction covers 512 / V rows x V bytes.
template <int R, int V, int UNROLL>
__global__ void rowsRxV(const unsigned char *p, int64_t n, int64_t rb, uint32_t *out)
{
    constexpr int kRowsPerWarp = R / 8, kRowsPerLoad = 512 / V, kLoads = kRowsPerWarp / kRowsPerLoad;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t row0 = (int64_t)blockIdx.x * R + warp * kRowsPerWarp + lane / (V / 16);
    const int col = 16 * (lane % (V / 16));
    uint32_t acc = 0;
    for (int64_t c = 0; c < rb; c += (int64_t)V * UNROLL) {
        uint4 v[UNROLL][kLoads];
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
#pragma unroll
            for (int j = 0; j < kLoads; j++) {
                int64_t row = row0 + j * kRowsPerLoad;
                row = row < n ? row : n - 1;
                v[u][j] = ld_stream(p + row * rb + c + (int64_t)V * u + col);
            }
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
#pragma unroll
            for (int j = 0; j < kLoads; j++) acc ^= v[u][j].x ^ v[u][j].w;
    }
    if (acc == 0x12345678u) out[blockIdx.x] = acc;
}

template <typename F>
static float time_it(F launch)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < 3; i++) launch();
    float best = 1e30f;
    for (int rep = 0; rep < 10; rep++) {
        cudaEventRecord(a);
        launch();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        best = ms < best ? ms : best;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return best * 1000.0f;
}

int main()
{
    const int64_t n = 248320, rb = 2560, bytes = n * rb;
    unsigned char *p;
    uint32_t *out;
    CHECK(cudaMalloc(&p, bytes));
    CHECK(cudaMalloc(&out, 1 << 24));
    CHECK(cudaMemset(p, 0x5a, bytes));
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const int64_t warps16 = n / 16;
    auto report = [&](const char *name, float us) {
        printf("%-28s %8.1f us %7.0f GB/s\n", name, us, bytes / us / 1e3);
    };
    report("contig u4", time_it([&] { contig<4><<<sms * 16, 128>>>(p, bytes, out); }));
    report("contig u8", time_it([&] { contig<8><<<sms * 16, 128>>>(p, bytes, out); }));
    report("rows16x64 u4", time_it([&] { rows16x64<4><<<(unsigned)(warps16 / 4), 128>>>(p, n, rb, out); }));
    report("rows16x64 u8", time_it([&] { rows16x64<8><<<(unsigned)(warps16 / 4), 128>>>(p, n, rb, out); }));
    report("rows16x512 u4", time_it([&] { rows16x512<4><<<(unsigned)(warps16 / 4), 128>>>(p, n, rb, out); }));
    report("rows16x512 u8", time_it([&] { rows16x512<8><<<(unsigned)(warps16 / 4), 128>>>(p, n, rb, out); }));
    report("rows256x64 u2", time_it([&] { rows256x64<2><<<(unsigned)(n / 256), 256>>>(p, n, rb, out); }));
    report("rows256x64 u4", time_it([&] { rows256x64<4><<<(unsigned)(n / 256), 256>>>(p, n, rb, out); }));
#define RXV(R, V, U)                                                                               \
    report("rowsRxV R=" #R " V=" #V " u" #U,                                                         \
           time_it([&] { rowsRxV<R, V, U><<<(unsigned)((n + R - 1) / R), 256>>>(p, n, rb, out); }))
    RXV(128, 64, 4);
    RXV(128, 128, 2);
    RXV(128, 256, 2);
    RXV(128, 512, 1);
    RXV(256, 64, 2);
    RXV(256, 128, 2);
    RXV(256, 256, 1);
    RXV(256, 256, 2);
    RXV(256, 512, 1);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    cudaFree(p);
    cudaFree(out);
    return 0;
}
