//! Building blocks every provider needs, written once: the completion
//! queue core, the spin-then-block wait, the check of an endpoint's default
//! operation flags, counters, tag matching with the
//! unexpected queue, the memory-region key table, the address-vector
//! table, and the executor of atomic operations at the target.
//!
//! None of these know about a transport. Providers wrap them in their
//! object types and drive them from their progress engines.

// The executor updates registered memory with the processor's atomic
// instructions through raw pointers, which needs `unsafe`; each block
// states why it is sound.
#[allow(unsafe_code)]
pub mod atomic;
pub mod av;
pub mod binds;
pub mod cntr;
pub mod cq;
pub mod defaults;
pub mod mr;
pub mod objects;
pub mod tag;
pub mod wait;
