//! The fault run (`fabric_core::testing::fault`) on each provider
//! compiled in with an RDM endpoint (tcp, shm): a peer process is killed
//! (SIGKILL) in the middle of a transfer; every operation aimed at it
//! ends in exactly one completion within 1 s, posted wildcard receives
//! stay posted and cancel, and the survivor goes on talking to a new
//! peer.
//!
//! The peers are this test binary run again (`fault_peer`, which does
//! nothing unless `FAULT_PEER` names its role and provider).

#![allow(clippy::unwrap_used)]

use fabric::objects::{CqAttr, CqFormat, WaitObj};
use fabric::{Caps, Hints, MrMode, Registry};
use fabric_core::testing::fault::{
    FaultRig, PEER_VAR, Peer, RdmEp, killing_the_receiver, killing_the_sender, serve,
};

/// The providers compiled in (those with an RDM endpoint here).
fn providers() -> Vec<&'static str> {
    let mut v = Vec::new();
    if cfg!(feature = "tcp") {
        v.push("tcp");
    }
    if cfg!(feature = "shm") {
        v.push("shm");
    }
    v
}

/// One provider's RDM endpoints, through the registry.
struct Rig(&'static str);

impl FaultRig for Rig {
    fn name(&self) -> &str {
        self.0
    }

    fn open(&self) -> RdmEp {
        let p = self.0;
        let info = Hints::new()
            .provider(p)
            .ep_type(fabric::EpType::Rdm)
            .caps(
                Caps::MSG
                    | Caps::TAGGED
                    | Caps::RMA
                    | Caps::READ
                    | Caps::WRITE
                    | Caps::REMOTE_READ
                    | Caps::REMOTE_WRITE,
            )
            .mr_mode(MrMode::all() - MrMode::LEGACY)
            .getinfo()
            .unwrap_or_else(|e| panic!("{p}: no RDM endpoint with RMA: {e}"))
            .remove(0);
        let fabric = Registry::global().fabric(&info).unwrap();
        let cq = CqAttr {
            format: CqFormat::Tagged,
            wait_obj: WaitObj::Unspec,
            ..CqAttr::default()
        };
        RdmEp::open(fabric, &info, &cq)
    }

    fn peer(&self, role: &str) -> Peer {
        Peer::spawn(&format!("{role}:{}", self.0))
    }
}

/// Kill the receiver and RMA target, stopped first: what was aimed at it
/// fails within 1 s.
#[test]
fn killing_the_receiver_fails_what_was_aimed_at_it_within_a_second() {
    for p in providers() {
        killing_the_receiver(&Rig(p));
        eprintln!("{p}: receiver killed: every operation completed once within 1 s");
    }
}

/// Kill the sender mid-stream: nothing is left hanging.
#[test]
fn killing_the_sender_mid_stream_leaves_nothing_hanging() {
    for p in providers() {
        killing_the_sender(&Rig(p));
        eprintln!("{p}: sender killed: nothing left hanging");
    }
}

/// A peer process; a no-op test unless `FAULT_PEER` is `role:provider`.
#[test]
fn fault_peer() {
    let Ok(spec) = std::env::var(PEER_VAR) else {
        return;
    };
    let (role, p) = spec.split_once(':').unwrap();
    let p = providers().into_iter().find(|q| *q == p).unwrap();
    serve(role, &Rig(p).open());
}
