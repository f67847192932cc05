//! Python call sites: the frames `libsyncspy.so` recorded from the calling thread's
//! interpreter, merged with the native stack for people.
//!
//! A native stack under Python is mostly the interpreter's eval loop. What a user needs is
//! their own line (`train.py:142 in train_step`), then the op that waited (torch's native
//! frames, innermost), then the rest. So a site's frames become: the user's line, the native
//! frames down to the first interpreter frame, then every Python frame, innermost first.
//! The user's line is the innermost Python frame outside the standard library and installed
//! packages: for `print(tensor)` that is the `print` line, not torch's `_tensor_str.py`.

use serde::{Deserialize, Serialize};
use syncspy_abi::python::{PyFrameInfo, PyStack, PyWaiter, PythonState, PythonStatus};

use crate::symbolize::{is_runtime_module, Frame};

/// One Python frame of a call site in a report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PyFrame {
    /// `co_filename`: usually absolute; `<stdin>`, `<string>` for code without a file.
    pub file: String,
    /// 1-based line of the instruction running in this frame (0: unknown).
    pub line: u32,
    /// Qualified name (`Trainer.step`, `<module>`); plain `co_name` on Python 3.10.
    pub function: String,
    /// Not a frame: the mark where a stack deeper than the writer's table (32 frames) had
    /// this many frames left out between its innermost and outermost ones (file, line and
    /// function empty). Left out of the JSON when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl From<&PyFrameInfo> for PyFrame {
    fn from(f: &PyFrameInfo) -> PyFrame {
        PyFrame {
            file: f.file.clone(),
            line: f.line,
            function: f.function.clone(),
            skipped: f.skipped,
        }
    }
}

impl PyFrame {
    /// `train.py:142 in train_step`, the form every view shows.
    pub fn text(&self) -> String {
        if self.skipped > 0 {
            return format!(
                "... {} skipped ...",
                crate::plural::count(self.skipped, "frame", "frames")
            );
        }
        let file = if self.file.is_empty() {
            "?"
        } else {
            &self.file
        };
        let function = if self.function.is_empty() {
            "?"
        } else {
            &self.function
        };
        format!("{file}:{} in {function}", self.line)
    }

    /// Whether the frame is the interpreter's or a package's code rather than the user's:
    /// the standard library (`.../lib/python3.12/...`), installed packages (site-packages,
    /// dist-packages) and frozen modules.
    pub fn is_library(&self) -> bool {
        let f = self.file.as_str();
        // The mark of skipped frames is nobody's code.
        self.skipped > 0
            || f.starts_with("<frozen ")
            || f.contains("/site-packages/")
            || f.contains("/dist-packages/")
            || stdlib_dir(f)
    }

    /// Whether `pattern` names this frame: `FILE:FUNCTION` or `FILE:LINE`, where FILE is the
    /// file's name or a path suffix at a `/` boundary and FUNCTION the qualified name or its
    /// last part (`train.py:train_step`, `models/mlp.py:MLP.forward`, `train.py:142`).
    pub fn matches(&self, pattern: &str) -> bool {
        let Some((file, what)) = pattern.rsplit_once(':') else {
            return false;
        };
        let file_ok = !file.is_empty()
            && (self.file == file
                || self
                    .file
                    .strip_suffix(file)
                    .is_some_and(|head| head.ends_with('/')));
        if !file_ok {
            return false;
        }
        match what.parse::<u32>() {
            Ok(line) => line == self.line,
            Err(_) => {
                self.function == what
                    || self
                        .function
                        .rsplit_once('.')
                        .is_some_and(|(_, last)| last == what)
            }
        }
    }
}

/// `.../lib/python3.X/...` but not inside an installed package (checked separately).
fn stdlib_dir(file: &str) -> bool {
    let Some(i) = file.find("/lib/python3") else {
        return false;
    };
    let rest = &file[i + "/lib/python3".len()..];
    // `python3.12/` (or `python3/` on some distributions).
    let rest = rest.trim_start_matches(|c: char| c == '.' || c.is_ascii_digit());
    rest.starts_with('/')
}

/// The index of the user's frame in `frames` (innermost first): the innermost that is not
/// library code, else the innermost. `None` for no frames.
pub fn user_frame(frames: &[PyFrame]) -> Option<usize> {
    if frames.is_empty() {
        return None;
    }
    Some(frames.iter().position(|f| !f.is_library()).unwrap_or(0))
}

