//! Each scenario's name, description and arguments (`Spec`), in the library so that the
//! scenario program and its launcher (`scn_launch.rs`: `--help` and a clear message when no
//! CUDA runtime can be loaded) share them.

use crate::scenario::Spec;

/// `scn-item-in-loop`.
pub const ITEM_IN_LOOP: Spec = Spec {
    size: Some((1 << 16, "elements of the array counted each step")),
    work_us: Some(2000),
    host_us: Some(1000),
    pageable_flag: true,
    ..Spec::new(
        "item-in-loop",
        "a scalar read back (.item()) every step: one stream sync per step",
        20,
    )
};

/// `scn-clean-async`.
pub const CLEAN_ASYNC: Spec = Spec {
    size: Some((1 << 16, "elements of the array counted each step")),
    work_us: Some(2000),
    host_us: Some(1000),
    ..Spec::new(
        "clean-async",
        "the healthy way: results stay on the GPU, one read at the end",
        20,
    )
};

/// `scn-sync-small-gemm`.
pub const SYNC_SMALL_GEMM: Spec = Spec {
    size: Some((512, "matrix side n (n x n FP32)")),
    async_flag: true,
    check_flag: true,
    ..Spec::new(
        "sync-small-gemm",
        "a small GEMM per step + cudaDeviceSynchronize (--async: the healthy variant)",
        200,
    )
};

/// `scn-sync-big-gemm`.
pub const SYNC_BIG_GEMM: Spec = Spec {
    size: Some((8192, "matrix side n (n x n FP32)")),
    async_flag: true,
    check_flag: true,
    ..Spec::new(
        "sync-big-gemm",
        "a big GEMM per step + cudaDeviceSynchronize (--async: the healthy variant)",
        8,
    )
};

/// `scn-pageable-h2d`.
pub const PAGEABLE_H2D: Spec = Spec {
    size: Some((4 << 20, "bytes per batch")),
    work_us: Some(1000),
    ..Spec::new(
        "pageable-h2d",
        "batches copied from pageable memory: the copy waits every step",
        20,
    )
};

/// `scn-pinned-double-buffer`.
pub const PINNED_DOUBLE_BUFFER: Spec = Spec {
    size: Some((4 << 20, "bytes per batch")),
    work_us: Some(1000),
    ..Spec::new(
        "pinned-double-buffer",
        "pinned batches, copy and compute streams, two buffers: no stall in the loop",
        20,
    )
};

/// `scn-nonzero-dynamic-shape`.
pub const NONZERO_DYNAMIC_SHAPE: Spec = Spec {
    size: Some((1 << 16, "elements of the array each step")),
    work_us: Some(2000),
    ..Spec::new(
        "nonzero-dynamic-shape",
        "a count read back each step to size the next launch: one blocking copy per step",
        20,
    )
};

/// `scn-implicit-free`.
pub const IMPLICIT_FREE: Spec = Spec {
    size: Some((1 << 20, "bytes allocated each step")),
    work_us: Some(2000),
    ..Spec::new(
        "implicit-free",
        "cudaMalloc/cudaFree every step: the free waits for the GPU",
        20,
    )
};

/// `scn-event-sync`.
pub const EVENT_SYNC: Spec = Spec {
    size: Some((1 << 16, "elements filled each step")),
    work_us: Some(2000),
    ..Spec::new("event-sync", "cudaEventSynchronize after every step", 20)
};

/// `scn-multi-thread`.
pub const MULTI_THREAD: Spec = Spec {
    size: Some((1 << 16, "elements filled per thread and step")),
    work_us: Some(2000),
    threads: Some(4),
    ..Spec::new(
        "multi-thread",
        "threads with their own streams, each synchronizing every step",
        20,
    )
};

/// Every scenario, by the name after `scn-`.
pub const ALL: [&Spec; 10] = [
    &ITEM_IN_LOOP,
    &CLEAN_ASYNC,
    &SYNC_SMALL_GEMM,
    &SYNC_BIG_GEMM,
    &PAGEABLE_H2D,
    &PINNED_DOUBLE_BUFFER,
    &NONZERO_DYNAMIC_SHAPE,
    &IMPLICIT_FREE,
    &EVENT_SYNC,
    &MULTI_THREAD,
];

/// The scenario named `name` (`item-in-loop`).
pub fn by_name(name: &str) -> Option<&'static Spec> {
    ALL.iter().copied().find(|s| s.name == name)
}
