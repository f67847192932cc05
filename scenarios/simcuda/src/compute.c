/* The real work of the kernels the simulator models (src/kernel.rs), in C compiled with -O2 by
 * build.rs whatever the Rust profile: a debug build of the simulator (what `cargo test` uses)
 * would otherwise spend ten times longer than a release build on every element, and work that
 * overruns its modeled time delays the simulated device. Callers check every pointer. */
#include <stddef.h>
#include <stdint.h>

void simcuda_fill(float *x, size_t n, float value) {
    for (size_t i = 0; i < n; i++) x[i] = value;
}

void simcuda_scale(float *x, size_t n, float factor) {
    for (size_t i = 0; i < n; i++) x[i] *= factor;
}

uint64_t simcuda_count_positive(const float *x, size_t n) {
    uint64_t count = 0;
    for (size_t i = 0; i < n; i++) count += x[i] > 0.0f;
    return count;
}

/* out (rows x cols, packed) = the first rows and cols of a b, for n x n row-major a and b. */
void simcuda_gemm(const float *a, const float *b, float *out, size_t n, size_t rows, size_t cols) {
    for (size_t i = 0; i < rows; i++) {
        float *o = out + i * cols;
        for (size_t j = 0; j < cols; j++) o[j] = 0.0f;
        for (size_t k = 0; k < n; k++) {
            float aik = a[i * n + k];
            const float *bk = b + k * n;
            for (size_t j = 0; j < cols; j++) o[j] += aik * bk[j];
        }
    }
}
