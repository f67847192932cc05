//! The HTTP side: `/metrics`, `/api/v1/snapshot` (behind the token) and
//! `POST /api/v1/gpu-trace`, answered by hyper on a small tokio runtime from the latest
//! snapshot, so a request never waits for the collector; a page is rendered once per
//! snapshot (off the runtime's workers), and every scrape hands the kernel the same bytes.
//!
//! No client can hold up another (issue 35): at most `MAX_CONNECTIONS` connections are served
//! at once, each with a deadline for its request (`HEADER_TIMEOUT`) and, once it asked, for its
//! whole response (`SEND_DEADLINE`). When every slot is taken, a new connection takes the slot
//! of the oldest one that has not sent a request `GRACE` after it was opened, else of one
//! still sending its response `GRACE` after it was ready (the one whose socket has taken
//! nothing for the longest), and waits for one of those when there is none yet. So connections that never ask, or ask and never read (a receive buffer of 1 byte: the
//! response blocks in the socket), keep no scraper out, however often they are reopened: a
//! scraper that asks and reads has its page within the grace.

use std::collections::BTreeMap;
use std::future::Future;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};

use crate::gpu_trace::gpu_trace;
use crate::metrics;
use crate::token::authorized;
use syncspy_read::snapshot::Snapshot;

/// Connections served at once. Each costs a task, at most `MAX_REQUEST_HEAD` bytes of buffer
/// and the kernel's buffer for its socket (`SEND_BUFFER`); a response body is shared, not
/// copied.
const MAX_CONNECTIONS: usize = 256;
/// Bytes of request head read from one connection (hyper's smallest buffer is 8 KiB).
const MAX_REQUEST_HEAD: usize = 16 * 1024;
/// A client has this long to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Once its request is read, a connection has this long for its whole response to be taken
/// by its socket, then it is reset. Prometheus's default scrape timeout: a scraper with the
/// default settings has given up on a response still being written after it, while a page
/// of 4 MB takes 3.2 s even over a 10 Mbit/s link.
const SEND_DEADLINE: Duration = Duration::from_secs(10);
/// A connection keeps its slot this long after it was opened, and after its response was
/// ready (its request read, its page rendered): when every slot is taken, one idle or still
/// sending past it can lose its slot to a new one. A scraper asks as soon as it is connected
/// (one round trip), and a scrape that reads promptly takes a few milliseconds on the node
/// and well under it over a network (4 MB: 34 ms at 1 Gbit/s, 0.34 s at 100 Mbit/s), so only
/// clients that do not ask, or do not read (or barely), are past it. It is also about the
/// longest a new connection waits for a slot.
const GRACE: Duration = Duration::from_secs(1);
/// The socket send buffer asked for each connection (the kernel doubles it): what a client
/// that does not read can pin in the kernel, instead of the 4 MiB that autotuning gives a
/// loopback socket (256 of them: 1 GiB). 512 KiB in flight is 500 MB/s at a 1 ms round trip.
const SEND_BUFFER: libc::c_int = 256 * 1024;

/// One snapshot and, rendered on first request, its two representations: shared by every
/// connection that asks before the next snapshot, so a page is rendered at most once per
/// snapshot whoever asks, and only when someone does.
pub(crate) struct Served {
    snapshot: Arc<Snapshot>,
    metrics: tokio::sync::OnceCell<Result<Bytes, String>>,
    json: tokio::sync::OnceCell<Result<Bytes, String>>,
}

impl Served {
    pub(crate) fn new(snapshot: Snapshot) -> Arc<Served> {
        Arc::new(Served {
            snapshot: Arc::new(snapshot),
            metrics: tokio::sync::OnceCell::new(),
            json: tokio::sync::OnceCell::new(),
        })
    }

    /// The representation in `cell`, rendered by `render` on the runtime's blocking threads
    /// (a page of megabytes takes a while: the workers keep serving meanwhile); the requests
    /// that ask while it renders wait for the same one.
    async fn rendered(
        &self,
        cell: &tokio::sync::OnceCell<Result<Bytes, String>>,
        render: fn(&Snapshot) -> Result<Bytes, String>,
    ) -> Result<Bytes, String> {
        cell.get_or_init(|| {
            let snapshot = Arc::clone(&self.snapshot);
            async move {
                tokio::task::spawn_blocking(move || render(&snapshot))
                    .await
                    .unwrap_or_else(|e| Err(format!("rendering failed: {e}")))
            }
        })
        .await
        .clone()
    }
}

