//! Address bytes: the first byte picks an address format (0..=15), the rest
//! is the C representation handed to `Address::from_bytes`. Whatever decodes
//! must encode to bytes that decode to the same address, and print as a
//! string that parses back to it.

#![no_main]

use fabric_core::addr::parse::parse;
use fabric_core::{AddrFormat, Address};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let Ok(format) = AddrFormat::try_from(u32::from(first & 0x0f)) else {
        return;
    };
    let Ok(a) = Address::from_bytes(format, rest) else {
        return;
    };
    let bytes = a.to_bytes();
    assert_eq!(bytes.len(), a.c_len(), "{a:?}");
    assert_eq!(
        Address::from_bytes(a.format(), &bytes),
        Ok(a.clone()),
        "{format} {rest:?}"
    );
    assert_eq!(parse(&a.to_string()), Ok(a), "{format} {rest:?}");
});
