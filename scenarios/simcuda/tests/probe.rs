//! The cdylib as programs see it: C programs linked against `libcudart.so.13` run against the
//! simulator, and `probe/semantics.c` answers as it did on a real H100 with CUDA 13
//! (`probe/h100-cuda13.0.txt`).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use std::time::{Duration, Instant};
use std::{env, fs};
use syncspy_test_support::Running;

/// Lines where the simulator differs from the real runtime on purpose.
const KNOWN_DIFFERENCES: &[(&str, &str)] = &[
    (
        "memcpyToSymbol(malloc",
        "symbols are device pointers: the simulator has no module registration",
    ),
    (
        "fork.child",
        "a fork child gets a fresh simulator; the real runtime refuses (cudaErrorInitializationError)",
    ),
];

fn run(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    // Drain both pipes while waiting, so a chatty program cannot block on a full pipe.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let mut running = Running(child);
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = running.0.try_wait().expect("wait for the program") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "{cmd:?} ran longer than {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

fn succeed(cmd: Command, limit: Duration) -> String {
    let desc = format!("{cmd:?}");
    let out = run(cmd, limit);
    assert!(
        out.status.success(),
        "{desc}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A scratch folder holding `libcudart.so.13` (and `libcudart.so`) linked to the simulator,
/// what `syncspy run --sim` puts first on the library path.
fn sim_lib_dir(name: &str) -> PathBuf {
    // Test binaries live in target/<profile>/deps, beside the cdylib cargo built with them
    // (`cargo build` also copies it up to target/<profile>; `cargo test` does not).
    let exe = env::current_exe().expect("test binary path");
    let lib = exe.with_file_name("libsimcudart.so");
    assert!(lib.exists(), "{} missing", lib.display());
    let dir = env::temp_dir().join(format!("simcuda-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create the scratch folder");
    for link in ["libcudart.so.13", "libcudart.so"] {
        std::os::unix::fs::symlink(&lib, dir.join(link)).expect("link the simulator");
    }
    dir
}

fn cc() -> Command {
    Command::new(env::var_os("CC").unwrap_or_else(|| "cc".into()))
}

/// `key value`, with measured times ("(12.3 ms)") dropped and rates skipped.
fn comparable(output: &str) -> BTreeMap<String, String> {
    output
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("rate."))
        .filter_map(|l| {
            let l = match l.rfind(" (") {
                Some(i) if l.ends_with(" ms)") => &l[..i],
                _ => l,
            };
            let (key, value) = l.split_once(' ')?;
            Some((key.to_string(), value.to_string()))
        })
        .collect()
}

#[test]
fn probe_answers_like_cuda_13_on_an_h100() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = sim_lib_dir("probe");
    let probe = dir.join("probe");
    let mut build = cc();
    build
        .arg(manifest.join("probe/semantics.c"))
        .arg("-o")
        .arg(&probe)
        .arg("-L")
        .arg(&dir)
        .args(["-lcudart", "-lpthread"]);
    succeed(build, Duration::from_secs(60));

    let mut cmd = Command::new(&probe);
    cmd.env("LD_LIBRARY_PATH", &dir)
        .env_remove("SIMCUDA_TIME_SCALE");
    let sim = comparable(&succeed(cmd, Duration::from_secs(60)));
    let real = comparable(&fs::read_to_string(manifest.join("probe/h100-cuda13.0.txt")).unwrap());

    let mut mismatches = Vec::new();
    for (key, expected) in &real {
        let got = sim.get(key).map_or("<missing>", String::as_str);
        let known = KNOWN_DIFFERENCES.iter().any(|(k, _)| k == key);
        if known {
            assert_ne!(
                got, expected,
                "{key} now matches: drop it from KNOWN_DIFFERENCES"
            );
        } else if got != expected {
            mismatches.push(format!("{key}: real `{expected}`, simulated `{got}`"));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    assert!(real.len() > 100, "reference has {} lines", real.len());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn programs_built_against_the_real_versioned_library_run() {
    // NVIDIA's libcudart.so.13 versions its symbols (`cudaMalloc@libcudart.so.13`); a program
    // linked against it must load the simulator. Build a stand-in with that version node,
    // link a program against it, then run the program against the simulator.
    let dir = sim_lib_dir("versioned");
    let real = dir.join("real");
    fs::create_dir_all(&real).unwrap();
    fs::write(
        real.join("stub.c"),
        "int cudaGetDeviceCount(int *n) { *n = 99; return 0; }\n\
         int cudaRuntimeGetVersion(int *v) { *v = 1; return 0; }\n",
    )
    .unwrap();
    fs::write(real.join("v.map"), "libcudart.so.13 { global: *; };\n").unwrap();
    fs::write(
        real.join("main.c"),
        "#include <stdio.h>\n\
         int cudaGetDeviceCount(int *); int cudaRuntimeGetVersion(int *);\n\
         int main(void) { int n = 0, v = 0; cudaGetDeviceCount(&n); cudaRuntimeGetVersion(&v);\n\
         printf(\"%d %d\\n\", n, v); return 0; }\n",
    )
    .unwrap();
    let mut stub = cc();
    stub.current_dir(&real).args([
        "-shared",
        "-fPIC",
        "-Wl,-soname,libcudart.so.13",
        "-Wl,--version-script=v.map",
        "-o",
        "libcudart.so",
        "stub.c",
    ]);
    succeed(stub, Duration::from_secs(60));
    let mut main = cc();
    main.current_dir(&real)
        .args(["main.c", "-o", "main", "-L.", "-lcudart"]);
    succeed(main, Duration::from_secs(60));

    let mut cmd = Command::new(real.join("main"));
    cmd.env("LD_LIBRARY_PATH", &dir);
    let out = run(cmd, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    assert!(!stderr.contains("version"), "loader complained: {stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1 13000\n");
    let _ = fs::remove_dir_all(&dir);
}
