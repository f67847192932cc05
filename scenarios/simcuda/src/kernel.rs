//! Kernels: libraries of PTX loaded with `cudaLibraryLoadData`, the kernels the simulator knows
//! by name (those of kernels/syncspy_kernels.cu), and what launching one does on the simulated
//! device.
//!
//! The simulator does not execute PTX. It reads the `.entry` names and parameter sizes out of
//! the text, and for each entry whose name and parameters match a model below it knows the
//! kernel's effect and cost:
//!
//! | kernel | parameters | effect | modeled work |
//! | --- | --- | --- | --- |
//! | `spin` | `u64 ns` | none | `ns` |
//! | `fill` | `f32* x, u64 n, f32 v` | `x[i] = v` | 4n bytes of device traffic |
//! | `scale` | `f32* x, u64 n, f32 a` | `x[i] *= a` | 8n bytes |
//! | `count_positive` | `const f32* x, u64 n, u32* count` | `*count += #{x[i] > 0}` | 4n bytes |
//! | `gemm` | `const f32* a, *b, f32* c, i32 n` | `c = a b` (n x n, row-major) | 2n³ FLOP |
//!
//! Durations are the launch cost plus the work at the configured rates, times the time scale
//! (`config.rs`). Results are real, computed by the CPU when the device reaches the kernel,
//! except for `gemm` with `n` above `SIMCUDA_GEMM_COMPUTE_MAX_N` (a CPU cannot keep up with a
//! GPU there): such a launch is timed but leaves `c` unchanged, and the simulator says so once
//! on stderr. A launch whose pointers do not lie inside memory the device can reach (device,
//! managed, pinned or registered) faults when it runs: the device's sticky
//! `cudaErrorIllegalAddress`, as on a GPU; a misaligned `f32`/`u32` pointer gives
//! `cudaErrorMisalignedAddress`. Kernels of one device run one at a time on its compute engine
//! (concurrent kernels are not modeled).

use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::runtime::sys::{cudaError_t, cudaKernel_t, cudaLibrary_t, dim3};

use crate::config::{Config, KernelCost};
use crate::error::CudaResult;

/// One `.entry` of a PTX text: its name and the size in bytes of each parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub name: String,
    pub params: Vec<usize>,
}

/// Size of one `.param` declaration such as `.param .u64 k_param_0`,
/// `.param .u64 .ptr .align 1 k_param_0` or `.param .align 4 .b8 k_param_1[12]`.
fn param_size(decl: &str) -> Option<usize> {
    let mut elem: Option<usize> = None;
    for token in decl.split_whitespace() {
        elem = elem.or(match token {
            ".u8" | ".s8" | ".b8" => Some(1),
            ".u16" | ".s16" | ".b16" | ".f16" => Some(2),
            ".u32" | ".s32" | ".b32" | ".f32" => Some(4),
            ".u64" | ".s64" | ".b64" | ".f64" => Some(8),
            _ => None,
        });
    }
    let elem = elem?;
    let count = match decl.split_once('[') {
        Some((_, rest)) => rest.split(']').next()?.trim().parse::<usize>().ok()?,
        None => 1,
    };
    elem.checked_mul(count)
}

/// The entries of a PTX text. `None` when the text is no PTX (no `.version`, `.target`, or a
/// malformed entry).
pub(crate) fn parse_ptx(text: &str) -> Option<Vec<Entry>> {
    // Comments may mention anything; drop them first.
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    if !code.contains(".version") || !code.contains(".target") {
        return None;
    }
    let mut entries = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find(".entry") {
        rest = &rest[at + ".entry".len()..];
        let open = rest.find('(')?;
        let name = rest[..open].trim();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_$".contains(c))
        {
            return None;
        }
        let close = rest.find(')')?;
        let params = rest[open + 1..close]
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(param_size)
            .collect::<Option<Vec<_>>>()?;
        entries.push(Entry {
            name: name.to_string(),
            params,
        });
        rest = &rest[close..];
    }
    Some(entries)
}

/// The kernels the simulator can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Model {
    Spin,
    Fill,
    Scale,
    CountPositive,
    Gemm,
}

impl Model {
    pub fn by_name(name: &str) -> Option<Self> {
        Some(match name {
            "spin" => Model::Spin,
            "fill" => Model::Fill,
            "scale" => Model::Scale,
            "count_positive" => Model::CountPositive,
            "gemm" => Model::Gemm,
            _ => return None,
        })
    }

