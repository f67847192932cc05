//! `cudacalls-dlopen N US`: loads a library that calls the CUDA runtime with
//! `dlopen(RTLD_LOCAL)` (as ctypes and Python extension modules do) and has it run N times
//! "US µs of stream work, then cudaStreamSynchronize". The program itself does not link the
//! runtime. Prints its ground truth like `cudacalls`.

use std::ffi::{c_int, c_uint};
use std::process::ExitCode;
use std::time::Instant;

use syncspy_scenarios::loader::{why, Library, RTLD_LOCAL, RTLD_NOW};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: c_int = args.first().and_then(|a| a.parse().ok()).unwrap_or(3);
    let us: c_uint = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    // Where the build put the library; CUDACALLER_LIB overrides it when the programs were
    // copied to another machine.
    let path = std::env::var("CUDACALLER_LIB")
        .unwrap_or_else(|_| env!("SYNCSPY_CUDACALLER_LIB").to_string());
    // With libloading, which calls dlopen with these flags: what this program tests is the
    // interposer's view of a library loaded RTLD_LOCAL, not who calls dlopen.
    // SAFETY: loading a library we built (its initialisers are the C compiler's own).
    let lib = match unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_LOCAL) } {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cudacalls-dlopen: {}", why(&e));
            return ExitCode::from(2);
        }
    };
    // Never closed: the runtime it loaded stays until the process ends, as under ctypes.
    let lib: &'static Library = Box::leak(Box::new(lib));
    // SAFETY: `caller_work` in src/cudacaller.c has this C signature.
    let f = match unsafe { lib.get::<unsafe extern "C" fn(c_int, c_uint) -> c_int>(c"caller_work") }
    {
        Ok(f) => *f,
        Err(e) => {
            eprintln!("cudacalls-dlopen: caller_work not found: {}", why(&e));
            return ExitCode::from(2);
        }
    };
    let t = Instant::now();
    // SAFETY: the library's function with its declared signature; plain integers.
    let rc = unsafe { f(n, us) };
    if rc != 0 {
        eprintln!("cudacalls-dlopen: CUDA error {rc}");
        return ExitCode::from(1);
    }
    println!(
        "{{\"pid\":{},\"calls\":{{\"cudaStreamSynchronize\":{{\"count\":{n},\"bytes\":0,\"total_ns\":{},\"max_ns\":0}}}}}}",
        std::process::id(),
        t.elapsed().as_nanos()
    );
    ExitCode::SUCCESS
}
