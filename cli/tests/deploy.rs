//! The deployment files (deploy/) say what the code needs: the Kubernetes DaemonSet gives the
//! agent what docs/cluster.md says it needs and nothing more, its arguments are ones the
//! agent takes, the PodMonitor finds its port, the NetworkPolicy lets only the Prometheus
//! scraper reach that port on the agent's pods, and the training pod preloads the library from
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

/// A YAML value of the subset the manifests use: block mappings and sequences, plain and
/// quoted scalars, flow sequences of scalars, `{}`.
#[derive(Debug, Clone, PartialEq)]
enum Yaml {
    Scalar(String),
    Seq(Vec<Yaml>),
    Map(Vec<(String, Yaml)>),
}

impl Yaml {
    /// The value at `path` (mapping keys), or a panic that names the path.
    fn at(&self, path: &[&str]) -> &Yaml {
        path.iter().fold(self, |v, k| match v {
            Yaml::Map(m) => m
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v)
                .unwrap_or_else(|| panic!("no {k:?} in {path:?}")),
            _ => panic!("{path:?}: {k:?} is not under a mapping"),
        })
    }

    fn str(&self) -> &str {
        match self {
            Yaml::Scalar(s) => s,
            v => panic!("not a scalar: {v:?}"),
        }
    }

    fn seq(&self) -> &[Yaml] {
        match self {
            Yaml::Seq(s) => s,
            v => panic!("not a sequence: {v:?}"),
        }
    }

    fn map(&self) -> &[(String, Yaml)] {
        match self {
            Yaml::Map(m) => m,
            v => panic!("not a mapping: {v:?}"),
        }
    }
}

/// Parses one YAML document of that subset; anything else (tabs, block scalars, anchors,
/// lines left over) fails the test, so a manifest that stops parsing is caught.
fn parse_yaml(text: &str) -> Yaml {
    let mut lines: Vec<(usize, String)> = text
        .lines()
        .filter_map(|l| {
            assert!(!l.contains('\t'), "a tab: {l:?}");
            let content = match l.find(" #") {
                Some(i) if !l[..i].contains('"') => &l[..i],
                _ => l,
            };
            let t = content.trim();
            (!t.is_empty() && !t.starts_with('#') && t != "---")
                .then(|| (l.len() - l.trim_start().len(), t.to_string()))
        })
        .collect();
    let mut i = 0;
    let indent = lines.first().expect("an empty document").0;
    let doc = yaml_block(&mut lines, &mut i, indent);
    assert_eq!(i, lines.len(), "left over from {:?}", lines.get(i));
    doc
}

fn yaml_block(lines: &mut [(usize, String)], i: &mut usize, indent: usize) -> Yaml {
    if lines[*i].1 == "-" || lines[*i].1.starts_with("- ") {
        let mut items = Vec::new();
        while *i < lines.len() && lines[*i].0 == indent && lines[*i].1.starts_with('-') {
            let rest = lines[*i].1[1..].trim_start().to_string();
            if rest.is_empty() {
                *i += 1;
                let inner = lines[*i].0;
                assert!(inner > indent, "an empty item at {:?}", lines[*i]);
                items.push(yaml_block(lines, i, inner));
            } else if yaml_key(&rest).is_some() {
                // `- key: value`: a mapping whose keys line up with `key`.
                let col = indent + lines[*i].1.len() - rest.len();
                lines[*i] = (col, rest);
                items.push(yaml_block(lines, i, col));
            } else {
                items.push(yaml_scalar(&rest));
                *i += 1;
            }
        }
        return Yaml::Seq(items);
    }
    let mut entries = Vec::new();
    while *i < lines.len() && lines[*i].0 == indent && !lines[*i].1.starts_with('-') {
        let (key, rest) =
            yaml_key(&lines[*i].1).unwrap_or_else(|| panic!("not `key: value`: {:?}", lines[*i]));
        *i += 1;
        let value = if !rest.is_empty() {
            yaml_scalar(&rest)
        } else if *i < lines.len()
            && (lines[*i].0 > indent || (lines[*i].0 == indent && lines[*i].1.starts_with('-')))
        {
            let inner = lines[*i].0;
            yaml_block(lines, i, inner)
        } else {
            Yaml::Scalar(String::new())
        };
        assert!(
            !entries.iter().any(|(k, _)| *k == key),
            "{key:?} twice in a mapping"
        );
        entries.push((key, value));
    }
    assert!(
        *i == lines.len() || lines[*i].0 < indent,
        "misaligned: {:?}",
        lines[*i]
    );
    Yaml::Map(entries)
}

