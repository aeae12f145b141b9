//! What the safe layer's tests share: the tcp provider's entries on the
//! loopback interface.

#![allow(dead_code)]

use fabric::prelude::*;

/// The tcp provider's first `ep_type` entry with `caps` on 127.0.0.1;
/// `None` only in a build without the `tcp` feature (with it, a failing
/// `getinfo` fails the test instead of skipping it).
pub(crate) fn tcp_info(ep_type: EpType, caps: Caps) -> Option<Info> {
    if !cfg!(feature = "tcp") {
        return None;
    }
    let infos = Hints::new()
        .caps(caps)
        .ep_type(ep_type)
        .provider("tcp")
        .node("127.0.0.1")
        .source()
        .getinfo()
        .unwrap_or_else(|e| panic!("tcp {ep_type:?} getinfo: {e}"));
    infos.into_iter().next()
}

/// A domain of the tcp provider's MSG entry (messages and tagged) on the
/// loopback interface, if tcp is compiled in.
pub(crate) fn msg_domain() -> Option<safe::Domain> {
    let info = tcp_info(EpType::Msg, Caps::MSG | Caps::TAGGED)?;
    Some(safe::Domain::open(&info).unwrap())
}
