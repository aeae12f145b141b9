//! `fabric pingpong`: round-trip latency between two endpoints, with
//! libfabric's `fi_pingpong` options and table, so the same experiment runs
//! on both. One-way latency is the run time over twice the round trips.

use std::time::Instant;

use clap::Args;
use fabric::objects::{FiAddr, IoVec, MemoryRegion, MrDesc, Msg};
use fabric::{Caps, OpFlags};

use crate::Status;
use crate::perf::{self, Common, ModeArg, Row, Session};

/// Options of `fabric pingpong`.
#[derive(Debug, Clone, Args)]
pub(crate) struct PingpongArgs {
    /// The options shared with `fabric bw`.
    #[command(flatten)]
    pub common: Common,
    /// Transmit mode.
    #[arg(short = 'm', long = "mode", value_enum, default_value = "msg")]
    pub mode: ModeArg,
    /// Untimed warm-up round trips per size (default: a tenth of -I, at least 1).
    #[arg(short = 'W', long = "warmup")]
    pub warmup: Option<usize>,
}

/// Runs the subcommand.
pub(crate) fn run(args: &PingpongArgs) -> Status {
    perf::run_tool(args)
}

impl perf::Tool for PingpongArgs {
    const NAME: &'static str = "pingpong";

    fn common_mut(&mut self) -> &mut Common {
        &mut self.common
    }

    fn common(&self) -> &Common {
        &self.common
    }

    fn own_args(&self) -> Vec<String> {
        let mut v = vec!["-m".to_string(), format!("{:?}", self.mode).to_lowercase()];
        if let Some(w) = self.warmup {
            v.extend(["-W".to_string(), w.to_string()]);
        }
        v
    }

    fn session(&self) -> fabric::Result<()> {
        session(self)
    }
}

/// Message buffers of a run; they outlive every operation that uses them.
/// With FI_MR_LOCAL both are registered; the regions come first so that
/// they are dropped (deregistered) before the memory is freed.
struct Buffers {
    _tx_mr: Option<Box<dyn MemoryRegion>>,
    _rx_mr: Option<Box<dyn MemoryRegion>>,
    /// The regions' descriptors, given with every operation.
    tx_desc: Option<MrDesc>,
    rx_desc: Option<MrDesc>,
    tx: Vec<u8>,
    rx: Vec<u8>,
}

impl Buffers {
    /// Buffers of `max` bytes, registered when the provider needs it.
    fn new(side: &perf::Side, max: usize) -> fabric::Result<Buffers> {
        let mut tx = vec![0; max];
        let mut rx = vec![0; max];
        // SAFETY: the vectors' memory neither moves nor is freed before
        // the regions are dropped: they live in the same struct, declared
        // after the regions, and are never resized.
        let (tx_mr, rx_mr) = unsafe {
            (
                perf::register_local(side, &mut tx)?,
                perf::register_local(side, &mut rx)?,
            )
        };
        Ok(Buffers {
            tx_desc: perf::desc_of(tx_mr.as_deref()),
            rx_desc: perf::desc_of(rx_mr.as_deref()),
            _tx_mr: tx_mr,
            _rx_mr: rx_mr,
            tx,
            rx,
        })
    }
}

fn session(args: &PingpongArgs) -> fabric::Result<()> {
    let c = &args.common;
    let caps = Caps::MSG
        | if args.mode == ModeArg::Tagged {
            Caps::TAGGED
        } else {
            Caps::empty()
        };
    let mut s = perf::connect(c, caps)?;
    let max = c.sizes.0.iter().copied().max().unwrap_or(1);
    let mut bufs = Buffers::new(&s.side, max)?;
    let warmup = args.warmup.unwrap_or((c.iterations / 10).max(1));
    let rounds = warmup + c.iterations;
    if !c.json {
        println!("{}", perf::HEADER);
    }
    let bar = c.progress();
    for &size in &c.sizes.0 {
        if size > s.side.info.ep_attr.max_msg_size {
            break;
        }
        bar.set_message(format!("{size} B"));
        // A receive is always posted before the peer can send to it (as
        // fi_pingpong and ibv_rc_pingpong do): providers without buffers
        // of their own for unexpected messages (verbs' RC queue pairs)
        // would make the sender retry after a receiver-not-ready timer.
        // The first round's is posted before both sides agree on the size.
        post_recv(args, &s, &mut bufs, size)?;
        s.ctl.sync(s.client, &format!("size {size}"))?;
        for i in 0..warmup {
            round(args, &s, &mut bufs, size, i as u64, i + 1 < rounds)?;
        }
        // One clock reading at each end, as fi_pingpong: where reading the
        // clock is slow (a system call in some virtual machines), a
        // reading per round would count in the latency.
        let t = Instant::now();
        for i in warmup..rounds {
            round(args, &s, &mut bufs, size, i as u64, i + 1 < rounds)?;
        }
        let elapsed = t.elapsed();
        let row = Row {
            size,
            iterations: c.iterations,
            transfers: 2 * c.iterations,
            seconds: elapsed.as_secs_f64(),
            verified: c.verify,
        };
        perf::print_row(c, "pingpong", &s.side, &row, &bar);
    }
    bar.finish_and_clear();
    s.ctl.sync(s.client, "done")
}

