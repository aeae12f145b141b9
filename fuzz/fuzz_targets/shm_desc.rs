//! libFuzzer entry of `fabric_fuzz::shm_desc` (what it checks is documented
//! there).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fabric_fuzz::shm_desc(data));
