//! Building blocks every provider needs, written once: the completion
//! queue core, the spin-then-block wait, counters, tag matching with the
//! unexpected queue, the memory-region key table and the address-vector
//! table.
//!
//! None of these know about a transport. Providers wrap them in their
//! object types and drive them from their progress engines.

pub mod av;
pub mod cntr;
pub mod cq;
pub mod mr;
pub mod objects;
pub mod tag;
pub mod wait;
