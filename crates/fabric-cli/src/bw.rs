//! `fabric bw`: one-way bandwidth with a window of outstanding operations,
//! for send / recv, tagged messages, RMA write and RMA read.
//!
//! Per iteration the client starts `-W` operations and waits for their
//! completions; the server keeps `-W` receives posted (send, tagged) or
//! just exposes a registered buffer (write, read). The clock runs on the
//! client from the first operation until the server's acknowledgement
//! that everything arrived.

use std::time::Instant;

use clap::Args;
use fabric::objects::{FiAddr, IoVec, MemoryRegion, MrAccess, MrAttr, MrDesc, Msg, RmaIov, RmaMsg};
use fabric::{Caps, Error, ErrorKind, OpFlags};

use crate::Status;
use crate::perf::{self, Common, Row, Session};

/// The operation to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OpArg {
    /// Untagged send / recv.
    Send,
    /// Tagged send / recv.
    Tagged,
    /// RMA write.
    Write,
    /// RMA read.
    Read,
}

/// Options of `fabric bw`.
#[derive(Debug, Clone, Args)]
pub(crate) struct BwArgs {
    /// The options shared with `fabric pingpong`.
    #[command(flatten)]
    pub common: Common,
    /// Operations in flight.
    #[arg(short = 'W', long = "window", default_value_t = 64)]
    pub window: usize,
    /// The operation.
    #[arg(short = 'o', long = "op", value_enum, default_value = "send")]
    pub op: OpArg,
}

/// Runs the subcommand.
pub(crate) fn run(args: &BwArgs) -> Status {
    if args.window == 0 {
        eprintln!("fabric bw: the window (-W) must be at least 1");
        return Status::Usage;
    }
    perf::run_tool(args)
}

impl perf::Tool for BwArgs {
    const NAME: &'static str = "bw";

    fn common_mut(&mut self) -> &mut Common {
        &mut self.common
    }

    fn common(&self) -> &Common {
        &self.common
    }

    fn own_args(&self) -> Vec<String> {
        vec![
            "-W".to_string(),
            self.window.to_string(),
            "-o".to_string(),
            format!("{:?}", self.op).to_lowercase(),
        ]
    }

    fn session(&self) -> fabric::Result<()> {
        session(self)
    }
}

/// Fills each slot of the window with its own pattern.
fn fill_window(buf: &mut [u8], size: usize, window: usize, base: u64) {
    for k in 0..window {
        perf::pattern(&mut buf[k * size..(k + 1) * size], base + k as u64);
    }
}

/// The capabilities a run uses: its operation, and messages for the
/// notices that end each window.
fn caps(op: OpArg) -> Caps {
    match op {
        OpArg::Send => Caps::MSG,
        OpArg::Tagged => Caps::TAGGED | Caps::MSG,
        OpArg::Write => Caps::RMA | Caps::MSG,
        OpArg::Read => Caps::RMA | Caps::MSG,
    }
}

