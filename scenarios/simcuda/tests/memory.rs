//! Memory: bytes really move, pointers describe themselves, misuse gets CUDA's error codes.

mod common;

use std::ffi::{c_int, c_void, CStr};

use common::*;
use cudarc::runtime::sys::{
    cudaExtent, cudaMemAttachGlobal, cudaMemcpy3DParms, cudaMemoryType, cudaPitchedPtr,
    cudaPointerAttributes, cudaPos,
};
use simcudart as sim;

fn attributes(ptr: *const c_void) -> cudaPointerAttributes {
    // SAFETY: all-zero is a valid value of this plain C struct.
    let mut attrs: cudaPointerAttributes = unsafe { std::mem::zeroed() };
    assert_eq!(
        // SAFETY: `attrs` is a local, a valid out-pointer for the call.
        unsafe { sim::cudaPointerGetAttributes(&mut attrs, ptr) },
        cudaSuccess
    );
    attrs
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

#[test]
fn host_to_device_and_back_round_trips() {
    let len = 3 << 20;
    let src = pattern(len);
    let dev = device_alloc(len);
    let dev2 = device_alloc(len);
    let pinned = pinned_alloc(len);
    let mut back = vec![0u8; len];
    // SAFETY: every pointer passed covers the byte count given: `src` and `back` are Vecs of `len`
    // bytes, `dev`, `dev2` and `pinned` allocations of `len`, `h` 16 bytes; `pinned` is read as a
    // slice only after the stream that wrote it synchronized.
    unsafe {
        // Pageable, synchronous.
        assert_eq!(
            sim::cudaMemcpy(dev.cast(), src.as_ptr().cast(), len, H2D),
            cudaSuccess
        );
        // Device to device, then to pinned memory asynchronously, then to pageable memory.
        assert_eq!(
            sim::cudaMemcpy(dev2.cast(), dev.cast(), len, D2D),
            cudaSuccess
        );
        assert_eq!(
            sim::cudaMemcpyAsync(pinned.cast(), dev2.cast(), len, D2H, LEGACY),
            cudaSuccess
        );
        assert_eq!(sim::cudaStreamSynchronize(LEGACY), cudaSuccess);
        assert_eq!(std::slice::from_raw_parts(pinned, len), &src[..]);
        // cudaMemcpyDefault infers the direction from the pointers; interior pointers work.
        assert_eq!(
            sim::cudaMemcpy(
                back.as_mut_ptr().cast(),
                dev2.add(100).cast(),
                len - 100,
                DEFAULT
            ),
            cudaSuccess
        );
        assert_eq!(&back[..len - 100], &src[100..]);
        // Host to host.
        let mut h = vec![0u8; 16];
        assert_eq!(
            sim::cudaMemcpy(h.as_mut_ptr().cast(), src.as_ptr().cast(), 16, H2H),
            cudaSuccess
        );
        assert_eq!(&h[..], &src[..16]);
        // Zero bytes: nothing to do, whatever the pointers.
        assert_eq!(
            sim::cudaMemcpy(std::ptr::null_mut(), std::ptr::null(), 0, H2D),
            cudaSuccess
        );
        for p in [dev, dev2] {
            assert_eq!(sim::cudaFree(p.cast()), cudaSuccess);
        }
        assert_eq!(sim::cudaFreeHost(pinned.cast()), cudaSuccess);
    }
}

#[test]
fn per_thread_and_async_forms_move_data_too() {
    let src = pattern(1 << 16);
    let dev = device_alloc(1 << 16);
    let mut back = vec![0u8; 1 << 16];
    let s = stream(true);
    // SAFETY: `src`, `back` and `dev` hold 1 << 16 bytes, more than any count below; `e` is a local
    // out-pointer.
    unsafe {
        assert_eq!(
            sim::cudaMemcpy_ptds(dev.cast(), src.as_ptr().cast(), 1 << 16, H2D),
            cudaSuccess
        );
        assert_eq!(
            sim::cudaMemsetAsync_ptsz(dev.cast(), 0x11, 16, LEGACY),
            cudaSuccess
        );
        assert_eq!(
            sim::cudaMemsetAsync(dev.add(16).cast(), 0x22, 16, s),
            cudaSuccess
        );
        assert_eq!(sim::cudaStreamSynchronize(s), cudaSuccess);
        assert_eq!(
            sim::cudaMemcpyAsync_ptsz(back.as_mut_ptr().cast(), dev.cast(), 1 << 16, D2H, LEGACY),
            cudaSuccess
        );
        assert_eq!(sim::cudaStreamSynchronize_ptsz(LEGACY), cudaSuccess);
        let mut e = std::ptr::null_mut();
        assert_eq!(sim::cudaEventCreate(&mut e), cudaSuccess);
        assert_eq!(sim::cudaEventRecord_ptsz(e, LEGACY), cudaSuccess);
        assert_eq!(sim::cudaEventSynchronize(e), cudaSuccess);
        assert_eq!(sim::cudaEventDestroy(e), cudaSuccess);
    }
    assert!(back[..16].iter().all(|b| *b == 0x11));
    assert!(back[16..32].iter().all(|b| *b == 0x22));
    assert_eq!(&back[32..], &src[32..]);
}

#[test]
fn memset_sets_bytes_in_device_pinned_and_managed_memory() {
    let dev = device_alloc(4096);
    let pinned = pinned_alloc(4096);
    let mut managed = std::ptr::null_mut();
    let mut back = vec![0u8; 4096];
    // SAFETY: `dev`, `pinned` and `managed` (once allocated) hold 4096 bytes, as does `back`; the
    // host-visible ones are read as slices after their synchronous memsets returned, and `managed`
    // is not used after it is freed.
    unsafe {
        assert_eq!(
            sim::cudaMallocManaged(&mut managed, 4096, cudaMemAttachGlobal),
            cudaSuccess
        );
        // The value is converted to unsigned char: 0x1ff sets 0xff.
        assert_eq!(sim::cudaMemset(dev.cast(), 0x1ff, 4096), cudaSuccess);
        assert_eq!(sim::cudaMemset(dev.add(1024).cast(), 0, 1024), cudaSuccess);
        assert_eq!(
            sim::cudaMemcpy(back.as_mut_ptr().cast(), dev.cast(), 4096, D2H),
            cudaSuccess
        );
        // Synchronous memset of host-visible memory is done when the call returns.
        assert_eq!(sim::cudaMemset(pinned.cast(), 0x5a, 4096), cudaSuccess);
        assert!(std::slice::from_raw_parts(pinned, 4096)
            .iter()
            .all(|b| *b == 0x5a));
        assert_eq!(sim::cudaMemset_ptds(managed, 0x33, 4096), cudaSuccess);
        assert!(std::slice::from_raw_parts(managed.cast::<u8>(), 4096)
            .iter()
            .all(|b| *b == 0x33));
        assert_eq!(sim::cudaFree(managed), cudaSuccess);
    }
    assert!(back[..1024].iter().all(|b| *b == 0xff));
    assert!(back[1024..2048].iter().all(|b| *b == 0));
    assert!(back[2048..].iter().all(|b| *b == 0xff));
}

#[test]
fn pitched_2d_and_3d_copies_move_only_their_box() {
    // A 4x3 box of bytes from a pitch-8 source into a pitch-16 device allocation and back.
    let src: Vec<u8> = (0..24).collect();
    let dev = device_alloc(16 * 3);
    let mut back = vec![0xeeu8; 6 * 3];
    // SAFETY: each 2D copy stays inside its buffers: 3 rows of 4 bytes at pitch 8 in `src` (24
    // bytes), at pitch 16 in `dev` (48) and at pitch 6 in `back` (18); the pitch-2 call is rejected
    // before copying.
    unsafe {
        assert_eq!(sim::cudaMemset(dev.cast(), 0, 48), cudaSuccess);
        assert_eq!(
            sim::cudaMemcpy2D(dev.cast(), 16, src.as_ptr().cast(), 8, 4, 3, H2D),
            cudaSuccess
        );
        assert_eq!(
            sim::cudaMemcpy2D(back.as_mut_ptr().cast(), 6, dev.cast(), 16, 4, 3, D2H),
            cudaSuccess
        );
        assert_eq!(
            sim::cudaMemcpy2D(dev.cast(), 2, src.as_ptr().cast(), 8, 4, 3, H2D),
            cudaErrorInvalidPitchValue
        );
        // The other forms take the same path.
        let d = dev.cast();
        assert_eq!(
            sim::cudaMemcpy2D_ptds(d, 16, src.as_ptr().cast(), 8, 4, 3, H2D),
            cudaSuccess
        );
        let s = src.as_ptr().cast();
        assert_eq!(
            sim::cudaMemcpy2DAsync(d, 16, s, 8, 4, 3, H2D, LEGACY),
            cudaSuccess
        );
        assert_eq!(
            sim::cudaMemcpy2DAsync_ptsz(d, 16, s, 8, 4, 3, H2D, LEGACY),
            cudaSuccess
        );
        sync_device();
    }
    assert_eq!(
        back,
        vec![0, 1, 2, 3, 0xee, 0xee, 8, 9, 10, 11, 0xee, 0xee, 16, 17, 18, 19, 0xee, 0xee]
    );

    // 3D: a 2x2x2 box at (1, 1, 1) of a 4x3x3 source volume, into a packed device volume.
    let volume: Vec<u8> = (0..36).collect();
    let dev3 = device_alloc(8);
    let mut out = [0u8; 8];
    let pitched = |ptr: *mut c_void, pitch, xsize, ysize| cudaPitchedPtr {
        ptr,
        pitch,
        xsize,
        ysize,
    };
    let origin = cudaPos { x: 0, y: 0, z: 0 };
    // SAFETY: all-zero is a valid value (null arrays, zero sizes, kind 0).
    let mut p: cudaMemcpy3DParms = unsafe { std::mem::zeroed() };
    p.srcPtr = pitched(volume.as_ptr().cast_mut().cast(), 4, 4, 3);
    p.srcPos = cudaPos { x: 1, y: 1, z: 1 };
    p.dstPtr = pitched(dev3.cast(), 2, 2, 2);
    p.dstPos = origin;
    p.extent = cudaExtent {
        width: 2,
        height: 2,
        depth: 2,
    };
    p.kind = cudarc::runtime::sys::cudaMemcpyKind::cudaMemcpyHostToDevice;
    // SAFETY: `p` describes a 2x2x2 box inside `volume` (36 bytes, pitch 4, 3 rows) and the whole
    // of `dev3` (8 bytes); `out` holds 8 bytes; the null, array and out-of-row cases are rejected
    // before copying.
    unsafe {
        assert_eq!(sim::cudaMemcpy3D(&p), cudaSuccess);
        assert_eq!(
            sim::cudaMemcpy(out.as_mut_ptr().cast(), dev3.cast(), 8, D2H),
            cudaSuccess
        );
        // Slice z=1 starts at 12; rows y=1,2 at +4,+8; columns x=1,2.
        assert_eq!(out, [17, 18, 21, 22, 29, 30, 33, 34]);
        assert_eq!(sim::cudaMemcpy3DAsync(&p, LEGACY), cudaSuccess);
        assert_eq!(sim::cudaMemcpy3DAsync_ptsz(&p, LEGACY), cudaSuccess);
        assert_eq!(sim::cudaMemcpy3D_ptds(&p), cudaSuccess);
        assert_eq!(sim::cudaMemcpy3D(std::ptr::null()), cudaErrorInvalidValue);
        p.srcArray = 0x1000 as *mut _;
        assert_eq!(
            sim::cudaMemcpy3D(&p),
            cudaErrorInvalidValue,
            "CUDA arrays are not simulated"
        );
        p.srcArray = std::ptr::null_mut();
        p.srcPos.x = 3; // the box would stick out of the 4-byte rows
        assert_eq!(sim::cudaMemcpy3D(&p), cudaErrorInvalidPitchValue);
    }
    sync_device();
}

#[test]
fn symbols_are_device_pointers() {
    let sym = device_alloc(64);
    let src = pattern(16);
    let mut back = [0u8; 16];
    // SAFETY: `sym` is a 64-byte device allocation, `src` and `back` 16 bytes, and no copy exceeds
    // those (the offset-60 one is rejected); the other failing calls are rejected before copying.
    unsafe {
        assert_eq!(
            sim::cudaMemcpyToSymbol(sym.cast(), src.as_ptr().cast(), 16, 8, H2D),
            cudaSuccess
        );
        assert_eq!(
            sim::cudaMemcpyFromSymbol(back.as_mut_ptr().cast(), sym.cast(), 16, 8, D2H),
            cudaSuccess
        );
        assert_eq!(&back[..], &src[..]);
        assert_eq!(
            sim::cudaMemcpyToSymbolAsync(sym.cast(), src.as_ptr().cast(), 16, 0, DEFAULT, LEGACY),
            cudaSuccess
        );
        assert_eq!(
            sim::cudaMemcpyFromSymbolAsync_ptsz(
                back.as_mut_ptr().cast(),
                sym.cast(),
                8,
                0,
                D2H,
                LEGACY
            ),
            cudaSuccess
        );
        assert_eq!(sim::cudaStreamSynchronize_ptsz(LEGACY), cudaSuccess);
        assert_eq!(&back[..8], &src[..8]);
        // Not device memory: no such symbol. Wrong direction, or past the end: invalid.
        assert_eq!(
            sim::cudaMemcpyToSymbol(src.as_ptr().cast(), src.as_ptr().cast(), 16, 0, H2D),
            cudaErrorInvalidSymbol
        );
        assert_eq!(
            sim::cudaMemcpyToSymbol(sym.cast(), src.as_ptr().cast(), 16, 0, D2H),
            cudaErrorInvalidMemcpyDirection
        );
        assert_eq!(
            sim::cudaMemcpyFromSymbol_ptds(back.as_mut_ptr().cast(), sym.cast(), 16, 0, H2D),
            cudaErrorInvalidMemcpyDirection
        );
        assert_eq!(
            sim::cudaMemcpyToSymbol_ptds(sym.cast(), src.as_ptr().cast(), 16, 60, H2D),
            cudaErrorInvalidValue
        );
    }
}

#[test]
fn peer_copies_within_one_device() {
    let (a, b) = (device_alloc(4096), device_alloc(4096));
    let src = pattern(4096);
    let mut back = vec![0u8; 4096];
    // SAFETY: `a`, `b`, `src` and `back` each hold 4096 bytes, the count of every copy; the wrong-
    // device and host-pointer peer copies are rejected before copying.
    unsafe {
        assert_eq!(
            sim::cudaMemcpy(a.cast(), src.as_ptr().cast(), 4096, H2D),
            cudaSuccess
        );
        assert_eq!(
            sim::cudaMemcpyPeer(b.cast(), 0, a.cast(), 0, 4096),
            cudaSuccess
        );
        assert_eq!(
            sim::cudaMemcpyPeerAsync(b.cast(), 0, a.cast(), 0, 4096, LEGACY),
            cudaSuccess
        );
        assert_eq!(
            sim::cudaMemcpy(back.as_mut_ptr().cast(), b.cast(), 4096, D2H),
            cudaSuccess
        );
        assert_eq!(back, src);
        assert_eq!(
            sim::cudaMemcpyPeer(b.cast(), 1, a.cast(), 0, 4096),
            cudaErrorInvalidDevice
        );
        assert_eq!(
            sim::cudaMemcpyPeer(back.as_mut_ptr().cast(), 0, a.cast(), 0, 4096),
            cudaErrorInvalidValue
        );
    }
}

#[test]
fn pointer_attributes_describe_each_kind_of_memory() {
    let dev = device_alloc(4096);
    let pinned = pinned_alloc(4096);
    let mut mapped = std::ptr::null_mut();
    let mut managed = std::ptr::null_mut();
    let mut registered = vec![0u8; 8192];
    let stack = 0u64;
    // SAFETY: `mapped` and `managed` are local out-pointers; `registered` is a live Vec of 8192
    // bytes, unregistered before it is dropped.
    unsafe {
        assert_eq!(sim::cudaHostAlloc(&mut mapped, 4096, 2), cudaSuccess);
        assert_eq!(
            sim::cudaMallocManaged(&mut managed, 4096, cudaMemAttachGlobal),
            cudaSuccess
        );
        assert_eq!(
            sim::cudaHostRegister(registered.as_mut_ptr().cast(), 8192, 0),
            cudaSuccess
        );
    }
    let null = std::ptr::null_mut();
    let interior = dev.wrapping_add(100).cast::<c_void>();
    let a = attributes(interior);
    assert_eq!(
        (a.type_, a.device),
        (cudaMemoryType::cudaMemoryTypeDevice, 0)
    );
    assert_eq!((a.devicePointer, a.hostPointer), (interior, null));
    for host in [
        pinned.cast::<c_void>(),
        mapped,
        registered.as_mut_ptr().wrapping_add(5000).cast(),
    ] {
        let a = attributes(host);
        assert_eq!((a.type_, a.device), (cudaMemoryType::cudaMemoryTypeHost, 0));
        assert_eq!((a.devicePointer, a.hostPointer), (host, host));
    }
    let a = attributes(managed);
    assert_eq!(
        (a.type_, a.device),
        (cudaMemoryType::cudaMemoryTypeManaged, 0)
    );
    assert_eq!((a.devicePointer, a.hostPointer), (managed, managed));
    // Memory the runtime does not know: success, as since CUDA 11.
    let p = std::ptr::addr_of!(stack).cast_mut().cast();
    let a = attributes(p);
    assert_eq!(
        (a.type_, a.device),
        (cudaMemoryType::cudaMemoryTypeUnregistered, -2)
    );
    assert_eq!((a.devicePointer, a.hostPointer), (null, p));
    assert_eq!(
        attributes(null).type_,
        cudaMemoryType::cudaMemoryTypeUnregistered
    );
    // SAFETY: null attributes pointer is the error being tested.
    let rc = unsafe { sim::cudaPointerGetAttributes(std::ptr::null_mut(), dev.cast()) };
    assert_eq!(rc, cudaErrorInvalidValue);

    // Mapped host memory has a device pointer, the same address; pageable memory has none.
    let mut dp = std::ptr::null_mut();
    // SAFETY: `dp` is a local out-pointer; the pointers looked up are only compared, never
    // accessed.
    unsafe {
        assert_eq!(
            sim::cudaHostGetDevicePointer(&mut dp, mapped, 0),
            cudaSuccess
        );
        assert_eq!(dp, mapped);
        assert_eq!(
            sim::cudaHostGetDevicePointer(&mut dp, p, 0),
            cudaErrorInvalidValue
        );
        assert_eq!(
            sim::cudaHostGetDevicePointer(&mut dp, mapped, 1),
            cudaErrorInvalidValue
        );
    }
    assert_eq!(
        sim::cudaHostUnregister(registered.as_mut_ptr().cast()),
        cudaSuccess
    );
    let a = attributes(registered.as_ptr().cast());
    assert_eq!(a.type_, cudaMemoryType::cudaMemoryTypeUnregistered);
    assert_eq!(sim::cudaFreeHost(mapped), cudaSuccess);
    assert_eq!(
        attributes(mapped).type_,
        cudaMemoryType::cudaMemoryTypeUnregistered
    );
}

#[test]
fn memory_misuse_gets_cuda_error_codes() {
    let dev = device_alloc(4096);
    let pinned = pinned_alloc(4096);
    let mut pageable = vec![0u8; 8192];
    let pg = pageable.as_mut_ptr().cast::<c_void>();
    let mut p = std::ptr::dangling_mut::<c_void>();
    // SAFETY: `p` is a local out-pointer; every copy or memset is rejected before touching memory
    // (that is what is tested), and the successful registrations cover `pageable` (8192 bytes),
    // which outlives them.
    unsafe {
        // Allocation.
        assert_eq!(sim::cudaMalloc(&mut p, 0), cudaSuccess);
        assert!(p.is_null(), "cudaMalloc(0) gives NULL");
        assert_eq!(
            sim::cudaMalloc(std::ptr::null_mut(), 16),
            cudaErrorInvalidValue
        );
        assert_eq!(
            sim::cudaMalloc(&mut p, usize::MAX),
            cudaErrorMemoryAllocation
        );
        assert_eq!(sim::cudaMallocManaged(&mut p, 64, 0), cudaErrorInvalidValue);
        assert_eq!(sim::cudaHostAlloc(&mut p, 64, 8), cudaErrorInvalidValue);
        // Freeing.
        assert_eq!(sim::cudaFree(pg), cudaErrorInvalidValue);
        assert_eq!(sim::cudaFree(dev.add(8).cast()), cudaErrorInvalidValue);
        assert_eq!(sim::cudaFree(pinned.cast()), cudaErrorInvalidValue);
        assert_eq!(sim::cudaFreeHost(dev.cast()), cudaErrorInvalidValue);
        assert_eq!(sim::cudaFreeHost(pg), cudaErrorInvalidValue);
        assert_eq!(sim::cudaFreeHost(std::ptr::null_mut()), cudaSuccess);
        // Registration.
        assert_eq!(sim::cudaHostRegister(pg, 8192, 0), cudaSuccess);
        assert_eq!(
            sim::cudaHostRegister(pg, 8192, 0),
            cudaErrorHostMemoryAlreadyRegistered
        );
        assert_eq!(
            sim::cudaHostRegister(pg.byte_add(4096), 16, 0),
            cudaErrorHostMemoryAlreadyRegistered
        );
        assert_eq!(
            sim::cudaHostRegister(std::ptr::null_mut(), 16, 0),
            cudaErrorInvalidValue
        );
        assert_eq!(
            sim::cudaHostUnregister(pg.byte_add(4096)),
            cudaErrorHostMemoryNotRegistered
        );
        assert_eq!(sim::cudaHostUnregister(pg), cudaSuccess);
        assert_eq!(
            sim::cudaHostUnregister(pg),
            cudaErrorHostMemoryNotRegistered
        );
        // Copies.
        assert_eq!(
            sim::cudaMemcpy(dev.cast(), pg, 16, 7),
            cudaErrorInvalidMemcpyDirection
        );
        assert_eq!(
            sim::cudaMemcpy(pg, pg.byte_add(64), 16, H2D),
            cudaErrorInvalidValue
        );
        assert_eq!(
            sim::cudaMemcpy(pg, pg.byte_add(64), 16, D2H),
            cudaErrorInvalidValue
        );
        assert_eq!(
            sim::cudaMemcpy(dev.add(4090).cast(), pg, 16, H2D),
            cudaErrorInvalidValue
        );
        assert_eq!(
            sim::cudaMemcpy(std::ptr::null_mut(), pg, 16, H2D),
            cudaErrorInvalidValue
        );
        assert_eq!(
            sim::cudaMemcpyAsync(dev.cast(), pg, 16, H2D, 0x99 as _),
            cudaErrorInvalidResourceHandle
        );
        // Memset of memory the runtime does not know, or past the end.
        assert_eq!(sim::cudaMemset(pg, 0, 16), cudaErrorInvalidValue);
        assert_eq!(
            sim::cudaMemset(dev.add(4090).cast(), 0, 16),
            cudaErrorInvalidValue
        );
        assert_eq!(sim::cudaMemset(pg, 0, 0), cudaSuccess);
    }
    // The last failure, not overwritten by the success after it.
    assert_eq!(sim::cudaGetLastError(), cudaErrorInvalidValue);
}

#[test]
fn devices_versions_and_error_names() {
    let mut n: c_int = -1;
    // SAFETY: `n` is a local out-pointer; the null one is rejected.
    unsafe {
        assert_eq!(sim::cudaGetDeviceCount(&mut n), cudaSuccess);
        assert_eq!(n, 1);
        assert_eq!(sim::cudaRuntimeGetVersion(&mut n), cudaSuccess);
        assert_eq!(n, 13000);
        assert_eq!(sim::cudaDriverGetVersion(&mut n), cudaSuccess);
        assert!(n >= 13000);
        assert_eq!(sim::cudaGetDevice(&mut n), cudaSuccess);
        assert_eq!(n, 0);
        assert_eq!(
            sim::cudaGetDevice(std::ptr::null_mut()),
            cudaErrorInvalidValue
        );
    }
    assert_eq!(sim::cudaSetDevice(0), cudaSuccess);
    assert_eq!(sim::cudaSetDevice(1), cudaErrorInvalidDevice);
    assert_eq!(sim::cudaSetDevice(-1), cudaErrorInvalidDevice);
    assert_eq!(sim::cudaPeekAtLastError(), cudaErrorInvalidDevice);
    assert_eq!(sim::cudaGetLastError(), cudaErrorInvalidDevice);
    assert_eq!(sim::cudaGetLastError(), cudaSuccess);

    // SAFETY: the error string and name functions return static NUL-terminated strings, for
    // unknown codes too.
    let text = |p: *const std::ffi::c_char| unsafe { CStr::from_ptr(p) }.to_str().unwrap();
    assert_eq!(text(sim::cudaGetErrorString(1)), "invalid argument");
    assert_eq!(text(sim::cudaGetErrorName(101)), "cudaErrorInvalidDevice");
    assert_eq!(text(sim::cudaGetErrorString(0)), "no error");
    assert_eq!(
        text(sim::cudaGetErrorName(12345)),
        "unrecognized error code"
    );
    assert_eq!(
        text(sim::cudaGetErrorString(12345)),
        "unrecognized error code"
    );
}
