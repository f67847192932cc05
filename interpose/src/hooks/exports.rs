//! The runtime functions this library exports, by name, for `dlsym`.
//!
//! A program that loads the CUDA runtime itself (Python's `ctypes.CDLL("libcudart.so")`,
//! NVIDIA's cuda-python bindings) and looks its functions up with `dlsym(handle, name)` gets
//! the runtime's own function, not the exported hook of the same name: symbol interposition
//! binds only references the dynamic linker resolves. Its calls were then seen only as the
//! driver calls the runtime makes, under driver names. `driver::dlsym` hands out the hook
//! below instead, when the function `dlsym` found is the very one the hook forwards to.

use std::ffi::c_void;

use super::{memcpy, memory, sync};

/// The exported hook for the runtime function `name` (`None`: not one syncspy exports).
pub fn hook(name: &[u8]) -> Option<*mut c_void> {
    // A dlsym of any other name stays one prefix test.
    if !name.starts_with(b"cuda") {
        return None;
    }
    table()
        .into_iter()
        .find(|(n, _)| n.as_bytes() == name)
        .map(|(_, f)| f)
}

/// Every runtime function the library exports, with its hook.
fn table() -> [(&'static str, *mut c_void); 36] {
    [
        (
            "cudaDeviceSynchronize",
            sync::cudaDeviceSynchronize as *mut c_void,
        ),
        (
            "cudaStreamSynchronize",
            sync::cudaStreamSynchronize as *mut c_void,
        ),
        (
            "cudaStreamSynchronize_ptsz",
            sync::cudaStreamSynchronize_ptsz as *mut c_void,
        ),
        (
            "cudaEventSynchronize",
            sync::cudaEventSynchronize as *mut c_void,
        ),
        ("cudaStreamQuery", sync::cudaStreamQuery as *mut c_void),
        (
            "cudaStreamQuery_ptsz",
            sync::cudaStreamQuery_ptsz as *mut c_void,
        ),
        ("cudaEventQuery", sync::cudaEventQuery as *mut c_void),
        ("cudaMemcpy", memcpy::cudaMemcpy as *mut c_void),
        ("cudaMemcpy_ptds", memcpy::cudaMemcpy_ptds as *mut c_void),
        ("cudaMemcpyAsync", memcpy::cudaMemcpyAsync as *mut c_void),
        (
            "cudaMemcpyAsync_ptsz",
            memcpy::cudaMemcpyAsync_ptsz as *mut c_void,
        ),
        ("cudaMemcpy2D", memcpy::cudaMemcpy2D as *mut c_void),
        (
            "cudaMemcpy2D_ptds",
            memcpy::cudaMemcpy2D_ptds as *mut c_void,
        ),
        (
            "cudaMemcpy2DAsync",
            memcpy::cudaMemcpy2DAsync as *mut c_void,
        ),
        (
            "cudaMemcpy2DAsync_ptsz",
            memcpy::cudaMemcpy2DAsync_ptsz as *mut c_void,
        ),
        ("cudaMemcpy3D", memcpy::cudaMemcpy3D as *mut c_void),
        (
            "cudaMemcpy3D_ptds",
            memcpy::cudaMemcpy3D_ptds as *mut c_void,
        ),
        (
            "cudaMemcpy3DAsync",
            memcpy::cudaMemcpy3DAsync as *mut c_void,
        ),
        (
            "cudaMemcpy3DAsync_ptsz",
            memcpy::cudaMemcpy3DAsync_ptsz as *mut c_void,
        ),
        (
            "cudaMemcpyToSymbol",
            memcpy::cudaMemcpyToSymbol as *mut c_void,
        ),
        (
            "cudaMemcpyToSymbol_ptds",
            memcpy::cudaMemcpyToSymbol_ptds as *mut c_void,
        ),
        (
            "cudaMemcpyFromSymbol",
            memcpy::cudaMemcpyFromSymbol as *mut c_void,
        ),
        (
            "cudaMemcpyFromSymbol_ptds",
            memcpy::cudaMemcpyFromSymbol_ptds as *mut c_void,
        ),
        (
            "cudaMemcpyToSymbolAsync",
            memcpy::cudaMemcpyToSymbolAsync as *mut c_void,
        ),
        (
            "cudaMemcpyToSymbolAsync_ptsz",
            memcpy::cudaMemcpyToSymbolAsync_ptsz as *mut c_void,
        ),
        (
            "cudaMemcpyFromSymbolAsync",
            memcpy::cudaMemcpyFromSymbolAsync as *mut c_void,
        ),
        (
            "cudaMemcpyFromSymbolAsync_ptsz",
            memcpy::cudaMemcpyFromSymbolAsync_ptsz as *mut c_void,
        ),
        ("cudaMemcpyPeer", memcpy::cudaMemcpyPeer as *mut c_void),
        ("cudaFree", memory::cudaFree as *mut c_void),
        ("cudaFreeHost", memory::cudaFreeHost as *mut c_void),
        (
            "cudaHostUnregister",
            memory::cudaHostUnregister as *mut c_void,
        ),
        ("cudaMallocHost", memory::cudaMallocHost as *mut c_void),
        ("cudaHostAlloc", memory::cudaHostAlloc as *mut c_void),
        ("cudaHostRegister", memory::cudaHostRegister as *mut c_void),
        ("cudaMemset", memory::cudaMemset as *mut c_void),
        ("cudaMemset_ptds", memory::cudaMemset_ptds as *mut c_void),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_has_its_own_hook_and_others_have_none() {
        let mut seen = std::collections::HashSet::new();
        for (n, f) in table() {
            assert_eq!(hook(n.as_bytes()), Some(f), "{n}");
            assert!(
                seen.insert(f as usize),
                "{n} shares a hook with another name"
            );
        }
        for other in [
            "cudaMalloc",
            "cudaLaunchKernel",
            "cuMemcpyDtoH_v2",
            "cudaMemcpyX",
            "",
        ] {
            assert!(hook(other.as_bytes()).is_none(), "{other}");
        }
    }
}
