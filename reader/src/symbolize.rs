//! Offline symbolization of call-site stacks with blazesym.
//!
//! Frames in the site table are return addresses, innermost first. For each one we find the
//! module (from the segment's module map) that holds `addr - 1` (the call instruction, not
//! the instruction after it), turn it into the ELF virtual address `addr - 1 - bias`, and
//! symbolize that in the module's file, with DWARF line info where present and demangling.
//! Nothing here fails a report: a frame that cannot be resolved prints as
//! `module.so+0xOFFSET` (or `0xADDR` outside every known module) and the reason is noted once.
//!
//! A segment whose writer is in another mount namespace than this reader (a container, a pod)
//! names its modules by the paths its process sees: this machine may have no file there, or
//! another one. Those are looked up inside the root of a live process of that namespace
//! ([`ModuleRoot`], [`Symbolizer::site_stack_in`]): `/proc/<pid>/root/<path>`, resolved with
//! `openat2(RESOLVE_IN_ROOT)` so that a link in the container stays in the container, the pid
//! checked (`/proc/<pid>/ns/mnt`) before and after its root is opened. A container's files are
//! untrusted like another user's: only a regular file is used (opened `O_PATH` and checked
//! with `fstat` first, so a FIFO or a device is never opened), its build id must be the one
//! the writer recorded, and only its ELF symbols are read (no DWARF, so no `.dwp` beside it
//! and no debug link is looked for). When no process of the namespace is left, the paths are
//! read on this machine (the build id still guards), and that is noted once.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{CodeInfo, Input, Symbolized};
use syncspy_abi::modules::Module;
use syncspy_abi::origin::Origin;

/// One logical frame (an inlined call expands to several for one address). Plain data, a
/// symbolized stack's text passed around by value (moved into reports, merged with Python
/// frames): its fields stay public.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// `symbol (file:line)`, `symbol (module)`, `module+0xOFFSET` or `0xADDR`.
    pub text: String,
    /// File name of the module holding the address, when known.
    pub module: Option<String>,
}

/// Whether a module is the CUDA runtime or syncspy's own library (or the simulated runtime
/// that stands in for it): frames there are not where the program called from.
pub fn is_runtime_module(file_name: &str) -> bool {
    ["libcudart", "libsyncspy", "libsimcudart"]
        .iter()
        .any(|p| file_name.starts_with(p))
}

/// Modules that are never the user's code: the C and C++ runtimes, the loader, the CUDA driver
/// and NVIDIA's libraries, the Python interpreter (the user's Python lines come from the
/// interpreter's own frames instead).
const SYSTEM_MODULES: &[&str] = &[
    "libc.so",
    "libc-",
    "libm.so",
    "libstdc++",
    "libgcc_s",
    "ld-linux",
    "libpthread",
    "libdl.so",
    "libcuda.so",
    "libcublas",
    "libcudnn",
    "libnccl",
    "libcusparse",
    "libcufft",
    "libcurand",
    "libpython",
];

/// Symbols that are never the user's code: Rust's standard library, cudarc, the C start-up,
/// and the scenario harness that ships with syncspy (its `timed`/`classified` wrappers).
const SYSTEM_SYMBOLS: &[&str] = &[
    "std::",
    "<std::",
    "core::",
    "<core::",
    "alloc::",
    "<alloc::",
    "cudarc::",
    "<cudarc::",
    "__libc_start",
    "_start",
    "syncspy_scenarios::truth::",
    "syncspy_scenarios::scenario::calls::",
];

/// Source files that are never the user's: the Rust toolchain's (`/rustc/<hash>/library/...`
/// in line tables) and crates from the registry.
const SYSTEM_FILES: &[&str] = &["(/rustc/", "/.cargo/registry/"];

/// The scenario harness's two files. Inlined into a release build, its wrappers are named
/// `{closure#0}` or `timed<...>` without their module, so only the file tells them apart from
/// the scenario's own code. They are the harness's only in this repository's scenario
/// programs ([`is_scenario_binary`]): a user's own `scenarios/src/scenario.rs` is the user's.
const HARNESS_FILES: &[&str] = &["/scenarios/src/scenario.rs:", "/scenarios/src/truth.rs:"];

/// This repository's scenario programs (the binaries of `scenarios/Cargo.toml` that link the
/// harness): `scn-<name>-cuda` (each `scn-<name>` launcher becomes it by `exec`), and the
/// other programs of that package.
const SCENARIO_BINARIES: &[&str] = &[
    "cudacalls",
    "cudacalls-dlopen",
    "drivercalls",
    "hostile-writer",
    "scenario-check",
];

/// Whether an object file name is one of this repository's scenario programs.
fn is_scenario_binary(module: &str) -> bool {
    module.starts_with("scn-") || SCENARIO_BINARIES.contains(&module)
}

/// Patterns from `SYNCSPY_HIDE_FRAMES` (comma-separated substrings of a frame's text), read
/// once.
fn hidden_patterns() -> &'static [String] {
    static P: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        std::env::var("SYNCSPY_HIDE_FRAMES")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect()
    })
}

/// Whether a frame is the user's code, the kind of frame a call site is named by: not in the
/// CUDA runtime or syncspy, not in a system or NVIDIA library, not Rust's standard library,
/// cudarc or syncspy's scenario harness, and matching none of `SYNCSPY_HIDE_FRAMES`.
/// `module` is the file name of the frame's object (`None` for a Python frame or unknown).
pub fn is_users_frame(text: &str, module: Option<&str>) -> bool {
    if let Some(m) = module {
        if is_runtime_module(m) || SYSTEM_MODULES.iter().any(|p| m.starts_with(p)) {
            return false;
        }
    }
    let harness_file =
        || module.is_some_and(is_scenario_binary) && HARNESS_FILES.iter().any(|p| text.contains(p));
    !SYSTEM_SYMBOLS.iter().any(|p| text.starts_with(p))
        && !is_static_runtime_symbol(text)
        && !SYSTEM_FILES.iter().any(|p| text.contains(p))
        && !harness_file()
        && !hidden_patterns().iter().any(|p| text.contains(p.as_str()))
}

/// Whether a frame is in the CUDA runtime linked statically into the program (nvcc links
/// `libcudart_static.a` by default): its internal functions are named `libcudart_static_<hash>`
/// and its API functions by their own names, in the program's own module, so neither the
/// module nor a system prefix tells them apart.
fn is_static_runtime_symbol(text: &str) -> bool {
    let symbol = text.split(" (").next().unwrap_or(text);
    symbol.starts_with("libcudart_static_")
        || syncspy_abi::Api::ALL
            .iter()
            .any(|a| !a.is_driver() && a.name() == symbol)
}

fn file_name(path: &str) -> &str {
    path.rsplit('/')
        .next()
        .filter(|s| !s.is_empty())
        .unwrap_or(path)
}

/// Resolved addresses a `Symbolizer` keeps (beyond, it starts over).
pub const MAX_CACHED_FRAMES: usize = 1 << 16;
/// Modules whose usability a `Symbolizer` remembers (beyond, it starts over).
pub const MAX_CACHED_MODULES: usize = 4096;
/// Notes a `Symbolizer` keeps.
pub const MAX_NOTES: usize = 64;
/// Frames of whole call-site stacks a `Symbolizer` keeps ([`Symbolizer::site_stack`]);
/// beyond, the stacks not used in the last pass are let go.
pub const MAX_CACHED_STACK_FRAMES: usize = 1 << 18;

/// Which segment a call site belongs to, for [`Symbolizer::site_stack`]: its pid, start
/// ticks and creation time (a `follow::SegmentKey`'s parts).
pub type StackOwner = (u32, u64, u64);

