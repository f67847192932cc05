//! Where a segment's process lives, seen from this reader: its pid here (the host pid, for a
//! reader on the node) and its container.
//!
//! A segment names its process by the pid it has in its own PID namespace (a job in a pod is
//! often pid 1). ABI 1.5 segments also carry the inode of that namespace (`Origin`). A reader
//! in another namespace finds the process as the one whose `/proc/<pid>/ns/pid` is that
//! inode and whose `NSpid:` line ends with the segment's pid, started at the segment's start
//! time. The container comes from that process's cgroup path: Docker, containerd, CRI-O and
//! Podman name their containers there, Kubernetes its pods, Slurm its jobs.

use syncspy_abi::origin::Origin;
use syncspy_abi::Ident;

/// The process of a segment, placed from this reader's side. Only [`place`] finds it;
/// callers read it through methods of the fields' names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// The process's pid in this reader's PID namespace; `None` when it cannot be found
    /// (ended, or in a namespace this reader cannot see into).
    host_pid: Option<u32>,
    /// Whether the process is in another PID namespace than this reader.
    foreign_ns: bool,
    /// Its container, from its cgroup path.
    container: Option<Container>,
    /// The segment's origin (ABI 1.5: the writer's PID and mount namespaces), as read when
    /// it was placed: it never changes, and a header read later could fault on a truncated
    /// file.
    origin: Option<Origin>,
}

impl Placement {
    /// A process found at host pid `pid`, in this reader's namespace, in no container (a
    /// test's: [`place`] finds the others).
    #[cfg(test)]
    pub(crate) fn with_host_pid(pid: u32) -> Placement {
        Placement {
            host_pid: Some(pid),
            ..Placement::default()
        }
    }

    /// The process's pid in this reader's PID namespace; `None` when it cannot be found
    /// (ended, or in a namespace this reader cannot see into).
    pub fn host_pid(&self) -> Option<u32> {
        self.host_pid
    }

    /// Whether the process is in another PID namespace than this reader.
    pub fn foreign_ns(&self) -> bool {
        self.foreign_ns
    }

    /// Its container, from its cgroup path.
    pub fn container(&self) -> Option<&Container> {
        self.container.as_ref()
    }

    /// The segment's origin (ABI 1.5: the writer's PID and mount namespaces), as read when
    /// it was placed.
    pub fn origin(&self) -> Option<&Origin> {
        self.origin.as_ref()
    }
}

/// A container (or pod, or batch job) a process runs in. Only [`container_of`] finds it;
/// callers read it through methods of the fields' names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Container {
    /// `docker`, `containerd`, `cri-o`, `podman`, `kubernetes` (a pod without a known
    /// runtime), `lxc`, `slurm`.
    runtime: &'static str,
    /// The container id (full), or the Slurm job id.
    id: String,
    /// The Kubernetes pod UID, when the cgroup path names one.
    pod_uid: Option<String>,
}

impl Container {
    /// `docker`, `containerd`, `cri-o`, `podman`, `kubernetes` (a pod without a known
    /// runtime), `lxc`, `slurm`.
    pub fn runtime(&self) -> &'static str {
        self.runtime
    }

    /// The container id (full), or the Slurm job id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The Kubernetes pod UID, when the cgroup path names one.
    pub fn pod_uid(&self) -> Option<&str> {
        self.pod_uid.as_deref()
    }

    /// `docker 3f2a1b9c0d1e`: the runtime and the first 12 characters of the id.
    pub fn label(&self) -> String {
        let short: String = self.id.chars().take(12).collect();
        format!("{} {short}", self.runtime)
    }
}

/// Places the process of a segment with identity `ident` and origin `origin` (`None` for
/// segments older than ABI 1.5: taken to be in this reader's namespace).
pub fn place(ident: &Ident, origin: Option<&Origin>) -> Placement {
    let foreign = origin.is_some_and(Origin::in_another_pid_namespace);
    let host_pid = if foreign {
        origin
            .and_then(|o| syncspy_abi::segment::host_pid_of(o.pid_ns, ident.pid, ident.start_ticks))
    } else {
        syncspy_abi::process_running(ident.pid, ident.start_ticks).then_some(ident.pid)
    };
    let container = host_pid
        .and_then(|p| std::fs::read_to_string(format!("/proc/{p}/cgroup")).ok())
        .and_then(|c| container_of(&c));
    Placement {
        host_pid,
        foreign_ns: foreign,
        container,
        origin: origin.copied(),
    }
}

/// The container a cgroup file (`/proc/<pid>/cgroup`) names, if any.
pub fn container_of(cgroup: &str) -> Option<Container> {
    // The unified hierarchy's line (`0::/...`) first, then any other.
    let mut lines: Vec<&str> = cgroup.lines().collect();
    lines.sort_by_key(|l| !l.starts_with("0::"));
    lines
        .into_iter()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .find_map(container_in_path)
}

