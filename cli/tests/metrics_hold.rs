//! `/metrics` answers its scraper while hundreds of clients ask for it and never read
//! (issue 35, item 2): with a page of megabytes, a response to a client whose receive buffer
//! is 1 byte blocks in the socket. 300 such connections held every one of the agent's 256
//! slots as "serving" until its 30 s deadline, and scrapes were turned away (5 of 120
//! answered in 60 s). Now a response has a send deadline, and a new connection takes the slot
//! of the oldest idle connection, else of one that has been sending for longer than a short
//! grace. Loopback only, bounded in count and time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod common;
use common::{eventually, metrics, start_agent, TempDir};
use syncspy_abi::{Api, Kind, SegmentParams, SegmentWriter};

/// Clients that ask and never read: more than the agent serves at once (256).
const HOLDERS: usize = 300;
/// Programs with series of their own (the agent gives its own user's programs up to 50).
const PROGRAMS: u32 = 40;

/// Segments of `PROGRAMS` live processes of this user, each a program of a long name with a
/// record of every host-stall kind: a page of megabytes (every series carries the name).
fn big_page(dir: &std::path::Path) -> Vec<SegmentWriter> {
    let long = "n".repeat(800);
    (0..PROGRAMS)
        .map(|i| {
            let mut p = SegmentParams::new(3_500_000 + i, 91);
            p.ring_capacity = 256;
            p.site_capacity = 64;
            p.cmdline = format!("/opt/{long}-{i}\0--epochs\0").into_bytes();
            let w = SegmentWriter::create(dir, &p).unwrap();
            let site = w.intern_site(&[0x7f00_0000_1000 + u64::from(i)]).unwrap();
            for (k, kind) in Kind::ALL.iter().enumerate() {
                // Durations over the buckets, so that each histogram has its counts.
                for d in 0..4u32 {
                    w.record(&syncspy_test_support::rec(
                        *kind,
                        Api::CudaStreamSynchronize,
                        10u64.pow(4 + d) + k as u64,
                        0,
                        site,
                    ));
                }
            }
            w
        })
        .collect()
}

/// A connection to `addr` with a receive buffer of 1 byte (the kernel's least, a few KB),
/// set before the connection so that the window it offers is that small from the start.
fn tiny_window(addr: SocketAddrV4) -> Option<TcpStream> {
    // SAFETY: a new socket, owned by the TcpStream made of it (closed on every error path
    // through it); the options and the address are plain values of the sizes given.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let s = TcpStream::from_raw_fd(fd);
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        // connect gives up after 1 s when the agent's backlog is full.
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: addr.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*addr.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let r = libc::connect(
            fd,
            (&sin as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        (r == 0).then_some(s)
    }
}

/// `HOLDERS` connections that each send `GET /metrics` and never read; one the agent closes
/// is opened again at once (the attacker keeps every slot it can). Stopped and closed when
/// dropped.
struct Holders {
    stop: Arc<AtomicBool>,
    /// Connections the agent cut off with a reset (its response blocked in the socket).
    reset: Arc<AtomicUsize>,
    /// Connections the agent closed otherwise.
    closed: Arc<AtomicUsize>,
    opened: Arc<AtomicUsize>,
    /// Open connections whose response has begun (bytes wait in their receive buffer).
    answered: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Holders {
    fn start(addr: SocketAddrV4) -> Holders {
        let stop = Arc::new(AtomicBool::new(false));
        let reset = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let opened = Arc::new(AtomicUsize::new(0));
        let answered = Arc::new(AtomicUsize::new(0));
        let open = {
            let opened = Arc::clone(&opened);
            move || {
                let mut s = tiny_window(addr)?;
                write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").ok()?;
                opened.fetch_add(1, Ordering::Relaxed);
                Some(s)
            }
        };
        // (One the agent closes at once is opened again by the thread.)
        let mut held: Vec<TcpStream> = (0..HOLDERS).filter_map(|_| open()).collect();
        let thread = {
            let (stop, reset, closed, answered) = (
                Arc::clone(&stop),
                Arc::clone(&reset),
                Arc::clone(&closed),
                Arc::clone(&answered),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let mut fds: Vec<libc::pollfd> = held
                        .iter()
                        .map(|s| libc::pollfd {
                            fd: s.as_raw_fd(),
                            events: libc::POLLIN | libc::POLLRDHUP,
                            revents: 0,
                        })
                        .collect();
                    // SAFETY: `fds` is an array of `fds.len()` pollfd of open sockets.
                    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 20) };
                    let ended = |f: &libc::pollfd| {
                        f.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
                    };
                    let begun = fds
                        .iter()
                        .filter(|f| !ended(f) && f.revents & libc::POLLIN != 0)
                        .count();
                    answered.store(begun, Ordering::Relaxed);
                    for (i, f) in fds.iter().enumerate().rev() {
                        if ended(f) {
                            let s = held.swap_remove(i);
                            if f.revents & libc::POLLERR != 0 {
                                reset.fetch_add(1, Ordering::Relaxed);
                            } else {
                                closed.fetch_add(1, Ordering::Relaxed);
                            }
                            drop(s);
                        }
                    }
                    while held.len() < HOLDERS && !stop.load(Ordering::Relaxed) {
                        match open() {
                            Some(s) => held.push(s),
                            None => break,
                        }
                    }
                }
            })
        };
        Holders {
            stop,
            reset,
            closed,
            opened,
            answered,
            thread: Some(thread),
        }
    }
}

