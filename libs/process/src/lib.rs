//! Child process runs with bounded streaming output and a lifecycle that always ends.
