//! Gives the simulated runtime the identity of the real one: soname `libcudart.so.13` and the
//! symbol version node `libcudart.so.13`. Programs linked against NVIDIA's libcudart carry
//! versioned references (`cudaMalloc@libcudart.so.13`); glibc's loader aborts on those when the
//! library that satisfies them defines no version at all. The NCCL functions (`nccl*`,
//! `src/api/nccl.rs`) are exported too: programs linked against `libnccl.so.2` (unversioned,
//! as NVIDIA's is) bind to them when `syncspy run --sim` links the library under that name.

use std::{env, fs, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let script = out.join("libcudart.map");
    fs::write(
        &script,
        "libcudart.so.13 {\n  global:\n    cu*;\n    __cuda*;\n    simcuda*;\n    nccl*;\n  local:\n    *;\n};\n",
    )
    .expect("write the version script");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcudart.so.13");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        script.display()
    );
    // The kernels' real work, optimized in every profile (see src/compute.c).
    cc::Build::new()
        .file("src/compute.c")
        .file("src/nccl/reduce.c")
        .opt_level(2)
        .warnings(true)
        .compile("simcuda_compute");
    println!("cargo:rerun-if-changed=src/compute.c");
    println!("cargo:rerun-if-changed=src/nccl/reduce.c");
    println!("cargo:rerun-if-changed=build.rs");
}
