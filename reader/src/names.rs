//! Names from closed vocabularies (event kind, CUDA API, copy direction, GPU tracing state
//! and mode) as the report and the snapshot carry them: the enum when this build knows the
//! name, the text itself when it does not (a report written by a newer syncspy, or a foreign
//! one). Serialized as the name, so the JSON is what it was when these were plain strings.
//!
//! A [`Name`] compares, orders and hashes as its text: a map keyed by names lists them in the
//! order it did when keyed by strings, and `map["stream_sync"]` still finds a key.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use syncspy_abi::{Api, Direction, Kind};

/// A closed vocabulary with a public name per value.
pub trait Vocabulary: Copy + Eq + fmt::Debug + 'static {
    fn name(self) -> &'static str;
    fn from_name(s: &str) -> Option<Self>;
}

macro_rules! abi_vocabulary {
    ($($t:ty),+) => {$(
        impl Vocabulary for $t {
            fn name(self) -> &'static str {
                <$t>::name(self)
            }
            fn from_name(s: &str) -> Option<Self> {
                <$t>::from_name(s)
            }
        }
    )+};
}
abi_vocabulary!(Kind, Api, Direction);

/// A value of vocabulary `T`, or a name this build does not know.
#[derive(Clone, Debug)]
pub enum Name<T: Vocabulary> {
    Known(T),
    /// Never the name of a known value ([`Name::new`] sees to it).
    Other(String),
}

/// An event kind by name (`stream_sync`).
pub type KindName = Name<Kind>;
/// A CUDA API by name (`cudaStreamSynchronize`).
pub type ApiName = Name<Api>;
/// A copy direction by name (`h2d`).
pub type DirectionName = Name<Direction>;

impl<T: Vocabulary> Name<T> {
    /// The value named `s`, or `s` kept as text.
    pub fn new(s: &str) -> Name<T> {
        match T::from_name(s) {
            Some(v) => Name::Known(v),
            None => Name::Other(s.to_string()),
        }
    }

    /// The value, when this build knows it (also for an `Other` built by hand with a known
    /// name).
    pub fn known(&self) -> Option<T> {
        match self {
            Name::Known(v) => Some(*v),
            Name::Other(s) => T::from_name(s),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Name::Known(v) => v.name(),
            Name::Other(s) => s,
        }
    }
}

impl Name<Kind> {
    /// Where the kind goes in a list: in the ABI's numeric order, unknown names after.
    pub fn order(&self) -> u8 {
        self.known().map_or(u8::MAX, |k| k as u8)
    }
}

impl<T: Vocabulary> Default for Name<T> {
    fn default() -> Self {
        Name::Other(String::new())
    }
}

impl<T: Vocabulary> From<T> for Name<T> {
    fn from(v: T) -> Self {
        Name::Known(v)
    }
}

impl<T: Vocabulary> From<&str> for Name<T> {
    fn from(s: &str) -> Self {
        Name::new(s)
    }
}

/// The name, honouring width, fill, alignment and precision (`{:<16}` in tables).
impl<T: Vocabulary> fmt::Display for Name<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl<T: Vocabulary> PartialEq for Name<T> {
    fn eq(&self, o: &Self) -> bool {
        self.as_str() == o.as_str()
    }
}
impl<T: Vocabulary> Eq for Name<T> {}

impl<T: Vocabulary> PartialEq<T> for Name<T> {
    fn eq(&self, o: &T) -> bool {
        self.known() == Some(*o)
    }
}

impl<T: Vocabulary> PartialOrd for Name<T> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<T: Vocabulary> Ord for Name<T> {
    fn cmp(&self, o: &Self) -> Ordering {
        self.as_str().cmp(o.as_str())
    }
}

impl<T: Vocabulary> Hash for Name<T> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.as_str().hash(h)
    }
}

/// Consistent with `Eq`, `Ord` and `Hash`, which all go by the text.
impl<T: Vocabulary> Borrow<str> for Name<T> {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl<T: Vocabulary> Serialize for Name<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de, T: Vocabulary> Deserialize<'de> for Name<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(Name::new(&s))
    }
}

