//! The job part of the header (ABI 1.3): which distributed job the process is a rank of.
//!
//! A training job is many processes (`torchrun --nproc-per-node 8` on many nodes, `srun`,
//! `mpirun`). The library reads the launcher's environment once, when it creates the
//! segment, and writes what it found here, before the segment is renamed into place: like
//! `Ident`, it is plain data written once and never changed. Readers group processes with
//! the same job id into one job and show their ranks side by side.
//!
//! What is read ([`JobIdent::from_lookup`]), first match wins:
//! 1. torchrun / torchelastic: `TORCHELASTIC_RUN_ID` set. Id: the run id; torchrun's default
//!    run id `none` is shared by unrelated jobs, so then `MASTER_ADDR:MASTER_PORT` (the
//!    rendezvous every rank of one job shares) stands in for it. Rank `RANK`, local rank
//!    `LOCAL_RANK`, world size `WORLD_SIZE`, node `GROUP_RANK`.
//! 2. MPI: `OMPI_COMM_WORLD_RANK`, `PMIX_RANK` or `PMI_RANK` set. Rank from it; local rank
//!    `OMPI_COMM_WORLD_LOCAL_RANK` / `MPI_LOCALRANKID`; world size `OMPI_COMM_WORLD_SIZE` /
//!    `PMI_SIZE`. Id: the Slurm job (below) when inside one, else `PMIX_NAMESPACE`, else
//!    `OMPI_MCA_ess_base_jobid`, else the syncspy session. (MPI ranks take precedence over
//!    Slurm's: `mpirun` inside an allocation runs every rank with the batch step's
//!    `SLURM_PROCID`.)
//! 3. Slurm: `SLURM_JOB_ID` and `SLURM_PROCID` set. Id: `SLURM_JOB_ID`, with `.SLURM_STEP_ID`
//!    appended when set (Slurm's own step name, `1234.0`); rank `SLURM_PROCID`, local rank
//!    `SLURM_LOCALID`, world size `SLURM_NTASKS`, node `SLURM_NODEID`.
//! 4. Plain environment (`torch.distributed`'s `env://`, `mp.spawn` scripts): `RANK` set. Id:
//!    `MASTER_ADDR:MASTER_PORT` when both are set, else the syncspy session; with neither,
//!    no job.
//!
//! The id is kept to `JOB_ID_MAX` bytes of printable ASCII (other bytes become `_`); a rank
//! that is not a whole number is unknown.

/// Bytes of the job id kept.
pub const JOB_ID_MAX: usize = 128;
/// `rank`, `local_rank`, `group_rank`: not known.
pub const NO_RANK: u32 = u32::MAX;

/// `JobIdent::launcher`: no job (the process is not a rank of one, or was started before
/// ABI 1.3).
pub const LAUNCHER_NONE: u32 = 0;
pub const LAUNCHER_TORCHELASTIC: u32 = 1;
pub const LAUNCHER_MPI: u32 = 2;
pub const LAUNCHER_SLURM: u32 = 3;
/// `RANK` in the environment without a launcher of the above.
pub const LAUNCHER_ENV: u32 = 4;

/// The job part of the header, appended at ABI 1.3. Written once by the creator before the
/// segment is visible; readers copy it once.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct JobIdent {
    /// `LAUNCHER_*`; 0: no job, and the other fields are zero.
    pub launcher: u32,
    /// Bytes of `id` used (at most `JOB_ID_MAX`).
    pub id_len: u32,
    /// Global rank in the job; `NO_RANK` when not known.
    pub rank: u32,
    /// Rank on this node; `NO_RANK` when not known.
    pub local_rank: u32,
    /// Ranks in the job; 0 when not known.
    pub world_size: u32,
    /// The node's index in the job (torchrun's `GROUP_RANK`, Slurm's `SLURM_NODEID`);
    /// `NO_RANK` when not known.
    pub group_rank: u32,
    /// The job id, printable ASCII.
    pub id: [u8; JOB_ID_MAX],
}

const _: () = assert!(std::mem::size_of::<JobIdent>() == 152);

/// End of the job part in the header: a segment whose `header_size` reaches it has one.
pub const JOB_END: usize = 6912;

impl Default for JobIdent {
    fn default() -> JobIdent {
        JobIdent {
            launcher: LAUNCHER_NONE,
            id_len: 0,
            rank: 0,
            local_rank: 0,
            world_size: 0,
            group_rank: 0,
            id: [0; JOB_ID_MAX],
        }
    }
}

