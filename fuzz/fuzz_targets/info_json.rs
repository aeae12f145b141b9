//! Hints from JSON (`fabric info --hints FILE`): any bytes either fail to
//! parse as an `Info` or give an `Info` that prints and parses back to
//! itself, and validation never panics.
#![no_main]

use fabric_core::Info;
use fabric_core::matching::validate_hints;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(info) = serde_json::from_slice::<Info>(data) else {
        return;
    };
    let _ = validate_hints(&info);
    let text = serde_json::to_string(&info).expect("an Info always serializes");
    let back: Info = serde_json::from_str(&text).expect("printed JSON parses");
    assert_eq!(back, info);
    let _ = info.verbose().to_string();
});
