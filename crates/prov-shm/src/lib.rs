//! The shm provider.
//!
//! **Status: not implemented yet** (tracked by the issue "prov-shm: a
//! shared-memory provider between processes on one node"). This crate exports
//! nothing, and the `fabric` facade registers no shm provider until it lands.
//!
//! What it will hold: RDM endpoints between processes on one node through
//! named shared-memory regions, with small messages inline in a lock-free
//! command queue, medium messages through bounce buffers and large ones by
//! cross-memory attach, addressed as `fi_shm://<name>` strings.
