//! The deployment files (deploy/) say what the code needs: the Kubernetes DaemonSet gives the
//! agent what docs/cluster.md says it needs and nothing more, its arguments are ones the
//! agent takes, the PodMonitor finds its port, and the training pod preloads the library from
//! where its init container put it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

mod common;
use common::SYNCSPY;

fn deploy(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The trimmed lines of `text` without comments.
fn lines(text: &str) -> Vec<&str> {
    text.lines()
        .map(|l| l.split(" #").next().unwrap_or(l).trim())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// The value of the first `key: value` line.
fn value<'a>(lines: &[&'a str], key: &str) -> &'a str {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no `{key}:` line"))
}

#[test]
fn the_agent_daemonset_has_the_least_it_needs() {
    let ds = deploy("kubernetes/agent-daemonset.yaml");
    let l = lines(&ds);
    assert_eq!(value(&l, "kind"), "DaemonSet");
    assert_eq!(value(&l, "hostPID"), "true");
    assert!(!l
        .iter()
        .any(|x| x.starts_with("hostIPC") || x.starts_with("hostNetwork")));
    assert_eq!(value(&l, "privileged"), "false");
    assert_eq!(value(&l, "allowPrivilegeEscalation"), "false");
    assert_eq!(value(&l, "readOnlyRootFilesystem"), "true");
    assert_eq!(value(&l, "drop"), r#"["ALL"]"#);
    assert_eq!(value(&l, "add"), r#"["SYS_PTRACE", "DAC_READ_SEARCH"]"#);
    // Its arguments are the agent's own options.
    let help = std::process::Command::new(SYNCSPY)
        .args(["agent", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let args: Vec<&str> = l
        .iter()
        .skip_while(|x| **x != "args:")
        .skip(1)
        .take_while(|x| x.starts_with("- "))
        .map(|x| x.trim_start_matches("- "))
        .collect();
    assert_eq!(args[0], "agent", "{args:?}");
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        assert!(help.contains(flag), "syncspy agent takes no {flag}");
    }
    // The token goes to a writable volume (the root is read-only).
    let token = args[args.iter().position(|a| *a == "--token-file").unwrap() + 1];
    let run_mount = l
        .iter()
        .filter_map(|x| x.strip_prefix("mountPath:").map(str::trim))
        .find(|m| token.starts_with(&format!("{m}/")))
        .expect("the token file's folder is a mounted volume");
    assert_eq!(run_mount, "/run/syncspy");
    // The PodMonitor scrapes the port by its name and the pods by their label.
    let pm = deploy("kubernetes/podmonitor.yaml");
    let pm = lines(&pm);
    assert_eq!(value(&pm, "kind"), "PodMonitor");
    let port_name = l
        .iter()
        .position(|x| *x == "ports:")
        .map(|i| l[i + 1].trim_start_matches("- name:").trim())
        .expect("a named container port");
    assert_eq!(value(&pm, "- port"), port_name);
    assert_eq!(port_name, "metrics");
    assert_eq!(value(&pm, "app"), value(&l, "app"));
}

#[test]
fn the_training_pod_preloads_the_library_its_init_container_copied() {
    let pod = deploy("kubernetes/training-pod.yaml");
    let l = lines(&pod);
    let preload = l
        .iter()
        .position(|x| *x == "- name: LD_PRELOAD")
        .map(|i| l[i + 1].trim_start_matches("value:").trim())
        .expect("LD_PRELOAD set");
    let copied_to = l
        .iter()
        .find_map(|x| x.strip_prefix("command: [\"cp\","))
        .and_then(|x| x.split('"').nth(3))
        .expect("the init container copies the library");
    assert_eq!(preload, copied_to);
    let folder = Path::new(preload).parent().unwrap().to_str().unwrap();
    let mounts: Vec<&str> = l
        .iter()
        .filter_map(|x| x.strip_prefix("mountPath:").map(str::trim))
        .collect();
    assert_eq!(
        mounts,
        [folder, folder],
        "both containers mount the library's volume there"
    );
    assert!(!l
        .iter()
        .any(|x| x.starts_with("hostIPC") || x.starts_with("hostPID")));
    assert!(!l.iter().any(|x| x.contains("capabilities")));
}
