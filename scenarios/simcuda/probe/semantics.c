/*
 * Prints how a CUDA runtime behaves for the cases simcuda models: error codes of misuse,
 * pointer attributes, and which calls block the host for how long.
 *
 * Built without CUDA's headers (plain C declarations below), so the same source runs against
 * the real libcudart.so.13 on a GPU machine and against the simulator:
 *   real: gcc semantics.c -o probe -L$CUDA/lib64 -lcudart -lpthread
 *   sim : gcc semantics.c -o probe -L<dir with libcudart.so -> libsimcudart.so> -lcudart -lpthread
 * Each line is "key value"; diff the two outputs (timings in ms differ by nature).
 * h100-cuda13.0.txt is its output on an H100 with CUDA 13.0; tests/probe.rs compares the
 * simulator's output with it.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
struct attrs {
    int type;
    int device;
    void *devicePointer;
    void *hostPointer;
    long reserved[8];
};
enum { H2H = 0, H2D = 1, D2H = 2, D2D = 3, DEF = 4 };

cudaError_t cudaGetDeviceCount(int *);
cudaError_t cudaSetDevice(int);
cudaError_t cudaRuntimeGetVersion(int *);
cudaError_t cudaDriverGetVersion(int *);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorName(cudaError_t);
const char *cudaGetErrorString(cudaError_t);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaMallocManaged(void **, size_t, unsigned);
cudaError_t cudaMallocHost(void **, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaFreeHost(void *);
cudaError_t cudaHostRegister(void *, size_t, unsigned);
cudaError_t cudaHostUnregister(void *);
cudaError_t cudaHostGetDevicePointer(void **, void *, unsigned);
cudaError_t cudaPointerGetAttributes(struct attrs *, const void *);
cudaError_t cudaMemcpy(void *, const void *, size_t, int);
cudaError_t cudaMemcpyAsync(void *, const void *, size_t, int, cudaStream_t);
cudaError_t cudaMemcpy2D(void *, size_t, const void *, size_t, size_t, size_t, int);
cudaError_t cudaMemcpyPeer(void *, int, const void *, int, size_t);
cudaError_t cudaHostAlloc(void **, size_t, unsigned);
cudaError_t cudaGetDevice(int *);
cudaError_t cudaMemcpyToSymbol(const void *, const void *, size_t, size_t, int);
cudaError_t cudaMemset(void *, int, size_t);
cudaError_t cudaMemsetAsync(void *, int, size_t, cudaStream_t);
cudaError_t cudaStreamCreate(cudaStream_t *);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *, unsigned);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamQuery(cudaStream_t);
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned);
cudaError_t cudaEventCreate(cudaEvent_t *);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *, unsigned);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventQuery(cudaEvent_t);
cudaError_t cudaEventElapsedTime(float *, cudaEvent_t, cudaEvent_t);
cudaError_t cudaEventDestroy(cudaEvent_t);
cudaError_t cudaLaunchHostFunc(cudaStream_t, void (*)(void *), void *);

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
static void sleep_us(void *arg) { usleep((useconds_t)(uintptr_t)arg); }
static void sleep_host_fn(cudaStream_t s, unsigned us) {
    cudaLaunchHostFunc(s, sleep_us, (void *)(uintptr_t)us);
}
static void attrs_line(const char *what, const void *p) {
    struct attrs a;
    memset(&a, 0x5a, sizeof a);
    cudaError_t rc = cudaPointerGetAttributes(&a, p);
    printf("attrs.%s rc=%d type=%d device=%d dev_is_p=%d host_is_p=%d dev_null=%d host_null=%d\n",
           what, rc, a.type, a.device, a.devicePointer == p, a.hostPointer == p,
           a.devicePointer == NULL, a.hostPointer == NULL);
    cudaGetLastError();
}
#define RC(name, call)                                                   \
    do {                                                                 \
        cudaError_t rc_ = (call);                                        \
        printf("%s %d %s\n", name, rc_, cudaGetErrorName(rc_));          \
        cudaGetLastError();                                              \
    } while (0)
/* How long a call blocks the host when a 30 ms host function is queued before it. */
#define BLOCK_MS(name, stream, call)                                     \
    do {                                                                 \
        sleep_host_fn((stream), 30000);                                  \
        double t0_ = now_ms();                                           \
        cudaError_t rc_ = (call);                                        \
        double dt_ = now_ms() - t0_;                                     \
        cudaDeviceSynchronize();                                         \
        printf("block.%s rc=%d blocked=%s (%.2f ms)\n", name, rc_,       \
               dt_ > 20.0 ? "yes" : "no", dt_);                          \
    } while (0)

