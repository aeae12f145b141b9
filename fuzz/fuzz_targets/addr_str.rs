//! Address strings: any UTF-8 input either fails to parse with an error, or
//! parses to an address whose printed form is canonical (it prints the same
//! again) and parses back to the same address.

#![no_main]

use fabric_core::Address;
use fabric_core::addr::parse::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(a) = parse(s) else {
        return;
    };
    let printed = a.to_string();
    let again: Address = match parse(&printed) {
        Ok(b) => b,
        Err(e) => panic!("{s:?} parsed to {a:?}, whose form {printed:?} does not parse: {e:?}"),
    };
    assert_eq!(a, again, "{s:?} -> {printed:?}");
    assert_eq!(again.to_string(), printed, "the printed form is canonical");
});
