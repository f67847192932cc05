//! The lists of event kinds kept outside the ABI's enum follow it (issue 34: the pytest
//! plugin's own list had no `poll_wait` or `host_wait`, so `kinds=["host_wait"]` was an
//! "unknown kind"): the Python package's `KINDS` and `HOST_STALL_KINDS`, which the plugin asks
//! for, and the kinds `syncspy check --help` lists. Adding a kind to `syncspy_abi::Kind` fails
//! here until each of them has it. Needs `python3` on PATH.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use syncspy_abi::Kind;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .into()
}

fn all() -> Vec<&'static str> {
    Kind::ALL.iter().map(|k| k.name()).collect()
}

fn host_stalls() -> Vec<&'static str> {
    Kind::ALL
        .iter()
        .filter(|k| k.is_host_stall())
        .map(|k| k.name())
        .collect()
}

/// `syncspy.<name>` of the package in python/, imported without loading the library.
fn package_list(name: &str) -> Vec<String> {
    let out = Command::new("python3")
        .args([
            "-c",
            &format!("import syncspy; print('\\n'.join(syncspy.{name}))"),
        ])
        .env("PYTHONPATH", root().join("python"))
        .env("SYNCSPY_IMPORT", "0")
        .env_remove("LD_PRELOAD")
        .output()
        .expect("python3 on PATH");
    assert!(
        out.status.success(),
        "python3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn the_python_package_lists_every_kind_of_the_abi_in_its_order() {
    assert_eq!(package_list("KINDS"), all());
    assert_eq!(package_list("HOST_STALL_KINDS"), host_stalls());
}

#[test]
fn the_pytest_plugin_keeps_no_list_of_its_own() {
    // It asks the installed package: no kind's name is a string literal in its code.
    let plugin = std::fs::read_to_string(root().join("python/syncspy_pytest.py")).unwrap();
    for k in all() {
        for quoted in [format!("\"{k}\""), format!("'{k}'")] {
            assert!(
                !plugin.contains(&quoted),
                "python/syncspy_pytest.py names {quoted}: take the kinds from syncspy.KINDS"
            );
        }
    }
    assert!(plugin.contains("syncspy.HOST_STALL_KINDS"));
}

#[test]
fn check_help_lists_every_kind() {
    // The help snapshot, which tests/cli_help.rs holds to the binary's `check --help`: the
    // lines under `kind = "stream_sync"` up to the next key.
    let help = std::fs::read_to_string(root().join("cli/tests/cmd/help-check.toml")).unwrap();
    let listed: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("kind = \"stream_sync\""))
        .take_while(|l| !l.trim_start().starts_with("site ="))
        .flat_map(|l| {
            l.split_once("):")
                .map_or(l.trim(), |(_, rest)| rest.trim())
                .split_whitespace()
        })
        .collect();
    for k in all() {
        assert!(
            listed.contains(&k),
            "`syncspy check --help` does not list {k}: {listed:?}"
        );
    }
}