    /// Parameter sizes the PTX entry must declare for this model to apply.
    pub fn params(self) -> &'static [usize] {
        match self {
            Model::Spin => &[8],
            Model::Fill | Model::Scale => &[8, 8, 4],
            Model::CountPositive => &[8, 8, 8],
            Model::Gemm => &[8, 8, 8, 4],
        }
    }

    /// The model of an entry, when both its name and its parameters match one.
    pub fn of(entry: &Entry) -> Option<Self> {
        Model::by_name(&entry.name).filter(|m| m.params() == entry.params.as_slice())
    }
}

/// A decoded launch: the model with its argument values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Launch {
    Spin {
        ns: u64,
    },
    Fill {
        x: usize,
        n: u64,
        value: f32,
    },
    Scale {
        x: usize,
        n: u64,
        factor: f32,
    },
    CountPositive {
        x: usize,
        n: u64,
        count: usize,
    },
    /// `rows` x `cols`: the part of `c` the launch geometry covers.
    Gemm {
        a: usize,
        b: usize,
        c: usize,
        n: usize,
        rows: usize,
        cols: usize,
    },
}

impl Launch {
    /// The kernel's name (its `.entry`), as activity records give it.
    pub fn name(&self) -> &'static std::ffi::CStr {
        match self {
            Launch::Spin { .. } => c"spin",
            Launch::Fill { .. } => c"fill",
            Launch::Scale { .. } => c"scale",
            Launch::CountPositive { .. } => c"count_positive",
            Launch::Gemm { .. } => c"gemm",
        }
    }
}

/// One memory range a launch touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Access {
    pub addr: usize,
    pub bytes: usize,
    /// Required alignment of `addr`.
    pub align: usize,
}

/// Reads argument `i` (of `size` bytes) from the `args` array of `cudaLaunchKernel`.
///
/// # Safety
/// `args` holds at least `i + 1` pointers, each to a readable value of its parameter's size.
unsafe fn arg<T: Copy>(args: *const *mut c_void, i: usize) -> CudaResult<T> {
    // SAFETY: the caller's contract.
    let p = unsafe { *args.add(i) };
    if p.is_null() {
        return Err(cudaError_t::cudaErrorInvalidValue);
    }
    // SAFETY: `p` points to the argument value (caller's contract); CUDA does not require it
    // to be aligned.
    Ok(unsafe { p.cast::<T>().read_unaligned() })
}

fn total(d: dim3) -> u64 {
    u64::from(d.x) * u64::from(d.y) * u64::from(d.z)
}

/// Checks a launch geometry as CUDA does: every dimension at least 1, at most 1024 threads per
/// block (z at most 64), grid y and z at most 65535.
pub(crate) fn check_geometry(grid: dim3, block: dim3) -> CudaResult {
    let bad = cudaError_t::cudaErrorInvalidConfiguration;
    if total(grid) == 0 || total(block) == 0 || total(block) > 1024 || block.z > 64 {
        return Err(bad);
    }
    if grid.x > i32::MAX as u32 || grid.y > 65535 || grid.z > 65535 {
        return Err(bad);
    }
    Ok(())
}

impl Launch {
    /// Decodes the arguments of a launch of `model`.
    ///
    /// # Safety
    /// `args` is null or holds one pointer per parameter of `model`, each to a readable value.
    pub unsafe fn decode(
        model: Model,
        args: *const *mut c_void,
        grid: dim3,
        block: dim3,
    ) -> CudaResult<Self> {
        if args.is_null() {
            return Err(cudaError_t::cudaErrorInvalidValue);
        }
        // SAFETY: for every `arg` below, `args` is non-null (checked) and holds one pointer per
        // parameter of `model`, each readable (the caller's contract); the indices and types
        // follow `model.params()`.
        unsafe {
            Ok(match model {
                Model::Spin => Launch::Spin { ns: arg(args, 0)? },
                Model::Fill => Launch::Fill {
                    x: arg(args, 0)?,
                    n: arg(args, 1)?,
                    value: arg(args, 2)?,
                },
                Model::Scale => Launch::Scale {
                    x: arg(args, 0)?,
                    n: arg(args, 1)?,
                    factor: arg(args, 2)?,
                },
                Model::CountPositive => Launch::CountPositive {
                    x: arg(args, 0)?,
                    n: arg(args, 1)?,
                    count: arg(args, 2)?,
                },
                Model::Gemm => {
                    let n = usize::try_from(arg::<i32>(args, 3)?).unwrap_or(0);
                    let covered = |blocks: u32, threads: u32| {
                        n.min((u64::from(blocks) * u64::from(threads)) as usize)
                    };
                    Launch::Gemm {
                        a: arg(args, 0)?,
                        b: arg(args, 1)?,
                        c: arg(args, 2)?,
                        n,
                        rows: covered(grid.y, block.y),
                        cols: covered(grid.x, block.x),
                    }
                }
            })
        }
    }

