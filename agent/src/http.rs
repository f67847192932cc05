//! The HTTP side: `/metrics`, `/api/v1/snapshot` (behind the token) and
//! `POST /api/v1/gpu-trace`, answered by hyper on a small tokio runtime from the latest
//! snapshot, so a request never waits for the collector.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};

use crate::gpu_trace::gpu_trace;
use crate::metrics;
use crate::token::authorized;
use syncspy_read::snapshot::Snapshot;

/// Connections served at once; further ones are closed at once. Each costs a task and
/// at most `MAX_REQUEST_HEAD` bytes of buffer; a response body is shared, not copied.
const MAX_CONNECTIONS: usize = 256;
/// Bytes of request head read from one connection (hyper's smallest buffer is 8 KiB).
const MAX_REQUEST_HEAD: usize = 16 * 1024;
/// A client has this long to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection, request and response together, is closed after this long, read or not.
const CONNECTION_DEADLINE: Duration = Duration::from_secs(30);

/// One snapshot and, rendered on first request, its two representations (shared by every
/// connection that asks before the next snapshot).
pub(crate) struct Served {
    snapshot: Arc<Snapshot>,
    metrics: OnceLock<Result<Bytes, String>>,
    json: OnceLock<Result<Bytes, String>>,
}

impl Served {
    pub(crate) fn new(snapshot: Snapshot) -> Arc<Served> {
        Arc::new(Served {
            snapshot: Arc::new(snapshot),
            metrics: OnceLock::new(),
            json: OnceLock::new(),
        })
    }
}

pub(crate) type Latest = Arc<Mutex<Arc<Served>>>;

fn respond(
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
    let rendered = |r: &Result<Bytes, String>, ctype| match r {
        Ok(b) => (200, b.clone(), ctype),
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
                served.metrics.get_or_init(|| {
                    metrics::render(&served.snapshot)
                        .map(Bytes::from)
                        .map_err(|e| e.to_string())
                }),
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
                served.json.get_or_init(|| {
                    serde_json::to_vec(&*served.snapshot)
                        .map(Bytes::from)
                        .map_err(|e| e.to_string())
                }),
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

/// Accepts connections until the process ends: each on a task of its own with a bounded
/// buffer, a header timeout and a deadline, one request per connection (pipelined ones
/// are not read), at most `MAX_CONNECTIONS` at once. No client can hold up another: a
/// client that never reads its response holds only its own task, until the deadline; and
/// when every slot is taken, a new connection takes the slot of the oldest one that has not
/// sent a request yet (connections opened and left idle, however many and however often
/// reopened, cannot keep a scrape out: it sends its request at once).
pub(crate) async fn accept_loop(
    listener: tokio::net::TcpListener,
    latest: Latest,
    token: Arc<str>,
    token_file: Arc<str>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Connections that have not sent a request yet, oldest first: (id, how to close it).
    type Idle = Mutex<VecDeque<(u64, Arc<tokio::sync::Notify>)>>;
    let idle: Arc<Idle> = Arc::default();
    let active = Arc::new(AtomicUsize::new(0));
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
        if active.load(Ordering::Acquire) >= MAX_CONNECTIONS {
            let oldest = idle.lock().ok().and_then(|mut q| q.pop_front());
            match oldest {
                // It closes at once; its slot is this one's.
                Some((_, close)) => close.notify_one(),
                None => continue, // every slot is serving a request: dropped, closed at once
            }
        }
        active.fetch_add(1, Ordering::AcqRel);
        let id = next_id;
        next_id += 1;
        let close = Arc::new(tokio::sync::Notify::new());
        if let Ok(mut q) = idle.lock() {
            q.push_back((id, Arc::clone(&close)));
        }
        let (latest, token, token_file) = (
            Arc::clone(&latest),
            Arc::clone(&token),
            Arc::clone(&token_file),
        );
        let (idle, active) = (Arc::clone(&idle), Arc::clone(&active));
        tokio::spawn(async move {
            let forget = {
                let idle = Arc::clone(&idle);
                move || {
                    if let Ok(mut q) = idle.lock() {
                        q.retain(|(i, _)| *i != id);
                    }
                }
            };
            let requested = forget.clone();
            let svc = hyper::service::service_fn(move |req| {
                // A request came: this connection is no longer one to evict.
                requested();
                let resp = respond(&req, &latest, &token, &token_file);
                async move { Ok::<_, std::convert::Infallible>(resp) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(false)
                .max_buf_size(MAX_REQUEST_HEAD)
                .serve_connection(TokioIo::new(stream), svc);
            // A client that went away, ran out of time or was evicted idle is not the
            // agent's problem.
            let mut served = std::pin::pin!(tokio::time::timeout(CONNECTION_DEADLINE, conn));
            let mut evicted = std::pin::pin!(close.notified());
            std::future::poll_fn(|cx| {
                use std::future::Future;
                if served.as_mut().poll(cx).is_ready() || evicted.as_mut().poll(cx).is_ready() {
                    std::task::Poll::Ready(())
                } else {
                    std::task::Poll::Pending
                }
            })
            .await;
            forget();
            active.fetch_sub(1, Ordering::AcqRel);
        });
    }
}
