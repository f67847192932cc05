//! What a GPU idle gap is blamed on: a host stall at a call site, or nothing the host waited
//! in ("host busy elsewhere"). One enum in the model; in the JSON, the flat `cause`, `api`,
//! `site_id` and `location` fields of `gpu.causes[]`.

use serde::{Deserialize, Serialize};

use crate::names::{ApiName, KindName};

/// `cause` of gaps no host stall explains.
pub const HOST_BUSY_ELSEWHERE: &str = "host_busy_elsewhere";

/// A stall cause's identity: kind, API, call site.
pub type CauseKey = (KindName, ApiName, u32);

/// The host's part in a gap.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "CauseFields", into = "CauseFields")]
pub enum IdleCause {
    /// The host was stalled in this call when the GPU ran dry.
    Stall(StallSite),
    /// The host made no stalling CUDA call: it was busy with something else.
    #[default]
    HostBusyElsewhere,
}

/// A stall's call: its kind, API and site.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StallSite {
    pub kind: KindName,
    pub api: ApiName,
    /// The call site in the segment (0 when no stack was captured).
    pub site_id: u32,
    /// Where the program made the call (as `sites[].location`).
    pub location: Option<String>,
}

impl IdleCause {
    /// The cause the JSON fields name: `host_busy_elsewhere`, or a stall of kind `cause`
    /// through `api` at `site_id`.
    pub fn parse(cause: &str, api: &str, site_id: u32, location: Option<String>) -> IdleCause {
        CauseFields {
            cause: cause.to_string(),
            api: api.to_string(),
            site_id,
            location,
        }
        .into()
    }

    /// The `cause` field: the stall's kind, or `host_busy_elsewhere`.
    pub fn name(&self) -> &str {
        match self {
            IdleCause::Stall(s) => s.kind.as_str(),
            IdleCause::HostBusyElsewhere => HOST_BUSY_ELSEWHERE,
        }
    }

    /// The stall's call site (0 when none was captured, or for host busy elsewhere).
    pub fn site_id(&self) -> u32 {
        self.stall().map_or(0, |s| s.site_id)
    }

    /// The stall, unless the host was busy elsewhere.
    pub fn stall(&self) -> Option<&StallSite> {
        match self {
            IdleCause::Stall(s) => Some(s),
            IdleCause::HostBusyElsewhere => None,
        }
    }

    /// Where the program made the stalling call, when known (never for host busy).
    pub fn location(&self) -> Option<&str> {
        self.stall()
            .and_then(|s| s.location.as_deref())
            .filter(|l| !l.is_empty())
    }

    /// What identifies the cause across refreshes of the same process: kind, API and site;
    /// `None` for host busy elsewhere.
    pub fn key(&self) -> Option<CauseKey> {
        self.stall()
            .map(|s| (s.kind.clone(), s.api.clone(), s.site_id))
    }
}

/// The fields as the JSON has them.
#[derive(Clone, Serialize, Deserialize)]
struct CauseFields {
    /// A host-stall kind (`stream_sync`, ...), or `host_busy_elsewhere`.
    cause: String,
    /// The stalling API; `""` for `host_busy_elsewhere`.
    #[serde(default)]
    api: String,
    #[serde(default)]
    site_id: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    location: Option<String>,
}

impl From<CauseFields> for IdleCause {
    fn from(f: CauseFields) -> Self {
        if f.cause == HOST_BUSY_ELSEWHERE {
            return IdleCause::HostBusyElsewhere;
        }
        IdleCause::Stall(StallSite {
            kind: KindName::new(&f.cause),
            api: ApiName::new(&f.api),
            site_id: f.site_id,
            location: f.location,
        })
    }
}

impl From<IdleCause> for CauseFields {
    fn from(c: IdleCause) -> Self {
        match c {
            IdleCause::Stall(s) => CauseFields {
                cause: s.kind.to_string(),
                api: s.api.to_string(),
                site_id: s.site_id,
                location: s.location,
            },
            IdleCause::HostBusyElsewhere => CauseFields {
                cause: HOST_BUSY_ELSEWHERE.to_string(),
                api: String::new(),
                site_id: 0,
                location: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use syncspy_abi::{Api, Kind};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Row {
        #[serde(flatten)]
        cause: IdleCause,
        count: u64,
    }

    #[test]
    fn causes_are_the_flat_fields_they_always_were() {
        let stall = IdleCause::Stall(StallSite {
            kind: Kind::StreamSync.into(),
            api: Api::CudaStreamSynchronize.into(),
            site_id: 7,
            location: Some("train.py:88 in step".into()),
        });
        let cases = [
            (
                stall,
                json!({"cause": "stream_sync", "api": "cudaStreamSynchronize", "site_id": 7,
                       "location": "train.py:88 in step", "count": 3}),
            ),
            (
                IdleCause::HostBusyElsewhere,
                json!({"cause": "host_busy_elsewhere", "api": "", "site_id": 0, "count": 3}),
            ),
        ];
        for (cause, want) in cases {
            let row = Row {
                cause: cause.clone(),
                count: 3,
            };
            assert_eq!(serde_json::to_value(&row).unwrap(), want);
            let back: Row = serde_json::from_value(want).unwrap();
            assert_eq!(back.cause, cause);
        }
        // The minimal form (only `cause`) reads; a kind this build does not know stays text.
        let back: Row =
            serde_json::from_value(json!({"cause": "tensor_sync", "count": 1})).unwrap();
        let s = back.cause.stall().unwrap();
        assert_eq!(
            (s.kind.as_str(), s.kind.known(), s.site_id),
            ("tensor_sync", None, 0)
        );
        assert_eq!(IdleCause::HostBusyElsewhere.key(), None);
    }
}
