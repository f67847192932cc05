//! Distributed jobs: processes grouped by the job part of their segments (ABI 1.3), their
//! ranks side by side, and the straggler.
//!
//! In data-parallel training every rank meets the others at each collective: a rank whose
//! host waits (an `.item()`, a pageable copy) launches its share of the collective late, and
//! every other rank's GPU then waits inside it. The straggler is found from what the
//! segments hold, per rank, with the first evidence every rank has:
//! - **collective kernels** (ABI 1.4, GPU activity traced and NCCL kernels seen on some
//!   rank): a collective kernel runs from when its rank reaches it until the last rank does,
//!   so the rank the others waited for has the least time in them. Per rank, the share of
//!   its traced time spent in collective kernels (`collective_ns / traced_ns`: ranks traced
//!   over different windows compare); the rank with the smallest share is the straggler when
//!   the median of the other ranks' *wait* (their share less its share, times their traced
//!   time) is at least 1 ms and at least a quarter of the straggler's own collective time.
//!   The straggler's top call site is its longest host stall: what made it late.
//! - **GPU idle behind host stalls** (`gpu.measured` on every rank): the rank's GPU
//!   idle time blamed on its own host stalls (`gpu.causes`, not `host_busy_elsewhere`). That
//!   is the time its GPU sat still because its host waited, during which it could not reach
//!   the next collective. (The other ranks' wait is GPU time inside NCCL kernels, busy time
//!   to the GPU tracer: it shows as their GPU being busy, not idle, and is not measured.)
//! - **otherwise**: the rank's host stall time (`stall_ns`).
//!
//! The score's `basis` says which. Without collective kernels the straggler is the rank with
//! the largest score, named
//! only when it exceeds the median of the other ranks' scores by at least a quarter and by at
//! least 1 ms (`excess_ns`): ranks that stall alike have none. Its top call site is the one it
//! stalled longest at (or, on the GPU basis, the host stall its GPU idled behind longest),
//! with the Python line where there is one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ProcessReport;
use crate::names::{ApiName, KindName, Name};

/// The job of one process, as the report shows it (`processes[].job`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct JobRef {
    pub id: String,
    /// `torchelastic`, `mpi`, `slurm`, `env`, or `unknown`.
    pub launcher: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
    /// The node's index in the job (torchrun's `GROUP_RANK`, Slurm's `SLURM_NODEID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_rank: Option<u32>,
}

impl JobRef {
    pub fn of(j: &syncspy_abi::job::JobInfo) -> JobRef {
        JobRef {
            id: j.id.clone(),
            launcher: j.launcher.to_string(),
            rank: j.rank,
            local_rank: j.local_rank,
            world_size: j.world_size,
            group_rank: j.group_rank,
        }
    }
}

crate::names::text_vocabulary! {
    /// What a job's straggler score measures (`JobReport::basis`).
    Basis {
        /// The other ranks' wait in collective kernels.
        Collective => "collective_wait",
        /// GPU idle time blamed on the rank's own host stalls.
        GpuIdle => "gpu_idle_behind_host_stalls",
        /// The rank's host stall time.
        HostStall => "host_stall",
    }
}

crate::names::text_vocabulary! {
    /// Where the collective basis took each rank's time in collectives
    /// (`JobReport::collective_source`).
    CollectiveSource {
        /// The library's own measurement of every NCCL call (events around it, ABI 1.8):
        /// always on, over each rank's window from its first collective.
        NcclCalls => "nccl_calls",
        /// Collective kernels in the GPU trace (ABI 1.4), over the traced time only.
        GpuTrace => "gpu_trace",
    }
}

/// A score must exceed the others' median by this factor, and by `MIN_EXCESS_NS`.
pub const STRAGGLER_FACTOR: f64 = 1.25;
pub const MIN_EXCESS_NS: u64 = 1_000_000;

/// One rank of a job (one process; a rank restarted by an elastic agent is one entry per
/// process, each with its pid).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RankReport {
    /// `None` when the launcher did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_rank: Option<u32>,
    pub pid: u32,
    pub state: String,
    pub stall_ns: u64,
    pub wall_ns: u64,
    /// GPU idle time blamed on this rank's host stalls; `None` when its GPU was not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_idle_behind_stalls_ns: Option<u64>,
    /// The straggler score (see `JobReport::basis`; on the collective basis, the rank's
    /// collective-kernel time).
    pub score_ns: u64,
    /// Time in collective kernels (traced time only); `None` when not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective_ns: Option<u64>,
    /// On the collective basis: how long this rank waited in collectives for the slowest
    /// rank (its collective time beyond the straggler's share).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective_wait_ns: Option<u64>,
    /// Where this rank stalled longest: `kind at location` (or `kind (api)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_site: Option<TopSite>,
}