macro_rules! text_vocabulary {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vmeta])* $variant,)+ }

        impl $crate::names::Vocabulary for $name {
            fn name(self) -> &'static str {
                match self { $($name::$variant => $text,)+ }
            }
            fn from_name(s: &str) -> Option<Self> {
                match s { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.pad($crate::names::Vocabulary::name(*self))
            }
        }
    };
}
pub(crate) use text_vocabulary;

text_vocabulary! {
    /// The library's GPU tracing (`gpu.state`).
    GpuState {
        Off => "off",
        Tracing => "tracing",
        /// Duty mode, between traced windows.
        Paused => "paused",
        /// No activity API in this process.
        Unavailable => "unavailable",
        /// Another tool holds the activity API; the library stepped aside.
        Yielded => "yielded",
        /// The state word holds a value the reader did not know.
        Unknown => "unknown",
    }
}

text_vocabulary! {
    /// `SYNCSPY_GPU_IDLE` of the process (`gpu.mode`).
    GpuMode {
        Off => "off",
        On => "on",
        Duty => "duty",
        Unknown => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn names_serialize_as_text_and_read_back_as_the_enum() {
        for k in Kind::ALL {
            let n = KindName::from(*k);
            let json = serde_json::to_string(&n).unwrap();
            assert_eq!(json, format!("\"{}\"", k.name()));
            let back: KindName = serde_json::from_str(&json).unwrap();
            assert_eq!(back.known(), Some(*k));
        }
        for a in Api::ALL {
            let back: ApiName = serde_json::from_str(&format!("\"{}\"", a.name())).unwrap();
            assert_eq!(back, *a);
        }
        let s: GpuState = Name::<GpuState>::new("yielded").known().unwrap();
        assert_eq!(s, GpuState::Yielded);
    }

    #[test]
    fn display_honours_width_fill_alignment_and_precision() {
        let known = KindName::from(Kind::DeviceSync);
        let other = KindName::new("tensor_sync");
        let api = ApiName::from(Api::CudaStreamSynchronize);
        assert_eq!(format!("{known:<16}|"), "device_sync     |");
        assert_eq!(format!("{other:<16}|"), "tensor_sync     |");
        assert_eq!(format!("{known:>16}|"), "     device_sync|");
        assert_eq!(format!("{api:-^25}"), "--cudaStreamSynchronize--");
        assert_eq!(format!("{other:.6}"), "tensor");
        assert_eq!(format!("{:<12}|", GpuState::Paused), "paused      |");
        assert_eq!(format!("{:>6}", GpuMode::On), "    on");
        // Names of different lengths fill one column.
        let rows: Vec<String> = ["device_sync", "memcpy_pageable", "gpu_idle", "zz_new"]
            .iter()
            .map(|n| format!("{:<16}{:>4}", KindName::new(n), 1))
            .collect();
        assert!(rows.iter().all(|r| r.len() == 20), "{rows:?}");
    }

    #[test]
    fn an_unknown_name_is_kept_as_text_and_written_back_unchanged() {
        let n: KindName = serde_json::from_str("\"tensor_sync\"").unwrap();
        assert_eq!(n, Name::Other("tensor_sync".into()));
        assert_eq!(n.known(), None);
        assert_eq!(serde_json::to_string(&n).unwrap(), "\"tensor_sync\"");
        // Not a string at all is an error, not a panic.
        assert!(serde_json::from_str::<KindName>("3").is_err());
    }

    #[test]
    fn maps_keyed_by_names_keep_the_text_order_and_find_keys_by_text() {
        let mut m: BTreeMap<KindName, u32> = BTreeMap::new();
        for k in [Kind::StreamSync, Kind::DeviceSync, Kind::MemcpySync] {
            m.insert(k.into(), 1);
        }
        m.insert(Name::new("zz_new"), 2);
        m.insert(Name::new("a_new"), 3);
        let order: Vec<&str> = m.keys().map(Name::as_str).collect();
        assert_eq!(
            order,
            [
                "a_new",
                "device_sync",
                "memcpy_sync",
                "stream_sync",
                "zz_new"
            ]
        );
        assert_eq!(m["stream_sync"], 1);
        assert_eq!(m.get("zz_new"), Some(&2));
        let json = serde_json::to_string(&m).unwrap();
        let back: BTreeMap<KindName, u32> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.keys().filter(|k| k.known().is_some()).count(), 3);
    }
}