/// Module files in other mount namespaces a `Symbolizer` keeps open (each with the file
/// blazesym keeps open for it); beyond, it lets go of them all and opens again what it needs.
pub const MAX_NS_FILES: usize = 512;

/// A mount namespace: the inode of `/proc/<pid>/ns/mnt` and the device of the nsfs it is on
/// (0: unknown, not compared). Found by this module only ([`MountNs::own`],
/// [`ModuleRoot::of`]); read through `ino` and `dev`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MountNs {
    ino: u64,
    dev: u64,
}

impl MountNs {
    /// The inode of the namespace's `/proc/<pid>/ns/mnt`.
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// The device of the nsfs it is on (0: unknown).
    pub fn dev(&self) -> u64 {
        self.dev
    }

    /// This process's mount namespace; `None` without `/proc`.
    pub fn own() -> Option<MountNs> {
        static OWN: std::sync::OnceLock<Option<MountNs>> = std::sync::OnceLock::new();
        *OWN.get_or_init(|| MountNs::at("/proc/self/ns/mnt"))
    }

    fn at(path: &str) -> Option<MountNs> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).ok().map(|m| MountNs {
            ino: m.ino(),
            dev: m.dev(),
        })
    }

    /// Whether `other` is this namespace (devices compared where both are known).
    fn is(&self, other: MountNs) -> bool {
        self.ino == other.ino && (self.dev == 0 || other.dev == 0 || self.dev == other.dev)
    }

    /// Whether process `pid` (here) is in this namespace now.
    pub fn holds(&self, pid: u32) -> bool {
        MountNs::at(&format!("/proc/{pid}/ns/mnt")).is_some_and(|n| self.is(n))
    }
}

/// Where a segment's module paths are to be found when its writer is in another mount
/// namespace than this reader: inside the root of a live process of that namespace. Made by
/// [`ModuleRoot::of`] only; read through `ns` and `pid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModuleRoot {
    ns: MountNs,
    /// The writer's pid here, when known: tried first (checked to be in `ns`).
    pid: Option<u32>,
}

impl ModuleRoot {
    /// The writer's mount namespace.
    pub fn ns(&self) -> MountNs {
        self.ns
    }

    /// The writer's pid here, when known: tried first (checked to be in `ns`).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The root of a segment whose header records `origin`, written by process `pid` (its
    /// pid here, when found); `None` when the writer is in this reader's mount namespace, or
    /// that is not known (a segment before ABI 1.5, no `/proc`): its paths are this
    /// machine's.
    pub fn of(origin: Option<&Origin>, pid: Option<u32>) -> Option<ModuleRoot> {
        let o = origin.filter(|o| o.mnt_ns != 0)?;
        let ns = MountNs {
            ino: o.mnt_ns,
            dev: o.ns_dev,
        };
        let own = MountNs::own()?;
        (!ns.is(own)).then_some(ModuleRoot { ns, pid })
    }
}

/// Where a module's file was looked up: at its path here, or inside a mount namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Place {
    Here,
    Ns(MountNs),
}

/// What a `Symbolizer` knows of a mount namespace whose modules it looks up.
#[derive(Default)]
struct NsState {
    /// A process of it, as last found.
    pid: Option<u32>,
    /// The pass of the last look for a process, the writer's pid it was asked with, and
    /// what it found.
    checked: Option<(u64, Option<u32>, Option<u32>)>,
    /// Module files open in its root (`O_PATH`), by (path, build id): blazesym reads each
    /// as `/proc/self/fd/<n>`, which stays that file whatever the container does.
    files: HashMap<(String, Vec<u8>), OwnedFd>,
    noted_inside: bool,
    noted_gone: bool,
}

/// The work one pass of a long-lived reader may spend on stacks not symbolized before
/// ([`Symbolizer::begin_pass`]). Settings the caller fills in (the agent's per-step budget):
/// its fields stay public.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassBudget {
    /// Frames over every segment.
    pub frames: usize,
    /// Frames of one segment.
    pub frames_per_segment: usize,
}

/// One call site's symbolized stack.
struct CachedStack {
    frames: Vec<Frame>,
    /// The pass that last used it.
    used: u64,
    /// Modules in the map when it was symbolized.
    modules: usize,
    /// Every frame was in a known module.
    complete: bool,
}

/// A bounded pass's state.
#[derive(Default)]
struct Pass {
    budget: Option<PassBudget>,
    spent: usize,
    per_owner: HashMap<StackOwner, usize>,
    number: u64,
    /// Stacks left unsymbolized for a later pass, since the reader started.
    deferred: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Usable {
    Yes,
    /// The module's ELF symbols only, no debug information: a file blazesym would open
    /// beside it (its `.dwp`) is not a regular file and would block it.
    SymbolsOnly,
    No,
}

/// Symbolizes stacks; caches per module and per address across processes.
pub struct Symbolizer {
    inner: blazesym::symbolize::Symbolizer,
    /// Per (where, path, build id): whether the file can be used for this module.
    modules: HashMap<(Place, String, Vec<u8>), Usable>,
    cache: HashMap<(Place, String, Vec<u8>, u64), Vec<Frame>>,
    /// Mount namespaces of writers in another one than this reader's.
    namespaces: HashMap<MountNs, NsState>,
    /// Files open in them (`NsState::files`), in all.
    ns_files: usize,
    /// A process of each mount namespace (by inode) the caller knows of
    /// ([`Symbolizer::set_namespace_pids`]).
    ns_pids: HashMap<u64, u32>,
    notes: Vec<String>,
    /// Whole stacks per call site.
    stacks: HashMap<(StackOwner, u32), CachedStack>,
    stack_frames: usize,
    pass: Pass,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    pub fn new() -> Symbolizer {
        Symbolizer {
            inner: blazesym::symbolize::Symbolizer::builder()
                .enable_code_info(true)
                .enable_inlined_fns(true)
                .enable_demangling(true)
                .build(),
            modules: HashMap::new(),
            cache: HashMap::new(),
            namespaces: HashMap::new(),
            ns_files: 0,
            ns_pids: HashMap::new(),
            notes: Vec::new(),
            stacks: HashMap::new(),
            stack_frames: 0,
            pass: Pass::default(),
        }
    }

    /// Starts a pass bounded by `budget` (`None`: unbounded, the default): stacks not
    /// symbolized before are symbolized in this pass only while the budget lasts, the
    /// others come back empty and are counted in [`Symbolizer::deferred`]; stacks met before
    /// cost nothing. A long-lived reader that reports every process at each step (the agent)
    /// calls it at each step, so that symbolizing never holds its collection up.
    ///
    /// It also lets go of the files it holds open in mount namespaces no process is left in
    /// (one `stat` per such namespace), so that a container's file system is not kept
    /// after its end.
    pub fn begin_pass(&mut self, budget: Option<PassBudget>) {
        self.pass.budget = budget;
        self.pass.spent = 0;
        self.pass.per_owner.clear();
        self.pass.number = self.pass.number.wrapping_add(1);
        let held: Vec<MountNs> = self
            .namespaces
            .iter()
            .filter(|(_, s)| !s.files.is_empty())
            .map(|(ns, _)| *ns)
            .collect();
        for ns in held {
            // Lets go of its files when none is found.
            self.live_pid(ns, None, true);
        }
    }

    /// A process (pid here) of each mount namespace (by inode) the caller knows of, for
    /// segments whose own process has ended or cannot be placed (the agent's discovery pass
    /// finds one per namespace). Each is checked to be in its namespace before its root is
    /// used.
    pub fn set_namespace_pids(&mut self, pids: impl IntoIterator<Item = (u64, u32)>) {
        self.ns_pids = pids.into_iter().collect();
    }