/// A rank's top call site.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TopSite {
    pub kind: KindName,
    pub api: ApiName,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Its stall time (host basis) or the GPU idle time behind it (GPU basis).
    pub total_ns: u64,
}

impl TopSite {
    /// `stream_sync at train.py:88 in step` (or `stream_sync (cudaStreamSynchronize)`).
    pub fn describe(&self) -> String {
        match &self.location {
            Some(l) => format!("{} at {l}", self.kind),
            None => format!("{} ({})", self.kind, self.api),
        }
    }
}

/// The rank named the straggler.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Straggler {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    pub pid: u32,
    pub score_ns: u64,
    /// The median of the other ranks' scores.
    pub others_median_ns: u64,
    /// `score_ns - others_median_ns`: about how long each other rank waited for this one at
    /// its collectives, over the run (collective basis: the median of the others' waits).
    pub excess_ns: u64,
    /// Collective basis: the other ranks that waited for it (at least 1 ms each), and their
    /// waits summed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_ranks: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_site: Option<TopSite>,
}

/// One job: the processes of a report with the same job id. Built by [`jobs_of`] (or read
/// from a report), never edited: its ranks, basis and straggler agree with each other.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct JobReport {
    id: String,
    launcher: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    world_size: Option<u32>,
    ranks: Vec<RankReport>,
    stall_ns: u64,
    basis: Name<Basis>,
    /// On the collective basis: where the ranks' collective times come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    collective_source: Option<Name<CollectiveSource>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    straggler: Option<Straggler>,
}

impl JobReport {
    /// The job id the ranks share.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The launcher whose environment named the job (`torchelastic`, `slurm`, ...).
    pub fn launcher(&self) -> &str {
        &self.launcher
    }

    /// The largest world size a rank reported; `None` when none did.
    pub fn world_size(&self) -> Option<u32> {
        self.world_size
    }

    /// Ranks seen, by rank (unknown ranks last, by pid).
    pub fn ranks(&self) -> &[RankReport] {
        &self.ranks
    }

    /// Host stall time over all ranks.
    pub fn stall_ns(&self) -> u64 {
        self.stall_ns
    }

    /// What the ranks' `score_ns` measures.
    pub fn basis(&self) -> &Name<Basis> {
        &self.basis
    }

    /// On the collective basis, where the ranks' collective times come from.
    pub fn collective_source(&self) -> Option<&Name<CollectiveSource>> {
        self.collective_source.as_ref()
    }

    /// The rank the others waited for, when one stands out.
    pub fn straggler(&self) -> Option<&Straggler> {
        self.straggler.as_ref()
    }

    /// One line: `job exp-7 (torchelastic, 4 of 8 ranks): straggler rank 3, stream_sync at
    /// train.py:88, 120 ms (others' median 20 ms)`.
    pub fn summary(&self) -> String {
        let seen = self.ranks.len();
        let of = match self.world_size {
            Some(w) => format!("{seen} of {w} ranks"),
            None => format!("{seen} ranks"),
        };
        let nccl = self
            .collective_source
            .as_ref()
            .is_some_and(|c| *c == CollectiveSource::NcclCalls);
        let what = match self.basis.known() {
            Some(Basis::Collective) if nccl => "collective time",
            Some(Basis::Collective) => "collective-kernel time",
            Some(Basis::GpuIdle) => "GPU idle behind host stalls",
            Some(Basis::HostStall) | None => "host stalls",
        };
        let tail = match &self.straggler {
            Some(s) if self.basis == Basis::Collective => {
                let rank = s
                    .rank
                    .map_or(format!("pid {}", s.pid), |r| format!("rank {r}"));
                let site = s
                    .top_site
                    .as_ref()
                    .map(|t| format!(" {}", t.describe()))
                    .unwrap_or_default();
                let n = s.waited_ranks.unwrap_or(0);
                format!(
                    "straggler {rank}{site} -> {n} rank{} waited {} in collectives (its own \
                     collective time {})",
                    if n == 1 { "" } else { "s" },
                    ms(s.waited_ns.unwrap_or(0)),
                    ms(s.score_ns)
                )
            }
            Some(s) => {
                let rank = s
                    .rank
                    .map_or(format!("pid {}", s.pid), |r| format!("rank {r}"));
                let site = s
                    .top_site
                    .as_ref()
                    .map(|t| format!(" {}", t.describe()))
                    .unwrap_or_default();
                format!(
                    "straggler {rank}{site}: {} of {what}, {} more than the other ranks' median",
                    ms(s.score_ns),
                    ms(s.excess_ns)
                )
            }
            None if self.basis == Basis::Collective => {
                format!("no straggler (the ranks' {what}s agree)")
            }
            None => format!("no straggler ({what} within {STRAGGLER_FACTOR}x of the median)"),
        };
        format!("job {} ({}, {of}): {tail}", self.id, self.launcher)
    }
}

