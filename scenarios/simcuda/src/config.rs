//! Settings read once from the environment, and the cost model that turns a transfer into
//! modeled device time.
//!
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `SIMCUDA_DEVICES` | number of simulated devices (0 makes every call fail with `cudaErrorNoDevice`) | 1 |
//! | `SIMCUDA_TIME_SCALE` | factor applied to every modeled duration | 1.0 |
//! | `SIMCUDA_PINNED_GBPS` | host link bandwidth for pinned, registered and managed memory | 25 |
//! | `SIMCUDA_PAGEABLE_GBPS` | bandwidth of copies staged through the CPU (pageable memory, host to host) | 8 |
//! | `SIMCUDA_D2D_GBPS` | device memory bandwidth (device to device copies, memset) | 1000 |
//! | `SIMCUDA_LATENCY_US` | fixed cost of every copy and memset | 3 |
//! | `SIMCUDA_STAGING_BYTES` | staging buffer for pageable host-to-device async copies | 2097152 |
//! | `SIMCUDA_LAUNCH_US` | fixed cost of every kernel on the device | 2 |
//! | `SIMCUDA_GEMM_TFLOPS` | rate of the `gemm` kernel | 8 |
//! | `SIMCUDA_GEMM_COMPUTE_MAX_N` | largest `gemm` whose result is really computed | 128 |
//! | `SIMCUDA_QUIET` | `1`: no note that a large `gemm` is timed but not computed | unset |
//! | `SIMCUDA_CAPTURING` | `1`: `cuStreamIsCapturing` says every stream is capturing a graph (the simulator captures nothing; a test knob, read at each call) | unset |
//!
//! Bad values are ignored with a warning on stderr: a simulator that refuses to start helps no
//! one, and the warning names the variable.

use std::sync::atomic::{AtomicU64, Ordering};

/// The staging pool the CUDA 13 driver on an H100 showed: 2 MiB of pageable host-to-device
/// copies return at once, the next byte waits for the stream.
const DEFAULT_STAGING_BYTES: u64 = 2 << 20;

/// What the `gemm` kernel of kernels/ (16 x 16 shared-memory tiles, FP32) reached on an H100:
/// 8.2 TFLOP/s at n = 8192 (6.0 at n = 512; docs/gpu-validation.md).
const DEFAULT_GEMM_TFLOPS: f64 = 8.0;

/// The link a transfer crosses, which decides its bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Link {
    /// DMA between device memory and pinned (or registered, or managed) host memory.
    Pinned,
    /// Pageable host memory, staged through a pinned buffer by the CPU.
    Pageable,
    /// Inside device memory.
    Device,
    /// Host to host, a CPU copy.
    Host,
}

#[derive(Debug)]
pub(crate) struct Config {
    pub devices: usize,
    /// `f64` bits; a Rust caller may change it at run time (see [`crate::set_time_scale`]).
    time_scale: AtomicU64,
    /// Bandwidths in bytes per nanosecond (numerically GB/s).
    pinned_bpns: f64,
    pageable_bpns: f64,
    device_bpns: f64,
    latency_ns: f64,
    pub staging_bytes: usize,
    launch_ns: f64,
    /// FLOP per nanosecond (numerically TFLOP/s times 1000).
    gemm_flop_per_ns: f64,
    /// `gemm` launches with a larger `n` are timed but not computed (see `kernel.rs`).
    pub gemm_compute_max_n: usize,
}

/// What a kernel's modeled duration is made of, before the launch cost and the time scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum KernelCost {
    /// A fixed time (`spin`).
    Nanos(u64),
    /// Bytes read and written in device memory (element-wise kernels).
    DeviceBytes(u64),
    /// Floating-point operations (`gemm`).
    Flops(f64),
}

