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

/* A runtime's own worker thread (XLA's, a C++ runtime's) that makes the stalls while a Python
 * thread waits for it on a condition, as `block_until_ready` waits on a host future. */
#include <unistd.h>

static pthread_mutex_t pc_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pc_cv = PTHREAD_COND_INITIALIZER;
/* Flags Python reads and sets through `c_int.in_dll`, without leaving the interpreter (so
 * without releasing the GIL): the worker exists, it may start, it is done. */
volatile int pc_started, pc_go, pc_done;

static void *pc_worker(void *arg) {
    long n = (long)arg;
    while (!__atomic_load_n(&pc_go, __ATOMIC_ACQUIRE)) usleep(100);
    for (long i = 0; i < n; i++) {
        if (cudaStreamSynchronize((void *)0)) break;
    }
    pthread_mutex_lock(&pc_mu);
    __atomic_store_n(&pc_done, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pc_cv);
    pthread_mutex_unlock(&pc_mu);
    return (void *)0;
}

static pthread_t pc_worker_thread;

/* Starts the worker (`n` syncs) and returns at once; a `gated` worker starts its syncs only
 * once `pc_go` is set. */
int pc_worker_start(int n, int gated) {
    pc_done = 0;
    pc_go = !gated;
    int rc = pthread_create(&pc_worker_thread, (void *)0, pc_worker, (void *)(long)n);
    __atomic_store_n(&pc_started, 1, __ATOMIC_RELEASE);
    return rc;
}

/* Waits on the condition until the worker is done (ctypes released the GIL), then joins it. */
int pc_worker_wait(void) {
    pthread_mutex_lock(&pc_mu);
    while (!pc_done) pthread_cond_wait(&pc_cv, &pc_mu);
    pthread_mutex_unlock(&pc_mu);
    pc_started = 0;
    return pthread_join(pc_worker_thread, (void *)0);
}

/* Starts `n` syncs on the worker and waits for them, in one call. */
int pc_worker_run(int n) {
    if (pc_worker_start(n, 0)) return -1;
    return pc_worker_wait();
}

/* The same, the worker held until Python sets `pc_go`. */
int pc_worker_run_gated(int n) {
    if (pc_worker_start(n, 1)) return -1;
    return pc_worker_wait();
}
