//! libfabric's C interface over the `fabric` crate.
//!
//! **Status: in progress** (issue "fabric-capi").
