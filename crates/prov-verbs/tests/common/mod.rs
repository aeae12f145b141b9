//! Shared helpers of the verbs integration tests.
//!
//! The tests need an RDMA device (soft-RoCE `rxe` works: `cargo xtask rxe`
//! runs them in a QEMU guest that has one). On a machine without a device
//! each test prints a notice and passes, unless
//! `FABRIC_VERBS_REQUIRE_DEVICE=1` is set, which makes a missing device a
//! failure (the rig sets it, so a broken rig cannot pass silently). They
//! use only the device's own address (loopback through the device).

#![allow(
    dead_code,
    unreachable_pub,
    clippy::result_large_err,
    clippy::unwrap_used,
    clippy::field_reassign_with_default
)]

use std::time::{Duration, Instant};

use fabric_core::matching::Request;
use fabric_core::objects::{
    Bind, CompletionQueue, CqAttr, CqEntry, CqErrEntry, CqFormat, Domain, Endpoint, EqAttr,
    EqErrEntry, EqEvent, EventQueue, Fabric, IoVec, MemoryRegion, MrAccess, MrAttr,
    PassiveEndpoint, Provider, WaitObj,
};
use fabric_core::*;
use prov_verbs::VerbsProvider;

#[allow(unused_imports)]
pub use fabric_core::testing::{iov, msg_to};

/// How long any wait in the tests may take (TCG guests are slow).
pub const T: Duration = Duration::from_secs(30);

/// The entries of an endpoint type, or `None` (skip) without a device.
pub fn entries(ep: EpType, mut hints: Info) -> Option<Vec<Info>> {
    hints.ep_attr.ep_type = ep;
    let req = Request {
        hints: Some(&hints),
        ..Request::new(Version::CURRENT)
    };
    let list = VerbsProvider.getinfo(&req).unwrap_or_default();
    if list.is_empty() {
        let require = std::env::var("FABRIC_VERBS_REQUIRE_DEVICE").is_ok_and(|v| v == "1");
        assert!(
            !require,
            "FABRIC_VERBS_REQUIRE_DEVICE=1 but the verbs provider finds no active RDMA port"
        );
        eprintln!(
            "skipped: no RDMA device (set FABRIC_VERBS_REQUIRE_DEVICE=1 to make this a failure)"
        );
        return None;
    }
    Some(list)
}

/// Hints of a MSG application that registers its buffers.
pub fn msg_hints() -> Info {
    let mut h = Info::default();
    h.caps = Caps::MSG | Caps::RMA | Caps::ATOMIC;
    h.mode = Mode::RX_CQ_DATA;
    h.domain_attr.mr_mode =
        MrMode::LOCAL | MrMode::VIRT_ADDR | MrMode::ALLOCATED | MrMode::PROV_KEY;
    h.addr_format = AddrFormat::SockaddrIn;
    h
}

/// The first MSG entry (IPv4), or skip.
pub fn msg_info() -> Option<Info> {
    entries(EpType::Msg, msg_hints()).map(|l| l.into_iter().next().unwrap())
}

pub fn eq_attr() -> EqAttr {
    EqAttr {
        wait_obj: WaitObj::Unspec,
        ..EqAttr::default()
    }
}

pub fn cq_attr() -> CqAttr {
    CqAttr {
        format: CqFormat::Tagged,
        wait_obj: WaitObj::Unspec,
        ..CqAttr::default()
    }
}

/// A registered buffer.
pub struct Buf {
    pub mem: Vec<u8>,
    pub mr: Box<dyn MemoryRegion>,
}

impl Buf {
    pub fn new(domain: &dyn Domain, len: usize) -> Buf {
        let mut mem = vec![0u8; len];
        let iov = [IoVec {
            addr: mem.as_mut_ptr(),
            len,
        }];
        let attr = MrAttr {
            iov: &iov,
            access: MrAccess::all(),
            offset: 0,
            requested_key: 0,
            context: 0,
        };
        // SAFETY: `mem` is not moved or freed before `mr` (fields
        // drop in order: mem is declared first but Vec's heap buffer does
        // not move; the test drops the Buf as a whole).
        let mr = unsafe { domain.mr_reg(&attr) }.unwrap();
        Buf { mem, mr }
    }

    pub fn iov(&mut self) -> [IoVec; 1] {
        [IoVec {
            addr: self.mem.as_mut_ptr(),
            len: self.mem.len(),
        }]
    }

