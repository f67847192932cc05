//! `cudacalls-dlopen N US`: loads a library that calls the CUDA runtime with
//! `dlopen(RTLD_LOCAL)` (as ctypes and Python extension modules do) and has it run N times
//! "US µs of stream work, then cudaStreamSynchronize". The program itself does not link the
//! runtime. Prints its ground truth like `cudacalls`.

use std::ffi::{c_int, c_uint, CString};
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: c_int = args.first().and_then(|a| a.parse().ok()).unwrap_or(3);
    let us: c_uint = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    // Where the build put the library; CUDACALLER_LIB overrides it when the programs were
    // copied to another machine.
    let path = std::env::var("CUDACALLER_LIB")
        .unwrap_or_else(|_| env!("SYNCSPY_CUDACALLER_LIB").to_string());
    let path = CString::new(path).expect("path without NUL");
    // SAFETY: loading a library we built; the symbol has the declared C signature.
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if h.is_null() {
            let e = std::ffi::CStr::from_ptr(libc::dlerror());
            eprintln!("cudacalls-dlopen: {}", e.to_string_lossy());
            return ExitCode::from(2);
        }
        let f = libc::dlsym(h, c"caller_work".as_ptr());
        if f.is_null() {
            eprintln!("cudacalls-dlopen: caller_work not found");
            return ExitCode::from(2);
        }
        let f: unsafe extern "C" fn(c_int, c_uint) -> c_int = std::mem::transmute(f);
        let t = Instant::now();
        let rc = f(n, us);
        if rc != 0 {
            eprintln!("cudacalls-dlopen: CUDA error {rc}");
            return ExitCode::from(1);
        }
        println!(
            "{{\"pid\":{},\"calls\":{{\"cudaStreamSynchronize\":{{\"count\":{n},\"bytes\":0,\"total_ns\":{},\"max_ns\":0}}}}}}",
            std::process::id(),
            t.elapsed().as_nanos()
        );
    }
    ExitCode::SUCCESS
}
