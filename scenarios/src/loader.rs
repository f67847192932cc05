//! The scenario programs' own library loading (libloading): `scn-*` asks whether the runtime
//! loads, `drivercalls` and `cudacalls-dlopen` load a library `RTLD_LOCAL` the way the
//! programs they imitate do. libloading calls the C library's `dlopen`/`dlsym`, so a
//! preloaded libsyncspy.so sees these calls exactly as it sees the imitated programs' own.

pub use libloading::os::unix::{Library, RTLD_LAZY, RTLD_LOCAL, RTLD_NOW};

/// Why a load or a look-up failed, in the loader's words (`dlerror`) where it gave some.
pub fn why(e: &libloading::Error) -> String {
    match e {
        libloading::Error::DlOpen { source } | libloading::Error::DlSym { source } => {
            source.to_string()
        }
        other => other.to_string(),
    }
}
