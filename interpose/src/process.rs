//! The process's life around the hooks: handlers registered at load for fork (the child
//! starts over) and exit (GPU tracing drained, the segment marked exited).

use std::panic::catch_unwind;
use std::sync::atomic::Ordering;

use crate::state;

/// Registers the fork and exit handlers when the library is loaded, before any thread can
/// be inside the first CUDA call: a fork during initialisation must still reset the child.
/// Handlers survive fork, so this runs once per process image; each handler consults the
/// current state when it runs.
#[used]
#[link_section = ".init_array"]
static INSTALL_PROCESS_HANDLERS: extern "C" fn() = install_process_handlers;

extern "C" fn install_process_handlers() {
    // Before the state can be DORMANT: a dormant hook polls for the control file through it.
    crate::init::register_attach(
        crate::attach::dormant_poll,
        crate::attach::on_runtime_created,
    );
    if crate::attach::dormant_by_env() {
        state::start_dormant();
    }
    // SAFETY: both functions only store the pointers of `extern "C"` functions of this
    // library, which stays loaded for the life of the process (it is preloaded), and a null
    // argument that `at_exit` ignores.
    unsafe {
        libc::pthread_atfork(None, None, Some(after_fork_in_child));
        on_exit(at_exit, std::ptr::null_mut());
    }
}

extern "C" {
    /// glibc's `on_exit`: like `atexit`, with the exit status.
    fn on_exit(f: extern "C" fn(i32, *mut libc::c_void), arg: *mut libc::c_void) -> i32;
}

extern "C" fn at_exit(status: i32, _: *mut libc::c_void) {
    if let Some(rt) = state::current() {
        let _ = catch_unwind(crate::gpu::at_exit);
        rt.seg.mark_exited(status);
    }
}

extern "C" fn after_fork_in_child() {
    state::forget_parent();
    crate::gpu::after_fork_in_child();
    crate::nccl::after_fork_in_child();
    crate::behind::after_fork_in_child();
    crate::unwind_ahead::after_fork_in_child();
    state::restart_in_child();
    crate::attach::after_fork_in_child();
    crate::shed::reset();
    crate::guard::FORK_GEN.fetch_add(1, Ordering::Relaxed);
}
