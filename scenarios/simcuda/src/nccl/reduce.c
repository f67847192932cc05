/* The element-wise reductions of the simulated NCCL (src/nccl/reduce.rs), in C compiled with -O2
 * by build.rs whatever the Rust profile, as the kernels' work (src/compute.c): a debug build
 * spent about 20 ms on one all-reduce of 64 Ki floats among 4 ranks, on the stream's worker,
 * which delayed every collective. Loads and stores go through memcpy (buffers need not be
 * aligned); signed arithmetic wraps (done unsigned); max and min skip a NaN operand, as Rust's
 * f32::max does. Types are ncclDataType_t values; the 16-bit floats stay in Rust. The caller
 * checks that both buffers hold n elements. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum { SUM = 0, PROD = 1, MAX = 2, MIN = 3, AVG = 4 };

#define INT_LANE(T, U, NAME)                                                           \
    static void combine_##NAME(unsigned char *acc, const unsigned char *other, size_t n, \
                               int op) {                                               \
        for (size_t i = 0; i < n; i++) {                                               \
            T a, b;                                                                    \
            memcpy(&a, acc + i * sizeof(T), sizeof(T));                                \
            memcpy(&b, other + i * sizeof(T), sizeof(T));                              \
            switch (op) {                                                              \
            case PROD: a = (T)((U)a * (U)b); break;                                    \
            case MAX: a = b > a ? b : a; break;                                        \
            case MIN: a = b < a ? b : a; break;                                        \
            default: a = (T)((U)a + (U)b);                                             \
            }                                                                          \
            memcpy(acc + i * sizeof(T), &a, sizeof(T));                                \
        }                                                                              \
    }

#define FLOAT_LANE(T, NAME)                                                            \
    static void combine_##NAME(unsigned char *acc, const unsigned char *other, size_t n, \
                               int op) {                                               \
        for (size_t i = 0; i < n; i++) {                                               \
            T a, b;                                                                    \
            memcpy(&a, acc + i * sizeof(T), sizeof(T));                                \
            memcpy(&b, other + i * sizeof(T), sizeof(T));                              \
            switch (op) {                                                              \
            case PROD: a = a * b; break;                                               \
            case MAX: a = (a != a || b > a) && b == b ? b : a; break;                  \
            case MIN: a = (a != a || b < a) && b == b ? b : a; break;                  \
            default: a = a + b;                                                        \
            }                                                                          \
            memcpy(acc + i * sizeof(T), &a, sizeof(T));                                \
        }                                                                              \
    }

INT_LANE(int8_t, uint8_t, i8)
INT_LANE(uint8_t, uint8_t, u8)
INT_LANE(int32_t, uint32_t, i32)
INT_LANE(uint32_t, uint32_t, u32)
INT_LANE(int64_t, uint64_t, i64)
INT_LANE(uint64_t, uint64_t, u64)
FLOAT_LANE(float, f32)
FLOAT_LANE(double, f64)

/* acc[i] = acc[i] op other[i] for n elements of `type` (the average sums). Returns 0, or -1 for
 * a type not done here. */
int simnccl_combine(unsigned char *acc, const unsigned char *other, size_t n, int type, int op) {
    switch (type) {
    case 0: combine_i8(acc, other, n, op); return 0;
    case 1: combine_u8(acc, other, n, op); return 0;
    case 2: combine_i32(acc, other, n, op); return 0;
    case 3: combine_u32(acc, other, n, op); return 0;
    case 4: combine_i64(acc, other, n, op); return 0;
    case 5: combine_u64(acc, other, n, op); return 0;
    case 7: combine_f32(acc, other, n, op); return 0;
    case 8: combine_f64(acc, other, n, op); return 0;
    default: return -1;
    }
}

#define DIVIDE(T, W)                                                                   \
    for (size_t i = 0; i < n; i++) {                                                   \
        T a;                                                                           \
        memcpy(&a, acc + i * sizeof(T), sizeof(T));                                    \
        a = (T)((W)a / (W)ranks);                                                      \
        memcpy(acc + i * sizeof(T), &a, sizeof(T));                                    \
    }                                                                                  \
    return 0;

/* acc[i] /= ranks (the average), integers truncated toward zero. Returns 0, or -1 for a type
 * not done here. */
int simnccl_divide(unsigned char *acc, size_t n, int type, size_t ranks) {
    if (ranks == 0) ranks = 1;
    switch (type) {
    case 0: DIVIDE(int8_t, int64_t)
    case 1: DIVIDE(uint8_t, uint64_t)
    case 2: DIVIDE(int32_t, int64_t)
    case 3: DIVIDE(uint32_t, uint64_t)
    case 4: DIVIDE(int64_t, int64_t)
    case 5: DIVIDE(uint64_t, uint64_t)
    case 7: DIVIDE(float, float)
    case 8: DIVIDE(double, double)
    default: return -1;
    }
}
