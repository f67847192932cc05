//! The closed vocabularies carried in records: event kind, CUDA API, copy direction.
//! Numeric values are part of the ABI: never renumber, only append.

macro_rules! named_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $value:literal => $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum $name { $($variant = $value,)+ }

        impl $name {
            /// Every value, in numeric order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The name used in reports, metrics, budgets and the monitor.
            pub const fn name(self) -> &'static str {
                match self { $($name::$variant => $text,)+ }
            }

            /// Decodes the ABI value; `None` for anything this version does not know.
            pub const fn from_u8(v: u8) -> Option<$name> {
                match v { $($value => Some($name::$variant),)+ _ => None }
            }

            /// Looks a value up by its public name.
            pub fn from_name(s: &str) -> Option<$name> {
                match s { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        /// The name, honouring width, fill, alignment and precision (`{:<16}` in tables).
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.name())
            }
        }
    };
}

named_enum! {
    /// What the host waited for. See docs/contracts.md, "Event kinds".
    Kind {
        DeviceSync = 1 => "device_sync",
        StreamSync = 2 => "stream_sync",
        EventSync = 3 => "event_sync",
        MemcpySync = 4 => "memcpy_sync",
        MemcpyPageable = 5 => "memcpy_pageable",
        ImplicitSync = 6 => "implicit_sync",
        GpuIdle = 7 => "gpu_idle",
        PollWait = 8 => "poll_wait",
        // A Python thread blocked, without the GIL, until a host function the GPU ran
        // (`cuLaunchHostFunc`) woke it: JAX's `block_until_ready` and `device_get` (ABI 1.7;
        // no layout change: a 1.6 reader counts its records as corrupt).
        HostWait = 9 => "host_wait",
    }
}

impl Api {
    /// Whether this is a driver API function (`libcuda.so.1`) rather than a runtime one.
    pub const fn is_driver(self) -> bool {
        self as u8 >= 40
    }
}

impl Kind {
    /// Kinds in which the host thread itself waited (everything but GPU idle gaps).
    pub const fn is_host_stall(self) -> bool {
        !matches!(self, Kind::GpuIdle)
    }

    /// Kinds whose stalls the library measures the GPU idle behind (`Api::StallEvents`
    /// records): the syncs, and the blocking and pageable copies (the writer measures those
    /// between host and device, not host-to-host ones). Every reader's count of what could
    /// have been measured follows it.
    pub const fn idle_measured_behind(self) -> bool {
        matches!(
            self,
            Kind::StreamSync | Kind::DeviceSync | Kind::MemcpySync | Kind::MemcpyPageable
        )
    }
}