fn session(args: &BwArgs) -> fabric::Result<()> {
    let c = &args.common;
    let mut s = perf::connect(c, caps(args.op))?;
    let window = args
        .window
        .min(s.side.info.tx_attr.size.max(1))
        .min(s.side.info.rx_attr.size.max(1));
    let max = c.sizes.0.iter().copied().max().unwrap_or(1);
    // One buffer per slot of the window, so receives never share memory;
    // every page is touched before timing.
    let mut buf = perf::MsgBuf::at(max * window, usize::from(args.common.buf_offset));
    // Notices: byte 0 is received into, byte 1 sent from.
    let mut ctl = vec![0u8; 2];
    // The target's registered buffer for RMA (the server's `buf`); with
    // FI_MR_LOCAL, the region of the local buffers too.
    let mr: Option<Box<dyn MemoryRegion>> = if matches!(args.op, OpArg::Write | OpArg::Read) {
        let iov = [IoVec {
            addr: buf.as_mut_ptr(),
            len: buf.len(),
        }];
        let attr = MrAttr {
            iov: &iov,
            access: MrAccess::REMOTE_WRITE
                | MrAccess::REMOTE_READ
                | MrAccess::READ
                | MrAccess::WRITE,
            offset: 0,
            requested_key: 0x5eed,
            context: 0,
        };
        // SAFETY: `buf` is neither moved nor freed before `mr` is dropped
        // (it is declared before `mr`, so dropped after it).
        Some(unsafe { s.side.domain.mr_reg(&attr)? })
    } else {
        // SAFETY: as above.
        unsafe { perf::register_local(&s.side, &mut buf)? }
    };
    // SAFETY: `ctl` is neither moved nor freed before `ctl_mr` is dropped.
    let ctl_mr = unsafe { perf::register_local(&s.side, &mut ctl)? };
    let local = s
        .side
        .info
        .domain_attr
        .mr_mode
        .contains(fabric::MrMode::LOCAL);
    let mut d = Descs {
        buf: perf::desc_of(mr.as_deref()).filter(|_| local),
        ctl: perf::desc_of(ctl_mr.as_deref()),
        remote: None,
    };
    // Exchange the RMA target: key and base (address with FI_MR_VIRT_ADDR).
    d.remote = match &mr {
        Some(m) => {
            let virt = s
                .side
                .info
                .domain_attr
                .mr_mode
                .contains(fabric::MrMode::VIRT_ADDR);
            let base = if virt { buf.as_ptr() as u64 } else { 0 };
            s.ctl.send(&format!("mr {} {}", m.key(), base))?;
            let line = s.ctl.recv()?;
            let mut it = line.split_whitespace().skip(1).map(str::parse::<u64>);
            match (it.next(), it.next()) {
                (Some(Ok(k)), Some(Ok(b))) => Some((k, b)),
                _ => {
                    return Err(Error::inval(format!(
                        "bad memory-region line from the peer: `{line}`"
                    )));
                }
            }
        }
        None => None,
    };
    if !c.json {
        println!("{}", perf::HEADER);
    }
    let bar = c.progress();
    for &size in &c.sizes.0 {
        if size > s.side.info.ep_attr.max_msg_size {
            break;
        }
        bar.set_message(format!("{size} B"));
        // The server posts its receives before it agrees on the size, so
        // that no message finds its receive missing (verbs' RC queue pairs
        // would make the sender retry after a receiver-not-ready timer).
        let sync = format!("size {size}");
        if s.client {
            s.ctl.sync(true, &sync)?;
        }
        let seconds = match (args.op, s.client) {
            (OpArg::Send | OpArg::Tagged, true) => {
                send_side(args, &s, &mut buf, &mut ctl, d, size, window)?
            }
            (OpArg::Send | OpArg::Tagged, false) => {
                recv_side(args, &mut s, &mut buf, &mut ctl, d, size, window, &sync)?
            }
            (OpArg::Write | OpArg::Read, true) => {
                rma_side(args, &s, &mut buf, &mut ctl, d, size, window)?
            }
            (OpArg::Write | OpArg::Read, false) => {
                target_side(&mut s, &mut buf, &mut ctl, d, size, &sync)?
            }
        };
        let row = Row {
            size,
            iterations: c.iterations,
            transfers: c.iterations * window,
            seconds,
            verified: c.verify,
        };
        perf::print_row(c, "bw", &s.side, &row, &bar);
    }
    bar.finish_and_clear();
    s.ctl.sync(s.client, "done")?;
    drop(ctl_mr);
    drop(mr);
    Ok(())
}

/// The descriptors of the registered buffers (FI_MR_LOCAL), or none, and
/// the peer's RMA target (key and base).
#[derive(Debug, Clone, Copy)]
struct Descs {
    buf: Option<MrDesc>,
    ctl: Option<MrDesc>,
    remote: Option<(u64, u64)>,
}

/// Sends a one-byte notice and waits until it is out (manual progress: an
/// inject alone may still sit in the provider's queue).
fn notify(s: &Session, byte: &mut [u8], desc: Option<MrDesc>) -> fabric::Result<()> {
    let iov = [IoVec {
        addr: byte.as_mut_ptr(),
        len: 1,
    }];
    let m = Msg {
        iov: &iov,
        desc: desc.as_slice(),
        addr: s.peer,
        tag: 0,
        ignore: 0,
        context: 3,
        data: 0,
    };
    // SAFETY: `byte` outlives the send: its completion is awaited here.
    unsafe { s.side.ep.sendmsg(&m, OpFlags::empty())? };
    loop {
        if perf::wait_one(&s.side)?.context == 3 {
            return Ok(());
        }
    }
}

/// Waits for `n` completions.
fn drain(s: &Session, mut n: usize) -> fabric::Result<()> {
    while n > 0 {
        perf::wait_one(&s.side)?;
        n -= 1;
    }
    Ok(())
}

/// The client of send / tagged: windows of sends, then the server's ack.
fn send_side(
    args: &BwArgs,
    s: &Session,
    buf: &mut [u8],
    ctl: &mut [u8],
    d: Descs,
    size: usize,
    window: usize,
) -> fabric::Result<f64> {
    let tagged = args.op == OpArg::Tagged;
    if args.common.verify {
        fill_window(buf, size, window, 0);
    }
    // The server's ack.
    post_recv(s, &mut ctl[..1], d.ctl, false)?;
    let t = Instant::now();
    for _ in 0..args.common.iterations {
        for k in 0..window {
            let iov = [IoVec {
                addr: buf[k * size..].as_mut_ptr(),
                len: size,
            }];
            let m = Msg {
                iov: &iov,
                desc: d.buf.as_slice(),
                addr: s.peer,
                tag: 9,
                ignore: 0,
                context: 10 + k as u64,
                data: 0,
            };
            // SAFETY: `buf` outlives the sends: their completions are
            // awaited below.
            unsafe {
                if tagged {
                    s.side.ep.tsendmsg(&m, OpFlags::empty())?
                } else {
                    s.side.ep.sendmsg(&m, OpFlags::empty())?
                }
            };
        }
        drain(s, window)?;
    }
    // The server's ack: everything arrived.
    drain(s, 1)?;
    Ok(t.elapsed().as_secs_f64())
}