/// `key: value` or `key:` (the key unquoted; `value` trimmed, maybe empty).
fn yaml_key(line: &str) -> Option<(String, String)> {
    let (key, rest) = match line.split_once(": ") {
        Some((k, r)) => (k, r.trim()),
        None => (line.strip_suffix(':')?, ""),
    };
    let key = key.trim();
    (!key.is_empty() && !key.contains(' ') && !key.starts_with(['"', '[', '{']))
        .then(|| (key.to_string(), rest.to_string()))
}

fn yaml_scalar(s: &str) -> Yaml {
    assert!(
        !s.starts_with(['|', '>', '&', '*', '!']),
        "not in the subset: {s:?}"
    );
    let unquote = |s: &str| {
        let s = s.trim();
        s.strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .or_else(|| s.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
            .unwrap_or(s)
            .to_string()
    };
    if s == "{}" {
        Yaml::Map(Vec::new())
    } else if let Some(inner) = s.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
        Yaml::Seq(
            inner
                .split(',')
                .filter(|x| !x.trim().is_empty())
                .map(|x| Yaml::Scalar(unquote(x)))
                .collect(),
        )
    } else {
        assert!(
            !s.starts_with('{'),
            "flow mappings are not in the subset: {s:?}"
        );
        Yaml::Scalar(unquote(s))
    }
}

#[test]
fn the_yaml_subset_parses_the_shapes_the_manifests_use() {
    let y = parse_yaml(
        "a:\n  b: 1 # note\n  c:\n    - x\n    - k: \"v\"\n      l: [\"p\", \"q\"]\n  d: {}\n",
    );
    assert_eq!(y.at(&["a", "b"]).str(), "1");
    let c = y.at(&["a", "c"]).seq();
    assert_eq!(c[0].str(), "x");
    assert_eq!(c[1].at(&["k"]).str(), "v");
    assert_eq!(c[1].at(&["l"]).seq().len(), 2);
    assert!(y.at(&["a", "d"]).map().is_empty());
    // Two selectors in one `from` entry, not two entries.
    let y = parse_yaml("from:\n  - a: 1\n    b: 2\n  - c: 3\n");
    assert_eq!(y.at(&["from"]).seq().len(), 2);
    assert_eq!(y.at(&["from"]).seq()[0].map().len(), 2);
    // Every manifest of deploy/kubernetes parses.
    for f in [
        "agent-daemonset.yaml",
        "agent-networkpolicy.yaml",
        "podmonitor.yaml",
        "training-pod.yaml",
    ] {
        parse_yaml(&deploy(&format!("kubernetes/{f}")));
    }
}

