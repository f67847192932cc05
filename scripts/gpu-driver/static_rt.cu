// A C program built with nvcc's default, the statically linked runtime (libcudart_static.a),
// and again with -cudart shared. It prints its own account: the waits it made, by kind.
// 7 blocking 1 MiB H2D cudaMemcpy (memcpy_sync); 5 cudaMemcpyAsync D2H into malloc memory
// (memcpy_pageable); 9 from cudaMallocHost memory (not stalls); 3 stream syncs; 4 event syncs;
// 1 device sync; implicit syncs: cudaMallocHost, cudaFreeHost, cudaFree.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

__global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}

int main(void) {
  const size_t n = 1 << 20;
  void *d, *pinned, *pageable = malloc(n);
  cudaStream_t s;
  cudaEvent_t e;
  cudaMalloc(&d, n);
  cudaMallocHost(&pinned, n);
  cudaStreamCreate(&s);
  cudaEventCreate(&e);
  for (int i = 0; i < 7; i++) cudaMemcpy(d, pageable, n, cudaMemcpyHostToDevice);
  for (int i = 0; i < 5; i++) cudaMemcpyAsync(pageable, d, n, cudaMemcpyDeviceToHost, s);
  for (int i = 0; i < 9; i++) cudaMemcpyAsync(pinned, d, n, cudaMemcpyDeviceToHost, s);
  for (int i = 0; i < 3; i++) { spin<<<1, 1, 0, s>>>(1000000); cudaStreamSynchronize(s); }
  for (int i = 0; i < 4; i++) { spin<<<1, 1, 0, s>>>(1000000); cudaEventRecord(e, s); cudaEventSynchronize(e); }
  cudaDeviceSynchronize();
  cudaFreeHost(pinned);
  cudaFree(d);
  printf("{\"account\":{\"memcpy_sync\":7,\"memcpy_pageable\":5,\"stream_sync\":3,"
         "\"event_sync\":4,\"device_sync\":1,\"implicit_sync\":3},\"non_stall_copies\":9}\n");
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
