//! The GPU kernels the scenario programs launch, as CUDA C (`syncspy_kernels.cu`) and as the
//! PTX generated from it by `build-ptx.sh` (`syncspy_kernels.ptx`, checked in). Programs load
//! [`PTX`] at run time with `cudaLibraryLoadData`, so they build where no CUDA is installed and
//! run unchanged against the real runtime or the simulated one. See README.md.

/// The PTX of every kernel, NUL-terminated as `cudaLibraryLoadData` wants PTX text.
pub const PTX: &str = concat!(include_str!("../syncspy_kernels.ptx"), "\0");

/// The CUDA C source the PTX was generated from.
pub const SOURCE: &str = include_str!("../syncspy_kernels.cu");

/// Entry names, as in the PTX: `spin(u64 ns)`, `fill(f32* x, u64 n, f32 value)`,
/// `scale(f32* x, u64 n, f32 factor)`, `count_positive(const f32* x, u64 n, u32* count)`,
/// `gemm(const f32* a, const f32* b, f32* c, i32 n)`.
pub const KERNELS: [&str; 5] = ["spin", "fill", "scale", "count_positive", "gemm"];

/// `gemm` must be launched with blocks of `GEMM_TILE x GEMM_TILE` threads.
pub const GEMM_TILE: u32 = 16;

/// FNV-1a (64 bit) of `data`, as `nvrtc-ptx.py --hash` prints it; the PTX header records the
/// source's, so a stale PTX is caught.
pub fn fnv1a64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The source hash recorded in the PTX header (`// source-fnv1a64: ...`), if any.
pub fn ptx_source_hash(ptx: &str) -> Option<u64> {
    ptx.lines()
        .find_map(|l| l.strip_prefix("// source-fnv1a64: "))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptx_was_generated_from_the_current_source() {
        assert_eq!(
            ptx_source_hash(PTX),
            Some(fnv1a64(SOURCE.as_bytes())),
            "kernels/syncspy_kernels.ptx is stale: run kernels/build-ptx.sh and commit the PTX"
        );
    }

    #[test]
    fn every_kernel_is_an_entry_of_the_ptx_and_of_the_source() {
        for k in KERNELS {
            assert!(
                PTX.contains(&format!(".entry {k}(")),
                "{k} missing from the PTX"
            );
            assert!(
                SOURCE.contains(&format!("__global__ void {k}(")),
                "{k} missing from the source"
            );
        }
        assert_eq!(PTX.matches(".entry ").count(), KERNELS.len());
        assert!(SOURCE.contains(&format!("#define GEMM_TILE {GEMM_TILE}")));
        assert!(PTX.ends_with('\0') && !PTX[..PTX.len() - 1].contains('\0'));
    }

    #[test]
    fn hash_matches_the_reference_values() {
        // The FNV-1a test vectors, which nvrtc-ptx.py's implementation also gives.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
