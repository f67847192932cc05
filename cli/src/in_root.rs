//! Opening a path as another process sees it, inside its root (a container's files, not this
//! machine's): the one way `attach` reaches into a container. It is the reader's
//! (`syncspy_read::in_root`), shared with the agent's pod discovery and the symbolizer, which
//! opens the modules of processes in other mount namespaces the same way.

pub use syncspy_read::in_root::open_in_root;
