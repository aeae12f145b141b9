//! MSG ping-pong latency over the tcp provider, for comparing with
//! `fi_pingpong -p tcp -e msg` until `fabric pingpong` speaks MSG.
//!
//! ```text
//! taskset -c 1 cargo run --release -p prov-tcp --example msg_pingpong -- server 48700 127.0.0.1 &
//! taskset -c 0 cargo run --release -p prov-tcp --example msg_pingpong -- client 127.0.0.1 48700 1 20000
//! ```
//!
//! The client prints the size, the iterations and the one-way latency
//! (half the round trip) in microseconds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use fabric_core::matching::Request;
use fabric_core::objects::{
    Bind, CompletionQueue, CqAttr, CqEntry, CqFormat, Domain, Endpoint, EqAttr, EqEvent,
    EventQueue, Fabric, FiAddr, IoVec, Msg, Provider, WaitObj,
};
use fabric_core::{Caps, EpType, GetinfoFlags, Info, OpFlags, Version};
use prov_tcp::TcpProvider;

fn info(node: &str, port: &str, source: bool) -> Info {
    let hints = Info {
        caps: Caps::MSG,
        ep_attr: fabric_core::EpAttr {
            ep_type: EpType::Msg,
            ..Default::default()
        },
        ..Default::default()
    };
    let req = Request {
        node: Some(node),
        service: Some(port),
        flags: if source {
            GetinfoFlags::SOURCE
        } else {
            GetinfoFlags::empty()
        },
        hints: Some(&hints),
        ..Request::new(Version::CURRENT)
    };
    TcpProvider.getinfo(&req).unwrap().remove(0)
}

fn wait_event(eq: &dyn EventQueue) -> EqEvent {
    match eq.sread(Some(Duration::from_secs(30))) {
        Ok(e) => e,
        Err(e) if e.kind() == fabric_core::ErrorKind::Avail => {
            panic!("EQ error: {:?}", eq.readerr())
        }
        Err(e) => panic!("EQ: {e}"),
    }
}

fn wait_cq(cq: &dyn CompletionQueue) -> CqEntry {
    let mut e = [CqEntry::default()];
    cq.sread(&mut e, Some(Duration::from_secs(30)))
        .expect("completion");
    e[0]
}

struct Side {
    ep: Box<dyn Endpoint>,
    cq: Box<dyn CompletionQueue>,
    _domain: Box<dyn Domain>,
}

fn open(fabric: &dyn Fabric, info: &Info, eq: &dyn EventQueue) -> Side {
    let domain = fabric.domain(info).unwrap();
    let cq = domain
        .cq(&CqAttr {
            format: CqFormat::Context,
            wait_obj: WaitObj::Unspec,
            ..Default::default()
        })
        .unwrap();
    let ep = domain.endpoint(info).unwrap();
    ep.bind(Bind::Eq(eq)).unwrap();
    ep.bind(Bind::Cq {
        cq: cq.as_ref(),
        transmit: true,
        recv: true,
        selective: false,
    })
    .unwrap();
    ep.enable().unwrap();
    Side {
        ep,
        cq,
        _domain: domain,
    }
}

/// One round trip; the client sends first.
fn round(s: &Side, buf: &mut [u8], out: &[u8], client: bool) {
    let riov = [IoVec {
        addr: buf.as_mut_ptr(),
        len: buf.len(),
    }];
    let m = Msg {
        iov: &riov,
        desc: &[],
        addr: FiAddr::UNSPEC,
        tag: 0,
        ignore: 0,
        context: 1,
        data: 0,
    };
    // SAFETY: `buf` outlives the receive: its completion is awaited here.
    unsafe { s.ep.recvmsg(&m, OpFlags::empty()).unwrap() };
    if client {
        s.ep.inject(out, FiAddr::UNSPEC, None).unwrap();
    }
    while wait_cq(s.cq.as_ref()).context != 1 {}
    if !client {
        s.ep.inject(out, FiAddr::UNSPEC, None).unwrap();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("server") => {
            let port = args.get(1).expect("server PORT [NODE]");
            let node = args.get(2).map_or("127.0.0.1", String::as_str);
            let info = info(node, port, true);
            let fabric = TcpProvider.fabric(&info.fabric_attr).unwrap();
            let eq = fabric
                .eq(&EqAttr {
                    wait_obj: WaitObj::Unspec,
                    ..Default::default()
                })
                .unwrap();
            let pep = fabric.passive_endpoint(&info).unwrap();
            pep.bind_eq(eq.as_ref()).unwrap();
            pep.listen().unwrap();
            let EqEvent::ConnReq {
                info: req, data, ..
            } = wait_event(eq.as_ref())
            else {
                panic!("expected a connection request");
            };
            let text = String::from_utf8(data).unwrap();
            let (size, iters) = text.split_once(' ').unwrap();
            let (size, iters): (usize, usize) = (size.parse().unwrap(), iters.parse().unwrap());
            let s = open(fabric.as_ref(), &req, eq.as_ref());
            s.ep.accept(b"").unwrap();
            let mut buf = vec![0u8; size];
            let out = vec![7u8; size];
            for _ in 0..iters {
                round(&s, &mut buf, &out, false);
            }
            // Let the last answer go out.
            std::thread::sleep(Duration::from_millis(100));
        }
        Some("client") => {
            let (host, port) = (&args[1], &args[2]);
            let size: usize = args.get(3).map_or(1, |s| s.parse().unwrap());
            let iters: usize = args.get(4).map_or(10_000, |s| s.parse().unwrap());
            let info = info(host, port, false);
            let fabric = TcpProvider.fabric(&info.fabric_attr).unwrap();
            let eq = fabric
                .eq(&EqAttr {
                    wait_obj: WaitObj::Unspec,
                    ..Default::default()
                })
                .unwrap();
            let s = open(fabric.as_ref(), &info, eq.as_ref());
            let dest = info.dest_addr.clone().unwrap();
            s.ep.connect(&dest, format!("{size} {iters}").as_bytes())
                .unwrap();
            match wait_event(eq.as_ref()) {
                EqEvent::Connected { .. } => {}
                other => panic!("{other:?}"),
            }
            let mut buf = vec![0u8; size];
            let out = vec![7u8; size];
            let warm = iters / 10;
            for _ in 0..warm {
                round(&s, &mut buf, &out, true);
            }
            let t = Instant::now();
            for _ in warm..iters {
                round(&s, &mut buf, &out, true);
            }
            let us = t.elapsed().as_secs_f64() * 1e6 / (2 * (iters - warm)) as f64;
            println!("msg {size} B x {}: {us:.2} us one-way", iters - warm);
        }
        _ => eprintln!("usage: msg_pingpong server PORT [NODE] | client HOST PORT [SIZE [ITERS]]"),
    }
}