    /// Stacks left for a later pass by a bounded pass's budget, since this symbolizer began.
    pub fn deferred(&self) -> u64 {
        self.pass.deferred
    }

    /// The logical frames of call site `site` of segment `owner`, whose stack `frames`
    /// gives (called only when not cached). A call site's stack never changes, so it is
    /// symbolized once and kept. In a bounded pass (`begin_pass`), a stack that does not fit
    /// the pass's budget comes back empty.
    pub fn site_stack(
        &mut self,
        owner: StackOwner,
        site: u32,
        frames: impl FnOnce() -> Vec<u64>,
        modules: &[Module],
    ) -> Vec<Frame> {
        self.site_stack_in(owner, site, frames, modules, None)
    }

    /// [`Symbolizer::site_stack`] of a segment whose module paths are to be found inside
    /// `root` (its writer's mount namespace, when another than this reader's).
    pub fn site_stack_in(
        &mut self,
        owner: StackOwner,
        site: u32,
        frames: impl FnOnce() -> Vec<u64>,
        modules: &[Module],
        root: Option<&ModuleRoot>,
    ) -> Vec<Frame> {
        let pass = self.pass.number;
        let stale = match self.stacks.get_mut(&(owner, site)) {
            // A frame outside every module may be in one published since: tried again
            // once the map has grown.
            Some(c) if c.complete || c.modules >= modules.len() => {
                c.used = pass;
                return c.frames.clone();
            }
            Some(c) => Some(c.frames.clone()),
            None => None,
        };
        let stack = frames();
        if let Some(b) = self.pass.budget {
            let mine = self.pass.per_owner.get(&owner).copied().unwrap_or(0);
            if self.pass.spent + stack.len() > b.frames || mine + stack.len() > b.frames_per_segment
            {
                self.pass.deferred = self.pass.deferred.saturating_add(1);
                return stale.unwrap_or_default();
            }
            self.pass.spent += stack.len();
            *self.pass.per_owner.entry(owner).or_default() += stack.len();
        }
        let out = self.stack_in(&stack, modules, root);
        if let Some(old) = self.stacks.remove(&(owner, site)) {
            self.stack_frames -= old.frames.len();
        }
        if self.stack_frames + out.len() > MAX_CACHED_STACK_FRAMES {
            // Let go of the stacks this pass has not used; all of them if that is not enough.
            self.stacks.retain(|_, c| c.used == pass);
            self.stack_frames = self.stacks.values().map(|c| c.frames.len()).sum();
            if self.stack_frames + out.len() > MAX_CACHED_STACK_FRAMES {
                self.stacks.clear();
                self.stack_frames = 0;
            }
        }
        self.stack_frames += out.len();
        let complete = out.iter().all(|f| f.module.is_some());
        self.stacks.insert(
            (owner, site),
            CachedStack {
                frames: out.clone(),
                used: pass,
                modules: modules.len(),
                complete,
            },
        );
        out
    }

    /// Lets go of the stacks of segment `owner` (no longer followed).
    pub fn forget_owner(&mut self, owner: StackOwner) {
        let before = self.stacks.len();
        self.stacks.retain(|(o, _), _| *o != owner);
        if self.stacks.len() != before {
            self.stack_frames = self.stacks.values().map(|c| c.frames.len()).sum();
        }
    }

    /// Things worth telling the user, each once: modules that could not be read, build ids
    /// that differ from the loaded object's. At most [`MAX_NOTES`], then one that says so.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Keeps a note, unless `MAX_NOTES` are kept already (module paths come from segments: a
    /// segment could name thousands).
    fn note(&mut self, n: String) {
        match self.notes.len() {
            l if l < MAX_NOTES => self.notes.push(n),
            l if l == MAX_NOTES => self
                .notes
                .push("more symbolization problems were not kept".to_string()),
            _ => {}
        }
    }

    /// The logical frames of a stack of return addresses (innermost first).
    pub fn stack(&mut self, return_addrs: &[u64], modules: &[Module]) -> Vec<Frame> {
        self.stack_in(return_addrs, modules, None)
    }

    /// [`Symbolizer::stack`] with the module paths inside `root`.
    pub fn stack_in(
        &mut self,
        return_addrs: &[u64],
        modules: &[Module],
        root: Option<&ModuleRoot>,
    ) -> Vec<Frame> {
        return_addrs
            .iter()
            .flat_map(|a| self.frame_in(*a, modules, root))
            .collect()
    }

    /// The logical frames of one return address: one, or more when calls were inlined
    /// (innermost first).
    pub fn frame(&mut self, return_addr: u64, modules: &[Module]) -> Vec<Frame> {
        self.frame_in(return_addr, modules, None)
    }

    /// [`Symbolizer::frame`] with the module paths inside `root` while a process of its
    /// namespace lives (at their paths here otherwise).
    pub fn frame_in(
        &mut self,
        return_addr: u64,
        modules: &[Module],
        root: Option<&ModuleRoot>,
    ) -> Vec<Frame> {
        // The call instruction ends just before the return address.
        let pc = return_addr.wrapping_sub(1);
        // The latest entry wins where ranges overlap (an object unloaded and another
        // loaded in its place).
        let Some(m) = modules.iter().rev().find(|m| m.contains(pc)) else {
            return vec![Frame {
                text: format!("{return_addr:#x}"),
                module: None,
            }];
        };
        let vaddr = pc.wrapping_sub(m.bias);
        let place = match root {
            Some(r) => self.place_of(r),
            None => Place::Here,
        };
        let key = (place, m.path.clone(), m.build_id.clone(), vaddr);
        if let Some(f) = self.cache.get(&key) {
            return f.clone();
        }
        let (frames, place) = self.resolve(m, vaddr, place);
        let key = (place, key.1, key.2, vaddr);
        if self.cache.len() >= MAX_CACHED_FRAMES {
            // A long-lived reader (the agent) meets ever new addresses; start over rather
            // than grow without bound.
            self.cache.clear();
        }
        self.cache.insert(key, frames.clone());
        frames
    }

    /// The frames of `vaddr` in module `m`, looked up at `place` (or here, when its
    /// namespace turned out to have no process left), and where that was.
    fn resolve(&mut self, m: &Module, vaddr: u64, place: Place) -> (Vec<Frame>, Place) {
        let name = file_name(&m.path).to_string();
        let fallback = || {
            vec![Frame {
                text: format!("{name}+{vaddr:#x}"),
                module: Some(name.clone()),
            }]
        };
        let (usable, file, place) = match place {
            Place::Here => (self.check_module(m), m.path.clone(), Place::Here),
            Place::Ns(ns) => match self.check_in_ns(m, ns) {
                Some((usable, file)) => (usable, file, place),
                None => (self.check_module(m), m.path.clone(), Place::Here),
            },
        };
        if usable == Usable::No {
            return (fallback(), place);
        }
        let mut elf = Elf::new(&file);
        elf.debug_syms = usable == Usable::Yes;
        let src = Source::Elf(elf);
        let syms = match self.inner.symbolize(&src, Input::VirtOffset(&[vaddr][..])) {
            Ok(s) => s,
            Err(e) => {
                self.note(format!("cannot symbolize in {}: {e}", m.path));
                self.modules
                    .insert((place, m.path.clone(), m.build_id.clone()), Usable::No);
                return (fallback(), place);
            }
        };
        let Some(Symbolized::Sym(sym)) = syms.into_iter().next() else {
            return (fallback(), place);
        };
        let mut out = Vec::with_capacity(1 + sym.inlined.len());
        for f in sym.inlined.iter().rev() {
            out.push(Frame {
                text: describe(&f.name, f.code_info.as_ref(), &name),
                module: Some(name.clone()),
            });
        }
        out.push(Frame {
            text: describe(&sym.name, sym.code_info.as_deref(), &name),
            module: Some(name.clone()),
        });
        (out, place)
    }

