//! Helpers shared by the provider's integration tests: RDM endpoints,
//! completions with a deadline, memory registration.

#![allow(
    dead_code,
    unreachable_pub,
    clippy::result_large_err,
    clippy::unwrap_used,
    clippy::field_reassign_with_default
)]

use fabric_core::matching::Request;
use fabric_core::objects::{
    AddressVector, AvAttr, Bind, CntrAttr, CompletionQueue, Counter, CqAttr, CqFormat, Domain,
    Endpoint, Fabric, FiAddr, IoVec, Msg, Provider, WaitObj,
};
#[allow(unused_imports)]
pub use fabric_core::testing::{
    PeerProcess, iov, next, next_from, nothing, peer_start, reg, settle,
};
use fabric_core::*;
use prov_shm::ShmProvider;

/// One RDM endpoint with its CQ and AV (fields drop in order).
pub struct Side {
    pub ep: Box<dyn Endpoint>,
    pub cq: Box<dyn CompletionQueue>,
    pub av: Box<dyn AddressVector>,
    pub domain: Box<dyn Domain>,
    pub fabric: Box<dyn Fabric>,
}

/// The shm answer for `caps`, `mr_mode` and a progress model.
pub fn info_with(caps: Caps, mr_mode: MrMode, progress: Progress) -> Info {
    let mut h = Info::default();
    h.caps = caps;
    h.mode = Mode::all();
    h.ep_attr.ep_type = EpType::Rdm;
    h.domain_attr.mr_mode = mr_mode;
    h.domain_attr.data_progress = progress;
    let req = Request {
        hints: Some(&h),
        ..Request::new(Version::CURRENT)
    };
    let mut list = ShmProvider.getinfo(&req).unwrap();
    list.remove(0)
}

pub fn info() -> Info {
    info_with(
        Caps::MSG | Caps::TAGGED | Caps::RMA | Caps::ATOMIC | Caps::MULTI_RECV,
        MrMode::empty(),
        Progress::Unspec,
    )
}

/// Opens an enabled endpoint bound to `counters`.
pub fn side_with(info: &Info, format: CqFormat, counters: &[(&dyn Counter, Caps)]) -> Side {
    let fabric = ShmProvider.fabric(&info.fabric_attr).unwrap();
    let domain = fabric.domain(info).unwrap();
    open_in(info, fabric, domain, format, counters)
}

pub fn open_in(
    info: &Info,
    fabric: Box<dyn Fabric>,
    domain: Box<dyn Domain>,
    format: CqFormat,
    counters: &[(&dyn Counter, Caps)],
) -> Side {
    let cq = domain
        .cq(&CqAttr {
            format,
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
    side_with(info, CqFormat::Tagged, &[])
}

/// Opens an endpoint with one counter per entry of `events`.
pub fn side_counting(info: &Info, events: &[Caps]) -> (Side, Vec<Box<dyn Counter>>) {
    let fabric = ShmProvider.fabric(&info.fabric_attr).unwrap();
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
    let s = open_in(info, fabric, domain, CqFormat::Tagged, &bound);
    drop(bound);
    (s, counters)
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
    pair_of(&info())
}

pub fn msg(iov: &[IoVec], addr: FiAddr, tag: u64, ignore: u64, ctx: u64) -> Msg<'_> {
    Msg {
        iov,
        desc: &[],
        addr,
        tag,
        ignore,
        context: ctx,
        data: 0,
    }
}

/// Posts a receive into `into` at `b` (context `ctx.0`), then a send of
/// `from` from `a` to `b_at_a` (context `ctx.1`).
///
/// # Safety
///
/// Both buffers outlive their completions.
pub unsafe fn recv_then_send(
    (a, b, b_at_a): (&Side, &Side, FiAddr),
    from: &[IoVec],
    into: &[IoVec],
    ctx: (u64, u64),
) {
    // SAFETY: the caller's contract.
    unsafe {
        b.ep.recvmsg(&msg(into, FiAddr::UNSPEC, 0, 0, ctx.0), OpFlags::empty())
            .unwrap();
        a.ep.sendmsg(&msg(from, b_at_a, 0, 0, ctx.1), OpFlags::empty())
            .unwrap();
    }
}

pub fn counter(d: &dyn Domain) -> Box<dyn Counter> {
    d.cntr(&CntrAttr::default()).unwrap()
}

/// A deterministic pattern.
pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(u32::from(seed)) as u8)
        .collect()
}

/// Runs `checks` with `vars` set, for settings a process reads once (the
/// environment): in the child process that [`rerun_in_child`] starts for
/// test `name` (`role` set to `child`) it runs them; here it starts that
/// child.
pub fn checks_in_child(name: &str, role: &str, vars: &[(&str, &str)], checks: impl FnOnce()) {
    if std::env::var(role).as_deref() == Ok("child") {
        return checks();
    }
    rerun_in_child(name, role, vars);
}

/// Runs test `name` of this test binary again in a child process, with
/// `vars` set and `role` set to `child`, and checks that it ran and
/// passed there: for settings a process reads once (the environment).
pub fn rerun_in_child(name: &str, role: &str, vars: &[(&str, &str)]) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture"])
        .envs(vars.iter().copied())
        .env(role, "child")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the checks failed in the child:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "the child ran no test"
    );
}
