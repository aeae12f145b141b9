//! Limits and sizes that several rooms share: what `getinfo` advertises
//! and the endpoints enforce (iovec pieces, inject size, private data),
//! and the data path's thresholds (eager messages, the unexpected-message
//! budget). Its own module, so that `getinfo` and `ep` need not import
//! each other.

use fabric_core::kit::rx::Budget;

/// IO vector pieces per operation.
pub const IOV_LIMIT: usize = 8;

/// Largest inject (copied before the call returns).
pub const INJECT_SIZE: usize = 8192;

/// Private data of connection requests, accepts and rejects.
pub const CM_DATA_SIZE: usize = 256;

/// Largest message sent eagerly (in one frame, buffered by the receiver
/// when no receive matches yet); larger messages go by rendezvous, except
/// lone ones ([`EAGER_LONE_MAX`]). 16 KiB by measurement of streams
/// (`fabric bw` on loopback, 64 sends in flight, 4 alternating rounds,
/// MB/s, eager / rendezvous): 32 KiB MSG 2093-2626 / 2910-3050 and RDM
/// 1873-2543 / 2899-3017; 20 KiB MSG 2068-2478 / 2013-2224, RDM
/// 2022-2110 / 2156-2199. Eager streams of 20-32 KiB ran at 2.2-2.5
/// GB/s, below 16 KiB's 3 GB/s and rendezvous' 4 GB/s from 36 KiB.
pub(crate) const EAGER_MAX: usize = 16 * 1024;

/// Largest message sent eagerly when it is lone: nothing else of the
/// endpoint in flight and no other send posted since the last progress
/// call (ping-pong, request-response), which saves the rendezvous round
/// trip. Messages posted in a burst keep rendezvous above [`EAGER_MAX`]:
/// it measured faster for streams on loopback (the data of many
/// clear-to-sends leaves in a few large `sendmsg` calls). 256 KiB by
/// measurement (ping-pong on loopback, 2-vCPU Intel Xeon guest, with
/// the fixed receive buffer of [`crate::sys::tune`], 4 alternating rounds, one-way us, rendezvous /
/// eager): 128 KiB 24.8 / 19.9 on MSG (`fi_pingpong` 20.1) and 25.6 /
/// 19.0 on RDM; 256 KiB 35.0 / 28.8 on MSG (`fi_pingpong` 29.3) and 34.7
/// / 28.5 on RDM; at 512 KiB eager took 52 or 86-90 from run to run
/// against 74-76, and at 1 MiB 280-296 against 130-150. Only with that
/// buffer: see [`EAGER_LONE_MAX_AUTOTUNED`].
pub(crate) const EAGER_LONE_MAX: usize = 256 * 1024;

/// [`EAGER_LONE_MAX`] where connections keep the kernel's receive-buffer
/// autotuning (`net.core.rmem_max` below what `sys::tune` asks for):
/// there lone messages of 128-256 KiB took one of two times from run to
/// run (RDM 256 KiB: 28-30 or 44-58 us), against a steady 35 by
/// rendezvous, so eager stops at 64 KiB, as before the fixed buffer.
pub(crate) const EAGER_LONE_MAX_AUTOTUNED: usize = 64 * 1024;

/// The lone-eager limit (in place of [`EAGER_LONE_MAX`]) on a connection
/// inside this host that no congestion control paces
/// ([`crate::sys::unpaced`]), with the fixed receive buffer: every lone
/// message of up to 8 MiB goes eagerly. Measured there
/// (`fabric pingpong` on loopback under cubic, 3 alternating rounds,
/// one-way us, rendezvous / eager): MSG 512 KiB 75.9 / 67.6
/// (`fi_pingpong` 71.8), 1 MiB 142.6 / 136.7, 4 MiB 548 / 551 and 8 MiB
/// 1080 / 1067; RDM 1 MiB 142.9 / 134.6. The 256 KiB limit came from
/// runs under BBR's pacing, where eager lost above it.
pub(crate) const EAGER_LONE_MAX_UNPACED: usize = 8 << 20;

/// The lone-eager limit of this system's connections: [`EAGER_LONE_MAX`]
/// with the fixed receive buffer, else [`EAGER_LONE_MAX_AUTOTUNED`].
pub(crate) fn eager_lone_max() -> usize {
    if crate::sys::fixed_rcvbuf() {
        EAGER_LONE_MAX
    } else {
        EAGER_LONE_MAX_AUTOTUNED
    }
}

/// The lone-eager limit of an unpaced connection inside this host:
/// [`EAGER_LONE_MAX_UNPACED`] with the fixed receive buffer, else
/// [`EAGER_LONE_MAX_AUTOTUNED`].
pub(crate) fn eager_lone_max_unpaced() -> usize {
    if crate::sys::fixed_rcvbuf() {
        EAGER_LONE_MAX_UNPACED
    } else {
        EAGER_LONE_MAX_AUTOTUNED
    }
}

/// Largest buffer of an unexpected message kept for reuse (the engine
/// keeps up to 64): the buffer of a larger lone message (up to
/// [`EAGER_LONE_MAX`]) that came before its receive is freed, not kept.
const SPARE_MAX: usize = 64 * 1024;

/// Bytes of unexpected messages an endpoint keeps at most (payloads, plus
/// [`UNEXP_COST`] per entry). Beyond it, the connection that brings the
/// next unexpected message stops being read until receives consume what
/// is kept.
pub(crate) const UNEXP_BUDGET: usize = 8 << 20;

/// What one unexpected entry counts against the budget besides its
/// payload.
pub(crate) const UNEXP_COST: usize = 64;

/// The receive engine's limits: [`UNEXP_BUDGET`] of unexpected messages
/// at [`UNEXP_COST`] an entry, a sender paused as soon as it is spent;
/// spare buffers kept up to [`SPARE_MAX`].
pub(crate) const RX_BUDGET: Budget = Budget {
    total: UNEXP_BUDGET,
    hard: UNEXP_BUDGET,
    reserve: 0,
    entry_cost: UNEXP_COST,
    spare_max: SPARE_MAX,
};
