//! The stop signals of a reader that runs until asked to end: `syncspy attach` (SIGINT,
//! SIGTERM, SIGHUP) and the node agent (SIGINT, SIGTERM). Each must clean up before it goes
//! (detach and report; remove its token file), so a stop signal only sets a flag that its
//! loop reads.
//!
//! - [`StopFlag`]: the handlers that set the one flag, restored on drop.
//! - [`Installed`]: handlers for some signals, the previous ones restored on drop; the CLI's
//!   forwarder of signals to `syncspy run`'s command installs through it too.
//! - [`Blocked`]: stop signals blocked in the calling thread while it starts threads, so
//!   that they reach the thread that waits for them.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by a stop signal while a [`StopFlag`] is installed.
static STOP: AtomicBool = AtomicBool::new(false);

/// SIGINT, SIGTERM and SIGHUP: what ends an interactive reader (`syncspy attach`), the
/// terminal's hang-up included.
pub const INTERACTIVE: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// SIGINT and SIGTERM: what ends a daemon (the node agent).
pub const DAEMON: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// A signal handler that takes the `siginfo_t` (`SA_SIGINFO`).
pub type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// Handlers installed for some signals; the previous ones come back on drop.
pub struct Installed {
    old: Vec<(libc::c_int, libc::sigaction)>,
}

impl Installed {
    /// `handler` for each of `signals` (`SA_SIGINFO | SA_RESTART`). The handler must be
    /// async-signal-safe. `SA_RESTART` does not delay a stop: `poll` and `sleep`, where the
    /// readers wait, are never restarted after a handler (signal(7)).
    pub fn new(signals: &[libc::c_int], handler: Handler) -> io::Result<Installed> {
        let mut installed = Installed { old: Vec::new() };
        for &sig in signals {
            // SAFETY: `sa` is fully initialised (zeroed, then the mask emptied) before use;
            // the handlers given here only touch atomics and call kill.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = handler as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &sa, &mut prev) != 0 {
                    // `installed` drops: the handlers set so far are restored.
                    return Err(io::Error::last_os_error());
                }
                installed.old.push((sig, prev));
            }
        }
        Ok(installed)
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        for (sig, prev) in &self.old {
            // SAFETY: restores an action the kernel gave us.
            unsafe { libc::sigaction(*sig, prev, std::ptr::null_mut()) };
        }
    }
}

extern "C" fn on_stop(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    STOP.store(true, Ordering::SeqCst);
}

/// Stop signals, caught: each sets the flag instead of ending the process. The previous
/// handlers come back on drop.
pub struct StopFlag {
    _handlers: Installed,
}

impl StopFlag {
    /// Installs the handlers for [`INTERACTIVE`], the flag cleared.
    pub fn install() -> io::Result<StopFlag> {
        StopFlag::install_for(&INTERACTIVE)
    }

    /// Installs the handlers for `signals`, the flag cleared.
    pub fn install_for(signals: &[libc::c_int]) -> io::Result<StopFlag> {
        STOP.store(false, Ordering::SeqCst);
        Ok(StopFlag {
            _handlers: Installed::new(signals, on_stop)?,
        })
    }

    /// Whether a stop signal came since the flag was installed.
    pub fn is_set(&self) -> bool {
        STOP.load(Ordering::SeqCst)
    }
}

/// Signals blocked in the calling thread; unblocked on drop. Threads started meanwhile
/// keep them blocked, so a stop signal reaches the thread that waits for it, whose wait it
/// cuts short.
pub struct Blocked {
    set: libc::sigset_t,
}

impl Blocked {
    /// Blocks `signals` in the calling thread.
    pub fn new(signals: &[libc::c_int]) -> Blocked {
        // SAFETY: the set is initialised by sigemptyset before use.
        let set = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &sig in signals {
                libc::sigaddset(&mut set, sig);
            }
            set
        };
        // SAFETY: `set` is initialised above; the old mask is not asked for.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        Blocked { set }
    }
}

impl Drop for Blocked {
    fn drop(&mut self) {
        // SAFETY: `set` was initialised in `new`; the old mask is not asked for.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &self.set, std::ptr::null_mut()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action_of(sig: libc::c_int) -> usize {
        // SAFETY: a query only (no new action); `now` is written by the kernel.
        unsafe {
            let mut now: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig, std::ptr::null(), &mut now);
            now.sa_sigaction
        }
    }

    #[test]
    fn a_stop_signal_sets_the_flag_and_the_old_handler_comes_back() {
        let before = action_of(libc::SIGHUP);
        let flag = StopFlag::install_for(&[libc::SIGHUP]).expect("install");
        assert_ne!(action_of(libc::SIGHUP), before);
        assert!(!flag.is_set());
        // SAFETY: raise sends the signal to this thread, whose handler was just installed.
        unsafe { libc::raise(libc::SIGHUP) };
        assert!(flag.is_set());
        drop(flag);
        assert_eq!(action_of(libc::SIGHUP), before);
    }
}
