/* A stand-in for another interposer preloaded ahead of the CUDA runtime (a GPU-sharing shim,
 * a second tool): it defines cudaDeviceSynchronize, counts its calls in the file SHIM_COUNT
 * names, and forwards to the next definition. tests/attach.rs checks that `syncspy attach`
 * leaves the calls it would take to it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

int cudaDeviceSynchronize(void) {
    static int (*next)(void);
    if (!next)
        next = (int (*)(void))dlsym(RTLD_NEXT, "cudaDeviceSynchronize");
    const char *path = getenv("SHIM_COUNT");
    if (path) {
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0600);
        if (fd >= 0) {
            if (write(fd, "x", 1) != 1) {
                /* the count comes up short and the test says so */
            }
            close(fd);
        }
    }
    return next ? next() : 999;
}
