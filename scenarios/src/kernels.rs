//! Loading and launching the kernels of kernels/ through the CUDA runtime API, identically
//! against the real runtime and the simulated one: `cudaLibraryLoadData` on the checked-in PTX,
//! `cudaLibraryGetKernel` per kernel, `cudaLaunchKernel` with the `cudaKernel_t` as the
//! function. Every call goes into the program's ground truth.

use std::ffi::{c_void, CString};
use std::ptr::null_mut;

use crate::cuda::*;
use crate::truth::Truth;

/// Threads per block of the element-wise kernels (a multiple of 32, as `count_positive` needs).
const BLOCK: u32 = 256;
/// Most blocks an element-wise launch uses; the kernels loop over the rest (grid-stride).
const MAX_BLOCKS: u64 = 1024;

/// The loaded library and its kernels.
#[derive(Debug)]
pub struct Kernels {
    library: cudaLibrary_t,
    spin: cudaKernel_t,
    fill: cudaKernel_t,
    scale: cudaKernel_t,
    count_positive: cudaKernel_t,
    gemm: cudaKernel_t,
}

// SAFETY: library and kernel handles are process-wide in CUDA and may be used from any thread.
unsafe impl Send for Kernels {}
// SAFETY: as above; launching through `&Kernels` from several threads is allowed by CUDA.
unsafe impl Sync for Kernels {}

fn dim(x: u32, y: u32) -> dim3 {
    dim3 { x, y, z: 1 }
}

fn blocks_for(n: u64) -> u32 {
    n.div_ceil(u64::from(BLOCK)).clamp(1, MAX_BLOCKS) as u32
}

/// A pointer to one argument value, as `cudaLaunchKernel`'s `args` array holds.
fn arg<T>(v: &mut T) -> *mut c_void {
    (v as *mut T).cast()
}

impl Kernels {
    /// Loads [`syncspy_kernels::PTX`] and looks up every kernel. Panics on failure, with the
    /// runtime's message (the programs are ground truth; a partial run would be wrong).
    pub fn load(t: &mut Truth) -> Kernels {
        let mut library = null_mut();
        let ptx = syncspy_kernels::PTX;
        // SAFETY: NUL-terminated PTX text, no options.
        let rc = t.call("cudaLibraryLoadData", 0, || unsafe {
            cudaLibraryLoadData(
                &mut library,
                ptx.as_ptr().cast(),
                null_mut(),
                null_mut(),
                0,
                null_mut(),
                null_mut(),
                0,
            )
        });
        check(rc, "cudaLibraryLoadData(kernels/syncspy_kernels.ptx)");
        let mut get = |name: &str| {
            let c = CString::new(name).expect("kernel names have no NUL");
            let mut k = null_mut();
            // SAFETY: valid out-pointer and NUL-terminated name.
            let rc = t.call("cudaLibraryGetKernel", 0, || unsafe {
                cudaLibraryGetKernel(&mut k, library, c.as_ptr())
            });
            check(rc, &format!("cudaLibraryGetKernel({name})"));
            k
        };
        Kernels {
            spin: get("spin"),
            fill: get("fill"),
            scale: get("scale"),
            count_positive: get("count_positive"),
            gemm: get("gemm"),
            library,
        }
    }

    fn launch(
        t: &mut Truth,
        kernel: cudaKernel_t,
        grid: dim3,
        block: dim3,
        args: &mut [*mut c_void],
        s: cudaStream_t,
        what: &str,
    ) {
        // SAFETY: `args` holds one pointer per kernel parameter, each to a live local of the
        // parameter's type (see the kernels' signatures in kernels/syncspy_kernels.cu).
        let rc = t.call("cudaLaunchKernel", 0, || unsafe {
            cudaLaunchKernel(
                kernel as *const c_void,
                grid,
                block,
                args.as_mut_ptr(),
                0,
                s,
            )
        });
        check(rc, what);
    }

    /// GPU work of a known length: one thread busy for `ns` nanoseconds.
    pub fn spin(&self, t: &mut Truth, s: cudaStream_t, ns: u64) {
        let mut ns = ns;
        Self::launch(
            t,
            self.spin,
            dim(1, 1),
            dim(1, 1),
            &mut [arg(&mut ns)],
            s,
            "spin",
        );
    }

    /// `x[..n] = value`.
    pub fn fill(&self, t: &mut Truth, s: cudaStream_t, x: *mut f32, n: u64, value: f32) {
        let (mut x, mut n2, mut v) = (x, n, value);
        let args = &mut [arg(&mut x), arg(&mut n2), arg(&mut v)];
        Self::launch(
            t,
            self.fill,
            dim(blocks_for(n), 1),
            dim(BLOCK, 1),
            args,
            s,
            "fill",
        );
    }

    /// `x[..n] *= factor`.
    pub fn scale(&self, t: &mut Truth, s: cudaStream_t, x: *mut f32, n: u64, factor: f32) {
        let (mut x, mut n2, mut f) = (x, n, factor);
        let args = &mut [arg(&mut x), arg(&mut n2), arg(&mut f)];
        Self::launch(
            t,
            self.scale,
            dim(blocks_for(n), 1),
            dim(BLOCK, 1),
            args,
            s,
            "scale",
        );
    }

    /// `*count += #(x[..n] > 0)` (device memory; it accumulates).
    pub fn count_positive(
        &self,
        t: &mut Truth,
        s: cudaStream_t,
        x: *const f32,
        n: u64,
        count: *mut u32,
    ) {
        let (mut x, mut n2, mut c) = (x, n, count);
        let args = &mut [arg(&mut x), arg(&mut n2), arg(&mut c)];
        let (grid, block) = (dim(blocks_for(n), 1), dim(BLOCK, 1));
        Self::launch(
            t,
            self.count_positive,
            grid,
            block,
            args,
            s,
            "count_positive",
        );
    }

    /// `c = a b` for n x n row-major matrices.
    pub fn gemm(
        &self,
        t: &mut Truth,
        s: cudaStream_t,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        n: usize,
    ) {
        let tile = syncspy_kernels::GEMM_TILE;
        let tiles = u32::try_from(n.div_ceil(tile as usize)).expect("gemm size fits a grid");
        let n32 = i32::try_from(n).expect("gemm size fits an int");
        let (mut a, mut b, mut c, mut n) = (a, b, c, n32);
        let args = &mut [arg(&mut a), arg(&mut b), arg(&mut c), arg(&mut n)];
        let (grid, block) = (dim(tiles, tiles), dim(tile, tile));
        Self::launch(t, self.gemm, grid, block, args, s, "gemm");
    }

    /// Unloads the library.
    pub fn unload(self, t: &mut Truth) {
        let lib = self.library;
        check(
            // SAFETY: the handle `load` got; no launch needs it after this.
            t.call("cudaLibraryUnload", 0, || unsafe { cudaLibraryUnload(lib) }),
            "cudaLibraryUnload",
        );
    }
}
