//! The tcp provider.
//!
//! **Status: not implemented yet** (tracked by the issue "prov-tcp: a
//! complete, fast tcp provider"). This crate exports nothing, and the
//! `fabric` facade registers no tcp provider until it lands.
//!
//! What it will hold: `getinfo` with one entry per usable IP interface and
//! endpoint type (fabric = subnet, domain = interface), MSG endpoints
//! (connect, accept, reject, shutdown) and RDM endpoints (unconnected,
//! addressed through an address vector, connections made on demand), with
//! messages, tagged messages, RMA and atomics over a versioned wire protocol
//! that never trusts the peer.
