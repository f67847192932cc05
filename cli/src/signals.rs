//! The signals that end a recording, for the two ways syncspy takes them.
//!
//! [`Forwarder`]: forwarding SIGINT and SIGTERM to the command while `syncspy run` waits for
//! it. syncspy itself must survive these signals (it still has to drain, report and clean
//! up); the command decides what they mean. A signal another process sent to syncspy
//! (`kill`, si_code `SI_USER` and friends) is passed on to the command. One the terminal
//! generated (Ctrl-C, si_code `SI_KERNEL`) already reached the command, which shares
//! syncspy's process group, so it is not sent twice.
//!
//! [`StopFlag`]: the one stop flag of `syncspy attach` (and of the node agent), set by
//! SIGINT, SIGTERM or SIGHUP and read by its loop, which then detaches and reports. It lives
//! in the reader, which the agent shares.

use std::io;
use std::sync::atomic::{AtomicI32, Ordering};

use syncspy_read::stop::Installed;
pub use syncspy_read::stop::StopFlag;

/// Pid of the command (0: none yet / already reaped).
static CHILD: AtomicI32 = AtomicI32::new(0);
/// A signal that arrived before the command's pid was known.
static PENDING: AtomicI32 = AtomicI32::new(0);

const SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let code = if info.is_null() {
        libc::SI_USER
    } else {
        // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t.
        unsafe { (*info).si_code }
    };
    if code == libc::SI_KERNEL {
        return;
    }
    let pid = CHILD.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    } else {
        PENDING.store(sig, Ordering::SeqCst);
    }
}

/// Installed handlers; the previous ones come back on drop.
pub struct Forwarder {
    _handlers: Installed,
}

impl Forwarder {
    /// Installs the handlers. Call before starting the command so that no signal in
    /// between kills syncspy; then `set_child`.
    pub fn install() -> io::Result<Forwarder> {
        CHILD.store(0, Ordering::SeqCst);
        PENDING.store(0, Ordering::SeqCst);
        Ok(Forwarder {
            _handlers: Installed::new(&SIGNALS, on_signal)?,
        })
    }

    /// From now on signals go to `pid`; one that arrived before is sent now.
    pub fn set_child(&self, pid: u32) {
        let pid = i32::try_from(pid).unwrap_or(0);
        CHILD.store(pid, Ordering::SeqCst);
        let pending = PENDING.swap(0, Ordering::SeqCst);
        if pending != 0 && pid > 0 {
            // SAFETY: plain syscall on a pid we started and have not reaped yet.
            unsafe { libc::kill(pid, pending) };
        }
    }

    /// Stops forwarding (the command was reaped: its pid may be reused).
    pub fn clear_child() {
        CHILD.store(0, Ordering::SeqCst);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        // Before the handlers are restored (the field drops after this).
        CHILD.store(0, Ordering::SeqCst);
    }
}
