//! The device the calling thread works on, as its CUDA runtime (or driver) says.

use crate::real::Real;

pub(crate) static GET_DEVICE: Real = Real::new(c"cudaGetDevice");
/// The driver's `cuCtxGetDevice`, for programs with no runtime to ask (a statically linked
/// runtime, the driver API alone).
static CTX_GET_DEVICE: Real = Real::driver(c"cuCtxGetDevice");

pub(crate) fn current_device() -> i32 {
    type GetDevice = unsafe extern "C" fn(*mut i32) -> u32;
    let Some(f) = GET_DEVICE
        .get::<GetDevice>()
        .or_else(|| CTX_GET_DEVICE.get::<GetDevice>())
    else {
        return -1;
    };
    let mut d = -1;
    // SAFETY: `f` is the runtime's cudaGetDevice or the driver's cuCtxGetDevice (both resolved
    // with this signature: `CUdevice` is an `int`), whose only requirement is a valid `int`
    // out-pointer: `d` is a local.
    if unsafe { f(&mut d) } == 0 {
        d
    } else {
        -1
    }
}
