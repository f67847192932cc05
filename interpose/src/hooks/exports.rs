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

/// Lists each hook with its name, the name taken from the hook's own (so the two cannot
/// differ).
macro_rules! named {
    ($($module:ident :: $name:ident),* $(,)?) => {
        [$((stringify!($name), $module::$name as *mut c_void)),*]
    };
}

/// Every runtime function the library exports, with its hook.
fn table() -> [(&'static str, *mut c_void); 36] {
    named![
        sync::cudaDeviceSynchronize,
        sync::cudaStreamSynchronize,
        sync::cudaStreamSynchronize_ptsz,
        sync::cudaEventSynchronize,
        sync::cudaStreamQuery,
        sync::cudaStreamQuery_ptsz,
        sync::cudaEventQuery,
        memcpy::cudaMemcpy,
        memcpy::cudaMemcpy_ptds,
        memcpy::cudaMemcpyAsync,
        memcpy::cudaMemcpyAsync_ptsz,
        memcpy::cudaMemcpy2D,
        memcpy::cudaMemcpy2D_ptds,
        memcpy::cudaMemcpy2DAsync,
        memcpy::cudaMemcpy2DAsync_ptsz,
        memcpy::cudaMemcpy3D,
        memcpy::cudaMemcpy3D_ptds,
        memcpy::cudaMemcpy3DAsync,
        memcpy::cudaMemcpy3DAsync_ptsz,
        memcpy::cudaMemcpyToSymbol,
        memcpy::cudaMemcpyToSymbol_ptds,
        memcpy::cudaMemcpyFromSymbol,
        memcpy::cudaMemcpyFromSymbol_ptds,
        memcpy::cudaMemcpyToSymbolAsync,
        memcpy::cudaMemcpyToSymbolAsync_ptsz,
        memcpy::cudaMemcpyFromSymbolAsync,
        memcpy::cudaMemcpyFromSymbolAsync_ptsz,
        memcpy::cudaMemcpyPeer,
        memory::cudaFree,
        memory::cudaFreeHost,
        memory::cudaHostUnregister,
        memory::cudaMallocHost,
        memory::cudaHostAlloc,
        memory::cudaHostRegister,
        memory::cudaMemset,
        memory::cudaMemset_ptds,
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