    /// Where the modules of a segment with root `r` are looked up now: inside its
    /// namespace while a process of it lives, else here (said once per namespace).
    fn place_of(&mut self, r: &ModuleRoot) -> Place {
        if self.live_pid(r.ns, r.pid, false).is_some() {
            return Place::Ns(r.ns);
        }
        self.note_gone(r.ns);
        Place::Here
    }

    fn note_gone(&mut self, ns: MountNs) {
        let st = self.namespaces.entry(ns).or_default();
        if !std::mem::replace(&mut st.noted_gone, true) {
            self.note(format!(
                "no process of mount namespace {} is left: the modules of its processes are \
                 read at their paths on this machine (their build ids checked)",
                ns.ino
            ));
        }
    }

    /// A live process of `ns`: the writer's (`writer`) first, then the one found last, then
    /// the caller's ([`Symbolizer::set_namespace_pids`]), each checked to be in `ns`. Looked
    /// for once a pass (a pass that found none looks again for another writer), or now when
    /// `fresh`. When none is left, the files held open in `ns` are let go.
    fn live_pid(&mut self, ns: MountNs, writer: Option<u32>, fresh: bool) -> Option<u32> {
        let pass = self.pass.number;
        if !self.namespaces.contains_key(&ns) && self.namespaces.len() >= MAX_CACHED_MODULES {
            self.release_all();
            self.namespaces.clear();
        }
        let hint = self.ns_pids.get(&ns.ino).copied();
        let st = self.namespaces.entry(ns).or_default();
        if !fresh {
            if let Some((p, w, found)) = st.checked {
                if p == pass && (found.is_some() || w == writer) {
                    return found;
                }
            }
        }
        let mut found = None;
        for pid in [writer, st.pid, hint].into_iter().flatten() {
            if ns.holds(pid) {
                found = Some(pid);
                break;
            }
        }
        st.pid = found;
        st.checked = Some((pass, writer, found));
        if found.is_none() && !st.files.is_empty() {
            self.release(ns);
        }
        found
    }

    /// Lets go of the files open in `ns` and of what was decided with them.
    fn release(&mut self, ns: MountNs) {
        let files = self
            .namespaces
            .get_mut(&ns)
            .map(|s| std::mem::take(&mut s.files))
            .unwrap_or_default();
        for fd in files.into_values() {
            self.close_ns_file(fd);
        }
        self.modules.retain(|k, _| k.0 != Place::Ns(ns));
    }

    fn release_all(&mut self) {
        let all: Vec<MountNs> = self.namespaces.keys().copied().collect();
        for ns in all {
            self.release(ns);
        }
    }

    /// Drops blazesym's copy of a namespace's file, then the file.
    fn close_ns_file(&mut self, fd: OwnedFd) {
        use blazesym::symbolize::evict::{Elf as EvictElf, Evict};
        let _ = self.inner.evict(&Evict::Elf(EvictElf::new(fd_path(&fd))));
        self.ns_files = self.ns_files.saturating_sub(1);
        drop(fd);
    }

    /// Whether module `m` of a process of mount namespace `ns` can be used, and the file
    /// blazesym reads it from; `None` when no process of `ns` is left (then it is looked up
    /// here, said once).
    fn check_in_ns(&mut self, m: &Module, ns: MountNs) -> Option<(Usable, String)> {
        let key = (Place::Ns(ns), m.path.clone(), m.build_id.clone());
        let file_of = |s: &Self| {
            s.namespaces
                .get(&ns)
                .and_then(|st| st.files.get(&(m.path.clone(), m.build_id.clone())))
                .map_or_else(|| m.path.clone(), fd_path)
        };
        if let Some(u) = self.modules.get(&key).copied() {
            return Some((u, file_of(self)));
        }
        if !m.path.starts_with('/') {
            return Some((self.check_module(m), m.path.clone()));
        }
        let Some((pid, fd)) = self.open_in_ns(ns, &m.path) else {
            self.note_gone(ns);
            return None;
        };
        let (usable, keep) = self.judge_ns_file(m, ns, pid, fd);
        self.remember_ns_module(key, ns, usable, keep);
        Some((usable, file_of(self)))
    }

    /// Opens `path` inside the root of a live process of `ns`: the process found this pass,
    /// and if it left the namespace since, another. `None` when no process of `ns` is left;
    /// else that process and what opening gave.
    fn open_in_ns(&mut self, ns: MountNs, path: &str) -> Option<(u32, std::io::Result<OwnedFd>)> {
        for fresh in [false, true] {
            let pid = self.live_pid(ns, None, fresh)?;
            match open_module_in(pid, ns, path) {
                Ok(fd) => return Some((pid, Ok(fd))),
                Err(Some(e)) => return Some((pid, Err(e))),
                Err(None) => {}
            }
        }
        None
    }

    /// Whether the file opened for module `m` in `ns` (through process `pid`) can be used,
    /// and the file to keep open for blazesym when it is read there.
    fn judge_ns_file(
        &mut self,
        m: &Module,
        ns: MountNs,
        pid: u32,
        fd: std::io::Result<OwnedFd>,
    ) -> (Usable, Option<OwnedFd>) {
        let at = format!("in mount namespace {} (/proc/{pid}/root)", ns.ino);
        match fd.and_then(|fd| fstat(&fd).map(|st| (fd, st))) {
            Err(e) => {
                self.note(format!(
                    "cannot read {} {at}: {e}; its frames are shown as offsets",
                    m.path
                ));
                (Usable::No, None)
            }
            Ok((_, st)) if st.st_mode & libc::S_IFMT != libc::S_IFREG => {
                // Opened `O_PATH` only: a FIFO or a device there was not opened.
                self.note(format!(
                    "{} {at} is not a regular file; its frames are shown as offsets",
                    m.path
                ));
                (Usable::No, None)
            }
            Ok((_, st)) if same_file_here(&m.path, &st) => {
                // The very file at its path here (a folder of this machine mounted into the
                // container, or a namespace that shares this reader's files): read as
                // such, under the rules for this machine's files.
                (self.check_module(m), None)
            }
            Ok((fd, _)) => self.judge_ns_build_id(m, ns, pid, &at, fd),
        }
    }

    /// A regular file of `ns` that is not this machine's: usable for its ELF symbols when
    /// its build id is the loaded one (or there is none to compare).
    fn judge_ns_build_id(
        &mut self,
        m: &Module,
        ns: MountNs,
        pid: u32,
        at: &str,
        fd: OwnedFd,
    ) -> (Usable, Option<OwnedFd>) {
        let path = fd_path(&fd);
        let found = if m.build_id.is_empty() {
            Ok(None)
        } else {
            syncspy_abi::modules::file_build_id(Path::new(&path))
        };
        match found {
            Ok(Some(b)) if b != m.build_id => {
                self.note(format!(
                    "{} {at} is not the file the process loaded (build id {} there, \
                     {} loaded): its frames are shown as offsets",
                    m.path,
                    hex(&b),
                    hex(&m.build_id)
                ));
                (Usable::No, None)
            }
            Ok(None) if !m.build_id.is_empty() => {
                self.note(format!(
                    "{} {at} has no build id ({} loaded): its frames are shown as \
                     offsets",
                    m.path,
                    hex(&m.build_id)
                ));
                (Usable::No, None)
            }
            // The same file, or no build id to compare (blazesym reports real
            // failures): its ELF symbols only, as another user's file. Its debug
            // information could name any file of the container or of this machine.
            _ => {
                let st = self.namespaces.entry(ns).or_default();
                if !std::mem::replace(&mut st.noted_inside, true) {
                    self.note(format!(
                        "the modules of mount namespace {} are read inside its root \
                         (/proc/{pid}/root), as another user's files: their frames \
                         are shown without file and line",
                        ns.ino
                    ));
                }
                (Usable::SymbolsOnly, Some(fd))
            }
        }
    }

