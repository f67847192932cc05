//! `/metrics` keeps answering whatever one local user opens (issue: 260 connections that
//! reconnect when closed stopped it: 0 of 75 probes answered). Loopback only, bounded in
//! count and time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::{start_agent, TempDir};

/// One scrape: whether a whole `/metrics` answer came back within 5 s.
fn probe(addr: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    if write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").is_err() {
        return false;
    }
    let mut resp = String::new();
    s.read_to_string(&mut resp).is_ok()
        && resp.starts_with("HTTP/1.0 200")
        && resp.contains("# EOF")
}

#[test]
fn metrics_answer_while_a_user_holds_and_reopens_hundreds_of_idle_connections() {
    let d = TempDir::new("metrics-flood");
    let (_agent, addr) = start_agent(d.path(), &d.path().join("agent.token"), &[]);
    assert!(probe(&addr), "no answer before the flood");

    // 300 connections that send nothing and are opened again as soon as they close, for at
    // most 20 s (more than the agent serves at once).
    let stop = Arc::new(AtomicBool::new(false));
    let flood: Vec<_> = (0..4)
        .map(|_| {
            let (addr, stop) = (addr.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(20);
                let mut held: Vec<TcpStream> = Vec::new();
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    // Reopen what the agent closed.
                    held.retain(|s| {
                        let mut b = [0u8; 1];
                        s.set_nonblocking(true).unwrap();
                        !matches!((&*s).read(&mut b), Ok(0))
                    });
                    while held.len() < 75 {
                        match TcpStream::connect(&addr) {
                            Ok(s) => held.push(s),
                            Err(_) => break,
                        }
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let answered = (0..30)
        .filter(|_| {
            let ok = probe(&addr);
            std::thread::sleep(Duration::from_millis(100));
            ok
        })
        .count();
    eprintln!("{answered} of 30 scrapes answered under the flood");
    stop.store(true, Ordering::Relaxed);
    for t in flood {
        t.join().unwrap();
    }
    assert!(
        answered >= 28,
        "{answered} of 30 scrapes answered under the flood"
    );
}