fn ms(ns: u64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

fn median(mut v: Vec<u64>) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        v[n / 2 - 1] / 2 + v[n / 2] / 2 + (v[n / 2 - 1] % 2 + v[n / 2] % 2) / 2
    }
}

/// The GPU idle time blamed on the host stalls of `p`, and the largest such cause.
fn gpu_behind(p: &ProcessReport) -> Option<(u64, Option<TopSite>)> {
    if !p.gpu.measured {
        return None;
    }
    let mut causes: Vec<_> = p
        .gpu
        .causes
        .iter()
        .filter_map(|c| Some((c.cause.stall()?, c.total_ns)))
        .collect();
    let total = causes.iter().map(|c| c.1).sum();
    causes.sort_by_key(|c| std::cmp::Reverse(c.1));
    let top = causes.first().map(|(s, total_ns)| TopSite {
        kind: s.kind.clone(),
        api: s.api.clone(),
        location: s.location.clone(),
        total_ns: *total_ns,
    });
    Some((total, top))
}

/// What made the straggler `p` late: its host stall at the call site where it stalled longest
/// beyond what the other ranks stalled there (the median of theirs at the same location).
/// Every rank waits after a collective (its `.item()` on the loss), the others longest: that
/// site is theirs, not the straggler's; the straggler's own wait before it arrived (a value
/// read back, a pageable copy) is a site the others have little or none of. `None` when no
/// site of `p` exceeds the others' (then its longest stall stands).
fn late_site(p: &ProcessReport, others: &[&ProcessReport]) -> Option<TopSite> {
    let at = |q: &ProcessReport, kind: &KindName, api: &ApiName, loc: &Option<String>| -> u64 {
        q.sites
            .iter()
            .filter(|s| s.kind == *kind && s.api == *api && s.location == *loc)
            .map(|s| s.total_ns)
            .sum()
    };
    p.sites
        .iter()
        .filter(|s| s.total_ns > 0)
        .map(|s| {
            let theirs = median(
                others
                    .iter()
                    .map(|q| at(q, &s.kind, &s.api, &s.location))
                    .collect(),
            );
            (s.total_ns.saturating_sub(theirs), s)
        })
        .filter(|(beyond, _)| *beyond > 0)
        .max_by_key(|(beyond, _)| *beyond)
        .map(|(_, s)| TopSite {
            kind: s.kind.clone(),
            api: s.api.clone(),
            location: s.location.clone(),
            total_ns: s.total_ns,
        })
}

fn top_host_site(p: &ProcessReport) -> Option<TopSite> {
    p.sites
        .iter()
        .filter(|s| s.total_ns > 0)
        .max_by_key(|s| s.total_ns)
        .map(|s| TopSite {
            kind: s.kind.clone(),
            api: s.api.clone(),
            location: s.location.clone(),
            total_ns: s.total_ns,
        })
}

/// The jobs of `processes`, by job id; processes without a job are in none.
pub fn jobs_of(processes: &[ProcessReport]) -> Vec<JobReport> {
    let mut by_id: BTreeMap<&str, Vec<&ProcessReport>> = BTreeMap::new();
    for p in processes {
        if let Some(j) = &p.job {
            by_id.entry(j.id.as_str()).or_default().push(p);
        }
    }
    by_id
        .into_iter()
        .map(|(id, ps)| job_report(id, &ps))
        .collect()
}

