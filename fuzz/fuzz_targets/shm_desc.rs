//! The shm provider's decoders of command payloads, which another process
//! writes into our region: RMA / atomic descriptors and rendezvous iovec
//! lists. They must never panic on any bytes, and a descriptor they accept
//! must encode back to exactly the bytes it was read from.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    prov_shm::fuzzing::descriptor_round_trip(data);
});