fn render_metrics(s: &Snapshot) -> Result<Bytes, String> {
    metrics::render(s)
        .map(Bytes::from)
        .map_err(|e| e.to_string())
}

fn render_json(s: &Snapshot) -> Result<Bytes, String> {
    serde_json::to_vec(s)
        .map(Bytes::from)
        .map_err(|e| e.to_string())
}

pub(crate) type Latest = Arc<Mutex<Arc<Served>>>;

async fn respond(
    req: &Request<hyper::body::Incoming>,
    latest: &Latest,
    token: &str,
    token_file: &str,
) -> Response<Full<Bytes>> {
    let served = latest
        .lock()
        .map(|s| Arc::clone(&s))
        .unwrap_or_else(|p| Arc::clone(&p.into_inner()));
    let text = "text/plain; charset=utf-8";
    let plain = |status: u16, body: String| (status, Bytes::from(body), text);
    let rendered = |r: Result<Bytes, String>, ctype| match r {
        Ok(b) => (200, b, ctype),
        Err(e) => plain(500, format!("{e}\n")),
    };
    let trace = req.uri().path() == "/api/v1/gpu-trace";
    let (status, body, ctype) = if trace && req.method() != hyper::Method::POST {
        plain(405, "POST /api/v1/gpu-trace?pid=N&seconds=S\n".into())
    } else if trace && !authorized(req.headers(), token) {
        plain(
            401,
            format!(
                "a tracing request needs `Authorization: Bearer TOKEN`, with the token the agent \
                 wrote to {token_file}\n"
            ),
        )
    } else if trace {
        let (status, body) = gpu_trace(&served.snapshot, req.uri().query().unwrap_or(""));
        plain(status, body)
    } else if req.method() != hyper::Method::GET {
        plain(405, "only GET\n".into())
    } else {
        match req.uri().path() {
            "/metrics" => rendered(
                served.rendered(&served.metrics, render_metrics).await,
                metrics::CONTENT_TYPE,
            ),
            "/api/v1/snapshot" if !authorized(req.headers(), token) => plain(
                401,
                format!(
                    "the snapshot (command lines, call stacks) needs `Authorization: Bearer \
                     TOKEN`, with the token the agent wrote to {token_file} (readable by the \
                     agent's user and root)\n"
                ),
            ),
            "/api/v1/snapshot" => rendered(
                served.rendered(&served.json, render_json).await,
                "application/json",
            ),
            "/" => plain(
                200,
                "syncspy agent\n/metrics            Prometheus metrics\n/api/v1/snapshot    \
                 every followed process as JSON (Authorization: Bearer TOKEN)\nPOST \
                 /api/v1/gpu-trace?pid=N&seconds=S    trace a process's GPU activity for S \
                 seconds (Authorization: Bearer TOKEN)\n"
                    .into(),
            ),
            _ => plain(404, "not found\n".into()),
        }
    };
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(ctype),
    );
    if status == 401 {
        resp.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Bearer realm=\"syncspy\""),
        );
    }
    resp
}

/// What the accept loop knows of a connection it serves.
struct Conn {
    opened: Instant,
    /// When its request was read: milliseconds after `opened`, plus 1 (0: not yet).
    requested: AtomicU64,
    /// When its response was ready to be written (its page rendered), the same way.
    ready: AtomicU64,
    /// When its socket last took bytes of the response, the same way.
    sent: AtomicU64,
    /// Notified when it loses its slot.
    evict: tokio::sync::Notify,
}

impl Conn {
    fn new() -> Conn {
        Conn {
            opened: Instant::now(),
            requested: AtomicU64::new(0),
            ready: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            evict: tokio::sync::Notify::new(),
        }
    }