/// The rule on scores where the largest is the straggler (host stall time, GPU idle behind
/// host stalls): the index of the rank with the largest score, the median of the other ranks'
/// scores, and whether that names it (at least `STRAGGLER_FACTOR` times that median and
/// `MIN_EXCESS_NS` above it). `None` with fewer than two ranks. The report and the monitor
/// both ask it.
pub fn score_rule(scores: &[u64]) -> Option<(usize, u64, bool)> {
    if scores.len() < 2 {
        return None;
    }
    let (i, top) = scores.iter().enumerate().max_by_key(|(_, s)| **s)?;
    let others = median(
        scores
            .iter()
            .enumerate()
            .filter(|(k, _)| *k != i)
            .map(|(_, s)| *s)
            .collect(),
    );
    let named = top.saturating_sub(others) >= MIN_EXCESS_NS
        && *top as f64 >= others as f64 * STRAGGLER_FACTOR;
    Some((i, others, named))
}

/// The collective rule on the ranks' collective-kernel times and traced times: the index of
/// the rank with the smallest share of its traced time in collectives, each rank's wait (its
/// collective time beyond that share), the median of the other ranks' waits, and whether that
/// median names the rank the straggler (at least 1 ms and a quarter of its own collective
/// time). `None` with fewer than two ranks, no collective kernel at all, or a rank not traced.
pub fn collective_rule(coll: &[u64], traced: &[u64]) -> Option<(usize, Vec<u64>, u64, bool)> {
    if coll.len() < 2
        || coll.len() != traced.len()
        || coll.iter().all(|c| *c == 0)
        || traced.contains(&0)
    {
        return None;
    }
    let share = |i: usize| coll[i] as f64 / traced[i] as f64;
    let s = (0..coll.len()).min_by(|a, b| share(*a).total_cmp(&share(*b)))?;
    let waits: Vec<u64> = (0..coll.len())
        .map(|i| ((share(i) - share(s)).max(0.0) * traced[i] as f64) as u64)
        .collect();
    let med = median(
        (0..coll.len())
            .filter(|i| *i != s)
            .map(|i| waits[i])
            .collect(),
    );
    let named = med >= MIN_EXCESS_NS && med as f64 >= coll[s] as f64 * 0.25;
    Some((s, waits, med, named))
}

/// The collective times that compare a job's ranks, as (time in collectives, the window it
/// is a share of) per rank: each rank's own NCCL measurement when every rank has one, else
/// the GPU trace's collective kernels when every rank has those; `None` otherwise. The
/// report's job view and the monitor both ask it.
pub fn collective_shares(
    nccl: &[Option<(u64, u64)>],
    trace: &[Option<(u64, u64)>],
) -> Option<(CollectiveSource, Vec<(u64, u64)>)> {
    if let Some(v) = nccl.iter().copied().collect::<Option<Vec<_>>>() {
        return Some((CollectiveSource::NcclCalls, v));
    }
    let v = trace.iter().copied().collect::<Option<Vec<_>>>()?;
    Some((CollectiveSource::GpuTrace, v))
}

/// The straggler on the collective basis, and each rank's wait (by index in `ranks`); `None`
/// when some rank has no collective measurement or no rank ran a collective kernel.
fn collective_straggler(
    ranks: &[RankReport],
    shares: &[(u64, u64)],
) -> Option<(Option<Straggler>, Vec<u64>)> {
    let (coll, traced): (Vec<u64>, Vec<u64>) = shares.iter().copied().unzip();
    let (s, waits, med, named) = collective_rule(&coll, &traced)?;
    let others: Vec<u64> = (0..ranks.len())
        .filter(|i| *i != s)
        .map(|i| waits[i])
        .collect();
    let straggler = named.then(|| {
        let waited: Vec<u64> = others
            .iter()
            .copied()
            .filter(|w| *w >= MIN_EXCESS_NS)
            .collect();
        Straggler {
            rank: ranks[s].rank,
            pid: ranks[s].pid,
            score_ns: coll[s],
            others_median_ns: median(
                (0..ranks.len())
                    .filter(|i| *i != s)
                    .map(|i| coll[i])
                    .collect(),
            ),
            excess_ns: med,
            top_site: ranks[s].top_site.clone(),
            waited_ranks: Some(waited.len() as u32),
            waited_ns: Some(waited.iter().sum()),
        }
    });
    Some((straggler, waits))
}

