//! GPU idle gaps: when the GPU ran nothing, measured from activity records.
//!
//! - [`track`]: the pure core, from activity records to busy time, gaps and samples.

pub mod track;