    /// The memory the kernel reads or writes. `None` when a size overflows (an illegal
    /// address on any device).
    pub fn accesses(&self) -> Option<Vec<Access>> {
        let floats = |x: usize, n: u64| -> Option<Access> {
            Some(Access {
                addr: x,
                bytes: usize::try_from(n).ok()?.checked_mul(4)?,
                align: 4,
            })
        };
        Some(match *self {
            Launch::Spin { .. } => Vec::new(),
            Launch::Fill { x, n, .. } | Launch::Scale { x, n, .. } => vec![floats(x, n)?],
            Launch::CountPositive { x, n, count } => vec![floats(x, n)?, floats(count, 1)?],
            Launch::Gemm {
                a,
                b,
                c,
                n,
                rows,
                cols,
            } => {
                if rows == 0 || cols == 0 {
                    return Some(Vec::new());
                }
                let square = n.checked_mul(n)? as u64;
                vec![floats(a, square)?, floats(b, square)?, floats(c, square)?]
            }
        })
    }

    pub fn cost(&self) -> KernelCost {
        match *self {
            Launch::Spin { ns } => KernelCost::Nanos(ns),
            Launch::Fill { n, .. } | Launch::CountPositive { n, .. } => {
                KernelCost::DeviceBytes(n.saturating_mul(4))
            }
            Launch::Scale { n, .. } => KernelCost::DeviceBytes(n.saturating_mul(8)),
            Launch::Gemm { n, .. } => KernelCost::Flops(2.0 * (n as f64).powi(3)),
        }
    }

    /// Does the kernel's work. `gemm_max_n`: larger GEMMs are not computed.
    ///
    /// # Safety
    /// Every range of [`Launch::accesses`] is valid memory, aligned as stated, that nothing
    /// else accesses while this runs (the device owns it, as on a GPU).
    pub unsafe fn run(&self, gemm_max_n: usize) {
        // SAFETY: for every call below, the ranges are valid, aligned and ours alone (the
        // caller's contract); `n` fits in usize, since `accesses` computed byte sizes from it.
        unsafe {
            match *self {
                Launch::Spin { .. } => {}
                Launch::Fill { x, n, value } => simcuda_fill(x as *mut f32, n as usize, value),
                Launch::Scale { x, n, factor } => simcuda_scale(x as *mut f32, n as usize, factor),
                Launch::CountPositive { x, n, count } => {
                    let positives = simcuda_count_positive(x as *const f32, n as usize);
                    let count = count as *mut u32;
                    // The device counter wraps like the kernel's atomicAdd.
                    count.write(count.read().wrapping_add(positives as u32));
                }
                Launch::Gemm {
                    a,
                    b,
                    c,
                    n,
                    rows,
                    cols,
                } => {
                    if n > gemm_max_n {
                        warn_gemm_not_computed(n, gemm_max_n);
                        return;
                    }
                    // Computed into a buffer first, so `c` overlapping `a` or `b` only gives
                    // a racy result, as on a GPU, never undefined behaviour here.
                    let mut product = vec![0.0f32; rows * cols];
                    simcuda_gemm(
                        a as *const f32,
                        b as *const f32,
                        product.as_mut_ptr(),
                        n,
                        rows,
                        cols,
                    );
                    let c = c as *mut f32;
                    for (r, row) in product.chunks_exact(cols).enumerate() {
                        std::ptr::copy(row.as_ptr(), c.add(r * n), cols);
                    }
                }
            }
        }
    }
}

// src/compute.c, compiled with -O2 by build.rs.
extern "C" {
    fn simcuda_fill(x: *mut f32, n: usize, value: f32);
    fn simcuda_scale(x: *mut f32, n: usize, factor: f32);
    fn simcuda_count_positive(x: *const f32, n: usize) -> u64;
    fn simcuda_gemm(
        a: *const f32,
        b: *const f32,
        out: *mut f32,
        n: usize,
        rows: usize,
        cols: usize,
    );
}