fn job_report(id: &str, ps: &[&ProcessReport]) -> JobReport {
    // The GPU basis only when every rank's GPU was measured: a rank without a measurement
    // would otherwise score 0 and hide a straggler.
    let gpu: Vec<Option<(u64, Option<TopSite>)>> = ps.iter().map(|p| gpu_behind(p)).collect();
    let on_gpu = gpu.iter().all(Option::is_some) && gpu.iter().flatten().any(|(t, _)| *t > 0);
    // Each rank with its process, kept together through the sort (pids may repeat across
    // PID namespaces, so a rank's process is never looked up by pid).
    let mut rows: Vec<(RankReport, &ProcessReport)> = ps
        .iter()
        .zip(&gpu)
        .map(|(p, g)| {
            let j = p.job.as_ref();
            let (score_ns, top_site) = match g {
                Some((t, top)) if on_gpu => (*t, top.clone()),
                _ => (p.stall_ns, top_host_site(p)),
            };
            let rank = RankReport {
                rank: j.and_then(|j| j.rank),
                local_rank: j.and_then(|j| j.local_rank),
                group_rank: j.and_then(|j| j.group_rank),
                pid: p.pid,
                state: p.state.name().to_string(),
                stall_ns: p.stall_ns,
                wall_ns: p.wall_ns,
                gpu_idle_behind_stalls_ns: g.as_ref().map(|(t, _)| *t),
                score_ns,
                collective_ns: p.gpu.collective_share().map(|(c, _)| c),
                collective_wait_ns: None,
                top_site,
            };
            (rank, *p)
        })
        .collect();
    rows.sort_by_key(|(r, _)| (r.rank.is_none(), r.rank, r.pid));
    let (mut ranks, procs): (Vec<RankReport>, Vec<&ProcessReport>) = rows.into_iter().unzip();
    let nccl: Vec<Option<(u64, u64)>> = procs
        .iter()
        .map(|p| p.collectives.as_ref()?.share())
        .collect();
    let trace: Vec<Option<(u64, u64)>> = procs.iter().map(|p| p.gpu.collective_share()).collect();
    // Each rank shows its own NCCL measurement where it has one.
    for (r, s) in ranks.iter_mut().zip(&nccl) {
        if let Some((c, _)) = s {
            r.collective_ns = Some(*c);
        }
    }
    let chosen = collective_shares(&nccl, &trace);
    let found = chosen
        .as_ref()
        .and_then(|(_, shares)| collective_straggler(&ranks, shares));
    if let (Some((source, shares)), Some((straggler, waits))) = (chosen, found) {
        for (((r, w), (c, _)), p) in ranks.iter_mut().zip(waits).zip(&shares).zip(&procs) {
            r.collective_wait_ns = Some(w);
            // The collective basis scores the time in collectives; the host site stays the
            // rank's longest host stall (what made a straggler late).
            r.score_ns = *c;
            r.top_site = top_host_site(p);
        }
        let straggler = straggler.map(|mut s| {
            if let Some(i) = ranks
                .iter()
                .position(|r| r.pid == s.pid && r.rank == s.rank)
            {
                let others: Vec<&ProcessReport> = procs
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| *k != i)
                    .map(|(_, p)| *p)
                    .collect();
                s.top_site = late_site(procs[i], &others).or_else(|| ranks[i].top_site.clone());
            }
            s
        });
        let mut job = finish(id, ps, ranks, Basis::Collective, straggler);
        job.collective_source = Some(source.into());
        return job;
    }
    let scores: Vec<u64> = ranks.iter().map(|r| r.score_ns).collect();
    let straggler = score_rule(&scores).and_then(|(i, others, named)| {
        let r = &ranks[i];
        named.then(|| Straggler {
            rank: r.rank,
            pid: r.pid,
            score_ns: r.score_ns,
            others_median_ns: others,
            excess_ns: r.score_ns.saturating_sub(others),
            top_site: r.top_site.clone(),
            waited_ranks: None,
            waited_ns: None,
        })
    });
    let basis = if on_gpu {
        Basis::GpuIdle
    } else {
        Basis::HostStall
    };
    finish(id, ps, ranks, basis, straggler)
}