int main(void) {
    int n = -1, v = -1;
    RC("getDeviceCount", cudaGetDeviceCount(&n));
    printf("deviceCount %d\n", n);
    cudaRuntimeGetVersion(&v);
    printf("runtimeVersion %d\n", v);
    RC("setDevice(99)", cudaSetDevice(99));
    cudaSetDevice(99);
    printf("lastError.peek %d\n", cudaPeekAtLastError());
    printf("lastError.get %d\n", cudaGetLastError());
    printf("lastError.after %d\n", cudaGetLastError());
    printf("errorName(12345) %s\n", cudaGetErrorName(12345));
    printf("errorString(12345) %s\n", cudaGetErrorString(12345));
    printf("errorString(1) %s\n", cudaGetErrorString(1));

    void *d = (void *)1, *pinned = NULL, *managed = NULL, *z = (void *)1;
    RC("malloc(0)", cudaMalloc(&z, 0));
    printf("malloc(0).ptr_null %d\n", z == NULL);
    RC("mallocManaged(0)", cudaMallocManaged(&z, 0, 1));
    RC("mallocManaged(flags=0)", cudaMallocManaged(&z, 64, 0));
    size_t big = 64u << 20;
    cudaMalloc(&d, big);
    cudaMallocHost(&pinned, big);
    cudaMallocManaged(&managed, 4096, 1);
    char *pageable = malloc(big);
    memset(pageable, 1, big);
    char *reg = aligned_alloc(4096, 1 << 20);
    RC("hostRegister", cudaHostRegister(reg, 1 << 20, 0));
    RC("hostRegister.again", cudaHostRegister(reg, 1 << 20, 0));
    RC("hostRegister.interior", cudaHostRegister(reg + 4096, 4096, 0));
    RC("hostUnregister.pageable", cudaHostUnregister(pageable));
    int stack_var = 0;
    attrs_line("stack", &stack_var);
    attrs_line("null", NULL);
    attrs_line("device", d);
    attrs_line("device+100", (char *)d + 100);
    attrs_line("pinned", pinned);
    attrs_line("pinned+100", (char *)pinned + 100);
    attrs_line("registered", reg);
    attrs_line("managed", managed);
    RC("pointerGetAttributes(NULL attrs)", cudaPointerGetAttributes(NULL, d));
    void *dp = NULL;
    RC("hostGetDevicePointer.pinned", cudaHostGetDevicePointer(&dp, pinned, 0));
    printf("hostGetDevicePointer.same %d\n", dp == pinned);
    RC("hostGetDevicePointer.pageable", cudaHostGetDevicePointer(&dp, pageable, 0));
    RC("hostGetDevicePointer.flags", cudaHostGetDevicePointer(&dp, pinned, 1));

    RC("free(pageable)", cudaFree(pageable));
    RC("free(device+8)", cudaFree((char *)d + 8));
    RC("free(NULL)", cudaFree(NULL));
    RC("freeHost(NULL)", cudaFreeHost(NULL));
    RC("freeHost(pageable)", cudaFreeHost(pageable));
    RC("freeHost(device)", cudaFreeHost(d));
    RC("memcpy.kind7", cudaMemcpy(d, pageable, 16, 7));
    RC("memcpy.count0", cudaMemcpy(d, pageable, 0, H2D));
    RC("memcpy.h2d_to_pageable", cudaMemcpy(pageable, pageable + 64, 16, H2D));
    RC("memcpy.d2h_from_pageable", cudaMemcpy(pageable, pageable + 64, 16, D2H));
    RC("memcpy.h2d_overrun", cudaMemcpy((char *)d + big - 8, pageable, 16, H2D));
    RC("memcpy.null", cudaMemcpy(NULL, pageable, 16, H2D));
    RC("memcpy.default_h2h", cudaMemcpy(pageable, pageable + 64, 16, DEF));
    RC("memcpyToSymbol(malloc ptr)", cudaMemcpyToSymbol(d, pageable, 16, 0, H2D));
    RC("memset.pageable", cudaMemset(pageable, 0, 16));
    RC("memset.pinned", cudaMemset(pinned, 0, 16));
    RC("memset.overrun", cudaMemset((char *)d + big - 8, 0, 16));
    RC("memset.count0_pageable", cudaMemset(pageable, 0, 0));
    RC("memcpy.count0_null", cudaMemcpy(NULL, NULL, 0, H2D));
    RC("memcpy2D.width_over_pitch", cudaMemcpy2D(d, 16, pageable, 64, 32, 2, H2D));
    RC("free(pinned)", cudaFree(pinned));
    RC("setDevice(-1)", cudaSetDevice(-1));
    RC("getDevice(NULL)", cudaGetDevice(NULL));
    RC("hostAlloc.flags8", cudaHostAlloc(&z, 64, 8));
    z = (void *)1;
    RC("mallocHost(0)", cudaMallocHost(&z, 0));
    printf("mallocHost(0).ptr_null %d\n", z == NULL);

    cudaStream_t s1, s2, nb;
    RC("streamCreateWithFlags(7)", cudaStreamCreateWithFlags(&s1, 7));
    cudaStreamCreate(&s1);
    cudaStreamCreate(&s2);
    cudaStreamCreateWithFlags(&nb, 1);
    RC("streamDestroy(0)", cudaStreamDestroy(0));
    RC("streamQuery(0)", cudaStreamQuery(0));
    RC("launchHostFunc(NULL)", cudaLaunchHostFunc(s1, NULL, NULL));
    cudaEvent_t e1, e2, notiming;
    RC("eventCreateWithFlags(64)", cudaEventCreateWithFlags(&e1, 64));
    cudaEventCreate(&e1);
    cudaEventCreate(&e2);
    cudaEventCreateWithFlags(&notiming, 2);
    float ms = -1;
    RC("eventQuery.unrecorded", cudaEventQuery(e1));
    RC("eventSynchronize.unrecorded", cudaEventSynchronize(e1));
    RC("streamWaitEvent.unrecorded", cudaStreamWaitEvent(s1, e1, 0));
    RC("streamWaitEvent.flags2", cudaStreamWaitEvent(s1, e1, 2));
    RC("elapsed.unrecorded", cudaEventElapsedTime(&ms, e1, e2));
    cudaEventRecord(e1, s1);
    cudaEventRecord(notiming, s1);
    cudaStreamSynchronize(s1);
    RC("elapsed.disableTiming", cudaEventElapsedTime(&ms, e1, notiming));
    RC("elapsed.nullMs", cudaEventElapsedTime(NULL, e1, e1));
    sleep_host_fn(s1, 30000);
    RC("streamQuery.busy", cudaStreamQuery(s1));
    printf("lastError.afterNotReady %d\n", cudaGetLastError());
    cudaEventRecord(e2, s1);
    RC("eventQuery.pending", cudaEventQuery(e2));
    RC("elapsed.pending", cudaEventElapsedTime(&ms, e1, e2));
    cudaEventSynchronize(e2);
    cudaEventElapsedTime(&ms, e1, e2);
    printf("elapsed.hostfn30 %s (%.2f ms)\n", ms >= 29.0 && ms < 60.0 ? "ok" : "off", ms);

    /* Two 20 ms host functions on two streams: overlap or not. */
    double t0 = now_ms();
    sleep_host_fn(s1, 20000);
    sleep_host_fn(s2, 20000);
    cudaStreamSynchronize(s1);
    cudaStreamSynchronize(s2);
    double dt = now_ms() - t0;
    printf("hostfn.two_streams %s (%.2f ms)\n", dt < 35.0 ? "overlap" : "serial", dt);

    /* Legacy default stream vs blocking and non-blocking streams. */
    sleep_host_fn(s1, 30000);
    t0 = now_ms();
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    dt = now_ms() - t0;
    printf("legacy.waits_blocking %s (%.2f ms)\n", dt > 20.0 ? "yes" : "no", dt);
    cudaDeviceSynchronize();
    sleep_host_fn(nb, 30000);
    t0 = now_ms();
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    dt = now_ms() - t0;
    printf("legacy.waits_nonblocking %s (%.2f ms)\n", dt > 20.0 ? "yes" : "no", dt);
    cudaDeviceSynchronize();
    sleep_host_fn(0, 30000);
    t0 = now_ms();
    cudaEventRecord(e1, s1);
    cudaEventSynchronize(e1);
    dt = now_ms() - t0;
    printf("blocking.waits_legacy %s (%.2f ms)\n", dt > 20.0 ? "yes" : "no", dt);
    cudaDeviceSynchronize();
    sleep_host_fn(s1, 30000);
    RC("legacy.query_while_blocking_busy", cudaStreamQuery(0));
    t0 = now_ms();
    cudaStreamSynchronize(0);
    dt = now_ms() - t0;
    printf("legacy.sync_waits_blocking %s (%.2f ms)\n", dt > 20.0 ? "yes" : "no", dt);
    cudaDeviceSynchronize();
    sleep_host_fn((cudaStream_t)2, 30000);
    t0 = now_ms();
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    dt = now_ms() - t0;
    printf("legacy.waits_per_thread %s (%.2f ms)\n", dt > 20.0 ? "yes" : "no", dt);
    cudaDeviceSynchronize();
    {
        cudaStream_t s3;
        cudaStreamCreate(&s3);
        sleep_host_fn(s3, 30000);
        t0 = now_ms();
        cudaError_t rc = cudaStreamDestroy(s3);
        dt = now_ms() - t0;
        printf("streamDestroy.pending rc=%d blocked=%s (%.2f ms)\n", rc, dt > 20.0 ? "yes" : "no", dt);
        cudaDeviceSynchronize();
    }
    /* A host function does not hold up a copy in another stream. */
    sleep_host_fn(s1, 30000);
    t0 = now_ms();
    cudaMemcpyAsync(d, pinned, 1 << 20, H2D, s2);
    cudaStreamSynchronize(s2);
    dt = now_ms() - t0;
    printf("overlap.hostfn_and_copy %s (%.2f ms)\n", dt < 20.0 ? "yes" : "no", dt);
    cudaDeviceSynchronize();

    BLOCK_MS("memcpyAsync.h2d_pinned", s1, cudaMemcpyAsync(d, pinned, 1 << 20, H2D, s1));
    BLOCK_MS("memcpyAsync.d2h_pinned", s1, cudaMemcpyAsync(pinned, d, 1 << 20, D2H, s1));
    BLOCK_MS("memcpyAsync.h2d_pageable", s1, cudaMemcpyAsync(d, pageable, 1 << 20, H2D, s1));
    BLOCK_MS("memcpyAsync.h2d_pageable_small", s1, cudaMemcpyAsync(d, pageable, 4096, H2D, s1));
    BLOCK_MS("memcpyAsync.d2h_pageable", s1, cudaMemcpyAsync(pageable, d, 1 << 20, D2H, s1));
    BLOCK_MS("memcpyAsync.d2d", s1, cudaMemcpyAsync(d, (char *)d + (1 << 20), 1 << 20, D2D, s1));
    BLOCK_MS("memcpyAsync.h2h_pageable", s1, cudaMemcpyAsync(pageable, pageable + (1 << 20), 4096, H2H, s1));
    BLOCK_MS("memcpyAsync.managed_h2d", s1, cudaMemcpyAsync(managed, pinned, 4096, H2D, s1));
    BLOCK_MS("memcpy.h2d_pinned", 0, cudaMemcpy(d, pinned, 1 << 20, H2D));
    BLOCK_MS("memcpy.h2d_pageable", 0, cudaMemcpy(d, pageable, 1 << 20, H2D));
    BLOCK_MS("memcpy.d2h_pinned", 0, cudaMemcpy(pinned, d, 1 << 20, D2H));
    BLOCK_MS("memcpy.d2d", 0, cudaMemcpy(d, (char *)d + (1 << 20), 1 << 20, D2D));
    BLOCK_MS("memcpyPeer.same_device", 0, cudaMemcpyPeer(d, 0, (char *)d + (1 << 20), 0, 1 << 20));
    BLOCK_MS("memcpy.h2d_nonblocking_pending", nb, cudaMemcpy(d, pinned, 1 << 20, H2D));
    BLOCK_MS("memset.device", 0, cudaMemset(d, 0, 1 << 20));
    BLOCK_MS("memset.pinned", 0, cudaMemset(pinned, 0, 4096));
    BLOCK_MS("memset.managed", 0, cudaMemset(managed, 0, 4096));
    BLOCK_MS("memsetAsync.pinned", s1, cudaMemsetAsync(pinned, 0, 4096, s1));
    void *tmp = NULL;
    BLOCK_MS("malloc", nb, cudaMalloc(&tmp, 1 << 20));
    BLOCK_MS("free", nb, cudaFree(tmp));
    BLOCK_MS("free(NULL)", nb, cudaFree(NULL));
    BLOCK_MS("mallocHost", nb, cudaMallocHost(&tmp, 1 << 20));
    BLOCK_MS("freeHost", nb, cudaFreeHost(tmp));
    BLOCK_MS("hostRegister", nb, cudaHostRegister(pageable, 1 << 20, 0));
    BLOCK_MS("hostUnregister", nb, cudaHostUnregister(pageable));
    BLOCK_MS("eventCreate", nb, cudaEventCreate(&e2));
    BLOCK_MS("streamCreate", nb, cudaStreamCreate(&s2));

    /* Copy rates as seen by events, 64 MiB each. */
    struct { const char *name; void *dst; const void *src; int kind; } rates[] = {
        {"h2d_pinned", d, pinned, H2D},     {"d2h_pinned", pinned, d, D2H},
        {"h2d_pageable", d, pageable, H2D}, {"d2h_pageable", pageable, d, D2H},
        {"d2d", d, (char *)d + (big / 2), D2D},
    };
    for (unsigned i = 0; i < sizeof rates / sizeof rates[0]; i++) {
        size_t bytes = rates[i].kind == D2D ? big / 2 : big;
        cudaMemcpy(rates[i].dst, rates[i].src, bytes, rates[i].kind);
        cudaEventRecord(e1, s1);
        cudaMemcpyAsync(rates[i].dst, rates[i].src, bytes, rates[i].kind, s1);
        cudaEventRecord(e2, s1);
        cudaEventSynchronize(e2);
        cudaEventElapsedTime(&ms, e1, e2);
        printf("rate.%s %.1f GB/s\n", rates[i].name, bytes / (ms * 1e6));
    }
    /* Pageable H2D async copies are staged: how much fits before the call waits for the stream. */
    size_t sizes[] = {64u << 10, 1u << 20, 2u << 20, 4u << 20, 8u << 20, 16u << 20, 64u << 20};
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        cudaDeviceSynchronize();
        sleep_host_fn(s1, 30000);
        double t = now_ms();
        cudaMemcpyAsync(d, pageable, sizes[i], H2D, s1);
        double dt = now_ms() - t;
        printf("staging.h2d_pageable_%zuKiB blocked=%s (%.2f ms)\n", sizes[i] >> 10,
               dt > 20.0 ? "yes" : "no", dt);
    }
    cudaDeviceSynchronize();
    sleep_host_fn(s1, 30000);
    int copies = 0;
    for (; copies < 256; copies++) {
        double t = now_ms();
        cudaMemcpyAsync((char *)d + (copies % 32) * (1 << 20), pageable, 1 << 20, H2D, s1);
        if (now_ms() - t > 10.0) break;
    }
    printf("staging.h2d_pageable_1MiB_copies_before_block %d\n", copies);
    cudaDeviceSynchronize();
    {
        double t = now_ms();
        cudaMemcpyAsync(d, pageable, 64u << 20, H2D, s1);
        double call = now_ms() - t;
        cudaStreamSynchronize(s1);
        double total = now_ms() - t;
        printf("staging.h2d_pageable_64MiB_idle call_waits_for_copy=%s (%.2f of %.2f ms)\n",
               call > 0.9 * total ? "yes" : "no", call, total);
    }
    BLOCK_MS("memcpyAsync.d2h_pageable_small", s1, cudaMemcpyAsync(pageable, d, 4096, D2H, s1));
    /* Is a pageable source read during the call (staged), or later? */
    {
        char *src = malloc(4096), *back = malloc(4096);
        memset(src, 7, 4096);
        sleep_host_fn(s1, 30000);
        cudaMemcpyAsync(d, src, 4096, H2D, s1);
        memset(src, 9, 4096);
        cudaMemcpy(back, d, 4096, D2H);
        printf("staging.snapshot_at_call %s\n", back[0] == 7 ? "yes" : "no");
        free(src);
        free(back);
    }
    RC("deviceSynchronize", cudaDeviceSynchronize());

    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int cn = -1;
        cudaError_t rc = cudaGetDeviceCount(&cn);
        void *cp = NULL;
        cudaError_t rc2 = cudaMalloc(&cp, 64);
        printf("fork.child getDeviceCount=%d malloc=%d\n", rc, rc2);
        fflush(stdout);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    /* Exit with work pending: must not hang. */
    sleep_host_fn(s1, 200000);
    printf("exit.pending\n");
    return 0;
}
