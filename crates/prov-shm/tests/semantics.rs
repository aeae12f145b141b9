//! The shared semantics suite (`fabric_core::testing::semantics`) on shm's
//! RDM endpoints.

use fabric_core::testing::semantics::Rig;
use fabric_core::{GetinfoFlags, Info, Mode};
use prov_shm::ShmProvider;

fn rig() -> Option<Rig> {
    let hints = Info {
        mode: Mode::all(),
        ..Info::default()
    };
    Some(Rig::new(&ShmProvider, hints, None, GetinfoFlags::empty()))
}

fabric_core::semantics_tests!(rig);
