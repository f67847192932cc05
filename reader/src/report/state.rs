//! How a process stands, as the report says it: its `state` and `exit_status` fields, one
//! enum in the model.

use serde::{Deserialize, Serialize};

use crate::aggregate::Lifecycle;

/// A process's state. In the JSON, `state` is its name (`running`, `exited`, `gone`,
/// `unknown`) and `exit_status` the exit status (only for `exited`).
///
/// A report of `syncspy attach` says `Running` for a process still running when the attach
/// ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StateFields", into = "StateFields")]
pub enum ProcessState {
    Running,
    /// The library's exit handler ran with this status (`None`: the report gave none).
    Exited(Option<i32>),
    /// Ended without the library's exit handler: killed by a signal, or `_exit`.
    Gone,
    /// The segment's state word held a value the reader did not know.
    Unknown,
    /// A state name this build does not know (a newer report's), or none (`""`).
    Other(String),
}

impl ProcessState {
    /// Whether the process ended (exited or gone).
    pub fn ended(&self) -> bool {
        matches!(self, ProcessState::Exited(_) | ProcessState::Gone)
    }

    pub fn is_running(&self) -> bool {
        matches!(self, ProcessState::Running)
    }

    /// The `state` field: `running`, `exited`, `gone`, `unknown` (or the unknown text).
    pub fn name(&self) -> &str {
        match self {
            ProcessState::Running => "running",
            ProcessState::Exited(_) => "exited",
            ProcessState::Gone => "gone",
            ProcessState::Unknown => "unknown",
            ProcessState::Other(s) => s,
        }
    }

    /// For people: `running`, `exited 3`, `gone`; `?` when the report named none.
    pub fn label(&self) -> String {
        match self {
            ProcessState::Exited(Some(s)) => format!("exited {s}"),
            ProcessState::Other(s) if s.is_empty() => "?".to_string(),
            s => s.name().to_string(),
        }
    }

    /// The status the process passed to `exit`, when it exited.
    pub fn exit_status(&self) -> Option<i32> {
        match self {
            ProcessState::Exited(s) => *s,
            _ => None,
        }
    }
}

/// No state named (`""`), as a report without the field reads.
impl Default for ProcessState {
    fn default() -> Self {
        ProcessState::Other(String::new())
    }
}

impl From<Lifecycle> for ProcessState {
    fn from(l: Lifecycle) -> Self {
        match l {
            Lifecycle::Running => ProcessState::Running,
            Lifecycle::Exited(s) => ProcessState::Exited(Some(s)),
            Lifecycle::Gone => ProcessState::Gone,
            Lifecycle::Unknown => ProcessState::Unknown,
        }
    }
}

/// A state by its name (an `exited` one without its status).
impl From<&str> for ProcessState {
    fn from(name: &str) -> Self {
        StateFields {
            state: name.to_string(),
            exit_status: None,
        }
        .into()
    }
}

/// The two fields as the JSON has them.
#[derive(Clone, Serialize, Deserialize)]
struct StateFields {
    #[serde(default)]
    state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    exit_status: Option<i32>,
}

impl From<StateFields> for ProcessState {
    fn from(f: StateFields) -> Self {
        match f.state.as_str() {
            "running" => ProcessState::Running,
            "exited" => ProcessState::Exited(f.exit_status),
            "gone" => ProcessState::Gone,
            "unknown" => ProcessState::Unknown,
            _ => ProcessState::Other(f.state),
        }
    }
}

impl From<ProcessState> for StateFields {
    fn from(s: ProcessState) -> Self {
        StateFields {
            state: s.name().to_string(),
            exit_status: s.exit_status(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct P {
        pid: u32,
        #[serde(flatten)]
        state: ProcessState,
        wall_ns: u64,
    }

    #[test]
    fn states_serialize_as_the_two_fields_they_always_were() {
        let cases = [
            (
                ProcessState::Running,
                json!({"pid": 1, "state": "running", "wall_ns": 2}),
            ),
            (
                ProcessState::Exited(Some(3)),
                json!({"pid": 1, "state": "exited", "exit_status": 3, "wall_ns": 2}),
            ),
            (
                ProcessState::Exited(None),
                json!({"pid": 1, "state": "exited", "wall_ns": 2}),
            ),
            (
                ProcessState::Gone,
                json!({"pid": 1, "state": "gone", "wall_ns": 2}),
            ),
            (
                ProcessState::Unknown,
                json!({"pid": 1, "state": "unknown", "wall_ns": 2}),
            ),
            (
                ProcessState::Other("frozen".into()),
                json!({"pid": 1, "state": "frozen", "wall_ns": 2}),
            ),
        ];
        for (state, want) in cases {
            let p = P {
                pid: 1,
                state: state.clone(),
                wall_ns: 2,
            };
            assert_eq!(serde_json::to_value(&p).unwrap(), want, "{state:?}");
            let back: P = serde_json::from_value(want).unwrap();
            assert_eq!(back.state, state);
        }
        // No state at all (the field is optional): written back as it was read, `""`.
        let back: P = serde_json::from_value(json!({"pid": 1, "wall_ns": 2})).unwrap();
        assert_eq!(back.state, ProcessState::Other(String::new()));
        assert_eq!(back.state.label(), "?");
    }

    #[test]
    fn labels_and_questions() {
        assert_eq!(ProcessState::Exited(Some(0)).label(), "exited 0");
        assert_eq!(ProcessState::Exited(None).label(), "exited");
        assert!(ProcessState::Gone.ended() && !ProcessState::Running.ended());
        assert_eq!(
            ProcessState::from(Lifecycle::Exited(7)).exit_status(),
            Some(7)
        );
    }
}
