//! The library's settings: read once at initialisation from the environment, or, while
//! attached, from the control file first (`attach`); and `SYNCSPY_OFF`, read once.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use syncspy_abi::gpu::{MODE_DUTY, MODE_OFF, MODE_ON};
use syncspy_abi::SegmentParams;

/// Settings read from the environment at initialisation.
pub struct Config {
    pub dir: PathBuf,
    pub ring: u32,
    pub sites: u32,
    pub session: u64,
    /// Capture call-site stacks at all (`SYNCSPY_STACKS=0` turns it off).
    pub stacks: bool,
    /// Frames kept per stack (`SYNCSPY_STACK_DEPTH`, at most `sites::MAX_FRAMES`).
    pub stack_depth: usize,
    /// Stalls shorter than this get no stack (`SYNCSPY_STACK_MIN_NS`, default 0).
    pub stack_min_ns: u64,
    /// Reuse a thread's cached stack when provably unchanged (`SYNCSPY_STACK_CACHE=0` off).
    pub stack_cache: bool,
    /// Add the calling thread's Python frames to call sites (`SYNCSPY_PYTHON=0` off).
    pub python: bool,
    /// GPU idle tracing (`SYNCSPY_GPU_IDLE`, `SYNCSPY_GPU_IDLE_MIN_US`).
    pub gpu: GpuConfig,
    /// Measure the GPU idle behind each stream and device sync with events
    /// (`SYNCSPY_IDLE_AFTER=0` off; `behind`).
    pub idle_after: bool,
    /// The budget for the library's own time, ppm of the wall time (`SYNCSPY_BUDGET`, a
    /// percentage, default 1; 0 none): past it, detail is shed (`shed`).
    pub budget_ppm: u32,
}

/// The largest `SYNCSPY_RING` taken (records of 64 bytes: 256 MiB of ring); larger values
/// are capped with a warning.
pub const MAX_RING_ENV: u32 = 1 << 22;
/// The largest `SYNCSPY_SITES` taken (entries of 512 bytes, plus 272 with Python: 50 MiB);
/// larger values are capped with a warning.
pub const MAX_SITES_ENV: u32 = 1 << 16;

/// Reads settings through `get` (the environment, or a map in tests) and collects a
/// warning for each value it cannot take as given.
struct Env<'a> {
    get: &'a dyn Fn(&str) -> Option<String>,
    warnings: Vec<String>,
}

impl Env<'_> {
    /// The trimmed value of `name`; `None` when unset or empty.
    fn value(&self, name: &str) -> Option<String> {
        (self.get)(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    /// A boolean: 0/1, true/false, yes/no, on/off (any case). Unset or empty: `default`;
    /// anything else: `otherwise`, with a warning.
    fn bool(&mut self, name: &str, default: bool, otherwise: bool) -> bool {
        let Some(v) = self.value(name) else {
            return default;
        };
        match parse_bool(&v) {
            Some(b) => b,
            None => {
                self.warnings.push(format!(
                    "{name}={v:?} is not a boolean (0/1, true/false, yes/no, on/off): taken as \
                     {}",
                    if otherwise { "on" } else { "off" }
                ));
                otherwise
            }
        }
    }

    /// A number: unset or empty gives `default`; not a number, a warning and `default`;
    /// above `max`, a warning and `max`.
    /// `SYNCSPY_BUDGET` (`shed::parse_ppm`); the default, with a warning, for anything else.
    fn budget(&mut self) -> u32 {
        let Some(v) = self.value("SYNCSPY_BUDGET") else {
            return crate::shed::DEFAULT_PPM;
        };
        crate::shed::parse_ppm(&v).unwrap_or_else(|| {
            self.warnings.push(format!(
                "SYNCSPY_BUDGET={v:?} is not a percentage from 0 to 100 (or off): using 1"
            ));
            crate::shed::DEFAULT_PPM
        })
    }

    fn num<T>(&mut self, name: &str, default: T, max: T) -> T
    where
        T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
    {
        let Some(v) = self.value(name) else {
            return default;
        };
        match v.parse::<T>() {
            Ok(n) if n > max => {
                self.warnings.push(format!(
                    "{name}={v} is above the most syncspy takes: {max} used"
                ));
                max
            }
            Ok(n) => n,
            Err(_) => {
                self.warnings.push(format!(
                    "{name}={v:?} is not a whole number in range: the default {default} used"
                ));
                default
            }
        }
    }
}

/// 0/1, true/false, yes/no, on/off, in any case; `None` for anything else.
pub fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

impl Config {
    pub fn from_env() -> Config {
        // Attached, the control file's settings come before the environment.
        let (cfg, warnings) =
            Config::from_lookup(&|name| attach_setting(name).or_else(|| std::env::var(name).ok()));
        for w in warnings {
            eprintln!("syncspy: warning: {w}");
        }
        cfg
    }

    /// The settings `get` gives, and a warning for each value not taken as given.
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> (Config, Vec<String>) {
        let mut env = Env {
            get,
            warnings: Vec::new(),
        };
        let max_frames = syncspy_abi::sites::MAX_FRAMES;
        let cfg = Config {
            dir: env
                .value("SYNCSPY_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/dev/shm")),
            ring: env.num("SYNCSPY_RING", SegmentParams::DEFAULT_RING, MAX_RING_ENV),
            sites: env.num("SYNCSPY_SITES", SegmentParams::DEFAULT_SITES, MAX_SITES_ENV),
            session: env.num("SYNCSPY_SESSION", 0, u64::MAX),
            stacks: env.bool("SYNCSPY_STACKS", true, true),
            stack_depth: env
                .num("SYNCSPY_STACK_DEPTH", max_frames, max_frames)
                .max(1),
            stack_min_ns: env.num("SYNCSPY_STACK_MIN_NS", 0, u64::MAX),
            stack_cache: env.bool("SYNCSPY_STACK_CACHE", true, true),
            python: env.bool("SYNCSPY_PYTHON", true, true),
            idle_after: env.bool("SYNCSPY_IDLE_AFTER", true, true),
            budget_ppm: env.budget(),
            gpu: {
                let (mode, min_us) = (
                    env.value("SYNCSPY_GPU_IDLE"),
                    env.value("SYNCSPY_GPU_IDLE_MIN_US"),
                );
                GpuConfig::parse_warn(mode.as_deref(), min_us.as_deref(), &mut env.warnings)
            },
        };
        (cfg, env.warnings)
    }
}

