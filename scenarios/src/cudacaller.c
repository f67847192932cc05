/* A shared library that calls the CUDA runtime, loaded by `cudacalls-dlopen` with
 * dlopen(RTLD_LOCAL): the way ctypes and Python extension modules bring the runtime in. */
#include <unistd.h>

typedef void (*host_fn)(void *);
extern int cudaLaunchHostFunc(void *stream, host_fn fn, void *data);
extern int cudaStreamSynchronize(void *stream);

static void sleep_us(void *us) { usleep((useconds_t)(unsigned long)us); }

/* n times: `us` microseconds of work in the legacy default stream, then wait for it.
 * Returns the first error, or 0. */
int caller_work(int n, unsigned us) {
    for (int i = 0; i < n; i++) {
        int rc = cudaLaunchHostFunc((void *)0, sleep_us, (void *)(unsigned long)us);
        if (rc) return rc;
        rc = cudaStreamSynchronize((void *)0);
        if (rc) return rc;
    }
    return 0;
}