    pub fn iov_n(&mut self, n: usize) -> [IoVec; 1] {
        [IoVec {
            addr: self.mem.as_mut_ptr(),
            len: n,
        }]
    }

    pub fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }
}

/// Waits for one completion (success or error).
pub fn wait_cq(cq: &dyn CompletionQueue) -> Result<CqEntry, CqErrEntry> {
    let deadline = Instant::now() + T;
    let mut out = [CqEntry::default(); 1];
    loop {
        match cq.sread(&mut out, Some(Duration::from_millis(50))) {
            Ok(1) => return Ok(out[0]),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Avail => return Err(cq.readerr().unwrap()),
            Err(e) if e.kind() == ErrorKind::Again => {}
            Err(e) => panic!("CQ read failed: {e:?}"),
        }
        assert!(Instant::now() < deadline, "no completion within {T:?}");
    }
}

/// Waits for the next EQ event or error.
pub fn wait_eq(eq: &dyn EventQueue) -> Result<EqEvent, EqErrEntry> {
    let deadline = Instant::now() + T;
    loop {
        match eq.sread(Some(Duration::from_millis(50))) {
            Ok(e) => return Ok(e),
            Err(e) if e.kind() == ErrorKind::Avail => return Err(eq.readerr().unwrap()),
            Err(e) if e.kind() == ErrorKind::Again => {}
            Err(e) => panic!("EQ read failed: {e:?}"),
        }
        assert!(Instant::now() < deadline, "no EQ event within {T:?}");
    }
}

/// One side of a MSG connection.
pub struct Side {
    pub ep: Box<dyn Endpoint>,
    pub cq: Box<dyn CompletionQueue>,
    pub eq: Box<dyn EventQueue>,
    pub domain: Box<dyn Domain>,
}

/// A listener.
pub struct Listener {
    pub fabric: Box<dyn Fabric>,
    pub eq: Box<dyn EventQueue>,
    pub pep: Box<dyn PassiveEndpoint>,
    pub info: Info,
}

pub fn listener(info: &Info) -> Listener {
    let fabric = VerbsProvider.fabric(&info.fabric_attr).unwrap();
    let eq = fabric.eq(&eq_attr()).unwrap();
    let pep = fabric.passive_endpoint(info).unwrap();
    pep.bind_eq(eq.as_ref()).unwrap();
    pep.listen().unwrap();
    Listener {
        fabric,
        eq,
        pep,
        info: info.clone(),
    }
}

pub fn open_side(fabric: &dyn Fabric, info: &Info) -> Side {
    let domain = fabric.domain(info).unwrap();
    let eq = fabric.eq(&eq_attr()).unwrap();
    let cq = domain.cq(&cq_attr()).unwrap();
    let ep = domain.endpoint(info).unwrap();
    ep.bind(Bind::Eq(eq.as_ref())).unwrap();
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .unwrap();
    ep.enable().unwrap();
    Side { ep, cq, eq, domain }
}

/// A connected pair (server, client); the client sent `b"hello"` and the
/// server answered `b"welcome"` as private data.
pub fn connected(l: &Listener) -> (Side, Side) {
    let client = open_side(l.fabric.as_ref(), &l.info);
    client
        .ep
        .connect(&l.pep.getname().unwrap(), b"hello")
        .unwrap();
    let req = wait_eq(l.eq.as_ref()).unwrap();
    let EqEvent::ConnReq { info, data, .. } = req else {
        panic!("expected a connection request, got {req:?}")
    };
    assert_eq!(data, b"hello");
    let server = open_side(l.fabric.as_ref(), &info);
    server.ep.accept(b"welcome").unwrap();
    let c = wait_eq(client.eq.as_ref()).unwrap();
    assert!(
        matches!(&c, EqEvent::Connected { data, .. } if data == b"welcome"),
        "client got {c:?}"
    );
    let s = wait_eq(server.eq.as_ref()).unwrap();
    assert!(matches!(s, EqEvent::Connected { .. }), "server got {s:?}");
    (server, client)
}

/// A message of a MSG endpoint (no address, no tag).
pub fn msg<'a>(
    iov: &'a [IoVec],
    desc: &'a [fabric_core::objects::MrDesc],
    context: u64,
    data: u64,
) -> fabric_core::objects::Msg<'a> {
    fabric_core::objects::Msg {
        iov,
        desc,
        addr: fabric_core::objects::FiAddr::UNSPEC,
        tag: 0,
        ignore: 0,
        context,
        data,
    }
}