#[cold]
fn warn_gemm_not_computed(n: usize, max: usize) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    // A note, not a problem: SIMCUDA_QUIET=1 (syncspy demo sets it) leaves it out.
    let quiet = std::env::var_os("SIMCUDA_QUIET").is_some_and(|v| v == "1");
    if !quiet && !WARNED.swap(true, Ordering::Relaxed) {
        eprintln!(
            "simcuda: gemm with n = {n} is timed but not computed (above \
             SIMCUDA_GEMM_COMPUTE_MAX_N = {max}); its output is left unchanged"
        );
    }
}

/// Library handles carry this tag in their top 16 bits (non-canonical, never a real pointer).
const LIBRARY_TAG: u64 = 0x5c1b << 48;
/// Kernel handles carry this one.
const KERNEL_TAG: u64 = 0x5c4e << 48;
const TAG_MASK: u64 = 0xffff << 48;

fn untag(handle: usize, tag: u64) -> Option<u64> {
    let bits = handle as u64;
    (bits & TAG_MASK == tag).then_some(bits & !TAG_MASK)
}

#[derive(Debug)]
struct Library {
    entries: Vec<Entry>,
    /// Kernel handles handed out for this library, by entry index.
    kernels: HashMap<usize, u64>,
}

/// A kernel handle's target.
#[derive(Debug, Clone)]
pub(crate) struct Kernel {
    library: u64,
    pub entry: Entry,
    pub model: Option<Model>,
}

/// Every loaded library and the kernel handles taken from them.
#[derive(Debug, Default)]
pub(crate) struct Modules {
    libraries: HashMap<u64, Library>,
    kernels: HashMap<u64, Kernel>,
    next_id: u64,
}

impl Modules {
    /// Loads a library from `code`, which must be NUL-terminated PTX text.
    ///
    /// # Safety
    /// `code` is readable up to and including a NUL byte.
    pub unsafe fn load(&mut self, code: *const c_void) -> CudaResult<cudaLibrary_t> {
        if code.is_null() {
            return Err(cudaError_t::cudaErrorInvalidValue);
        }
        // An ELF cubin, a fat binary or a fat binary wrapper: machine code the simulator
        // cannot read.
        let mut magic = [0u8; 4];
        for (i, m) in magic.iter_mut().enumerate() {
            // SAFETY: bytes up to the first NUL are readable (caller's contract), and the loop
            // stops at it.
            *m = unsafe { code.cast::<u8>().add(i).read() };
            if *m == 0 {
                break;
            }
        }
        if [
            *b"\x7fELF",
            [0x50, 0xed, 0x55, 0xba],
            [0xb1, 0x43, 0x62, 0x46],
        ]
        .contains(&magic)
        {
            return Err(cudaError_t::cudaErrorInvalidKernelImage);
        }
        // SAFETY: the caller's contract.
        let text = unsafe { CStr::from_ptr(code.cast()) };
        let text = text
            .to_str()
            .map_err(|_| cudaError_t::cudaErrorInvalidPtx)?;
        let entries = parse_ptx(text).ok_or(cudaError_t::cudaErrorInvalidPtx)?;
        for e in &entries {
            if Model::by_name(&e.name).is_some() && Model::of(e).is_none() {
                eprintln!(
                    "simcuda: kernel {} declares parameters of {:?} bytes, the simulator's \
                     model expects {:?}: it cannot be launched",
                    e.name,
                    e.params,
                    Model::by_name(&e.name)
                        .map(Model::params)
                        .unwrap_or_default()
                );
            }
        }
        self.next_id += 1;
        let id = self.next_id;
        self.libraries.insert(
            id,
            Library {
                entries,
                kernels: HashMap::new(),
            },
        );
        Ok((LIBRARY_TAG | id) as usize as cudaLibrary_t)
    }

    fn library_id(&self, handle: cudaLibrary_t) -> CudaResult<u64> {
        untag(handle as usize, LIBRARY_TAG)
            .filter(|id| self.libraries.contains_key(id))
            .ok_or(cudaError_t::cudaErrorInvalidResourceHandle)
    }