fn post_recv(
    s: &Session,
    into: &mut [u8],
    desc: Option<MrDesc>,
    tagged: bool,
) -> fabric::Result<()> {
    let iov = [IoVec {
        addr: into.as_mut_ptr(),
        len: into.len(),
    }];
    let m = Msg {
        iov: &iov,
        desc: desc.as_slice(),
        addr: FiAddr::UNSPEC,
        tag: 9,
        ignore: 0,
        context: 1,
        data: 0,
    };
    // SAFETY: callers keep `into` alive until the receive completes.
    unsafe {
        if tagged {
            s.side.ep.trecvmsg(&m, OpFlags::empty())
        } else {
            s.side.ep.recvmsg(&m, OpFlags::empty())
        }
    }
}

/// The server of send / tagged: keeps a window of receives posted, then
/// acknowledges.
#[allow(clippy::too_many_arguments)]
fn recv_side(
    args: &BwArgs,
    s: &mut Session,
    buf: &mut [u8],
    ctl: &mut [u8],
    d: Descs,
    size: usize,
    window: usize,
    sync: &str,
) -> fabric::Result<f64> {
    let tagged = args.op == OpArg::Tagged;
    let total = args.common.iterations * window;
    let mut posted = 0;
    let mut done = 0;
    while posted < total.min(window) {
        post_recv(
            s,
            &mut buf[posted % window * size..(posted % window + 1) * size],
            d.buf,
            tagged,
        )?;
        posted += 1;
    }
    s.ctl.sync(false, sync)?;
    let t = Instant::now();
    while done < total {
        let e = perf::wait_one(&s.side)?;
        if e.len != size {
            return Err(Error::new(
                ErrorKind::Io,
                format!("received {} bytes instead of {size}", e.len),
            ));
        }
        let slot = done % window;
        if args.common.verify {
            perf::check(&buf[slot * size..(slot + 1) * size], slot as u64, size)?;
        }
        done += 1;
        if posted < total {
            post_recv(s, &mut buf[slot * size..(slot + 1) * size], d.buf, tagged)?;
            posted += 1;
        }
    }
    notify(s, &mut ctl[1..], d.ctl)?;
    Ok(t.elapsed().as_secs_f64())
}

/// The client of write / read: windows of RMA operations on the server's
/// buffer, then a message saying it is over.
fn rma_side(
    args: &BwArgs,
    s: &Session,
    buf: &mut [u8],
    ctl: &mut [u8],
    d: Descs,
    size: usize,
    window: usize,
) -> fabric::Result<f64> {
    let (key, base) = d
        .remote
        .ok_or_else(|| Error::inval("no remote memory region"))?;
    if args.common.verify && args.op == OpArg::Write {
        fill_window(buf, size, window, 0);
    }
    let t = Instant::now();
    for _ in 0..args.common.iterations {
        for k in 0..window {
            let iov = [IoVec {
                addr: buf[k * size..].as_mut_ptr(),
                len: size,
            }];
            let rma = [RmaIov {
                addr: base + (k * size) as u64,
                len: size,
                key,
            }];
            let m = RmaMsg {
                iov: &iov,
                desc: d.buf.as_slice(),
                addr: s.peer,
                rma_iov: &rma,
                context: 10 + k as u64,
                data: 0,
            };
            // SAFETY: `buf` outlives the operations: their completions are
            // awaited below.
            unsafe {
                if args.op == OpArg::Write {
                    s.side.ep.writemsg(&m, OpFlags::DELIVERY_COMPLETE)?
                } else {
                    s.side.ep.readmsg(&m, OpFlags::empty())?
                }
            };
        }
        drain(s, window)?;
    }
    let secs = t.elapsed().as_secs_f64();
    if args.common.verify && args.op == OpArg::Read {
        for k in 0..window {
            perf::check(&buf[k * size..(k + 1) * size], 1000 + k as u64, size)?;
        }
    }
    notify(s, &mut ctl[1..], d.ctl)?;
    Ok(secs)
}

/// The server of write / read: exposes its buffer (filled with the
/// pattern for reads), waits for the client's end message, checks writes.
fn target_side(
    s: &mut Session,
    buf: &mut [u8],
    ctl: &mut [u8],
    d: Descs,
    size: usize,
    sync: &str,
) -> fabric::Result<f64> {
    fill_window(buf, size, buf.len() / size.max(1), 1000);
    post_recv(s, &mut ctl[..1], d.ctl, false)?;
    s.ctl.sync(false, sync)?;
    let t = Instant::now();
    drain(s, 1)?;
    Ok(t.elapsed().as_secs_f64())
}
