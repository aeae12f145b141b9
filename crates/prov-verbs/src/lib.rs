//! The verbs provider.
//!
//! **Status: not implemented yet** (tracked by the issue "fabric-sys over
//! rdma-core, and prov-verbs"). This crate exports nothing, and the `fabric`
//! facade registers no verbs provider until it lands.
//!
//! What it will hold: `getinfo` from the real device list and port
//! attributes (built on `rdma_getaddrinfo`), MSG endpoints on RC queue pairs
//! with rdma_cm connection management, and RDM endpoints, with send/recv,
//! immediate data, RMA and atomics executed by the NIC.