fn is_id(s: &str) -> bool {
    s.len() >= 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The container one cgroup path names.
fn container_in_path(path: &str) -> Option<Container> {
    let mut pod_uid = None;
    let mut found: Option<(&'static str, String)> = None;
    for part in path.split('/') {
        let part = part.strip_suffix(".scope").unwrap_or(part);
        let part = part.strip_suffix(".slice").unwrap_or(part);
        // kubepods-burstable-pod<uid with _>, or kubepods/burstable/pod<uid>.
        if let Some(i) = part.rfind("pod") {
            let uid = &part[i + 3..];
            if uid.len() == 36
                && uid
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() || b == b'_' || b == b'-')
            {
                pod_uid = Some(uid.replace('_', "-"));
                continue;
            }
        }
        for (prefix, runtime) in [
            ("docker-", "docker"),
            ("cri-containerd-", "containerd"),
            ("crio-", "cri-o"),
            ("libpod-", "podman"),
        ] {
            if let Some(id) = part.strip_prefix(prefix).filter(|id| is_id(id)) {
                found = Some((runtime, id.to_string()));
            }
        }
        if found.is_none() && is_id(part) {
            // cgroup v1 `/docker/<id>` or a kubepods path's last part. A hex id under any
            // other manager (a VM's sandbox, a systemd unit) names no container.
            let runtime = if path.contains("docker") {
                Some("docker")
            } else if path.contains("kubepods") {
                Some("kubernetes")
            } else if path.contains("lxc") {
                Some("lxc")
            } else {
                None
            };
            if let Some(runtime) = runtime {
                found = Some((runtime, part.to_string()));
            }
        }
        if let Some(job) = part
            .strip_prefix("job_")
            .filter(|j| j.bytes().all(|b| b.is_ascii_digit()))
        {
            if path.contains("slurm") && found.is_none() {
                found = Some(("slurm", job.to_string()));
            }
        }
    }
    match (found, pod_uid) {
        (Some((runtime, id)), pod_uid) => Some(Container {
            runtime,
            id,
            pod_uid,
        }),
        (None, Some(uid)) => Some(Container {
            runtime: "kubernetes",
            id: uid.clone(),
            pod_uid: Some(uid),
        }),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f2a1b9c0d1e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a";

    #[test]
    fn cgroup_paths_of_the_usual_runtimes_name_their_containers() {
        let docker = container_of(&format!("0::/system.slice/docker-{ID}.scope\n")).unwrap();
        assert_eq!((docker.runtime, docker.id.as_str()), ("docker", ID));
        assert_eq!(docker.label(), "docker 3f2a1b9c0d1e");
        let v1 = container_of(&format!("12:memory:/docker/{ID}\n0::/\n")).unwrap();
        assert_eq!((v1.runtime, v1.id.as_str()), ("docker", ID));
        let pod = "7b3c4d5e-1111-2222-3333-444455556666";
        let k8s = container_of(&format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{ID}.scope\n",
            pod.replace('-', "_")
        ))
        .unwrap();
        assert_eq!(k8s.runtime, "containerd");
        assert_eq!(k8s.id, ID);
        assert_eq!(k8s.pod_uid.as_deref(), Some(pod));
        let crio = container_of(&format!(
            "0::/kubepods/besteffort/pod{pod}/crio-{ID}.scope\n"
        ))
        .unwrap();
        assert_eq!(
            (crio.runtime, crio.pod_uid.as_deref()),
            ("cri-o", Some(pod))
        );
        let slurm = container_of("0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n")
            .unwrap();
        assert_eq!((slurm.runtime, slurm.id.as_str()), ("slurm", "4242"));
        assert_eq!(
            container_of("0::/user.slice/user-1000.slice/session-3.scope\n"),
            None
        );
        assert_eq!(container_of("0::/\n"), None);
        // A sandbox's cgroup with a hex id (seen on a GPU host's VM) is no container.
        assert_eq!(
            container_of(&format!("4:memory:/process_api/{}\n0::/\n", &ID[..32])),
            None
        );
        assert_eq!(container_of(""), None);
    }

    #[test]
    fn a_process_of_this_namespace_is_placed_at_its_own_pid() {
        let me = std::process::id();
        let mut p =
            syncspy_abi::SegmentParams::new(me, syncspy_abi::process_start_ticks(me).unwrap());
        p.ring_capacity = 16;
        p.site_capacity = 16;
        p.module_capacity = 8;
        p.origin = Origin::of_this_process();
        let dir = syncspy_test_support::TempDir::new("place");
        let w = syncspy_abi::SegmentWriter::create(dir.path(), &p).unwrap();
        let r = syncspy_abi::SegmentReader::open(w.path()).unwrap();
        let at = place(r.ident(), r.origin().as_ref());
        assert_eq!(at.host_pid, Some(me));
        assert!(!at.foreign_ns);
        // In a namespace of its own whose process is not to be found: placed nowhere.
        let mut o = r.origin().unwrap();
        o.pid_ns = 1;
        let at = place(r.ident(), Some(&o));
        assert!(at.foreign_ns);
        assert_eq!(at.host_pid, None);
    }
}
