/* A C program against the CUDA 12 runtime (libcudart.so.12, e.g. from the
 * nvidia-cuda-runtime-cu12 wheel), for scripts/gpu-cu12.sh: N blocking copies each way, N
 * stream syncs, N device syncs, one pageable async copy each step; it prints its own account.
 * Declarations by hand: the CUDA 12 headers need not be installed. */
#include <stdio.h>
#include <stdlib.h>
extern int cudaMalloc(void **p, size_t n);
extern int cudaFree(void *p);
extern int cudaMemcpy(void *d, const void *s, size_t n, int kind);
extern int cudaMemcpyAsync(void *d, const void *s, size_t n, int kind, void *stream);
extern int cudaStreamSynchronize(void *stream);
extern int cudaDeviceSynchronize(void);
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    size_t bytes = 1 << 20;
    void *d = 0;
    char *h = malloc(bytes);
    if (cudaMalloc(&d, bytes)) { fprintf(stderr, "cudaMalloc failed\n"); return 1; }
    for (int i = 0; i < n; i++) {
        cudaMemcpy(d, h, bytes, 1);            /* H2D, blocking */
        cudaMemcpy(h, d, bytes, 2);            /* D2H, blocking */
        cudaMemcpyAsync(h, d, bytes, 2, 0);    /* D2H into pageable memory */
        cudaStreamSynchronize(0);
        cudaDeviceSynchronize();
    }
    cudaFree(d);
    printf("{\"memcpy_sync\": %d, \"memcpy_pageable\": %d, \"stream_sync\": %d, \"device_sync\": %d, \"implicit_sync\": 1}\n",
           2 * n, n, n, n);
    return 0;
}
