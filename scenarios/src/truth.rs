//! The ground-truth account a program prints at exit: per CUDA API, how many calls it made,
//! the bytes they moved, and the host time each took as the program itself measured it.

use std::collections::BTreeMap;
use std::time::Instant;

#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    pub count: u64,
    pub bytes: u64,
    pub total_ns: u64,
    pub max_ns: u64,
}

#[derive(Debug, Default)]
pub struct Truth {
    pub calls: BTreeMap<&'static str, Tally>,
}

impl Truth {
    /// Runs `f` (one CUDA call named `api`), timing it, and adds it to the account.
    pub fn call<R>(&mut self, api: &'static str, bytes: u64, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        let ns = t.elapsed().as_nanos() as u64;
        let e = self.calls.entry(api).or_default();
        e.count += 1;
        e.bytes += bytes;
        e.total_ns += ns;
        e.max_ns = e.max_ns.max(ns);
        r
    }

    pub fn merge(&mut self, other: &Truth) {
        for (k, v) in &other.calls {
            let e = self.calls.entry(k).or_default();
            e.count += v.count;
            e.bytes += v.bytes;
            e.total_ns += v.total_ns;
            e.max_ns = e.max_ns.max(v.max_ns);
        }
    }

    /// One JSON object: `{"pid":..,"calls":{"api":{"count":..,"bytes":..,"total_ns":..,"max_ns":..}}}`.
    pub fn to_json(&self, pid: u32) -> String {
        let calls: Vec<String> = self
            .calls
            .iter()
            .map(|(k, v)| {
                format!(
                    "\"{k}\":{{\"count\":{},\"bytes\":{},\"total_ns\":{},\"max_ns\":{}}}",
                    v.count, v.bytes, v.total_ns, v.max_ns
                )
            })
            .collect();
        format!("{{\"pid\":{pid},\"calls\":{{{}}}}}", calls.join(","))
    }
}
