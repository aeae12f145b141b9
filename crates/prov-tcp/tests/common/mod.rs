//! Helpers shared by the integration tests: RDM endpoints over loopback,
//! completions with a deadline, memory registration.

#![allow(
    dead_code,
    unreachable_pub,
    clippy::result_large_err,
    clippy::unwrap_used,
    clippy::field_reassign_with_default
)]

use std::time::Duration;

use fabric_core::matching::Request;
use fabric_core::objects::{
    AddressVector, AvAttr, Bind, CntrAttr, CompletionQueue, Counter, CqAttr, CqFormat, Domain,
    Endpoint, Fabric, FiAddr, Provider, WaitObj,
};
#[allow(unused_imports)]
pub use fabric_core::testing::{PeerProcess, iov, next, next_from, peer_start, reg, settle};
use fabric_core::*;
use prov_tcp::TcpProvider;

/// One RDM endpoint with its CQ and AV (fields drop in order).
pub struct Side {
    pub ep: Box<dyn Endpoint>,
    pub cq: Box<dyn CompletionQueue>,
    pub av: Box<dyn AddressVector>,
    pub domain: Box<dyn Domain>,
    pub fabric: Box<dyn Fabric>,
}

/// The first RDM answer for 127.0.0.1 with `caps` and `mr_mode`.
pub fn rdm_info_with(caps: Caps, mr_mode: MrMode, node: &str) -> Info {
    let mut h = Info::default();
    h.caps = caps;
    h.mode = Mode::all();
    h.ep_attr.ep_type = EpType::Rdm;
    h.domain_attr.mr_mode = mr_mode;
    let req = Request {
        node: Some(node),
        flags: GetinfoFlags::SOURCE,
        hints: Some(&h),
        ..Request::new(Version::CURRENT)
    };
    TcpProvider
        .getinfo(&req)
        .unwrap()
        .into_iter()
        .next()
        .unwrap()
}

pub fn rdm_info() -> Info {
    rdm_info_with(
        Caps::MSG | Caps::TAGGED | Caps::RMA | Caps::ATOMIC,
        MrMode::empty(),
        "127.0.0.1",
    )
}

/// Opens an enabled endpoint with one counter per entry of `events`, bound
/// for those events.
pub fn side_counting(info: &Info, events: &[Caps]) -> (Side, Vec<Box<dyn Counter>>) {
    let fabric = TcpProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(info).unwrap();
    let counters: Vec<Box<dyn Counter>> = events
        .iter()
        .map(|_| domain.cntr(&CntrAttr::default()).unwrap())
        .collect();
    let bound: Vec<(&dyn Counter, Caps)> = counters
        .iter()
        .zip(events)
        .map(|(c, e)| (c.as_ref(), *e))
        .collect();
    let s = open_in(info, fabric, domain, &bound);
    drop(bound);
    (s, counters)
}

/// Opens an enabled endpoint.
pub fn side_with(info: &Info, counters: &[(&dyn Counter, Caps)]) -> Side {
    let fabric = TcpProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(info).unwrap();
    open_in(info, fabric, domain, counters)
}

fn open_in(
    info: &Info,
    fabric: Box<dyn Fabric>,
    domain: Box<dyn Domain>,
    counters: &[(&dyn Counter, Caps)],
) -> Side {
    let cq = domain
        .cq(&CqAttr {
            format: CqFormat::Tagged,
            wait_obj: WaitObj::Unspec,
            ..Default::default()
        })
        .unwrap();
    let av = domain.av(&AvAttr::default()).unwrap();
    let ep = domain.endpoint(info).unwrap();
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .unwrap();
    ep.bind(Bind::Av(av.as_ref())).unwrap();
    for (c, ev) in counters {
        ep.bind(Bind::Cntr(*c, *ev)).unwrap();
    }
    ep.enable().unwrap();
    Side {
        ep,
        cq,
        av,
        domain,
        fabric,
    }
}

pub fn side(info: &Info) -> Side {
    side_with(info, &[])
}

/// Inserts `name` in `s`'s AV.
pub fn insert(s: &Side, name: &Address) -> FiAddr {
    let mut out = [FiAddr(0)];
    s.av.insert(std::slice::from_ref(name), &mut out).unwrap();
    out[0]
}

/// Two endpoints that know each other: a's handle for b, b's for a.
pub fn pair_of(info: &Info) -> (Side, Side, FiAddr, FiAddr) {
    let a = side(info);
    let b = side(info);
    let b_at_a = insert(&a, &b.ep.getname().unwrap());
    let a_at_b = insert(&b, &a.ep.getname().unwrap());
    (a, b, b_at_a, a_at_b)
}

pub fn pair() -> (Side, Side, FiAddr, FiAddr) {
    pair_of(&rdm_info())
}

pub fn counter(d: &dyn Domain) -> Box<dyn Counter> {
    d.cntr(&CntrAttr::default()).unwrap()
}

/// CPU time (user + system) this process has used.
pub fn cpu_time() -> Duration {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes a whole rusage into the pointer on success.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) };
    assert_eq!(rc, 0);
    // SAFETY: initialised by the successful call above.
    let u = unsafe { u.assume_init() };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// This process's resident memory.
pub fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap();
    kb * 1024
}

/// An RDM answer on 127.0.0.1 for `caps` whose domain progresses by
/// itself (a thread), so that a spinning engine shows as CPU time.
pub fn auto_info_with(caps: Caps) -> Info {
    let mut h = Info::default();
    h.caps = caps;
    h.mode = Mode::all();
    h.ep_attr.ep_type = EpType::Rdm;
    h.domain_attr.data_progress = Progress::Auto;
    let req = Request {
        node: Some("127.0.0.1"),
        flags: GetinfoFlags::SOURCE,
        hints: Some(&h),
        ..Request::new(Version::CURRENT)
    };
    TcpProvider.getinfo(&req).unwrap().remove(0)
}
