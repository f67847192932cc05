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
//!
//! Bad values are ignored with a warning on stderr: a simulator that refuses to start helps no
//! one, and the warning names the variable.

use std::sync::atomic::{AtomicU64, Ordering};

/// The staging pool the CUDA 13 driver on an H100 showed: 2 MiB of pageable host-to-device
/// copies return at once, the next byte waits for the stream.
const DEFAULT_STAGING_BYTES: u64 = 2 << 20;

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