    /// Unloads a library; its kernel handles become invalid.
    pub fn unload(&mut self, handle: cudaLibrary_t) -> CudaResult {
        let id = self.library_id(handle)?;
        self.libraries.remove(&id);
        self.kernels.retain(|_, k| k.library != id);
        Ok(())
    }

    pub fn kernel_count(&self, handle: cudaLibrary_t) -> CudaResult<usize> {
        let id = self.library_id(handle)?;
        Ok(self.libraries[&id].entries.len())
    }

    /// The handle of the kernel `name` of a library (the same handle for the same kernel).
    pub fn get_kernel(&mut self, handle: cudaLibrary_t, name: &CStr) -> CudaResult<cudaKernel_t> {
        let id = self.library_id(handle)?;
        let name = name
            .to_str()
            .map_err(|_| cudaError_t::cudaErrorSymbolNotFound)?;
        self.next_id += 1;
        let fresh = self.next_id;
        let Some(lib) = self.libraries.get_mut(&id) else {
            return Err(cudaError_t::cudaErrorInvalidResourceHandle);
        };
        let index = lib
            .entries
            .iter()
            .position(|e| e.name == name)
            .ok_or(cudaError_t::cudaErrorSymbolNotFound)?;
        let kernel = *lib.kernels.entry(index).or_insert(fresh);
        let entry = lib.entries[index].clone();
        self.kernels.entry(kernel).or_insert_with(|| Kernel {
            library: id,
            model: Model::of(&entry),
            entry,
        });
        Ok((KERNEL_TAG | kernel) as usize as cudaKernel_t)
    }

    /// The kernel a `cudaLaunchKernel` `func` argument names.
    pub fn kernel(&self, func: *const c_void) -> CudaResult<&Kernel> {
        untag(func as usize, KERNEL_TAG)
            .and_then(|id| self.kernels.get(&id))
            .ok_or(cudaError_t::cudaErrorInvalidDeviceFunction)
    }
}