impl Drop for Holders {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One scrape as Prometheus makes it: the whole page, read at once, within 5 s.
fn scrape(addr: &str) -> Result<usize, String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let sa = addr.parse().unwrap();
    let mut s = TcpStream::connect_timeout(&sa, Duration::from_secs(5))
        .map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut resp = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        if Instant::now() > deadline {
            return Err(format!("not whole after 5 s ({} bytes)", resp.len()));
        }
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => resp.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("after {} bytes: {e}", resp.len())),
        }
    }
    if !resp.starts_with(b"HTTP/1.1 200") {
        return Err(format!(
            "{} bytes: {:?}",
            resp.len(),
            String::from_utf8_lossy(&resp[..resp.len().min(200)])
        ));
    }
    if !resp.ends_with(b"# EOF\n") {
        return Err(format!("cut short at {} bytes", resp.len()));
    }
    Ok(resp.len())
}

#[test]
fn metrics_answer_while_hundreds_of_clients_ask_and_never_read() {
    let d = TempDir::new("metrics-hold");
    let _segments = big_page(d.path());
    // A new snapshot (and page) every 3 s.
    let (_agent, addr) = start_agent(
        d.path(),
        &d.path().join("agent.token"),
        &["--interval-ms", "3000"],
    );
    // Every program's series are in the page once the agent drained the records.
    let page = eventually("every program's series", || {
        let m = metrics(&addr);
        let n = m
            .lines()
            .filter(|l| l.starts_with("syncspy_stall_events_total{") && l.contains("host_wait"))
            .count();
        (n >= PROGRAMS as usize).then_some(m.len())
    });
    eprintln!("/metrics: {page} bytes");
    assert!(
        page > 4 << 20,
        "a page of {page} bytes is too small for a response to block in loopback's socket \
         buffers"
    );

    let started = Instant::now();
    let holders = Holders::start(addr.parse().unwrap());
    eprintln!(
        "{HOLDERS} connections asked and do not read ({:?})",
        started.elapsed()
    );
    // The agent has taken their requests: every slot is answering one of them, its
    // response blocked in the socket (the old agent takes a few seconds to get there).
    let full = Instant::now() + Duration::from_secs(20);
    while holders.answered.load(Ordering::Relaxed) < 256 && Instant::now() < full {
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "{} holders answered, at {:?}",
        holders.answered.load(Ordering::Relaxed),
        started.elapsed()
    );

    // Prometheus, meanwhile: every scrape whole within 5 s.
    let mut answered = 0;
    let mut failures = Vec::new();
    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let t = Instant::now();
        match scrape(&addr) {
            Ok(_) => answered += 1,
            Err(e) => failures.push(format!("scrape {i}: {e} after {:?}", t.elapsed())),
        }
        slowest = slowest.max(t.elapsed());
        std::thread::sleep(Duration::from_millis(100));
    }
    let (reset, closed, opened) = (
        holders.reset.load(Ordering::Relaxed),
        holders.closed.load(Ordering::Relaxed),
        holders.opened.load(Ordering::Relaxed),
    );
    drop(holders);
    eprintln!(
        "{answered} of 20 scrapes answered (slowest {slowest:?}); holders: {opened} opened, \
         {reset} cut off by the agent, {closed} closed otherwise, in {:?}",
        started.elapsed()
    );
    assert_eq!(answered, 20, "scrapes held up: {failures:#?}");
    // The attack was one: responses blocked and the agent cut their connections off.
    assert!(
        reset >= 20,
        "only {reset} holders were cut off: their responses did not block"
    );
}