/// Posts the receive of the next message (context 1).
fn post_recv(
    args: &PingpongArgs,
    s: &Session,
    bufs: &mut Buffers,
    size: usize,
) -> fabric::Result<()> {
    let riov = [IoVec {
        addr: bufs.rx.as_mut_ptr(),
        len: size,
    }];
    let rmsg = Msg {
        iov: &riov,
        desc: bufs.rx_desc.as_slice(),
        addr: FiAddr::UNSPEC,
        tag: 7,
        ignore: 0,
        context: 1,
        data: 0,
    };
    // SAFETY: `bufs` outlives the receive: every posted receive completes
    // within its size's rounds (the last round posts none), and on error
    // the process ends.
    unsafe {
        if args.mode == ModeArg::Tagged {
            s.side.ep.trecvmsg(&rmsg, OpFlags::empty())
        } else {
            s.side.ep.recvmsg(&rmsg, OpFlags::empty())
        }
    }
}

/// One round trip: the client sends first, the server answers. The
/// receive of this round is already posted; the next round's (`more`) is
/// posted as soon as this one's message has been checked, before the
/// answer goes out.
fn round(
    args: &PingpongArgs,
    s: &Session,
    bufs: &mut Buffers,
    size: usize,
    seq: u64,
    more: bool,
) -> fabric::Result<()> {
    let tagged = args.mode == ModeArg::Tagged;
    let (side, peer, client) = (&s.side, s.peer, s.client);
    let send = |bufs: &mut Buffers, seed: u64| -> fabric::Result<bool> {
        if args.common.verify {
            perf::pattern(&mut bufs.tx[..size], seed);
        }
        if size <= side.info.tx_attr.inject_size {
            let data = &bufs.tx[..size];
            if tagged {
                side.ep.tinject(data, peer, 7, None)?
            } else {
                side.ep.inject(data, peer, None)?
            }
            return Ok(false);
        }
        let siov = [IoVec {
            addr: bufs.tx.as_mut_ptr(),
            len: size,
        }];
        let smsg = Msg {
            iov: &siov,
            desc: bufs.tx_desc.as_slice(),
            addr: peer,
            tag: 7,
            ignore: 0,
            context: 2,
            data: 0,
        };
        // SAFETY: `bufs` outlives the send: its completion is awaited
        // before this function returns.
        unsafe {
            if tagged {
                side.ep.tsendmsg(&smsg, OpFlags::empty())?
            } else {
                side.ep.sendmsg(&smsg, OpFlags::empty())?
            }
        };
        Ok(true)
    };
    let mut pending_tx = false;
    if client {
        pending_tx = send(bufs, seq * 2)?;
    }
    let mut got_rx = false;
    while !got_rx || pending_tx {
        let e = perf::wait_one(side)?;
        match e.context {
            1 => {
                got_rx = true;
                if args.common.verify {
                    let seed = if client { seq * 2 + 1 } else { seq * 2 };
                    perf::check(&bufs.rx[..size], seed, size)?;
                }
                if more {
                    post_recv(args, s, bufs, size)?;
                }
                if !client {
                    pending_tx = send(bufs, seq * 2 + 1)?;
                }
            }
            2 => pending_tx = false,
            _ => {}
        }
    }
    Ok(())
}
