/* The test library Python loads with ctypes: it reaches the CUDA runtime through its own
 * dynamic symbol table (DT_NEEDED libcudart.so.13, calls through the PLT), as libtorch does,
 * so an LD_PRELOADed libsyncspy.so takes the calls. ctypes releases the GIL around each call,
 * as torch does around cudaStreamSynchronize. */
#include <pthread.h>

extern int cudaStreamSynchronize(void *stream);

/* One stream synchronization, from whichever Python line called this. */
int pc_sync(void) { return cudaStreamSynchronize((void *)0); }

static void *c_thread(void *arg) {
    long n = (long)arg;
    for (long i = 0; i < n; i++) {
        if (cudaStreamSynchronize((void *)0)) break;
    }
    return (void *)0;
}

/* `n` synchronizations from a thread that has never run Python. */
int pc_c_thread(int n) {
    pthread_t t;
    if (pthread_create(&t, (void *)0, c_thread, (void *)(long)n)) return -1;
    return pthread_join(t, (void *)0);
}