    /// Caches the verdict on a module of a namespace, and keeps its file open (`keep`) for
    /// blazesym, within the caches' bounds.
    fn remember_ns_module(
        &mut self,
        key: (Place, String, Vec<u8>),
        ns: MountNs,
        usable: Usable,
        keep: Option<OwnedFd>,
    ) {
        if self.modules.len() >= MAX_CACHED_MODULES {
            self.modules.clear();
            self.release_all();
        }
        if let Some(fd) = keep {
            if self.ns_files >= MAX_NS_FILES {
                self.release_all();
            }
            self.ns_files += 1;
            let old = self
                .namespaces
                .entry(ns)
                .or_default()
                .files
                .insert((key.1.clone(), key.2.clone()), fd);
            if let Some(old) = old {
                self.close_ns_file(old);
            }
        }
        self.modules.insert(key, usable);
    }

    /// Checks once per module that its file exists and, when the writer recorded a build
    /// id, that the file still has it (a rebuilt file would give wrong names).
    fn check_module(&mut self, m: &Module) -> Usable {
        let key = (Place::Here, m.path.clone(), m.build_id.clone());
        if let Some(u) = self.modules.get(&key) {
            return *u;
        }
        let usable = if !m.path.starts_with('/') {
            self.note(format!(
                "module {:?} has no absolute path: its frames are shown as offsets",
                m.path
            ));
            Usable::No
        } else if let Some(why) = match std::fs::metadata(Path::new(&m.path)) {
            Err(e) => Some(format!("cannot read {}: {e}", m.path)),
            // The path comes from the segment: a FIFO or a device there would block or
            // mislead the symbolizer.
            Ok(md) if !md.is_file() => Some(format!("{} is not a regular file", m.path)),
            Ok(_) => None,
        } {
            self.note(format!("{why}; its frames are shown as offsets"));
            Usable::No
        } else if let Some(why) =
            beside_not_regular(&m.path).or_else(|| others_can_plant_beside(&m.path))
        {
            self.note(format!(
                "{why}; the frames of {} are shown without file and line",
                m.path
            ));
            Usable::SymbolsOnly
        } else if m.build_id.is_empty() {
            Usable::Yes
        } else {
            match syncspy_abi::modules::file_build_id(Path::new(&m.path)) {
                Ok(Some(b)) if b == m.build_id => Usable::Yes,
                Ok(found) => {
                    self.note(format!(
                        "{} changed since the process loaded it (build id {} on disk, {} \
                         loaded): its frames are shown as offsets",
                        m.path,
                        found.map(|b| hex(&b)).unwrap_or_else(|| "none".into()),
                        hex(&m.build_id)
                    ));
                    Usable::No
                }
                // Unreadable build id: symbolize anyway, blazesym reports real failures.
                Err(_) => Usable::Yes,
            }
        };
        if self.modules.len() >= MAX_CACHED_MODULES {
            self.modules.clear();
            self.release_all();
        }
        self.modules.insert(key, usable);
        usable
    }
}

/// `/proc/self/fd/<n>`: the file `fd` is open on, for blazesym and `file_build_id`.
fn fd_path(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

fn fstat(fd: &OwnedFd) -> std::io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on an open descriptor (`O_PATH` ones included) into a `stat` it fills.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

/// Whether `path` here is the file `st` describes.
fn same_file_here(path: &str, st: &libc::stat) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).is_ok_and(|md| md.dev() == st.st_dev && md.ino() == st.st_ino)
}

/// Opens `path` inside the root of process `pid` of mount namespace `ns`, `O_PATH` (nothing
/// at the path is opened for reading: a FIFO, a device are not opened). `Err(None)`: the
/// process is gone or no longer in `ns`. The pid is checked before its root is opened and
/// again after: a pid reused in between would have to be in `ns` too.
fn open_module_in(pid: u32, ns: MountNs, path: &str) -> Result<OwnedFd, Option<std::io::Error>> {
    if !ns.holds(pid) {
        return Err(None);
    }
    let root = match crate::in_root::open_root(pid) {
        Ok(r) => r,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) => return Err(None),
        Err(e) => {
            return Err(Some(std::io::Error::new(
                e.kind(),
                format!("cannot open /proc/{pid}/root: {e}"),
            )))
        }
    };
    if !ns.holds(pid) {
        return Err(None);
    }
    crate::in_root::open_under(root.as_fd(), Path::new(path), false).map_err(Some)
}

/// Why a file blazesym opens beside a module cannot be opened safely: its DWARF package
/// (`<module>.dwp`) is there but not a regular file. Module paths come from segments, and a
/// FIFO named like the `.dwp` would block blazesym's open, and the reader, forever.
fn beside_not_regular(module: &str) -> Option<String> {
    let dwp = format!("{module}.dwp");
    match std::fs::symlink_metadata(&dwp) {
        Err(_) => None,
        // Followed as blazesym would; a link to nothing is not opened either.
        Ok(_) => match std::fs::metadata(&dwp) {
            Ok(md) if md.is_file() => None,
            Ok(_) => Some(format!("{dwp} is not a regular file")),
            Err(_) => None,
        },
    }
}

/// Why the files blazesym would look for debug information in, beside a module, are not safe
/// to open: the module's file is another user's (its `.gnu_debuglink` could name any path,
/// `../../tmp/fifo`), or its folder, or the `.debug` folder in it, is another user's or
/// writable by every user (where a FIFO named like the debug file could be planted). Then
/// no debug link is followed (ELF symbols only). Root's and this reader's own files are
/// trusted; group-writable folders are (members of a group are trusted with each other's
/// folders already).
fn others_can_plant_beside(module: &str) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let euid = crate::safe_file::euid();
    let trusted = |md: &std::fs::Metadata| md.uid() == 0 || md.uid() == euid;
    // Where blazesym looks: beside the file the path resolves to.
    let file = std::fs::canonicalize(module).ok()?;
    let md = std::fs::metadata(&file).ok()?;
    if !trusted(&md) {
        return Some(format!(
            "{} belongs to another user (uid {}): its debug links are not followed",
            file.display(),
            md.uid()
        ));
    }
    let dir = file.parent()?;
    for d in [dir.to_path_buf(), dir.join(".debug")] {
        match std::fs::metadata(&d) {
            Ok(md) if !trusted(&md) || md.mode() & 0o002 != 0 => {
                return Some(format!(
                    "{} can be written by other users: debug files in it are not opened",
                    d.display()
                ))
            }
            _ => {}
        }
    }
    None
}