/// Whether a native frame is the Python interpreter's (its eval loop and call machinery):
/// the place where Python frames go in a merged stack.
pub fn is_interpreter_frame(f: &Frame) -> bool {
    let module = f.module.as_deref().unwrap_or("");
    module.starts_with("libpython")
        || (module.starts_with("python") && !module.contains(".so"))
        || f.text.starts_with("_PyEval_")
        || f.text.starts_with("PyEval_")
        || f.text.starts_with("_PyObject_")
        || f.text.starts_with("PyObject_Call")
}

/// A site's frames for people: the user's Python line, the native frames above the
/// interpreter (the op that waited, innermost first), then every Python frame. Without
/// Python frames, the native frames unchanged. Python frames carry no module.
pub fn merge(native: Vec<Frame>, python: &[PyFrame]) -> Vec<Frame> {
    let Some(user) = user_frame(python) else {
        return native;
    };
    let py = |f: &PyFrame| Frame {
        text: f.text(),
        module: None,
    };
    let mut out = Vec::with_capacity(native.len() + python.len() + 1);
    out.push(py(&python[user]));
    out.extend(native.into_iter().take_while(|f| !is_interpreter_frame(f)));
    out.extend(python.iter().map(py));
    out
}

/// The innermost native frame outside the CUDA runtime and syncspy (the op): with the
/// Python stack, what tells two sites apart.
pub fn native_op(native: &[Frame]) -> Option<&str> {
    native
        .iter()
        .find(|f| !f.module.as_deref().is_some_and(is_runtime_module))
        .map(|f| f.text.as_str())
}

/// The frames of a recorded Python stack.
pub fn frames_of(stack: &PyStack) -> Vec<PyFrame> {
    stack.frames.iter().map(PyFrame::from).collect()
}

/// The Python thread that waited for a call site's stalls (ABI 1.6): they happened on a thread
/// with no Python frames (a runtime's worker: XLA's under JAX), while this thread was blocked
/// outside the GIL at `location`. Never the site's own frames: a site has its own Python
/// frames or a waiter, not both.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Waiter {
    /// The waiting thread's user line (`jax_sync.py:21 in main`): its innermost frame outside
    /// the standard library and installed packages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// The waiting thread was the interpreter's main thread.
    #[serde(default)]
    pub main_thread: bool,
    /// Its Python frames, innermost first.
    #[serde(default)]
    pub python: Vec<PyFrame>,
}

impl Waiter {
    pub fn of(w: &PyWaiter) -> Waiter {
        let python = frames_of(&w.stack);
        Waiter {
            location: user_frame(&python).map(|i| python[i].text()),
            main_thread: w.main,
            python,
        }
    }

    /// `jax_sync.py:21 in main`, shortened to the file's name.
    pub fn short(&self) -> String {
        let Some(i) = user_frame(&self.python) else {
            return "?".to_string();
        };
        let f = &self.python[i];
        let file = f.file.rsplit('/').next().unwrap_or(&f.file);
        format!("{file}:{}", f.line)
    }
}

/// The `python` section of a process's report; `None` when the process had no Python.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonReport {
    /// `supported` (frames recorded), `unsupported` (a CPython whose layout this build does
    /// not know: native frames only) or `unknown`.
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Recorded events whose thread had Python frames.
    pub stacks: u64,
    /// Of those, stacks deeper than the writer keeps (32 frames): from ABI 1.5 their middle is
    /// left out (a `skipped` mark), before it their outermost frames were missing.
    pub truncated: u64,
    /// Walks stopped at a frame that failed validation.
    pub rejected: u64,
    /// Code objects the writer had no room for (their frames have no names).
    pub codes_dropped: u64,
}

impl PythonReport {
    pub fn of(s: &PythonStatus) -> Option<PythonReport> {
        let state = match s.state {
            PythonState::Absent => return None,
            PythonState::Supported => "supported",
            PythonState::Unsupported => "unsupported",
            PythonState::Unknown(_) => "unknown",
        };
        Some(PythonReport {
            state: state.to_string(),
            version: s.version.map(|v| v.to_string()),
            stacks: s.stacks,
            truncated: s.truncated,
            rejected: s.rejected,
            codes_dropped: s.codes_dropped,
        })
    }

