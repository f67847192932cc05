// The kernels the scenario programs launch (scenarios/src/bin/scn_*.rs).
//
// Compiled to PTX by kernels/build-ptx.sh; the PTX is checked in (kernels/syncspy_kernels.ptx)
// and loaded at run time with cudaLibraryLoadData, so the scenario programs build on machines
// without CUDA. The simulated runtime (scenarios/simcuda) recognizes these kernels by name and
// models each one; keep the parameter lists in step with scenarios/simcuda/src/kernel.rs.
//
// Every kernel is extern "C" so its PTX entry has the plain name. No headers: NVRTC and nvcc
// both compile this file as it is.

// The GPU's global timer, in nanoseconds.
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Keeps the GPU busy for `ns` nanoseconds: GPU work of a known length. Launch with one block of
// one thread; other threads return at once.
extern "C" __global__ void spin(unsigned long long ns) {
    if (threadIdx.x != 0 || blockIdx.x != 0) {
        return;
    }
    unsigned long long start = global_ns();
    while (global_ns() - start < ns) {
    }
}

// x[i] = value for i < n. Any launch geometry (grid-stride loop).
extern "C" __global__ void fill(float* x, unsigned long long n, float value) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        x[i] = value;
    }
}

// x[i] *= factor for i < n. Any launch geometry (grid-stride loop).
extern "C" __global__ void scale(float* x, unsigned long long n, float factor) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        x[i] *= factor;
    }
}

// *count += the number of i < n with x[i] > 0. The count accumulates: zero it first to count
// one array. Launch with a block size that is a multiple of 32 (one warp reduces at a time).
extern "C" __global__ void count_positive(const float* x, unsigned long long n,
                                          unsigned int* count) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned int mine = 0;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        mine += x[i] > 0.0f ? 1u : 0u;
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        mine += __shfl_down_sync(0xffffffffu, mine, offset);
    }
    if ((threadIdx.x & 31) == 0 && mine != 0) {
        atomicAdd(count, mine);
    }
}

#define GEMM_TILE 16

// c = a * b for n x n row-major matrices, tiled through shared memory. Launch with blocks of
// GEMM_TILE x GEMM_TILE threads and a grid of ceil(n / GEMM_TILE) blocks in x and y.
extern "C" __global__ void gemm(const float* a, const float* b, float* c, int n) {
    __shared__ float as[GEMM_TILE][GEMM_TILE];
    __shared__ float bs[GEMM_TILE][GEMM_TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * GEMM_TILE + ty;
    int col = blockIdx.x * GEMM_TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < n; t += GEMM_TILE) {
        as[ty][tx] = (row < n && t + tx < n) ? a[(size_t)row * n + t + tx] : 0.0f;
        bs[ty][tx] = (t + ty < n && col < n) ? b[(size_t)(t + ty) * n + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < GEMM_TILE; ++k) {
            acc += as[ty][k] * bs[k][tx];
        }
        __syncthreads();
    }
    if (row < n && col < n) {
        c[(size_t)row * n + col] = acc;
    }
}