    fn stamp(&self, at: &AtomicU64) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        at.store(ms.saturating_add(1), Ordering::Relaxed);
    }

    fn when(&self, at: &AtomicU64) -> Option<Instant> {
        match at.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(self.opened + Duration::from_millis(ms - 1)),
        }
    }

    fn seen(&self) -> Seen {
        Seen {
            opened: self.opened,
            requested: self.when(&self.requested),
            ready: self.when(&self.ready),
            sent: self.when(&self.sent),
        }
    }
}

/// A connection as [`victim`] sees it.
#[derive(Clone, Copy, Debug)]
struct Seen {
    opened: Instant,
    requested: Option<Instant>,
    ready: Option<Instant>,
    sent: Option<Instant>,
}

#[derive(Debug, PartialEq, Eq)]
enum Room {
    /// This connection gives its slot up.
    Evict(u64),
    /// None can before then (when the first one's grace ends).
    WaitUntil(Instant),
}

/// Which connection gives its slot up to a new one when every slot is taken (`conns` by id,
/// oldest first): the oldest that has sent no request `GRACE` after it was opened; else, of
/// those whose response has been ready for at least `GRACE` (all still sending: a connection
/// leaves once its response is written), the one whose socket has taken nothing for the
/// longest (a client that does not read before one that reads slowly), the oldest among
/// equals. One whose response is not ready yet (its page being rendered: the agent's time,
/// not the client's) keeps its slot. Else when the first grace may end; `None` when there is
/// no connection.
fn victim(conns: impl IntoIterator<Item = (u64, Seen)>, now: Instant) -> Option<Room> {
    let mut stalled: Option<(Instant, u64)> = None;
    let mut grace_ends: Option<Instant> = None;
    for (id, c) in conns {
        let ends = match (c.requested, c.ready) {
            (None, _) => c.opened + GRACE,
            (Some(_), Some(ready)) => ready + GRACE,
            // Its grace starts when its response is ready: look again then, or after a grace.
            (Some(_), None) => now + GRACE,
        };
        if ends > now {
            grace_ends = Some(grace_ends.map_or(ends, |g| g.min(ends)));
            continue;
        }
        let Some(ready) = c.ready else {
            // Idle past its grace, and the oldest such: the first to go.
            return Some(Room::Evict(id));
        };
        let quiet_since = c.sent.map_or(ready, |s| s.max(ready));
        if stalled.is_none_or(|(q, _)| quiet_since < q) {
            stalled = Some((quiet_since, id));
        }
    }
    stalled
        .map(|(_, id)| Room::Evict(id))
        .or(grace_ends.map(Room::WaitUntil))
}

/// The connections served, by id (ids grow: oldest first).
#[derive(Default)]
struct Slots {
    conns: Mutex<BTreeMap<u64, Arc<Conn>>>,
    /// Notified when a connection leaves.
    freed: tokio::sync::Notify,
}

