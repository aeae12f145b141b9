//! The shared semantics suite (`fabric_core::testing::semantics`) on verbs'
//! RDM endpoints, loopback through the device. Skips without a device
//! (see `common`).

mod common;

use fabric_core::testing::semantics::Rig;
use fabric_core::{AddrFormat, EpType, ErrorKind, GetinfoFlags, Info};
use prov_verbs::VerbsProvider;

fn rig() -> Option<Rig> {
    let hints = Info {
        addr_format: AddrFormat::SockaddrIn,
        ..Info::default()
    };
    common::entries(EpType::Rdm, hints.clone())?;
    let mut rig = Rig::new(&VerbsProvider, hints, None, GetinfoFlags::empty());
    // The responder's NIC reports every protection failure, a wrong key
    // included, as one remote access error.
    rig.bad_key = ErrorKind::Access;
    Some(rig)
}

fabric_core::semantics_tests!(rig);