named_enum! {
    /// The interposed CUDA entry point: a runtime function (the exact exported symbol), or from
    /// 40 a driver function (its name without version suffix; `Api::is_driver`).
    Api {
        CudaDeviceSynchronize = 1 => "cudaDeviceSynchronize",
        CudaStreamSynchronize = 2 => "cudaStreamSynchronize",
        CudaStreamSynchronizePtsz = 3 => "cudaStreamSynchronize_ptsz",
        CudaEventSynchronize = 4 => "cudaEventSynchronize",
        CudaMemcpy = 5 => "cudaMemcpy",
        CudaMemcpyPtds = 6 => "cudaMemcpy_ptds",
        CudaMemcpy2D = 7 => "cudaMemcpy2D",
        CudaMemcpy2DPtds = 8 => "cudaMemcpy2D_ptds",
        CudaMemcpy3D = 9 => "cudaMemcpy3D",
        CudaMemcpy3DPtds = 10 => "cudaMemcpy3D_ptds",
        CudaMemcpyToSymbol = 11 => "cudaMemcpyToSymbol",
        CudaMemcpyToSymbolPtds = 12 => "cudaMemcpyToSymbol_ptds",
        CudaMemcpyFromSymbol = 13 => "cudaMemcpyFromSymbol",
        CudaMemcpyFromSymbolPtds = 14 => "cudaMemcpyFromSymbol_ptds",
        CudaMemcpyPeer = 15 => "cudaMemcpyPeer",
        CudaMemcpyAsync = 16 => "cudaMemcpyAsync",
        CudaMemcpyAsyncPtsz = 17 => "cudaMemcpyAsync_ptsz",
        CudaMemcpy2DAsync = 18 => "cudaMemcpy2DAsync",
        CudaMemcpy2DAsyncPtsz = 19 => "cudaMemcpy2DAsync_ptsz",
        CudaMemcpy3DAsync = 20 => "cudaMemcpy3DAsync",
        CudaMemcpy3DAsyncPtsz = 21 => "cudaMemcpy3DAsync_ptsz",
        CudaMemcpyToSymbolAsync = 22 => "cudaMemcpyToSymbolAsync",
        CudaMemcpyToSymbolAsyncPtsz = 23 => "cudaMemcpyToSymbolAsync_ptsz",
        CudaMemcpyFromSymbolAsync = 24 => "cudaMemcpyFromSymbolAsync",
        CudaMemcpyFromSymbolAsyncPtsz = 25 => "cudaMemcpyFromSymbolAsync_ptsz",
        CudaFree = 26 => "cudaFree",
        CudaFreeHost = 27 => "cudaFreeHost",
        CudaMallocHost = 28 => "cudaMallocHost",
        CudaHostAlloc = 29 => "cudaHostAlloc",
        CudaHostRegister = 30 => "cudaHostRegister",
        CudaHostUnregister = 31 => "cudaHostUnregister",
        CudaMemset = 32 => "cudaMemset",
        CudaMemsetPtds = 33 => "cudaMemset_ptds",
        // Not a runtime entry point: the API of `gpu_idle` records, measured from the GPU's
        // activity (ABI 1.2).
        GpuActivity = 34 => "gpu_activity",
        // Queries (ABI 1.5): a call that does not wait; a run of them that returned
        // not-ready on one thread, up to the one that found the work done, is a `poll_wait`.
        CudaStreamQuery = 35 => "cudaStreamQuery",
        CudaStreamQueryPtsz = 36 => "cudaStreamQuery_ptsz",
        CudaEventQuery = 37 => "cudaEventQuery",
        // Not a runtime entry point (ABI 1.10): the API of `gpu_idle` records that the library
        // measured at a stall with two CUDA events, the GPU's idle time from finishing the
        // work the stall waited for to starting the next work the thread queued. The record
        // carries the stall's site, and its kind and API in `result` (`record::stall_of`).
        StallEvents = 38 => "stall_events",
        // The driver API (libcuda.so.1), from 40: one value per function, whatever its
        // version suffix (`_v2`) or per-thread form (`_ptds`/`_ptsz`, see FLAG_PER_THREAD).
        CuCtxSynchronize = 40 => "cuCtxSynchronize",
        CuStreamSynchronize = 41 => "cuStreamSynchronize",
        CuEventSynchronize = 42 => "cuEventSynchronize",
        CuMemcpy = 43 => "cuMemcpy",
        CuMemcpyHtoD = 44 => "cuMemcpyHtoD",
        CuMemcpyDtoH = 45 => "cuMemcpyDtoH",
        CuMemcpyDtoD = 46 => "cuMemcpyDtoD",
        CuMemcpy2D = 47 => "cuMemcpy2D",
        CuMemcpy3D = 48 => "cuMemcpy3D",
        CuMemcpyAsync = 49 => "cuMemcpyAsync",
        CuMemcpyHtoDAsync = 50 => "cuMemcpyHtoDAsync",
        CuMemcpyDtoHAsync = 51 => "cuMemcpyDtoHAsync",
        CuMemcpyDtoDAsync = 52 => "cuMemcpyDtoDAsync",
        CuMemcpy2DAsync = 53 => "cuMemcpy2DAsync",
        CuMemcpy3DAsync = 54 => "cuMemcpy3DAsync",
        CuMemFree = 55 => "cuMemFree",
        CuMemFreeHost = 56 => "cuMemFreeHost",
        CuMemAllocHost = 57 => "cuMemAllocHost",
        CuMemHostAlloc = 58 => "cuMemHostAlloc",
        CuMemHostRegister = 59 => "cuMemHostRegister",
        CuMemHostUnregister = 60 => "cuMemHostUnregister",
        CuStreamQuery = 61 => "cuStreamQuery",
        CuEventQuery = 62 => "cuEventQuery",
        // Enqueues a host function (ABI 1.7): counted as a call; the wait it ends is a
        // `host_wait`.
        CuLaunchHostFunc = 63 => "cuLaunchHostFunc",
    }
}

named_enum! {
    /// Direction of a copy; `None` for calls that move no data.
    Direction {
        None = 0 => "none",
        HostToDevice = 1 => "h2d",
        DeviceToHost = 2 => "d2h",
        DeviceToDevice = 3 => "d2d",
        HostToHost = 4 => "h2h",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_values_are_dense_enough_for_the_header() {
        for k in Kind::ALL {
            assert_eq!(Kind::from_name(k.name()), Some(*k));
            assert_eq!(Kind::from_u8(*k as u8), Some(*k));
            assert!((*k as usize) < crate::layout::KIND_SLOTS);
        }
        for a in Api::ALL {
            assert_eq!(Api::from_name(a.name()), Some(*a));
            assert!((*a as usize) < crate::layout::API_SLOTS);
        }
        assert_eq!(Kind::from_u8(0), None);
        assert_eq!(Api::from_u8(200), None);
        assert_eq!(Direction::from_u8(4), Some(Direction::HostToHost));
    }

    #[test]
    fn display_honours_width_fill_alignment_and_precision() {
        // Tables pad names to a column: `{:<16}` must pad a kind as it pads a string.
        assert_eq!(format!("{:<16}|", Kind::DeviceSync), "device_sync     |");
        assert_eq!(format!("{:>16}|", Kind::PollWait), "       poll_wait|");
        assert_eq!(format!("{:*^13}", Kind::GpuIdle), "**gpu_idle***");
        assert_eq!(format!("{:.6}", Kind::StreamSync), "stream");
        assert_eq!(format!("{:<12}|", Api::CudaMemcpy), "cudaMemcpy  |");
        assert_eq!(format!("{:>5}", Direction::HostToDevice), "  h2d");
        // Too long for the width: the whole name, never cut.
        assert_eq!(format!("{:<4}", Kind::MemcpyPageable), "memcpy_pageable");
        for k in Kind::ALL {
            assert_eq!(format!("{k:<20}").len(), 20, "{k}");
            assert_eq!(format!("{k}"), k.name());
        }
    }
}
