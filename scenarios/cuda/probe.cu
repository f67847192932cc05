// A plain CUDA C++ program for the real-GPU check that `nvcc -cudart shared` programs are
// seen (and that statically linked ones, nvcc's default, are not). Known calls:
//   N × (spin kernel ~1 ms, cudaStreamSynchronize)                  → N stream_sync
//   N × cudaMemcpy H2D of 1 MiB from malloc memory                  → N memcpy_sync
//   N × cudaMemcpyAsync D2H 1 MiB into malloc memory (pageable)     → N memcpy_pageable
//   N × cudaMemcpyAsync D2H 1 MiB into cudaMallocHost memory        → N non-stalling
//   1 × cudaEventSynchronize, 1 × cudaDeviceSynchronize
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}

#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 5;
    const size_t bytes = 1 << 20;
    void *d, *pinned;
    void* pageable = malloc(bytes);
    CK(cudaMalloc(&d, bytes));
    CK(cudaMallocHost(&pinned, bytes));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    float total_ms = 0;
    for (int i = 0; i < n; i++) {
        CK(cudaEventRecord(a, s));
        spin<<<1, 1, 0, s>>>(2000000);  // ~1 ms at ~2 GHz
        CK(cudaEventRecord(b, s));
        CK(cudaStreamSynchronize(s));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        total_ms += ms;
    }
    for (int i = 0; i < n; i++) CK(cudaMemcpy(d, pageable, bytes, cudaMemcpyHostToDevice));
    for (int i = 0; i < n; i++) CK(cudaMemcpyAsync(pageable, d, bytes, cudaMemcpyDeviceToHost, s));
    for (int i = 0; i < n; i++) CK(cudaMemcpyAsync(pinned, d, bytes, cudaMemcpyDeviceToHost, s));
    CK(cudaEventRecord(a, s));
    CK(cudaEventSynchronize(a));
    CK(cudaDeviceSynchronize());
    printf("{\"program\":\"probe\",\"n\":%d,\"spin_ms_total\":%.3f}\n", n, total_ms);
    return 0;
}