fn describe(name: &str, ci: Option<&CodeInfo<'_>>, module: &str) -> String {
    match ci {
        Some(ci) => {
            let path = ci.to_path();
            match ci.line {
                Some(line) => format!("{name} ({}:{line})", path.display()),
                None => format!("{name} ({})", path.display()),
            }
        }
        None => format!("{name} ({module})"),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A function whose address the tests symbolize; never inlined, so it has a symbol.
    #[inline(never)]
    pub fn syncspy_known_function_for_symbolization(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(3)
    }

    /// The module map entry of the test executable itself (the first loaded object).
    pub fn own_module() -> Module {
        let (bias, extent) = syncspy_abi::objects::for_each_object(|o| {
            std::ops::ControlFlow::Break((o.bias(), o.extent()))
        })
        .unwrap();
        let extent = extent.unwrap();
        let path = std::fs::read_link("/proc/self/exe").unwrap();
        let path = path.to_str().unwrap().to_string();
        let build_id = syncspy_abi::modules::file_build_id(Path::new(&path))
            .unwrap()
            .unwrap_or_default();
        Module {
            path,
            bias,
            start: extent.start,
            end: extent.end,
            build_id,
        }
    }

    pub fn known_return_addr() -> u64 {
        syncspy_known_function_for_symbolization as *const () as u64 + 1
    }

    #[test]
    fn a_bounded_pass_defers_new_stacks_and_reuses_the_ones_it_has() {
        let m = own_module();
        let addr = known_return_addr();
        let stack = vec![addr; 10];
        let mut s = Symbolizer::new();
        let budget = PassBudget {
            frames: 25,
            frames_per_segment: 20,
        };
        s.begin_pass(Some(budget));
        let a = (1, 1, 1);
        let b = (2, 2, 2);
        let mods = std::slice::from_ref(&m);
        // Segment a: two stacks fit its 20 frames, the third waits.
        assert!(!s.site_stack(a, 1, || stack.clone(), mods).is_empty());
        assert!(!s.site_stack(a, 2, || stack.clone(), mods).is_empty());
        assert!(s.site_stack(a, 3, || stack.clone(), mods).is_empty());
        // Segment b gets what is left of the pass (5 frames): not a whole stack.
        assert!(s.site_stack(b, 1, || stack.clone(), mods).is_empty());
        assert_eq!(s.deferred(), 2);
        // Known stacks cost nothing and are not read again.
        let again = s.site_stack(a, 1, || panic!("read again"), mods);
        assert!(again[0]
            .text
            .contains("syncspy_known_function_for_symbolization"));
        // The next pass does the deferred ones.
        s.begin_pass(Some(budget));
        assert!(!s.site_stack(b, 1, || stack.clone(), mods).is_empty());
        assert!(!s.site_stack(a, 3, || stack.clone(), mods).is_empty());
        // Unbounded (the default of a one-shot report): everything at once.
        s.begin_pass(None);
        for site in 10..20 {
            assert!(!s.site_stack(a, site, || stack.clone(), mods).is_empty());
        }
        s.forget_owner(a);
        assert!(s.stacks.keys().all(|(o, _)| *o == b));
    }

    #[test]
    fn symbolizes_a_function_of_the_test_binary() {
        let m = own_module();
        let addr = known_return_addr();
        assert!(m.contains(addr - 1));
        let mut s = Symbolizer::new();
        let frames = s.frame(addr, std::slice::from_ref(&m));
        let last = frames.last().unwrap();
        assert!(
            last.text
                .contains("syncspy_known_function_for_symbolization"),
            "{frames:?}"
        );
        // The test binary has debug info: file and line are there.
        assert!(last.text.contains("symbolize.rs:"), "{frames:?}");
        assert_eq!(s.notes(), &[] as &[String]);
        // Cached the second time, same answer.
        assert_eq!(s.frame(addr, std::slice::from_ref(&m)), frames);
    }

    #[test]
    fn unknown_addresses_and_changed_modules_fall_back_to_offsets() {
        let mut s = Symbolizer::new();
        let f = s.frame(0x1234, &[]);
        assert_eq!(f[0].text, "0x1234");
        assert_eq!(f[0].module, None);

        let mut m = own_module();
        m.build_id = vec![0xde, 0xad];
        let addr = known_return_addr();
        let f = s.frame(addr, std::slice::from_ref(&m));
        let name = file_name(&m.path).to_string();
        assert_eq!(f[0].text, format!("{name}+{:#x}", addr - 1 - m.bias));
        assert!(s.notes()[0].contains("build id"), "{:?}", s.notes());

        // A FIFO in a module's place is never opened (it would block).
        let dir = syncspy_test_support::TempDir::new("sym-fifo");
        let fifo = dir.path().join("libfifo.so");
        syncspy_test_support::mkfifo(&fifo);
        let m = Module {
            path: fifo.to_string_lossy().into_owned(),
            bias: 0x1000,
            start: 0x1000,
            end: 0x2000,
            build_id: vec![],
        };
        assert_eq!(s.frame(0x1801, &[m])[0].text, "libfifo.so+0x800");
        assert!(s.notes().iter().any(|n| n.contains("not a regular file")));
        assert!(syncspy_abi::modules::file_build_id(&fifo).is_err());

        let missing = Module {
            path: "/nonexistent/libgone.so".into(),
            bias: 0x1000,
            start: 0x1000,
            end: 0x2000,
            build_id: vec![],
        };
        let f = s.frame(0x1801, std::slice::from_ref(&missing));
        assert_eq!(f[0].text, "libgone.so+0x800");
        assert_eq!(f[0].module.as_deref(), Some("libgone.so"));
        assert!(s
            .notes()
            .iter()
            .any(|n| n.contains("/nonexistent/libgone.so")));
    }

    /// The frames and notes of `known_return_addr()` in module `m`, symbolized on a thread of
    /// their own; `Err` if that took over 30 s (blocked).
    fn frame_within_30s(
        m: &Module,
    ) -> Result<(Vec<Frame>, Vec<String>), std::sync::mpsc::RecvTimeoutError> {
        let addr = known_return_addr();
        let (tx, rx) = std::sync::mpsc::channel();
        let m = m.clone();
        std::thread::spawn(move || {
            let mut s = Symbolizer::new();
            let frames = s.frame(addr, std::slice::from_ref(&m));
            let _ = tx.send((frames, s.notes().to_vec()));
        });
        rx.recv_timeout(std::time::Duration::from_secs(30))
    }

    /// The ELF symbols still name the function (no file and line without the DWARF).
    fn assert_names_the_known_function(frames: &[Frame]) {
        assert!(
            frames
                .last()
                .unwrap()
                .text
                .contains("syncspy_known_function_for_symbolization"),
            "{frames:?}"
        );
    }

    #[test]
    fn a_fifo_named_like_the_modules_dwp_does_not_block_symbolization() {
        // The module as a segment could name it: a link to this test binary in a folder
        // where a user also put a FIFO named like its DWARF package.
        let dir = syncspy_test_support::TempDir::new("sym-dwp");
        let mut m = own_module();
        let link = dir.path().join("cudacalls");
        std::os::unix::fs::symlink(&m.path, &link).unwrap();
        syncspy_test_support::mkfifo(&dir.path().join("cudacalls.dwp"));
        m.path = link.to_string_lossy().into_owned();
        let (frames, notes) = frame_within_30s(&m)
            .expect("symbolization blocked on the FIFO named like the module's .dwp");
        assert_names_the_known_function(&frames);
        assert!(
            notes
                .iter()
                .any(|n| n.contains("cudacalls.dwp is not a regular file")),
            "{notes:?}"
        );
    }

    /// A module in a folder every user can write (here with a debug link whose file was
    /// replaced by a FIFO, as a user could plant one): its debug link is not followed, so
    /// the FIFO cannot block the reader; ELF symbols still name the function.
    #[test]
    fn a_module_in_a_folder_every_user_can_write_follows_no_debug_link() {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let dir = syncspy_test_support::TempDir::new("sym-debuglink");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let mut m = own_module();
        let copy = dir.path().join("prog");
        let debug = dir.path().join("prog.debug");
        std::fs::copy(&m.path, &copy).unwrap();
        // A debug link to prog.debug (objcopy computes its CRC from the file), then the
        // debug file replaced by a FIFO.
        std::fs::write(&debug, b"debug").unwrap();
        let st = std::process::Command::new("objcopy")
            .arg(format!("--add-gnu-debuglink={}", debug.display()))
            .arg(&copy)
            .status()
            .expect("objcopy (binutils) is needed");
        assert!(st.success());
        std::fs::remove_file(&debug).unwrap();
        syncspy_test_support::mkfifo(&debug);
        m.path = copy.to_string_lossy().into_owned();
        // The copy keeps the test binary's build id; the address is the test binary's.
        let got = frame_within_30s(&m);
        // Unblock a reader that did open it (the test fails then; no thread left behind).
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&debug);
        let (frames, notes) =
            got.expect("symbolization blocked on the FIFO the module's debug link names");
        assert_names_the_known_function(&frames);
        assert!(
            notes
                .iter()
                .any(|n| n.contains("can be written by other users")),
            "{notes:?}"
        );
    }

    /// A process in a mount namespace of its own (`unshare --mount`) with a tmpfs of its own
    /// on folder `$1`, where `script` ran first (with `args` as `$2`...); it then sleeps
    /// until dropped. `None` (said why) where this cannot be made: not root, no `unshare`.
    struct OtherMountNs(std::process::Child);

    impl OtherMountNs {
        fn start(dir: &Path, script: &str, args: &[&std::ffi::OsStr]) -> Option<OtherMountNs> {
            use std::io::BufRead;
            use std::process::{Command, Stdio};
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                eprintln!("skipped: a mount namespace and a tmpfs need root (CI runs as root)");
                return None;
            }
            let mut child = Command::new("unshare")
                .args(["--mount", "--propagation", "private", "sh", "-c"])
                .arg(format!(
                    "mount -t tmpfs tmpfs \"$1\" && {script} && echo ready && exec sleep 600"
                ))
                .arg("sh")
                .arg(dir)
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .ok()?;
            let mut line = String::new();
            let out = child.stdout.take().unwrap();
            let _ = std::io::BufReader::new(out).read_line(&mut line);
            let ns = OtherMountNs(child);
            if line.trim() != "ready" {
                eprintln!("skipped: `unshare --mount` with a tmpfs mounted inside fails here");
                return None;
            }
            Some(ns)
        }

        fn pid(&self) -> u32 {
            self.0.id()
        }

        fn root(&self) -> ModuleRoot {
            ModuleRoot {
                ns: MountNs::at(&format!("/proc/{}/ns/mnt", self.pid())).unwrap(),
                pid: Some(self.pid()),
            }
        }

        fn end(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    impl Drop for OtherMountNs {
        fn drop(&mut self) {
            self.end();
        }
    }

    /// An ELF file other than the test binary (another build id): this machine's file at
    /// the path where a container has the program.
    fn decoy(at: &Path) {
        std::fs::copy("/bin/sh", at).expect("/bin/sh, an ELF file to stand in the way");
        assert_ne!(
            syncspy_abi::modules::file_build_id(at).unwrap(),
            Some(own_module().build_id)
        );
    }

    #[test]
    fn a_module_that_only_a_containers_root_holds_is_named_from_there() {
        let d = syncspy_test_support::TempDir::new("sym-ns");
        let dir = d.path().join("opt");
        std::fs::create_dir(&dir).unwrap();
        let mut m = own_module();
        let exe = m.path.clone();
        // Inside: the program itself. Here: another file at the same path.
        let Some(mut ns) =
            OtherMountNs::start(&dir, r#"cp "$2" "$1/prog""#, &[std::ffi::OsStr::new(&exe)])
        else {
            return;
        };
        let prog = dir.join("prog");
        decoy(&prog);
        m.path = prog.to_string_lossy().into_owned();
        let root = ns.root();
        let mods = std::slice::from_ref(&m);
        let addr = known_return_addr();

        // The segment's origin says where it was written: another namespace than this one.
        let origin = Origin {
            mnt_ns: root.ns.ino,
            ns_dev: root.ns.dev,
            ..Origin::default()
        };
        assert_eq!(ModuleRoot::of(Some(&origin), root.pid), Some(root));
        assert_eq!(
            ModuleRoot::of(Some(&Origin::of_this_process()), root.pid),
            None
        );
        assert_eq!(ModuleRoot::of(None, root.pid), None);

        let mut s = Symbolizer::new();
        let frames = s.frame_in(addr, mods, Some(&root));
        assert_names_the_known_function(&frames);
        // A container's file: its ELF symbols only (no DWARF, no debug link followed).
        assert!(
            !frames.last().unwrap().text.contains("symbolize.rs:"),
            "{frames:?}"
        );
        assert!(
            s.notes()
                .iter()
                .any(|n| n.contains("read inside its root") && n.contains("another user's")),
            "{:?}",
            s.notes()
        );
        assert_eq!(s.ns_files, 1);
        // At the same path here: not the program, refused by its build id.
        let here = s.frame(addr, mods);
        assert!(here[0].text.starts_with("prog+0x"), "{here:?}");
        assert!(s.notes().iter().any(|n| n.contains("build id")));

        // The namespace's last process ends: its files are let go at the next pass (ours
        // and blazesym's: nothing keeps the container's file system), and its modules are
        // read here (the build id still guards), which is said once.
        use std::os::unix::fs::MetadataExt;
        let inside = std::fs::metadata(format!("/proc/{}/root{}", ns.pid(), m.path))
            .unwrap()
            .dev();
        let open_inside = || {
            std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|e| std::fs::metadata(e.unwrap().path()).ok())
                .filter(|md| md.dev() == inside)
                .count()
        };
        assert!(open_inside() > 0);
        ns.end();
        s.begin_pass(None);
        assert_eq!(s.ns_files, 0);
        assert!(s.namespaces.values().all(|st| st.files.is_empty()));
        assert_eq!(
            open_inside(),
            0,
            "a file of the ended namespace is still open"
        );
        let after = s.frame_in(addr + 16, mods, Some(&root));
        assert!(after[0].text.starts_with("prog+0x"), "{after:?}");
        s.frame_in(addr + 32, mods, Some(&root));
        let gone = |n: &&String| n.contains("no process of mount namespace");
        assert_eq!(s.notes().iter().filter(gone).count(), 1, "{:?}", s.notes());
    }

    #[test]
    fn a_pid_of_another_namespace_is_not_used_for_a_namespaces_root() {
        let d = syncspy_test_support::TempDir::new("sym-ns-reuse");
        let dir = d.path().join("opt");
        std::fs::create_dir(&dir).unwrap();
        let mut m = own_module();
        let exe = std::ffi::OsString::from(&m.path);
        // Namespace a holds the program; namespace b (where a's writer pid could now be)
        // another file at the same path.
        let Some(a) = OtherMountNs::start(&dir, r#"cp "$2" "$1/prog""#, &[&exe]) else {
            return;
        };
        let Some(b) = OtherMountNs::start(&dir, r#"cp /bin/sh "$1/prog""#, &[]) else {
            return;
        };
        m.path = dir.join("prog").to_string_lossy().into_owned();
        let mods = std::slice::from_ref(&m);
        let addr = known_return_addr();
        // a's segment, its writer's pid now b's process: not used, and no other process of
        // a known: read here, where nothing is at that path.
        let stale = ModuleRoot {
            ns: a.root().ns,
            pid: Some(b.pid()),
        };
        let mut s = Symbolizer::new();
        let f = s.frame_in(addr, mods, Some(&stale));
        assert!(f[0].text.starts_with("prog+0x"), "{f:?}");
        assert!(
            s.notes()
                .iter()
                .any(|n| n.contains("no process of mount namespace")),
            "{:?}",
            s.notes()
        );
        // A process of a, as the agent's discovery finds one: a's file, named.
        let mut s = Symbolizer::new();
        s.set_namespace_pids([(a.root().ns.ino, a.pid())]);
        assert_names_the_known_function(&s.frame_in(addr, mods, Some(&stale)));
    }

    #[test]
    fn a_fifo_at_a_containers_module_path_is_neither_opened_nor_waited_on() {
        let d = syncspy_test_support::TempDir::new("sym-ns-fifo");
        let dir = d.path().join("lib");
        std::fs::create_dir(&dir).unwrap();
        let Some(ns) = OtherMountNs::start(&dir, r#"mkfifo "$1/libfifo.so""#, &[]) else {
            return;
        };
        let root = ns.root();
        let inside = format!("/proc/{}/root{}/libfifo.so", ns.pid(), dir.display());
        let mut watch = inotify::Inotify::init().unwrap();
        watch
            .watches()
            .add(&inside, inotify::WatchMask::OPEN)
            .unwrap();
        let m = Module {
            path: dir.join("libfifo.so").to_string_lossy().into_owned(),
            bias: 0x1000,
            start: 0x1000,
            end: 0x2000,
            build_id: vec![0xab; 20],
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut s = Symbolizer::new();
            let frames = s.frame_in(0x1801, std::slice::from_ref(&m), Some(&root));
            let _ = tx.send((frames, s.notes().to_vec()));
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(30));
        let mut buf = [0u8; 4096];
        let opened = watch.read_events(&mut buf).map(|e| e.count()).unwrap_or(0);
        // Unblock a reader that did open it (the test fails then; no thread left behind).
        {
            use std::os::unix::fs::OpenOptionsExt;
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&inside);
        }
        let (frames, notes) = got.expect("symbolization blocked on the container's FIFO");
        assert_eq!(opened, 0, "the FIFO was opened");
        assert_eq!(frames[0].text, "libfifo.so+0x800");
        assert!(
            notes
                .iter()
                .any(|n| n.contains("in mount namespace") && n.contains("not a regular file")),
            "{notes:?}"
        );
        // The watch does see an open (of the FIFO, without blocking).
        {
            use std::os::unix::fs::OpenOptionsExt;
            let _f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&inside)
                .unwrap();
        }
        assert!(watch.read_events(&mut buf).unwrap().count() > 0);
    }

    #[test]
    fn caches_and_notes_stay_bounded_whatever_the_segments_name() {
        let mut s = Symbolizer::new();
        // Modules that do not exist, each at its own path, and many addresses in each.
        for i in 0..(MAX_CACHED_MODULES + 10) as u64 {
            let m = Module {
                path: format!("/nonexistent/lib{i}.so"),
                bias: 0,
                start: 0x1000,
                end: 0x100000,
                build_id: vec![],
            };
            for a in 0..20 {
                s.frame(0x1001 + i * 20 + a, std::slice::from_ref(&m));
            }
        }
        assert!(s.cache.len() <= MAX_CACHED_FRAMES);
        assert!(s.modules.len() <= MAX_CACHED_MODULES);
        assert_eq!(s.notes().len(), MAX_NOTES + 1);
        assert!(s.notes()[MAX_NOTES].contains("not kept"));
    }

    #[test]
    fn runtime_modules_are_recognised() {
        // The static runtime's frames inside the program are skipped for the location.
        let frame = |t: &str| Frame {
            text: t.to_string(),
            module: Some("basic_static".to_string()),
        };
        let frames = [
            frame("libcudart_static_e760a72b1d2f (basic_static)"),
            frame("cudaStreamSynchronize (basic_static)"),
            frame("main (basic_static)"),
        ];
        assert_eq!(
            crate::report::location_of(&frames).as_deref(),
            Some("main (basic_static)")
        );
        assert!(is_users_frame("cudaHelper (app)", Some("app")));
        assert!(is_runtime_module("libcudart.so.13"));
        assert!(is_runtime_module("libsyncspy.so"));
        assert!(!is_runtime_module("libtorch_cuda.so"));
    }
}