/// A reader's view of the job part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobInfo {
    pub id: String,
    /// `torchelastic`, `mpi`, `slurm`, `env`, or `unknown` for a value this reader does not
    /// know.
    pub launcher: &'static str,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    pub group_rank: Option<u32>,
}

/// The name of a `LAUNCHER_*` value.
pub fn launcher_name(l: u32) -> &'static str {
    match l {
        LAUNCHER_TORCHELASTIC => "torchelastic",
        LAUNCHER_MPI => "mpi",
        LAUNCHER_SLURM => "slurm",
        LAUNCHER_ENV => "env",
        _ => "unknown",
    }
}

fn rank_of(v: Option<String>) -> u32 {
    v.and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|r| *r != NO_RANK)
        .unwrap_or(NO_RANK)
}

impl JobIdent {
    /// The job the environment that `get` reads describes (see the module's documentation);
    /// `session` is `SYNCSPY_SESSION` (0 when unset). No job: launcher 0.
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>, session: u64) -> JobIdent {
        let val = |name: &str| {
            get(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let first = |names: &[&str]| names.iter().find_map(|n| val(n));
        let rendezvous = || Some(format!("{}:{}", val("MASTER_ADDR")?, val("MASTER_PORT")?));
        let session_id = || (session != 0).then(|| format!("session-{session:x}"));
        let slurm_id = || {
            let job = val("SLURM_JOB_ID")?;
            Some(match val("SLURM_STEP_ID") {
                Some(step) => format!("{job}.{step}"),
                None => job,
            })
        };
        let (launcher, id, rank, local, world, group);
        if let Some(run) = val("TORCHELASTIC_RUN_ID") {
            launcher = LAUNCHER_TORCHELASTIC;
            id = if run == "none" {
                rendezvous().or(Some(run))
            } else {
                Some(run)
            };
            rank = val("RANK");
            local = val("LOCAL_RANK");
            world = val("WORLD_SIZE");
            group = val("GROUP_RANK");
        } else if let Some(r) = first(&["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"]) {
            launcher = LAUNCHER_MPI;
            id = slurm_id()
                .or_else(|| val("PMIX_NAMESPACE"))
                .or_else(|| val("OMPI_MCA_ess_base_jobid"))
                .or_else(session_id);
            rank = Some(r);
            local = first(&["OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"]);
            world = first(&["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]);
            group = val("SLURM_NODEID");
        } else if let (Some(_), Some(r)) = (val("SLURM_JOB_ID"), val("SLURM_PROCID")) {
            launcher = LAUNCHER_SLURM;
            id = slurm_id();
            rank = Some(r);
            local = val("SLURM_LOCALID");
            world = val("SLURM_NTASKS");
            group = val("SLURM_NODEID");
        } else if let Some(r) = val("RANK") {
            launcher = LAUNCHER_ENV;
            id = rendezvous().or_else(session_id);
            rank = Some(r);
            local = val("LOCAL_RANK");
            world = val("WORLD_SIZE");
            group = val("GROUP_RANK");
        } else {
            return JobIdent::default();
        }
        let Some(id) = id else {
            return JobIdent::default();
        };
        let mut out = JobIdent {
            launcher,
            id_len: 0,
            rank: rank_of(rank),
            local_rank: rank_of(local),
            world_size: world.and_then(|w| w.parse().ok()).unwrap_or(0),
            group_rank: rank_of(group),
            id: [0; JOB_ID_MAX],
        };
        for (i, b) in id.bytes().take(JOB_ID_MAX).enumerate() {
            out.id[i] = if b.is_ascii_graphic() { b } else { b'_' };
            out.id_len = i as u32 + 1;
        }
        out
    }

    /// What a reader makes of these bytes: `None` without a job (launcher 0 or an empty id).
    pub fn info(&self) -> Option<JobInfo> {
        if self.launcher == LAUNCHER_NONE {
            return None;
        }
        let len = (self.id_len as usize).min(JOB_ID_MAX);
        let id: String = self.id[..len]
            .iter()
            .map(|b| {
                if b.is_ascii_graphic() {
                    *b as char
                } else {
                    '_'
                }
            })
            .collect();
        if id.is_empty() {
            return None;
        }
        let known = |r: u32| (r != NO_RANK).then_some(r);
        Some(JobInfo {
            id,
            launcher: launcher_name(self.launcher),
            rank: known(self.rank),
            local_rank: known(self.local_rank),
            world_size: (self.world_size != 0).then_some(self.world_size),
            group_rank: known(self.group_rank),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn job(vars: &[(&str, &str)], session: u64) -> Option<JobInfo> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        JobIdent::from_lookup(&|n| m.get(n).cloned(), session).info()
    }

    #[test]
    fn torchrun_ranks_are_read() {
        let j = job(
            &[
                ("TORCHELASTIC_RUN_ID", "exp-7"),
                ("RANK", "5"),
                ("LOCAL_RANK", "1"),
                ("WORLD_SIZE", "16"),
                ("GROUP_RANK", "2"),
                ("SLURM_JOB_ID", "99"),
                ("SLURM_PROCID", "0"),
            ],
            0,
        )
        .unwrap();
        assert_eq!(
            j,
            JobInfo {
                id: "exp-7".into(),
                launcher: "torchelastic",
                rank: Some(5),
                local_rank: Some(1),
                world_size: Some(16),
                group_rank: Some(2),
            }
        );
        // torchrun's default run id is shared by every job: the rendezvous names this one.
        let j = job(
            &[
                ("TORCHELASTIC_RUN_ID", "none"),
                ("RANK", "0"),
                ("MASTER_ADDR", "10.0.0.1"),
                ("MASTER_PORT", "29500"),
            ],
            0,
        )
        .unwrap();
        assert_eq!((j.id.as_str(), j.rank), ("10.0.0.1:29500", Some(0)));
    }

    #[test]
    fn slurm_mpi_and_plain_env() {
        let j = job(
            &[
                ("SLURM_JOB_ID", "1234"),
                ("SLURM_STEP_ID", "0"),
                ("SLURM_PROCID", "3"),
                ("SLURM_LOCALID", "3"),
                ("SLURM_NTASKS", "8"),
                ("SLURM_NODEID", "0"),
            ],
            0,
        )
        .unwrap();
        assert_eq!((j.id.as_str(), j.launcher), ("1234.0", "slurm"));
        assert_eq!(
            (j.rank, j.local_rank, j.world_size),
            (Some(3), Some(3), Some(8))
        );
        // mpirun inside an allocation: MPI's rank, Slurm's job.
        let j = job(
            &[
                ("SLURM_JOB_ID", "1234"),
                ("SLURM_PROCID", "0"),
                ("OMPI_COMM_WORLD_RANK", "6"),
                ("OMPI_COMM_WORLD_SIZE", "8"),
            ],
            0,
        )
        .unwrap();
        assert_eq!(
            (j.id.as_str(), j.launcher, j.rank),
            ("1234", "mpi", Some(6))
        );
        let j = job(&[("PMI_RANK", "2"), ("PMI_SIZE", "4")], 0xab).unwrap();
        assert_eq!(
            (j.id.as_str(), j.rank, j.world_size),
            ("session-ab", Some(2), Some(4))
        );
        assert_eq!(job(&[("PMI_RANK", "2")], 0), None, "no id at all: no job");
        let j = job(&[("RANK", "1"), ("WORLD_SIZE", "2")], 0x5eed).unwrap();
        assert_eq!((j.id.as_str(), j.launcher), ("session-5eed", "env"));
        assert_eq!(job(&[("LOCAL_RANK", "1")], 0x5eed), None);
        assert_eq!(job(&[], 0x5eed), None);
    }

    #[test]
    fn ids_are_bounded_and_printable_and_bad_ranks_unknown() {
        let long = "x".repeat(500) + "\u{e9}";
        let j = job(
            &[
                ("TORCHELASTIC_RUN_ID", &format!("a b\n{long}")),
                ("RANK", "-1"),
                ("LOCAL_RANK", "4294967295"),
                ("WORLD_SIZE", "many"),
            ],
            0,
        )
        .unwrap();
        assert_eq!(j.id.len(), JOB_ID_MAX);
        assert!(j.id.starts_with("a_b_xxx"));
        assert_eq!((j.rank, j.local_rank, j.world_size), (None, None, None));
        // Whatever the bytes say, a reader's strings stay printable and bounded.
        let mut raw = JobIdent::from_lookup(&|_| None, 0);
        raw.launcher = 77;
        raw.id_len = u32::MAX;
        raw.id = [0xff; JOB_ID_MAX];
        let j = raw.info().unwrap();
        assert_eq!((j.launcher, j.id.len()), ("unknown", JOB_ID_MAX));
        raw.id_len = 0;
        assert_eq!(raw.info(), None);
    }
}