    /// One line for people, when there is something to say: an unsupported version, or
    /// stacks that were cut or rejected.
    pub fn note(&self) -> Option<String> {
        let v = self.version.as_deref().unwrap_or("?");
        match self.state.as_str() {
            "supported" if self.rejected > 0 || self.codes_dropped > 0 => Some(format!(
                "Python {v}: {} at a frame that failed validation, {} without names \
                 (table full)",
                crate::plural::count(self.rejected, "stack stopped", "stacks stopped"),
                crate::plural::count(self.codes_dropped, "code object", "code objects")
            )),
            "supported" => None,
            "unsupported" => Some(format!(
                "Python {v}: this syncspy does not know its frame layout; call sites show \
                 native frames only"
            )),
            _ => Some(format!(
                "Python {v}: unknown status; call sites show native frames only"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(file: &str, line: u32, function: &str) -> PyFrame {
        PyFrame {
            file: file.into(),
            line,
            function: function.into(),
            skipped: 0,
        }
    }

    fn native(text: &str, module: &str) -> Frame {
        Frame {
            text: text.into(),
            module: Some(module.into()),
        }
    }

    #[test]
    fn the_user_frame_is_the_innermost_outside_libraries() {
        let frames = [
            py(
                "/venv/lib/python3.12/site-packages/torch/_tensor_str.py",
                154,
                "_str",
            ),
            py("/usr/lib/python3.12/threading.py", 1010, "Thread.run"),
            py("/home/u/train.py", 42, "log"),
            py("/home/u/train.py", 90, "main"),
        ];
        assert_eq!(user_frame(&frames), Some(2));
        // All library code: the innermost.
        assert_eq!(user_frame(&frames[..2]), Some(0));
        assert_eq!(user_frame(&[]), None);
        assert!(py("<frozen runpy>", 1, "f").is_library());
        assert!(!py("/home/u/lib/python_utils.py", 1, "f").is_library());
        assert!(!py("/home/u/lib/python3x/a.py", 1, "f").is_library());
    }

    #[test]
    fn merged_frames_put_the_users_line_first_and_python_where_the_eval_loop_was() {
        let n = vec![
            native("cudaStreamSynchronize", "libcudart.so.13"),
            native(
                "at::native::_local_scalar_dense_cuda (Scalar.cpp:30)",
                "libtorch_cuda.so",
            ),
            native("_PyEval_EvalFrameDefault", "libpython3.12.so.1.0"),
            native("main", "python3.12"),
        ];
        let p = [
            py(
                "/venv/lib/python3.12/site-packages/torch/_tensor.py",
                10,
                "Tensor.item",
            ),
            py("/home/u/train.py", 142, "train_step"),
        ];
        let m: Vec<String> = merge(n.clone(), &p).into_iter().map(|f| f.text).collect();
        assert_eq!(
            m,
            vec![
                "/home/u/train.py:142 in train_step",
                "cudaStreamSynchronize",
                "at::native::_local_scalar_dense_cuda (Scalar.cpp:30)",
                "/venv/lib/python3.12/site-packages/torch/_tensor.py:10 in Tensor.item",
                "/home/u/train.py:142 in train_step",
            ]
        );
        // Without Python frames the native stack is unchanged.
        assert_eq!(merge(n.clone(), &[]), n);
        assert_eq!(
            native_op(&n),
            Some("at::native::_local_scalar_dense_cuda (Scalar.cpp:30)")
        );
    }

    #[test]
    fn patterns_name_a_file_and_a_function_or_line() {
        let f = py("/home/u/models/mlp.py", 88, "MLP.forward");
        for yes in [
            "mlp.py:MLP.forward",
            "mlp.py:forward",
            "models/mlp.py:forward",
            "/home/u/models/mlp.py:88",
            "mlp.py:88",
        ] {
            assert!(f.matches(yes), "{yes}");
        }
        for no in [
            "lp.py:forward",
            "mlp.py:89",
            "mlp.py:MLP",
            "forward",
            "mlp.py:",
            ":88",
        ] {
            assert!(!f.matches(no), "{no}");
        }
    }
}
