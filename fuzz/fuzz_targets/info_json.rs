//! libFuzzer entry of `fabric_fuzz::info_json` (what it checks is documented
//! there).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fabric_fuzz::info_json(data));