impl Slots {
    fn conns(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Returns once a new connection may take a slot: one is free, or one was taken from
    /// its connection (`victim`), which closes; until then it waits (about `GRACE` at most).
    async fn make_room(&self) {
        loop {
            let until = {
                let mut conns = self.conns();
                if conns.len() < MAX_CONNECTIONS {
                    return;
                }
                let seen = conns.iter().map(|(id, c)| (*id, c.seen()));
                match victim(seen, Instant::now()) {
                    Some(Room::Evict(id)) => {
                        if let Some(c) = conns.remove(&id) {
                            c.evict.notify_one();
                        }
                        return;
                    }
                    Some(Room::WaitUntil(t)) => t,
                    None => return,
                }
            };
            first_of(
                self.freed.notified(),
                tokio::time::sleep_until(until.into()),
            )
            .await;
        }
    }

    fn leave(&self, id: u64) {
        self.conns().remove(&id);
        self.freed.notify_one();
    }
}

/// Waits for the first of `a` and `b`.
async fn first_of(a: impl Future<Output = ()>, b: impl Future<Output = ()>) {
    let (mut a, mut b) = (pin!(a), pin!(b));
    std::future::poll_fn(|cx| {
        if a.as_mut().poll(cx).is_ready() || b.as_mut().poll(cx).is_ready() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

/// A connection's socket that notes when it takes bytes of the response.
struct Tracked {
    io: tokio::net::TcpStream,
    conn: Arc<Conn>,
}

impl Tracked {
    fn took(&self, r: &Poll<std::io::Result<usize>>) {
        if matches!(r, Poll::Ready(Ok(n)) if *n > 0) {
            self.conn.stamp(&self.conn.sent);
        }
    }
}

impl tokio::io::AsyncRead for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Tracked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        this.took(&r);
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.took(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Sets an integer socket option of `fd`; a failure leaves the kernel's default.
fn set_option(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &impl Sized) {
    // SAFETY: `value` is a plain value of the size given, read by the kernel only.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            std::ptr::from_ref(value).cast::<libc::c_void>(),
            std::mem::size_of_val(value) as libc::socklen_t,
        );
    }
}

/// Accepts connections until the process ends: each on a task of its own with a bounded
/// buffer and send buffer, a header timeout and a send deadline, one request per connection
/// (pipelined ones are not read), at most `MAX_CONNECTIONS` at once. When every slot is
/// taken, the connection just accepted takes the slot of the oldest connection idle for
/// `GRACE`, else of the most stalled one still sending `GRACE` after its response was ready
/// (`victim`), waiting for one (later connections wait in the listen backlog meanwhile). A
/// connection cut off (evicted or past its deadline) is reset, so that the kernel drops what
/// is queued for it at once.
pub(crate) async fn accept_loop(
    listener: tokio::net::TcpListener,
    latest: Latest,
    token: Arc<str>,
    token_file: Arc<str>,
) {
    let slots: Arc<Slots> = Arc::default();
    let mut next_id = 0u64;
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(_) => {
                // Out of file descriptors, say: let some connections end first.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        slots.make_room().await;
        let id = next_id;
        next_id += 1;
        let conn = Arc::new(Conn::new());
        slots.conns().insert(id, Arc::clone(&conn));
        let (latest, token, token_file) = (
            Arc::clone(&latest),
            Arc::clone(&token),
            Arc::clone(&token_file),
        );
        let slots = Arc::clone(&slots);
        tokio::spawn(async move {
            serve_connection(stream, conn, latest, token, token_file).await;
            slots.leave(id);
        });
    }
}

/// Serves one connection until its response is written, it runs out of time or it is
/// evicted (then reset).
async fn serve_connection(
    stream: tokio::net::TcpStream,
    conn: Arc<Conn>,
    latest: Latest,
    token: Arc<str>,
    token_file: Arc<str>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let fd = stream.as_raw_fd();
    set_option(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &SEND_BUFFER);
    let asked = Arc::clone(&conn);
    let svc = hyper::service::service_fn(move |req| {
        asked.stamp(&asked.requested);
        let (latest, token, token_file) = (
            Arc::clone(&latest),
            Arc::clone(&token),
            Arc::clone(&token_file),
        );
        let ready = Arc::clone(&asked);
        async move {
            let resp = respond(&req, &latest, &token, &token_file).await;
            ready.stamp(&ready.ready);
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    let io = TokioIo::new(Tracked {
        io: stream,
        conn: Arc::clone(&conn),
    });
    let http = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .keep_alive(false)
        .max_buf_size(MAX_REQUEST_HEAD)
        .serve_connection(io, svc);
    let mut http = pin!(http);
    // Until the request, hyper's header timeout holds (this is a backstop); from the
    // request, the send deadline, and again from the response ready (its page rendered).
    let mut deadline = pin!(tokio::time::sleep(HEADER_TIMEOUT + Duration::from_secs(1)));
    let mut since = None;
    let mut evicted = pin!(conn.evict.notified());
    // A client that went away is not the agent's problem: whatever hyper's result, the
    // connection is done.
    let cut = std::future::poll_fn(|cx| {
        if http.as_mut().poll(cx).is_ready() {
            return Poll::Ready(false);
        }
        let from = conn.when(&conn.ready).or(conn.when(&conn.requested));
        if from != since {
            if let Some(t) = from {
                deadline.as_mut().reset((t + SEND_DEADLINE).into());
            }
            since = from;
        }
        if evicted.as_mut().poll(cx).is_ready() || deadline.as_mut().poll(cx).is_ready() {
            Poll::Ready(true)
        } else {
            Poll::Pending
        }
    })
    .await;
    if cut {
        // The socket is still open (`http` owns it): closed with a reset when dropped.
        let abort = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        set_option(fd, libc::SOL_SOCKET, libc::SO_LINGER, &abort);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Opened `age_ms` before `now`, asked (its response ready at once) `asked_ms` before it,
    /// took bytes `sent_ms` before.
    fn conn(now: Instant, age_ms: u64, asked_ms: Option<u64>, sent_ms: Option<u64>) -> Seen {
        let ago = |ms| now - Duration::from_millis(ms);
        Seen {
            opened: ago(age_ms),
            requested: asked_ms.map(ago),
            ready: asked_ms.map(ago),
            sent: sent_ms.map(ago),
        }
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(600)
    }

    #[test]
    fn the_oldest_idle_connection_past_its_grace_goes_first() {
        let now = later();
        let conns = [
            (1, conn(now, 30_000, Some(30_000), None)),
            (2, conn(now, 5000, None, None)),
            (3, conn(now, 2000, None, None)),
        ];
        assert_eq!(victim(conns, now), Some(Room::Evict(2)));
        // One just accepted, its request not read yet, is not idle: it keeps its slot.
        let conns = [
            (1, conn(now, 30_000, Some(30_000), None)),
            (2, conn(now, 5, None, None)),
        ];
        assert_eq!(victim(conns, now), Some(Room::Evict(1)));
    }

    #[test]
    fn then_the_longest_stalled_sender_past_its_grace() {
        let now = later();
        let conns = [
            // Asked 5 s ago, its socket took bytes 100 ms ago: a slow reader.
            (1, conn(now, 5000, Some(5000), Some(100))),
            // Asked 3 s ago, took the first bytes then nothing: does not read.
            (2, conn(now, 3000, Some(3000), Some(2999))),
            // Asked 4 s ago, nothing taken since.
            (3, conn(now, 4000, Some(4000), None)),
            // Asked within the grace, or opened within it: not yet.
            (4, conn(now, 9000, Some(10), None)),
            (5, conn(now, 10, None, None)),
        ];
        assert_eq!(victim(conns, now), Some(Room::Evict(3)));
        // Equals: the oldest.
        let conns = [
            (7, conn(now, 2000, Some(2000), None)),
            (8, conn(now, 2000, Some(2000), None)),
        ];
        assert_eq!(victim(conns, now), Some(Room::Evict(7)));
    }

    #[test]
    fn within_the_grace_nobody_is_evicted_until_the_first_grace_ends() {
        let now = later();
        let conns = [
            (1, conn(now, 5000, Some(300), None)),
            (2, conn(now, 700, Some(700), None)),
            (3, conn(now, 600, None, None)),
        ];
        assert_eq!(
            victim(conns, now),
            Some(Room::WaitUntil(now - Duration::from_millis(700) + GRACE))
        );
        assert_eq!(victim([], now), None);
    }

    #[test]
    fn a_response_being_rendered_keeps_its_slot_and_its_grace_starts_when_ready() {
        let now = later();
        let ago = |ms| now - Duration::from_millis(ms);
        // Asked 3 s ago, its page still being rendered.
        let rendering = Seen {
            ready: None,
            ..conn(now, 3000, Some(3000), None)
        };
        // Asked 3 s ago, ready 200 ms ago.
        let rendered = Seen {
            ready: Some(ago(200)),
            ..conn(now, 3000, Some(3000), None)
        };
        assert_eq!(
            victim([(1, rendering), (2, rendered)], now),
            Some(Room::WaitUntil(ago(200) + GRACE))
        );
        assert_eq!(
            victim([(1, rendering)], now),
            Some(Room::WaitUntil(now + GRACE))
        );
        let stalled = conn(now, 1500, Some(1500), None);
        assert_eq!(
            victim([(1, rendering), (2, rendered), (3, stalled)], now),
            Some(Room::Evict(3))
        );
    }
}
