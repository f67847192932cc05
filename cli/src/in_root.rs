//! Opening a path as another process sees it, inside its root (a container's files, not this
//! machine's): the one way `attach` and the agent's pod discovery reach into a container.
//! Shared with the symbolizer, which opens the modules of processes in other mount namespaces
//! the same way (`syncspy_read::in_root`).

pub use syncspy_read::in_root::open_in_root;
