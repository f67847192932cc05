//! The library keeps itself under its budget (issue 36): at a hostile rate of events its own
//! time passes 1% of the wall time, and it sheds detail in the documented order (call-site
//! stacks, then GPU gap records, then per-event records), one level a second, while every
//! count and time stays exact; the report and the summary say what was shed. With the budget
//! off, nothing is shed. Runs `cudacalls` on the simulated runtime: each
//! `cudaStreamSynchronize` of an idle stream is a recorded stall of about a microsecond.
//! The counts are asserted, never the time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;

mod common;
use common::{cudacalls, run_sim_report, TempDir};

/// Syncs of the hostile loop: about 5 s in a debug build here, so that the second level (a
/// second after the first) is reached well before the end on a fast machine too.
const CALLS: u64 = 800_000;

/// Runs `calls` syncs with `env`; the report's process, the program's own counts and
/// syncspy's stderr.
fn hostile(d: &TempDir, calls: u64, env: &[(&str, &str)]) -> (Value, Value, String) {
    let iters = calls.to_string();
    run_sim_report(d, &[&cudacalls(), "--iters", &iters, "sync=s1"], env)
}

/// The stream syncs of the report's process that sit in a call site with a location.
fn syncs_at_a_site(p: &Value) -> u64 {
    p["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "stream_sync" && s["location"].is_string())
        .map(|s| n(&s["count"]))
        .sum()
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn a_hostile_rate_sheds_detail_in_order_and_keeps_every_count() {
    let d = TempDir::new("self-budget");
    let (p, truth, stderr) = hostile(&d, CALLS, &[]);
    // Every call counted, whatever was shed.
    let syncs = n(&truth["calls"]["cudaStreamSynchronize"]["count"]);
    assert_eq!(syncs, CALLS);
    assert_eq!(n(&p["kinds"]["stream_sync"]["count"]), syncs, "{stderr}");
    assert_eq!(n(&p["apis"]["cudaStreamSynchronize"]["count"]), syncs);
    // Shed, in order: stacks first, and deeper a level at a time.
    let cost = &p["cost"];
    assert_eq!(cost["budget_pct"].as_f64(), Some(1.0), "{p}");
    assert!(n(&cost["raised"]) >= 2, "{cost}");
    assert!(n(&cost["stacks_shed"]) > 0, "{cost}");
    assert!(
        ["gap_records", "records"].contains(&cost["shedding"].as_str().unwrap()),
        "{cost}"
    );
    // The events kept as records and those kept as totals only add up to every event.
    let events: u64 = p["kinds"]
        .as_object()
        .unwrap()
        .values()
        .map(|k| n(&k["count"]))
        .sum();
    assert_eq!(
        n(&p["recorded_events"]) + n(&cost["records_shed"]) + n(&p["lost_records"]),
        events,
        "{p}"
    );
    // Events without a stack sit in no call site; the sites hold the rest.
    let in_sites = syncs_at_a_site(&p);
    assert!(in_sites > 0 && in_sites < syncs, "{in_sites}");
    assert!(
        stderr.contains("!! syncspy went over its budget (1% of wall) and shed detail:"),
        "{stderr}"
    );
    assert!(stderr.contains("without a call site"), "{stderr}");
}

#[test]
fn with_the_budget_off_nothing_is_shed() {
    let d = TempDir::new("self-budget-off");
    let (p, truth, stderr) = hostile(&d, CALLS / 4, &[("SYNCSPY_BUDGET", "off")]);
    let syncs = n(&truth["calls"]["cudaStreamSynchronize"]["count"]);
    assert_eq!(syncs, CALLS / 4);
    assert_eq!(n(&p["kinds"]["stream_sync"]["count"]), syncs);
    assert!(p.get("cost").is_none(), "{p}");
    assert!(!stderr.contains("went over its budget"), "{stderr}");
    // Every event is a record with its call site.
    assert_eq!(syncs_at_a_site(&p), syncs);
}
