//! The shared semantics suite (`fabric_core::testing::semantics`) on tcp's
//! RDM endpoints over loopback.

use fabric_core::testing::semantics::Rig;
use fabric_core::{GetinfoFlags, Info, Mode};
use prov_tcp::TcpProvider;

fn rig() -> Option<Rig> {
    let hints = Info {
        mode: Mode::all(),
        ..Info::default()
    };
    Some(Rig::new(
        &TcpProvider,
        hints,
        Some("127.0.0.1"),
        GetinfoFlags::SOURCE,
    ))
}

fabric_core::semantics_tests!(rig);