/// Modeled device time of a launch.
pub(crate) fn duration_ns(config: &Config, launch: &Launch) -> u64 {
    config.kernel_ns(launch.cost())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = "//\n// Generated by NVIDIA NVVM Compiler\n.version 9.0\n.target sm_75\n\
        .address_size 64\n\n\t// .globl\tspin\n.visible .entry spin(\n\t.param .u64 spin_param_0\n)\n\
        {\n\tret;\n}\n.visible .entry gemm(\n\t.param .u64 .ptr .align 1 gemm_param_0,\n\
        \t.param .u64 gemm_param_1,\n\t.param .u64 gemm_param_2,\n\t.param .u32 gemm_param_3\n)\n\
        {\n\tret;\n}\n.entry odd(\n\t.param .align 4 .b8 odd_param_0[12],\n\t.param .f32 odd_param_1\n)\n\
        {\n\tret;\n}\n.entry none()\n{\n\tret;\n}\n";

    #[test]
    fn entries_and_parameter_sizes_come_from_the_ptx() {
        let entries = parse_ptx(PTX).unwrap();
        let got: Vec<(&str, &[usize])> = entries
            .iter()
            .map(|e| (e.name.as_str(), e.params.as_slice()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("spin", &[8][..]),
                ("gemm", &[8, 8, 8, 4][..]),
                ("odd", &[12, 4][..]),
                ("none", &[][..])
            ]
        );
        assert_eq!(Model::of(&entries[0]), Some(Model::Spin));
        assert_eq!(Model::of(&entries[1]), Some(Model::Gemm));
        assert_eq!(Model::of(&entries[2]), None);
        // A known name with other parameters has no model.
        let wrong = Entry {
            name: "fill".into(),
            params: vec![8, 8],
        };
        assert_eq!(Model::of(&wrong), None);
    }

    #[test]
    fn text_that_is_not_ptx_is_refused() {
        assert!(parse_ptx("hello").is_none());
        assert!(parse_ptx("// .version .target\n.entry x(").is_none());
        assert!(parse_ptx(".version 9.0\n.target sm_90\n.entry (\n)").is_none());
        assert!(parse_ptx(".version 9.0\n.target sm_90\n.entry k(.param .q99 p)").is_none());
        assert_eq!(parse_ptx(".version 9.0\n.target sm_90\n").unwrap(), vec![]);
    }

    #[test]
    fn geometry_follows_the_cuda_limits() {
        let d = |x, y, z| dim3 { x, y, z };
        assert!(check_geometry(d(1, 1, 1), d(1024, 1, 1)).is_ok());
        assert!(check_geometry(d(i32::MAX as u32, 65535, 65535), d(16, 16, 4)).is_ok());
        for (g, b) in [
            (d(0, 1, 1), d(1, 1, 1)),
            (d(1, 1, 1), d(1025, 1, 1)),
            (d(1, 1, 1), d(32, 32, 2)),
            (d(1, 1, 1), d(1, 1, 65)),
            (d(1, 65536, 1), d(1, 1, 1)),
        ] {
            assert_eq!(
                check_geometry(g, b),
                Err(cudaError_t::cudaErrorInvalidConfiguration)
            );
        }
    }

    #[test]
    fn kernels_compute_real_results() {
        let mut x = vec![0.0f32; 1000];
        let base = x.as_mut_ptr() as usize;
        let mut count = 5u32;
        // SAFETY: every pointer below is a live local of the right size.
        unsafe {
            Launch::Fill {
                x: base,
                n: 999,
                value: 2.0,
            }
            .run(0);
            assert!(x[..999].iter().all(|v| *v == 2.0) && x[999] == 0.0);
            Launch::Scale {
                x: base,
                n: 300,
                factor: -0.5,
            }
            .run(0);
            assert_eq!((x[299], x[300]), (-1.0, 2.0));
            Launch::CountPositive {
                x: base,
                n: 1000,
                count: &mut count as *mut u32 as usize,
            }
            .run(0);
        }
        assert_eq!(count, 5 + 699);
    }

    #[test]
    fn gemm_matches_a_reference_and_respects_the_cap() {
        let n = 5;
        let a: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 - 3.0).collect();
        let b: Vec<f32> = (0..n * n).map(|i| (i % 4) as f32 * 0.5).collect();
        let mut c = vec![-1.0f32; n * n];
        let launch = |rows, cols| Launch::Gemm {
            a: a.as_ptr() as usize,
            b: b.as_ptr() as usize,
            c: c.as_ptr() as usize,
            n,
            rows,
            cols,
        };
        // Above the cap: untouched.
        // SAFETY: the three matrices are live n x n locals.
        unsafe { launch(n, n).run(4) };
        assert!(c.iter().all(|v| *v == -1.0));
        // Only the covered part.
        // SAFETY: as above.
        unsafe { launch(2, 3).run(n) };
        assert_eq!(c[3], -1.0);
        assert_eq!(c[2 * n], -1.0);
        // SAFETY: as above.
        unsafe { launch(n, n).run(n) };
        for i in 0..n {
            for j in 0..n {
                let want: f32 = (0..n).map(|k| a[i * n + k] * b[k * n + j]).sum();
                assert_eq!(c[i * n + j], want, "c[{i}][{j}]");
            }
        }
        c.clear();
    }

    #[test]
    fn handles_are_checked() {
        let mut m = Modules::default();
        let src = format!("{PTX}\0");
        // SAFETY: NUL-terminated.
        let lib = unsafe { m.load(src.as_ptr().cast()) }.unwrap();
        assert_eq!(m.kernel_count(lib), Ok(4));
        let k = m.get_kernel(lib, c"gemm").unwrap();
        assert_eq!(
            m.get_kernel(lib, c"gemm"),
            Ok(k),
            "same kernel, same handle"
        );
        assert_eq!(
            m.get_kernel(lib, c"nope"),
            Err(cudaError_t::cudaErrorSymbolNotFound)
        );
        assert_eq!(
            m.kernel(k as *const c_void).unwrap().model,
            Some(Model::Gemm)
        );
        assert!(m.kernel(lib as *const c_void).is_err());
        m.unload(lib).unwrap();
        assert_eq!(
            m.kernel(k as *const c_void).err(),
            Some(cudaError_t::cudaErrorInvalidDeviceFunction)
        );
        assert_eq!(
            m.unload(lib),
            Err(cudaError_t::cudaErrorInvalidResourceHandle)
        );
        // SAFETY: NUL-terminated byte strings.
        unsafe {
            assert_eq!(
                m.load(c"\x7fELF".as_ptr().cast()),
                Err(cudaError_t::cudaErrorInvalidKernelImage)
            );
            assert_eq!(
                m.load(c"int main() {}".as_ptr().cast()),
                Err(cudaError_t::cudaErrorInvalidPtx)
            );
        }
    }
}