/// Whether `SYNCSPY_OFF`'s value turns recording off: a true boolean does, a false one
/// (`0`, `false`, `no`, `off`) or none does not; anything else does, with a warning (it was
/// set to turn recording off, the switch's only use).
fn off_from(v: Option<String>) -> (bool, Option<String>) {
    let mut env = Env {
        get: &|_| v.clone(),
        warnings: Vec::new(),
    };
    let off = env.bool("SYNCSPY_OFF", false, true);
    (off, env.warnings.pop())
}

fn off_by_env() -> bool {
    let (off, warning) = off_from(std::env::var("SYNCSPY_OFF").ok());
    if let Some(w) = warning {
        eprintln!("syncspy: warning: {w}");
    }
    off
}

/// Whether hooks maintain side tables (the pinned registry): always, unless `SYNCSPY_OFF`.
pub fn tracking() -> bool {
    !off_by_env_cached()
}

pub(crate) fn off_by_env_cached() -> bool {
    static OFF: AtomicU8 = AtomicU8::new(2);
    match OFF.load(Ordering::Relaxed) {
        0 => false,
        1 => true,
        _ => {
            let off = off_by_env();
            OFF.store(off as u8, Ordering::Relaxed);
            off
        }
    }
}

/// Settings from the control file, consulted before the environment while attached (set by
/// `attach` when it arms).
static ATTACH_SETTINGS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// A setting from the control file of the current attach.
pub(crate) fn attach_setting(name: &str) -> Option<String> {
    let s = ATTACH_SETTINGS.lock().ok()?;
    s.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

/// Takes `settings` as the current attach's control file settings.
pub(crate) fn set_attach_settings(settings: Vec<(String, String)>) {
    if let Ok(mut s) = ATTACH_SETTINGS.lock() {
        *s = settings;
    }
}

/// GPU idle tracing's settings (`SYNCSPY_GPU_IDLE`, `SYNCSPY_GPU_IDLE_MIN_US`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuConfig {
    /// `MODE_*` (`SYNCSPY_GPU_IDLE`: `off`, `on`, `duty`; default `duty`).
    pub mode: u32,
    /// Shortest gap written to the ring (`SYNCSPY_GPU_IDLE_MIN_US`, default 10 µs).
    pub min_gap_ns: u64,
}

impl GpuConfig {
    pub fn from_env() -> GpuConfig {
        GpuConfig::parse(
            std::env::var("SYNCSPY_GPU_IDLE").ok().as_deref(),
            std::env::var("SYNCSPY_GPU_IDLE_MIN_US").ok().as_deref(),
        )
    }

    /// A value that does not parse gives the default.
    pub fn parse(mode: Option<&str>, min_us: Option<&str>) -> GpuConfig {
        GpuConfig::parse_warn(mode, min_us, &mut Vec::new())
    }

