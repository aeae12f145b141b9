//! The shared semantics suite (`fabric_core::testing::semantics`) on verbs'
//! RDM endpoints, loopback through the device. Skips without a device
//! (see `common`).

mod common;

use fabric_core::testing::semantics::Rig;
use fabric_core::{AddrFormat, EpType, ErrorKind, GetinfoFlags, Info, MrMode};
use prov_verbs::VerbsProvider;

fn rig() -> Option<Rig> {
    let mut hints = Info {
        addr_format: AddrFormat::SockaddrIn,
        ..Info::default()
    };
    // An RMA target needs remote keys and virtual addresses; no FI_MR_LOCAL.
    hints.domain_attr.mr_mode = MrMode::VIRT_ADDR | MrMode::ALLOCATED | MrMode::PROV_KEY;
    common::entries(EpType::Rdm, hints.clone())?;
    let mut rig = Rig::new(&VerbsProvider, hints, None, GetinfoFlags::empty());
    // The responder's NIC reports every protection failure, a wrong key
    // included, as one remote access error.
    rig.bad_key = ErrorKind::Access;
    Some(rig)
}

fabric_core::semantics_tests!(rig);