#[cfg(test)]
mod user_frame_tests {
    use super::is_users_frame;

    #[test]
    fn system_runtime_and_harness_frames_are_not_the_users() {
        for (text, module) in [
            ("cudaStreamSynchronize", Some("libcudart.so.13")),
            ("__libc_start_call_main", Some("libc.so.6")),
            ("std::rt::lang_start_internal (/rustc/abc/library/std/src/rt.rs:175)", Some("scn")),
            ("<&dyn core::ops::function::Fn<()> as core::ops::function::FnOnce<()>>::call_once (/rustc/abc/library/core/src/ops/function.rs:287)", Some("scn")),
            ("cudarc::runtime::result::stream::synchronize (/root/.cargo/registry/src/x/cudarc/src/runtime/result.rs:9)", Some("scn")),
            ("syncspy_scenarios::truth::Truth::timed (/w/scenarios/src/truth.rs:69)", Some("scn")),
            // The same harness inlined in a release build: names without their module.
            ("{closure#0} (/w/scenarios/src/scenario.rs:243)", Some("scn-item-in-loop-cuda")),
            ("timed<cudarc::runtime::sys::cudaError, syncspy_scenarios::scenario::calls::stream_sync::{closure_env#0}> (/w/scenarios/src/truth.rs:69)", Some("scn-sync-small-gemm-cuda")),
            ("{closure#0} (/w/scenarios/src/truth.rs:80)", Some("cudacalls")),
            ("_PyEval_EvalFrameDefault", Some("libpython3.12.so.1.0")),
        ] {
            assert!(!is_users_frame(text, module), "{text}");
        }
        for (text, module) in [
            (
                "syncspy_scenarios::sync_gemm::run (/w/scenarios/src/sync_gemm.rs:61)",
                Some("scn"),
            ),
            ("run_op (train.cc:42)", Some("train")),
            (
                "main (/w/scenarios/src/bin/scn_item_in_loop.rs:55)",
                Some("scn"),
            ),
            (
                "at::native::_local_scalar_dense_cuda(at::Tensor const&) (libtorch_cuda.so)",
                Some("libtorch_cuda.so"),
            ),
            ("/u/train.py:47 in <module>", None),
        ] {
            assert!(is_users_frame(text, module), "{text}");
        }
    }

    #[test]
    fn harness_files_are_hidden_only_in_the_scenario_programs() {
        let text = "step (/home/u/myproj/scenarios/src/scenario.rs:12)";
        // A user's own project that happens to have the same layout: the user's code.
        assert!(is_users_frame(text, Some("train")));
        assert!(is_users_frame(text, None));
        assert!(is_users_frame(text, Some("scn")));
        assert!(is_users_frame(
            "step (/home/u/myproj/scenarios/src/truth.rs:3)",
            Some("train")
        ));
        // The same file in this repository's scenario programs: the harness.
        for m in [
            "scn-sync-big-gemm-cuda",
            "scn-item-in-loop-cuda",
            "cudacalls",
            "drivercalls",
        ] {
            assert!(!is_users_frame(text, Some(m)), "{m}");
        }
        // The scenario's own files stay the user's in a scenario program.
        assert!(is_users_frame(
            "run (/w/scenarios/src/sync_gemm.rs:61)",
            Some("scn-sync-big-gemm-cuda")
        ));
    }
}
