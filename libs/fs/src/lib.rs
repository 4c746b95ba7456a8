//! Workspace confinement and filesystem operations (in progress).