    /// [`GpuConfig::parse`], with a warning in `warnings` for each value not taken: the mode
    /// is `duty` or a boolean (`off`, `0`, `false`, `no`: off; `on`, `1`, `true`, `yes`:
    /// on), the gap a whole number of microseconds.
    pub fn parse_warn(
        mode: Option<&str>,
        min_us: Option<&str>,
        warnings: &mut Vec<String>,
    ) -> GpuConfig {
        let mode = match mode.map(str::trim) {
            None | Some("") => MODE_DUTY,
            Some(v) if v.eq_ignore_ascii_case("duty") => MODE_DUTY,
            Some(v) => match parse_bool(v) {
                Some(false) => MODE_OFF,
                Some(true) => MODE_ON,
                None => {
                    warnings.push(format!(
                        "SYNCSPY_GPU_IDLE={v:?} is not off, on or duty: the default duty used"
                    ));
                    MODE_DUTY
                }
            },
        };
        let min_us: u64 = match min_us.map(str::trim).filter(|v| !v.is_empty()) {
            None => 10,
            Some(v) => v.parse().unwrap_or_else(|_| {
                warnings.push(format!(
                    "SYNCSPY_GPU_IDLE_MIN_US={v:?} is not a whole number of microseconds: the \
                     default 10 used"
                ));
                10
            }),
        };
        GpuConfig {
            mode,
            min_gap_ns: min_us.saturating_mul(1000),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> (Config, Vec<String>) {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(&move |name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn booleans_take_every_usual_spelling_and_warn_on_others() {
        for (v, want) in [
            ("0", false),
            ("false", false),
            ("No", false),
            ("OFF", false),
            ("1", true),
            ("true", true),
            ("yes", true),
            (" on ", true),
        ] {
            assert_eq!(parse_bool(v), Some(want), "{v}");
            let (c, w) = config(&[("SYNCSPY_STACKS", v), ("SYNCSPY_PYTHON", v)]);
            assert_eq!((c.stacks, c.python), (want, want), "{v}");
            assert!(w.is_empty(), "{w:?}");
        }
        let (c, w) = config(&[("SYNCSPY_STACK_CACHE", "nope")]);
        assert!(c.stack_cache);
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("SYNCSPY_STACK_CACHE=\"nope\" is not a boolean"),
            "{w:?}"
        );
        // Unset and empty: the defaults, silently.
        let (c, w) = config(&[("SYNCSPY_STACKS", "")]);
        assert!(c.stacks && c.stack_cache && c.python && w.is_empty());
    }

    #[test]
    fn syncspy_off_false_records_and_garbage_turns_it_off_with_a_warning() {
        assert_eq!(off_from(None), (false, None));
        assert_eq!(off_from(Some(String::new())), (false, None));
        for v in ["0", "false", "no", "off", "FALSE"] {
            assert_eq!(off_from(Some(v.into())), (false, None), "{v}");
        }
        for v in ["1", "true", "yes", "on"] {
            assert_eq!(off_from(Some(v.into())), (true, None), "{v}");
        }
        let (off, w) = off_from(Some("please".into()));
        assert!(off);
        assert!(w.unwrap().contains("SYNCSPY_OFF=\"please\""));
    }

    #[test]
    fn sizes_are_capped_with_a_warning_and_garbage_is_the_default() {
        let (c, w) = config(&[
            ("SYNCSPY_SITES", "4294967295"),
            ("SYNCSPY_RING", "99999999999"),
            ("SYNCSPY_STACK_DEPTH", "500"),
        ]);
        assert_eq!(c.sites, MAX_SITES_ENV);
        // Not a u32 at all: the default, with a warning.
        assert_eq!(c.ring, SegmentParams::DEFAULT_RING);
        assert_eq!(c.stack_depth, syncspy_abi::sites::MAX_FRAMES);
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].contains("SYNCSPY_RING"), "{w:?}");
        assert!(w[1].contains("SYNCSPY_SITES=4294967295 is above"), "{w:?}");
        let (c, w) = config(&[("SYNCSPY_RING", "8388608"), ("SYNCSPY_SESSION", "x")]);
        assert_eq!(c.ring, MAX_RING_ENV);
        assert_eq!(c.session, 0);
        assert_eq!(w.len(), 2, "{w:?}");
        let (c, w) = config(&[("SYNCSPY_RING", "1024"), ("SYNCSPY_SITES", "256")]);
        assert_eq!((c.ring, c.sites), (1024, 256));
        assert!(w.is_empty());
    }
}
