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
    /// Do `fi_pingpong`'s per-round work: post each receive only once the
    /// previous one has completed, so that posting it is on the round
    /// trip's critical path (by default two are kept posted ahead, off
    /// it), and inject only messages shorter than the inject size (by
    /// default up to it): the fair partner of `fi_pingpong` run on this
    /// library.
    #[arg(long = "late-recv")]
    pub late_recv: bool,
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
        if self.late_recv {
            v.push("--late-recv".to_string());
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
    tx: perf::MsgBuf,
    rx: perf::MsgBuf,
}

impl Buffers {
    /// Buffers of `max` bytes, registered when the provider needs it,
    /// `off` bytes past a page boundary (`--buf-offset`).
    fn new(side: &perf::Side, max: usize, off: usize) -> fabric::Result<Buffers> {
        let mut tx = perf::MsgBuf::at(max, off);
        let mut rx = perf::MsgBuf::at(max, off);
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
    let mut bufs = Buffers::new(&s.side, max, usize::from(c.buf_offset))?;
    let mut track = Track::default();
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
        // Two are kept posted, as ibv_rc_pingpong keeps many: a round
        // posts the receive of the round after next once its own send is
        // out, while the message is on its way (off the round trip's
        // critical path). The first two rounds' are posted before both
        // sides agree on the size. With --late-recv one is posted at a
        // time, as in fi_pingpong: the next right after a message came
        // (and was checked), before this side answers or sends again.
        track.by_ctx = [0; 4];
        let ahead = if args.late_recv { 1 } else { AHEAD };
        for _ in 0..rounds.min(ahead) {
            post_recv(args, &s, &mut bufs, size)?;
        }
        s.ctl.sync(s.client, &format!("size {size}"))?;
        let mut rounds_in = |range: std::ops::Range<usize>| -> fabric::Result<()> {
            for i in range {
                round(
                    args,
                    &s,
                    &mut bufs,
                    &mut track,
                    size,
                    i as u64,
                    i + ahead < rounds,
                )?;
            }
            Ok(())
        };
        rounds_in(0..warmup)?;
        // One clock reading at each end, as fi_pingpong: where reading the
        // clock is slow (a system call in some virtual machines), a
        // reading per round would count in the latency.
        let t = Instant::now();
        rounds_in(warmup..rounds)?;
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

/// Posts the receive of the next message (context [`RX`]).
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
        context: RX,
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

/// Receives kept posted ahead of the messages.
const AHEAD: usize = 2;

/// The context of receives.
const RX: u64 = 1;
/// The context of sends (injects report no completion).
const TX: u64 = 2;

/// Completions of a run: what a round carries over to the next, and what
/// a run that times out reports.
#[derive(Debug, Default)]
struct Track {
    /// The next round's message came already, while this side still
    /// waited for its own send to complete: the peer's acknowledgement of
    /// that send can come after the peer's next message (the answer to
    /// the send), as it does on soft-RoCE.
    early_rx: bool,
    /// Completions seen.
    seen: u64,
    /// The contexts of the last few.
    recent: [u64; 8],
    /// Completions of the current size by context: 0, 1, 2, others.
    by_ctx: [u64; 4],
}

impl Track {
    fn note(&mut self, context: u64) {
        self.recent[(self.seen % 8) as usize] = context;
        self.by_ctx[context.min(3) as usize] += 1;
        self.seen += 1;
    }

    /// The contexts of the last few completions, oldest first.
    fn last(&self) -> Vec<u64> {
        let n = self.seen.min(8);
        (0..n)
            .rev()
            .map(|k| self.recent[((self.seen - 1 - k) % 8) as usize])
            .collect()
    }
}

/// The completion handling of one round: `pending_tx`, whether this
/// side's send (the client's) is out already; `next` waits for the next
/// completion's context; `on_rx` handles this round's message and returns
/// whether it sent a send that completes (the server's answer).
///
/// The round ends when its message has come and its send has completed.
/// A second receive completion in the round is the next round's message
/// (the peer may answer before this side sees its send complete): it is
/// carried over in `track.early_rx` and handled first by the next round,
/// so that the rounds stay in step with the peer's.
fn drive(
    track: &mut Track,
    mut pending_tx: bool,
    mut next: impl FnMut(&Track, bool, bool) -> fabric::Result<u64>,
    mut on_rx: impl FnMut() -> fabric::Result<bool>,
) -> fabric::Result<()> {
    let mut got_rx = false;
    if std::mem::take(&mut track.early_rx) {
        got_rx = true;
        pending_tx |= on_rx()?;
    }
    while !got_rx || pending_tx {
        let context = next(track, got_rx, pending_tx)?;
        track.note(context);
        match context {
            RX if got_rx => {
                if track.early_rx {
                    return Err(fabric::Error::new(
                        fabric::ErrorKind::Io,
                        "pingpong: a third message in one round (the peer is out of step)",
                    ));
                }
                track.early_rx = true;
            }
            RX => {
                got_rx = true;
                pending_tx |= on_rx()?;
            }
            TX => pending_tx = false,
            _ => {}
        }
    }
    Ok(())
}

/// One round trip: the client sends first, the server answers. The
/// receives of this round and the next are already posted; the one of
/// the round after next (`more`) is posted right after this side's send.
/// With `--late-recv` only this round's receive is posted, and the next
/// one's (`more`) is posted as soon as this round's message has come.
fn round(
    args: &PingpongArgs,
    s: &Session,
    bufs: &mut Buffers,
    track: &mut Track,
    size: usize,
    seq: u64,
    more: bool,
) -> fabric::Result<()> {
    let tagged = args.mode == ModeArg::Tagged;
    let late = args.late_recv;
    let (side, peer, client) = (&s.side, s.peer, s.client);
    let send = |bufs: &mut Buffers, seed: u64| -> fabric::Result<bool> {
        if args.common.verify {
            perf::pattern(&mut bufs.tx[..size], seed);
        }
        // fi_pingpong injects below the inject size only.
        let inject = side.info.tx_attr.inject_size;
        if size < inject || (size == inject && !late) {
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
            context: TX,
            data: 0,
        };
        // SAFETY: `bufs` outlives the send: its completion is awaited
        // before this round ends.
        unsafe {
            if tagged {
                side.ep.tsendmsg(&smsg, OpFlags::empty())?
            } else {
                side.ep.sendmsg(&smsg, OpFlags::empty())?
            }
        };
        Ok(true)
    };
    let pending_tx = if client {
        let pending = send(bufs, seq * 2)?;
        if more && !late {
            post_recv(args, s, bufs, size)?;
        }
        pending
    } else {
        false
    };
    let next = |track: &Track, got_rx: bool, pending_tx: bool| -> fabric::Result<u64> {
        perf::wait_one(side).map(|e| e.context).map_err(|err| {
            if err.kind() != fabric::ErrorKind::TimedOut {
                return err;
            }
            fabric::Error::new(
                err.kind(),
                format!(
                    "{} ({} at {size} B, round {seq}, waiting for {}; {} completions seen, {:?} of contexts 0, 1, 2 and others at this size, the last contexts {:?})",
                    err.detail(),
                    if client { "client" } else { "server" },
                    match (got_rx, pending_tx) {
                        (false, true) => "the message and the send",
                        (false, false) => "the message",
                        _ => "the send",
                    },
                    track.seen,
                    track.by_ctx,
                    track.last(),
                ),
            )
        })
    };
    let on_rx = || -> fabric::Result<bool> {
        if args.common.verify {
            let seed = if client { seq * 2 + 1 } else { seq * 2 };
            perf::check(&bufs.rx[..size], seed, size)?;
        }
        if late && more {
            post_recv(args, s, bufs, size)?;
        }
        if client {
            return Ok(false);
        }
        let pending = send(bufs, seq * 2 + 1)?;
        if more && !late {
            post_recv(args, s, bufs, size)?;
        }
        Ok(pending)
    };
    drive(track, pending_tx, next, on_rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs rounds over a scripted completion stream; returns each
    /// round's number for every `on_rx`, and the completions left.
    fn play(rounds: u64, client: bool, stream: &[u64]) -> fabric::Result<(Vec<u64>, usize)> {
        let mut track = Track::default();
        let mut it = stream.iter().copied();
        let mut handled = Vec::new();
        for seq in 0..rounds {
            let next = |_: &Track, _: bool, _: bool| {
                it.next()
                    .ok_or_else(|| fabric::Error::new(fabric::ErrorKind::TimedOut, "no completion"))
            };
            drive(&mut track, client, next, || {
                handled.push(seq);
                Ok(!client)
            })?;
        }
        assert!(!track.early_rx, "a message left over");
        Ok((handled, it.count()))
    }

    #[test]
    fn rounds_in_order() -> fabric::Result<()> {
        assert_eq!(
            play(3, false, &[RX, TX, RX, TX, RX, TX])?,
            (vec![0, 1, 2], 0)
        );
        assert_eq!(play(2, true, &[TX, RX, RX, TX])?, (vec![0, 1], 0));
        Ok(())
    }

    #[test]
    fn an_answer_before_the_own_send_completion_is_the_next_round_message() -> fabric::Result<()> {
        // The server's send of round 0 completes after the client's
        // message of round 1 arrived: round 1 must not wait for another.
        assert_eq!(
            play(3, false, &[RX, RX, TX, TX, RX, TX])?,
            (vec![0, 1, 2], 0)
        );
        // Twice in a row.
        assert_eq!(
            play(3, false, &[RX, RX, TX, RX, TX, TX])?,
            (vec![0, 1, 2], 0)
        );
        Ok(())
    }

    #[test]
    fn other_contexts_are_ignored() -> fabric::Result<()> {
        assert_eq!(play(2, false, &[0, RX, 0, TX, 7, RX, TX])?, (vec![0, 1], 0));
        Ok(())
    }
}