impl Config {
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the settings through `lookup`, so tests need not touch the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let positive = |name: &str, default: f64| -> f64 {
            match lookup(name).map(|v| v.trim().parse::<f64>()) {
                None => default,
                Some(Ok(v)) if v.is_finite() && v > 0.0 => v,
                Some(_) => {
                    eprintln!("simcuda: ignoring {name}: expected a positive number");
                    default
                }
            }
        };
        let nonnegative = |name: &str, default: f64| -> f64 {
            match lookup(name).map(|v| v.trim().parse::<f64>()) {
                None => default,
                Some(Ok(v)) if v.is_finite() && v >= 0.0 => v,
                Some(_) => {
                    eprintln!("simcuda: ignoring {name}: expected a number of at least 0");
                    default
                }
            }
        };
        let count = |name: &str, default: u64, max: u64| -> u64 {
            match lookup(name).map(|v| v.trim().parse::<u64>()) {
                None => default,
                Some(Ok(v)) if v <= max => v,
                Some(_) => {
                    eprintln!("simcuda: ignoring {name}: expected an integer from 0 to {max}");
                    default
                }
            }
        };
        Self {
            devices: count("SIMCUDA_DEVICES", 1, 64) as usize,
            time_scale: AtomicU64::new(positive("SIMCUDA_TIME_SCALE", 1.0).to_bits()),
            pinned_bpns: positive("SIMCUDA_PINNED_GBPS", 25.0),
            pageable_bpns: positive("SIMCUDA_PAGEABLE_GBPS", 8.0),
            device_bpns: positive("SIMCUDA_D2D_GBPS", 1000.0),
            latency_ns: positive("SIMCUDA_LATENCY_US", 3.0) * 1e3,
            staging_bytes: count("SIMCUDA_STAGING_BYTES", DEFAULT_STAGING_BYTES, 1 << 40) as usize,
            launch_ns: nonnegative("SIMCUDA_LAUNCH_US", 2.0) * 1e3,
            gemm_flop_per_ns: positive("SIMCUDA_GEMM_TFLOPS", DEFAULT_GEMM_TFLOPS) * 1e3,
            gemm_compute_max_n: count("SIMCUDA_GEMM_COMPUTE_MAX_N", 128, 1 << 16) as usize,
        }
    }

    pub fn time_scale(&self) -> f64 {
        f64::from_bits(self.time_scale.load(Ordering::Relaxed))
    }

    pub fn set_time_scale(&self, scale: f64) {
        self.time_scale.store(scale.to_bits(), Ordering::Relaxed);
    }

    /// Modeled duration of moving `bytes` over `link`: a fixed latency plus bytes over
    /// bandwidth, times the time scale.
    pub fn transfer_ns(&self, bytes: usize, link: Link) -> u64 {
        let bandwidth = match link {
            Link::Pinned => self.pinned_bpns,
            Link::Pageable | Link::Host => self.pageable_bpns,
            Link::Device => self.device_bpns,
        };
        let ns = (self.latency_ns + bytes as f64 / bandwidth) * self.time_scale();
        // Saturating float-to-int conversion: absurd sizes give u64::MAX, never wrap.
        ns as u64
    }

    /// Modeled duration of a kernel: the launch cost plus its work, times the time scale.
    pub fn kernel_ns(&self, cost: KernelCost) -> u64 {
        let work = match cost {
            KernelCost::Nanos(ns) => ns as f64,
            KernelCost::DeviceBytes(bytes) => bytes as f64 / self.device_bpns,
            KernelCost::Flops(flops) => flops / self.gemm_flop_per_ns,
        };
        ((self.launch_ns + work) * self.time_scale()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Config {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(move |name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn defaults_model_a_pcie_device() {
        let c = config(&[]);
        assert_eq!(c.devices, 1);
        assert_eq!(c.staging_bytes, 2 << 20);
        // 25 MB over 25 GB/s pinned: 1 ms plus 3 µs latency.
        assert_eq!(c.transfer_ns(25_000_000, Link::Pinned), 1_003_000);
        assert_eq!(c.transfer_ns(8_000_000, Link::Pageable), 1_003_000);
        assert_eq!(c.transfer_ns(1_000_000_000, Link::Device), 1_003_000);
        assert_eq!(c.transfer_ns(0, Link::Host), 3_000);
    }

    #[test]
    fn time_scale_multiplies_every_duration() {
        let c = config(&[("SIMCUDA_TIME_SCALE", "10"), ("SIMCUDA_LATENCY_US", "1")]);
        assert_eq!(c.transfer_ns(25_000, Link::Pinned), 20_000);
        c.set_time_scale(0.5);
        assert_eq!(c.transfer_ns(25_000, Link::Pinned), 1_000);
    }

    #[test]
    fn bad_values_fall_back_to_defaults() {
        let c = config(&[
            ("SIMCUDA_TIME_SCALE", "-3"),
            ("SIMCUDA_DEVICES", "many"),
            ("SIMCUDA_PINNED_GBPS", "NaN"),
        ]);
        assert_eq!(c.time_scale(), 1.0);
        assert_eq!(c.devices, 1);
        assert_eq!(c.transfer_ns(25_000_000, Link::Pinned), 1_003_000);
    }

    #[test]
    fn kernels_cost_launch_plus_work() {
        let c = config(&[("SIMCUDA_GEMM_TFLOPS", "2")]);
        assert_eq!(c.kernel_ns(KernelCost::Nanos(1_000_000)), 1_002_000);
        // 1 GB of device traffic at 1000 GB/s: 1 ms.
        assert_eq!(
            c.kernel_ns(KernelCost::DeviceBytes(1_000_000_000)),
            1_002_000
        );
        // 2 * 1000^3 FLOP at 2 TFLOP/s: 1 ms.
        assert_eq!(c.kernel_ns(KernelCost::Flops(2e9)), 1_002_000);
        c.set_time_scale(0.5);
        assert_eq!(c.kernel_ns(KernelCost::Nanos(1_000_000)), 501_000);
        let free = config(&[
            ("SIMCUDA_LAUNCH_US", "0"),
            ("SIMCUDA_GEMM_COMPUTE_MAX_N", "8"),
        ]);
        assert_eq!(free.kernel_ns(KernelCost::Nanos(5)), 5);
        assert_eq!(free.gemm_compute_max_n, 8);
        assert_eq!(config(&[]).gemm_compute_max_n, 128);
    }

    #[test]
    fn device_count_and_bandwidths_are_configurable() {
        let c = config(&[
            ("SIMCUDA_DEVICES", "0"),
            ("SIMCUDA_PAGEABLE_GBPS", "2"),
            ("SIMCUDA_STAGING_BYTES", "0"),
        ]);
        assert_eq!(c.devices, 0);
        assert_eq!(c.staging_bytes, 0);
        assert_eq!(c.transfer_ns(2_000, Link::Pageable), 4_000);
    }
}