fn finish(
    id: &str,
    ps: &[&ProcessReport],
    ranks: Vec<RankReport>,
    basis: Basis,
    straggler: Option<Straggler>,
) -> JobReport {
    let first = ps.first().and_then(|p| p.job.as_ref());
    JobReport {
        id: id.to_string(),
        launcher: first.map(|j| j.launcher.clone()).unwrap_or_default(),
        world_size: ps.iter().filter_map(|p| p.job.as_ref()?.world_size).max(),
        stall_ns: ranks.iter().map(|r| r.stall_ns).sum(),
        ranks,
        basis: basis.into(),
        collective_source: None,
        straggler,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{GapCauseReport, IdleCause, Site};

    fn proc(pid: u32, job: Option<(&str, u32)>, stall_ms: u64, site: &str) -> ProcessReport {
        ProcessReport {
            pid,
            state: "exited".into(),
            stall_ns: stall_ms * 1_000_000,
            job: job.map(|(id, rank)| JobRef {
                id: id.into(),
                launcher: "torchelastic".into(),
                rank: Some(rank),
                local_rank: Some(rank),
                world_size: Some(4),
                group_rank: Some(0),
            }),
            sites: vec![Site {
                kind: "stream_sync".into(),
                api: "cudaStreamSynchronize".into(),
                total_ns: stall_ms * 1_000_000,
                location: Some(site.into()),
                ..Site::default()
            }],
            ..ProcessReport::default()
        }
    }

    /// `proc` with GPU activity traced for `traced_ms` and `coll_ms` in collective kernels.
    fn traced(mut p: ProcessReport, traced_ms: u64, coll_ms: u64) -> ProcessReport {
        p.gpu.measured = true;
        p.gpu.traced_ns = traced_ms * 1_000_000;
        p.gpu.collective_ns = Some(coll_ms * 1_000_000);
        p.gpu.collectives = 100;
        p
    }

    /// `proc` whose library measured its NCCL calls: `coll_ms` of GPU time in collectives
    /// over a `window_ms` window.
    fn nccl(mut p: ProcessReport, window_ms: u64, coll_ms: u64) -> ProcessReport {
        p.collectives = Some(crate::report::CollectivesReport {
            calls: 50,
            measured: 50,
            gpu_ns: coll_ms * 1_000_000,
            window_ns: window_ms * 1_000_000,
            ..Default::default()
        });
        p
    }

    #[test]
    fn the_ranks_own_nccl_measurements_name_the_straggler_over_a_sampled_trace() {
        // Rank 2 is late at train.py:17 before each all-reduce; the others wait for it in their
        // collectives (host stalls name a waiting rank: they wait in `.item()` after it). The
        // GPU trace sampled one second, mostly set-up, where rank 0 had the least collective
        // time: the measurement of every call decides.
        let ps = vec![
            nccl(
                traced(proc(30, Some(("d", 0)), 900, "t.py:20"), 1_000, 1),
                3_000,
                700,
            ),
            nccl(
                traced(proc(31, Some(("d", 1)), 880, "t.py:20"), 1_000, 3),
                3_000,
                690,
            ),
            nccl(
                traced(proc(32, Some(("d", 2)), 200, "t.py:17"), 1_000, 2),
                2_900,
                40,
            ),
            nccl(
                traced(proc(33, Some(("d", 3)), 870, "t.py:20"), 1_000, 3),
                3_000,
                650,
            ),
        ];
        let j = &jobs_of(&ps)[0];
        assert_eq!(j.basis, Basis::Collective);
        assert_eq!(
            j.collective_source(),
            Some(&Name::from(CollectiveSource::NcclCalls))
        );
        let s = j.straggler().expect("a straggler");
        assert_eq!(s.rank, Some(2));
        assert_eq!(
            s.top_site.as_ref().unwrap().location.as_deref(),
            Some("t.py:17")
        );
        assert_eq!(s.waited_ranks, Some(3));
        assert_eq!(j.ranks()[0].collective_ns, Some(700_000_000));
        assert!(j
            .summary()
            .contains("straggler rank 2 stream_sync at t.py:17 -> 3 ranks"));
        // One rank without the measurement (an older library): the trace decides, as before.
        let mut mixed = ps.clone();
        mixed[3].collectives = None;
        let j = &jobs_of(&mixed)[0];
        assert_eq!(
            j.collective_source(),
            Some(&Name::from(CollectiveSource::GpuTrace))
        );
        assert_eq!(j.straggler().and_then(|s| s.rank), Some(0));
    }

    #[test]
    fn three_ranks_at_10_20_and_24_ms_name_the_24_ms_rank() {
        // The others' median is 15 ms (the two middle values averaged): 24 ms is 1.6 times it.
        assert_eq!(
            score_rule(&[10_000_000, 24_000_000, 20_000_000]),
            Some((1, 15_000_000, true))
        );
        assert_eq!(
            score_rule(&[10_000_000, 11_000_000, 12_000_000]).map(|r| r.2),
            Some(false)
        );
        assert_eq!(score_rule(&[5]), None);
    }

    #[test]
    fn the_stragglers_line_is_where_it_stalled_beyond_the_others() {
        // Every rank waits in `.item()` after the all-reduce (t.py:20), the others longest;
        // rank 2 also waits at t.py:17 before it, less than its own wait at t.py:20 on this
        // run: t.py:17 is what made it late.
        let site = |loc: &str, ms: u64| Site {
            kind: "stream_sync".into(),
            api: "cudaStreamSynchronize".into(),
            total_ns: ms * 1_000_000,
            location: Some(loc.into()),
            ..Site::default()
        };
        let mut ps: Vec<ProcessReport> = (0..4)
            .map(|r| nccl(proc(40 + r, Some(("d", r)), 100, "t.py:20"), 3_000, 700))
            .collect();
        for p in &mut ps {
            p.sites = vec![site("t.py:20", 120)];
        }
        ps[2].collectives.as_mut().unwrap().gpu_ns = 40_000_000;
        ps[2].sites = vec![site("t.py:20", 30), site("t.py:17", 24)];
        let j = &jobs_of(&ps)[0];
        let s = j.straggler().expect("a straggler");
        assert_eq!(s.rank, Some(2));
        assert_eq!(
            s.top_site.as_ref().unwrap().location.as_deref(),
            Some("t.py:17")
        );
    }

    #[test]
    fn with_collective_kernels_the_rank_the_others_waited_for_is_named() {
        // Rank 1 stalls at train.py:45 every step; ranks 0, 2 and 3 then wait for it inside
        // their all-reduce kernels: about 300 ms more in collectives than its own 20 ms. Its
        // host stall is no larger than the others' (they wait in `.item()` too, after the
        // all-reduce): host stalls alone would not name it.
        let ps = vec![
            traced(proc(20, Some(("j", 0)), 40, "train.py:50"), 10_000, 330),
            traced(proc(21, Some(("j", 1)), 35, "train.py:45"), 10_000, 20),
            traced(proc(22, Some(("j", 2)), 40, "train.py:50"), 10_000, 310),
            // Traced half as long (another duty window): compared by share of traced time.
            traced(proc(23, Some(("j", 3)), 40, "train.py:50"), 5_000, 160),
        ];
        let j = &jobs_of(&ps)[0];
        assert_eq!(j.basis, Basis::Collective);
        let s = j.straggler.as_ref().expect("a straggler");
        assert_eq!((s.rank, s.pid, s.score_ns), (Some(1), 21, 20_000_000));
        assert_eq!(s.waited_ranks, Some(3));
        // Waits: 330 - 20, 310 - 20, (160/5000 - 20/10000) * 5000 = 150 ms.
        assert_eq!(s.waited_ns, Some(310_000_000 + 290_000_000 + 150_000_000));
        assert_eq!(s.excess_ns, 290_000_000);
        assert_eq!(
            s.top_site.as_ref().unwrap().location.as_deref(),
            Some("train.py:45")
        );
        let waits: Vec<_> = j
            .ranks
            .iter()
            .map(|r| r.collective_wait_ns.unwrap())
            .collect();
        assert_eq!(waits, [310_000_000, 0, 290_000_000, 150_000_000]);
        let line = j.summary();
        assert!(
            line.contains(
                "straggler rank 1 stream_sync at train.py:45 -> 3 ranks waited 750.0 ms in \
                 collectives (its own collective time 20.0 ms)"
            ),
            "{line}"
        );

        // Ranks that reach their collectives together: nobody is named.
        let even = jobs_of(&[
            traced(proc(1, Some(("e", 0)), 40, "t.py:1"), 10_000, 100),
            traced(proc(2, Some(("e", 1)), 40, "t.py:1"), 10_000, 103),
        ]);
        assert_eq!(even[0].basis, Basis::Collective);
        assert_eq!(even[0].straggler, None);
        assert!(even[0].summary().contains("collective-kernel times agree"));

        // One rank without a collective measurement (an older library): the host basis.
        let mut mixed = ps.clone();
        mixed[2].gpu.collective_ns = None;
        assert_ne!(jobs_of(&mixed)[0].basis, Basis::Collective);
        // No rank ran a collective kernel (gloo): not the collective basis either.
        let none: Vec<_> = ps
            .iter()
            .cloned()
            .map(|mut p| {
                p.gpu.collective_ns = Some(0);
                p
            })
            .collect();
        assert_ne!(jobs_of(&none)[0].basis, Basis::Collective);
    }

    #[test]
    fn ranks_are_grouped_by_job_and_the_straggler_named_with_its_site() {
        let ps = vec![
            proc(10, Some(("a", 2)), 20, "train.py:10"),
            proc(11, Some(("a", 0)), 22, "train.py:10"),
            proc(12, Some(("a", 3)), 120, "train.py:88"),
            proc(13, Some(("a", 1)), 18, "train.py:10"),
            proc(14, Some(("b", 0)), 500, "other.py:1"),
            proc(15, None, 900, "x.py:1"),
        ];
        let jobs = jobs_of(&ps);
        assert_eq!(jobs.len(), 2);
        let a = &jobs[0];
        assert_eq!(a.id, "a");
        assert_eq!(a.basis, Basis::HostStall);
        let ranks: Vec<_> = a.ranks.iter().map(|r| r.rank.unwrap()).collect();
        assert_eq!(ranks, [0, 1, 2, 3]);
        assert_eq!(a.stall_ns, 180_000_000);
        let s = a.straggler.as_ref().unwrap();
        assert_eq!((s.rank, s.pid), (Some(3), 12));
        assert_eq!(s.others_median_ns, 20_000_000);
        assert_eq!(s.excess_ns, 100_000_000);
        assert_eq!(
            s.top_site.as_ref().unwrap().location.as_deref(),
            Some("train.py:88")
        );
        let line = a.summary();
        assert!(
            line.contains("straggler rank 3 stream_sync at train.py:88: 120.0 ms"),
            "{line}"
        );
        // One rank alone, or ranks that stall alike, have no straggler.
        assert_eq!(jobs[1].straggler, None);
        let even = jobs_of(&[
            proc(1, Some(("c", 0)), 20, "t.py:1"),
            proc(2, Some(("c", 1)), 24, "t.py:1"),
        ]);
        assert_eq!(even[0].straggler, None);
        assert!(
            even[0].summary().contains("no straggler"),
            "{}",
            even[0].summary()
        );
        // Tiny stalls are not worth a name, however uneven.
        let tiny = jobs_of(&[
            proc(1, Some(("d", 0)), 0, "t.py:1"),
            proc(2, Some(("d", 1)), 0, "t.py:1"),
        ]);
        assert_eq!(tiny[0].straggler, None);
    }

    #[test]
    fn with_gpu_activity_the_score_is_gpu_idle_behind_host_stalls() {
        // Rank 0 stalls longest on the host (it waits at the end of each step for the
        // others), but rank 1's GPU idles behind its `.item()`: rank 1 is the straggler.
        let mut r0 = proc(1, Some(("g", 0)), 300, "train.py:50");
        let mut r1 = proc(2, Some(("g", 1)), 200, "train.py:50");
        for (p, behind, line) in [(&mut r0, 5, "train.py:50"), (&mut r1, 80, "train.py:88")] {
            p.gpu.measured = true;
            p.gpu.causes = vec![
                GapCauseReport {
                    cause: IdleCause::parse(
                        "stream_sync",
                        "cudaStreamSynchronize",
                        0,
                        Some(line.into()),
                    ),
                    total_ns: behind * 1_000_000,
                    ..GapCauseReport::default()
                },
                GapCauseReport {
                    cause: IdleCause::HostBusyElsewhere,
                    total_ns: 900_000_000,
                    ..GapCauseReport::default()
                },
            ];
        }
        let jobs = jobs_of(&[r0.clone(), r1.clone()]);
        assert_eq!(jobs[0].basis, Basis::GpuIdle);
        let s = jobs[0].straggler.as_ref().unwrap();
        assert_eq!((s.rank, s.score_ns), (Some(1), 80_000_000));
        assert_eq!(
            s.top_site.as_ref().unwrap().location.as_deref(),
            Some("train.py:88")
        );
        // A rank whose GPU was not measured: back to host stalls for the whole job.
        r1.gpu.measured = false;
        let jobs = jobs_of(&[r0, r1]);
        assert_eq!(jobs[0].basis, Basis::HostStall);
        assert_eq!(jobs[0].straggler.as_ref().unwrap().rank, Some(0));
    }

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(vec![]), 0);
        assert_eq!(median(vec![3, 1, 2]), 2);
        assert_eq!(median(vec![1, 4]), 2);
        assert_eq!(median(vec![3, 5]), 4);
        assert_eq!(median(vec![u64::MAX, u64::MAX]), u64::MAX);
    }
}