#[test]
fn only_the_prometheus_scraper_reaches_the_agents_port() {
    let ds = parse_yaml(&deploy("kubernetes/agent-daemonset.yaml"));
    let np = parse_yaml(&deploy("kubernetes/agent-networkpolicy.yaml"));
    assert_eq!(np.at(&["kind"]).str(), "NetworkPolicy");
    assert_eq!(np.at(&["apiVersion"]).str(), "networking.k8s.io/v1");
    assert_eq!(
        np.at(&["metadata", "namespace"]),
        ds.at(&["metadata", "namespace"])
    );
    // It selects the agent's pods: each of its labels is on the DaemonSet's pods.
    let pod_labels = ds.at(&["spec", "template", "metadata", "labels"]).map();
    let selects = np.at(&["spec", "podSelector", "matchLabels"]).map();
    assert!(
        !selects.is_empty(),
        "an empty podSelector selects every pod"
    );
    for l in selects {
        assert!(pod_labels.contains(l), "{l:?} is not on the agent's pods");
    }
    let types = np.at(&["spec", "policyTypes"]).seq();
    assert!(types.contains(&Yaml::Scalar("Ingress".into())), "{types:?}");
    // One rule: the agent's port, from the scraper only.
    let rules = np.at(&["spec", "ingress"]).seq();
    assert_eq!(rules.len(), 1, "{rules:?}");
    let ports = rules[0].at(&["ports"]).seq();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].at(&["protocol"]).str(), "TCP");
    let port = ports[0].at(&["port"]).str();
    let container = &ds.at(&["spec", "template", "spec", "containers"]).seq()[0];
    let metrics_port = container
        .at(&["ports"])
        .seq()
        .iter()
        .find(|p| p.at(&["name"]).str() == "metrics")
        .expect("a port named metrics")
        .at(&["containerPort"])
        .str();
    assert_eq!(port, metrics_port);
    let args: Vec<&str> = container
        .at(&["args"])
        .seq()
        .iter()
        .map(Yaml::str)
        .collect();
    let listen = args[args.iter().position(|a| *a == "--listen").unwrap() + 1];
    assert_eq!(listen.rsplit(':').next(), Some(port), "--listen {listen}");
    // From: one peer that must match both selectors (a namespace and its pods), no address
    // block, no empty selector (which would match every namespace or pod).
    let from = rules[0].at(&["from"]).seq();
    assert_eq!(from.len(), 1, "{from:?}");
    let peer = from[0].map();
    let keys: Vec<&str> = peer.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["namespaceSelector", "podSelector"], "{peer:?}");
    let labels = |sel: &str| -> Vec<(String, String)> {
        from[0]
            .at(&[sel, "matchLabels"])
            .map()
            .iter()
            .map(|(k, v)| (k.clone(), v.str().to_string()))
            .collect()
    };
    // What docs/cluster.md and the file's comment say to adapt.
    let ns = labels("namespaceSelector");
    let pods = labels("podSelector");
    assert_eq!(
        ns,
        [("kubernetes.io/metadata.name".into(), "monitoring".into())]
    );
    assert_eq!(
        pods,
        [("app.kubernetes.io/name".into(), "prometheus".into())]
    );
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cluster.md"))
            .unwrap();
    for said in [
        "deploy/kubernetes/agent-networkpolicy.yaml",
        "app.kubernetes.io/name=prometheus",
        "kubernetes.io/metadata.name",
    ] {
        assert!(doc.contains(said), "docs/cluster.md does not say {said}");
    }
}

/// The agent's memory limit covers the worst case of the budgets it runs with: the reader
/// budgets bound its histograms (`SYNCSPY_READER_MB`, over every folder), and the rest of its
/// memory at those caps was at most 238 MB beyond them in the shared-server soak with four
/// users flooding 16 pods' folders (docs/performance.md, "Memory budgets over every
/// folder"). Raising a budget without the limit fails here.
#[test]
fn the_agents_memory_limit_is_above_the_worst_case_of_its_budgets() {
    const BEYOND_THE_BUDGETS_MIB: u64 = 256;
    const MARGIN: u64 = 2;
    let ds = parse_yaml(&deploy("kubernetes/agent-daemonset.yaml"));
    let container = &ds.at(&["spec", "template", "spec", "containers"]).seq()[0];
    let env = |name: &str| -> u64 {
        let v = container
            .at(&["env"])
            .seq()
            .iter()
            .find(|e| e.at(&["name"]).str() == name)
            .unwrap_or_else(|| panic!("{name} is not set: the budget would be the default"))
            .at(&["value"])
            .str();
        v.trim_matches('"').parse().unwrap()
    };
    let total = env("SYNCSPY_READER_MB");
    let per_user = env("SYNCSPY_READER_MB_PER_USER");
    assert!(per_user <= total, "{per_user} MiB per user, {total} in all");
    assert!(env("SYNCSPY_READER_SEGMENTS") > 0);
    let limit = container.at(&["resources", "limits", "memory"]).str();
    let limit_mib: u64 = match limit.strip_suffix("Mi") {
        Some(n) => n.parse().unwrap(),
        None => limit.strip_suffix("Gi").unwrap().parse::<u64>().unwrap() * 1024,
    };
    assert!(
        limit_mib >= MARGIN * (total + BEYOND_THE_BUDGETS_MIB),
        "limit {limit} under {MARGIN} x ({total} MiB of budgets + {BEYOND_THE_BUDGETS_MIB} MiB)"
    );
}
