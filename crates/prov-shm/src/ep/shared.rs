//! The part of an endpoint every thread may touch without a lock: its
//! configuration, its peers (lock-free table indexed by AV handle), the
//! queues that hand receives and started operations to the engine, and
//! the bindings once enabled.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crossbeam_queue::ArrayQueue;
use fabric_core::kit::atomic::AtomicKind;
use fabric_core::kit::hash::IdMap;
use fabric_core::kit::lock;
use fabric_core::kit::mr::MrTable;
use fabric_core::objects::{AtomicOp, Datatype, FiAddr, IoVec, Msg, RmaIov};
use fabric_core::{Address, Error, ErrorKind, Info, OpFlags, Result};

use super::binds::{Binds, TxDone};
use super::choice::Choice;
use super::handoff::Handoff;
use crate::config::{SCHEME, region_of};
use crate::pieces::Pieces;
use crate::region::{OwnerStatus, PeerRegion};
use crate::ring::{Command, Sender};
use crate::wire::RMA_IOV_LIMIT;

/// Regions this process created (open or closed), so that a peer region
/// claiming this process as its owner can be told from a forgery.
fn own_regions() -> &'static Mutex<HashSet<String>> {
    static OWN: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    OWN.get_or_init(|| Mutex::new(HashSet::new()))
}

/// Records a region of this process.
pub(crate) fn register_own(name: &str) {
    lock(own_regions()).insert(name.to_owned());
}

/// Forgets a closed region of this process.
pub(crate) fn unregister_own(name: &str) {
    lock(own_regions()).remove(name);
}

/// Maps the region `name`, sharing one mapping per region in this process
/// (an endpoint's sends to a peer and its answers to the same peer use
/// one). A region whose header names this process as owner must be one
/// this process created: cross-memory attach trusts the owner pid.
pub(crate) fn attach(name: &str) -> Result<Arc<PeerRegion>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Weak<PeerRegion>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(r) = lock(cache).get(name).and_then(Weak::upgrade) {
        if r.is_open() {
            return Ok(r);
        }
    }
    let r = Arc::new(PeerRegion::attach(name)?);
    if r.owner_pid() == std::process::id() && !lock(own_regions()).contains(name) {
        return Err(Error::new(
            ErrorKind::Access,
            format!("region {name} claims this process as its owner but was not created by it"),
        ));
    }
    let mut c = lock(cache);
    c.retain(|_, w| w.strong_count() > 0);
    c.insert(name.to_owned(), Arc::downgrade(&r));
    Ok(r)
}

/// States of a peer's introduction.
const HELLO_NONE: u8 = 0;
const HELLO_SENDING: u8 = 1;
const HELLO_DONE: u8 = 2;

/// A destination of an endpoint: the peer's region and how this endpoint
/// stands with it.
#[derive(Debug)]
pub(crate) struct TxPeer {
    pub region: Arc<PeerRegion>,
    pub sender: Sender,
    /// The peer's pid (cross-memory attach).
    pub pid: u32,
    hello: AtomicU8,
    /// Cross-memory attach with this peer was refused: push instead.
    pub no_cma: AtomicBool,
    /// Which copy rendezvous messages to this peer take.
    pub choice: Choice,
    /// [`EpShared::rx_taken`] at the last send of a mid-size message.
    rx_mark: AtomicU64,
    /// The peer closed its endpoint or exited: operations fail.
    pub dead: AtomicBool,
    /// The peer asked us to send no messages until it resumes us (it holds
    /// too many unexpected messages of ours): messages wait in the
    /// engine's queue, injects return `FI_EAGAIN`. Set and cleared by our
    /// engine on the peer's `PAUSE` / `RESUME`.
    pub paused: AtomicBool,
    /// The AV's removal count when this handle was last found in it: the
    /// handle is used without a lookup while the count stays.
    checked: AtomicU64,
}

impl TxPeer {
    /// The copy choice of a mid-size message to this peer, where both
    /// copies are open to it: the choice is measured (no
    /// `FI_SHM_CMA_MIN`), cross-memory attach works, and the message goes
    /// alone: this endpoint took a command from its ring since the
    /// previous such send (a message of a stream, sent right behind the
    /// previous, stays eager: a rendezvous would hold the stream behind
    /// it until the peer posts a receive).
    #[inline]
    pub(crate) fn mid_choice(&self, sh: &EpShared) -> Option<&Choice> {
        if !sh.adaptive || !sh.cma || self.no_cma.load(Ordering::Relaxed) {
            return None;
        }
        let seen = sh.rx_taken.load(Ordering::Relaxed);
        (self.rx_mark.swap(seen, Ordering::Relaxed) != seen).then_some(&self.choice)
    }

    /// Whether the handle was found in the AV since its last removal.
    #[inline]
    fn valid_at(&self, removals: u64) -> bool {
        self.checked.load(Ordering::Relaxed) == removals
    }

    /// Whether operations may be sent (introduced, alive).
    #[inline]
    pub(crate) fn ready(&self) -> bool {
        self.hello.load(Ordering::Acquire) == HELLO_DONE && !self.dead.load(Ordering::Relaxed)
    }

    /// Sends this endpoint's introduction if not done yet: `Ok` once it
    /// is in the peer's ring, `Again` when the ring is full (or another
    /// thread is sending it right now).
    pub(crate) fn introduce(&self, me: &EpShared) -> Result<()> {
        if self.dead.load(Ordering::Relaxed) {
            return Err(peer_gone());
        }
        match self.hello.compare_exchange(
            HELLO_NONE,
            HELLO_SENDING,
            Ordering::Acquire,
            Ordering::Acquire,
        ) {
            Ok(_) => {}
            Err(HELLO_DONE) => return Ok(()),
            Err(_) => return Err(Error::again()),
        }
        let cmd = Command {
            op: crate::wire::op::HELLO,
            src: me.id,
            ..Command::default()
        };
        match self.sender.try_send(&cmd, me.region_name.as_bytes()) {
            Ok(()) => {
                self.hello.store(HELLO_DONE, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                self.hello.store(HELLO_NONE, Ordering::Release);
                Err(e)
            }
        }
    }
}

/// The error of an operation towards a peer that went away.
pub(crate) fn peer_gone() -> Error {
    Error::new(
        ErrorKind::ConnReset,
        "shm: the peer endpoint was closed or its process exited",
    )
}

/// Entries per chunk of the peer table.
const CHUNK: usize = 256;
/// Chunks of the peer table: AV handles below `CHUNK * CHUNKS` are looked
/// up without a lock; larger ones go through a locked map.
const CHUNKS: usize = 1024;

type Chunk = Box<[OnceLock<Arc<TxPeer>>]>;

/// An endpoint's peers by AV handle. Lookups are two acquire loads; an
/// entry is filled once (the first operation towards the handle) and kept
/// for the endpoint's life (AV handles are never reused).
#[derive(Debug)]
pub(crate) struct PeerTable {
    chunks: Box<[OnceLock<Chunk>]>,
    /// AV handles are our numbers: the kit's fast hasher.
    big: Mutex<IdMap<u64, Arc<TxPeer>>>,
}

impl PeerTable {
    pub(crate) fn new() -> PeerTable {
        PeerTable {
            chunks: (0..CHUNKS).map(|_| OnceLock::new()).collect(),
            big: Mutex::new(IdMap::default()),
        }
    }

    fn slot(&self, fi: FiAddr) -> Option<&OnceLock<Arc<TxPeer>>> {
        let i = usize::try_from(fi.0).ok()?;
        let chunk = self.chunks.get(i / CHUNK)?;
        let c = chunk.get_or_init(|| (0..CHUNK).map(|_| OnceLock::new()).collect());
        c.get(i % CHUNK)
    }

    /// The peer of `fi`, if known.
    #[inline]
    pub(crate) fn get(&self, fi: FiAddr) -> Option<Arc<TxPeer>> {
        match self.slot(fi) {
            Some(s) => s.get().cloned(),
            None => lock(&self.big).get(&fi.0).cloned(),
        }
    }

    /// The peer of `fi` as a reference (no reference count traffic), for
    /// handles in the lock-free range.
    #[inline]
    pub(crate) fn get_ref(&self, fi: FiAddr) -> Option<&Arc<TxPeer>> {
        let i = usize::try_from(fi.0).ok()?;
        self.chunks.get(i / CHUNK)?.get()?.get(i % CHUNK)?.get()
    }

    /// Records the peer of `fi` (the first one recorded wins).
    pub(crate) fn insert(&self, fi: FiAddr, p: Arc<TxPeer>) -> Arc<TxPeer> {
        match self.slot(fi) {
            Some(s) => s.get_or_init(|| p).clone(),
            None => lock(&self.big).entry(fi.0).or_insert(p).clone(),
        }
    }
}

/// A receive on its way to the engine (posted without taking the
/// engine's lock; FI_PEEK / FI_CLAIM / FI_DISCARD, and buffers of several
/// pieces, take it at once). It carries one piece, so that the queue's
/// slot is 72 bytes where one for [`IOV_LIMIT`](crate::pieces::IOV_LIMIT)
/// pieces took 120: a program such as `fi_pingpong` posts each receive on
/// its round trip's path.
#[derive(Debug)]
pub(crate) struct RxReq {
    pub tagged: bool,
    pub tag: u64,
    pub ignore: u64,
    pub src: FiAddr,
    pub buf: OnePiece,
    pub context: u64,
    pub flags: OpFlags,
}

impl RxReq {
    /// Receive `msg` (tag and ignore mask only when `tagged`) into `buf`.
    #[inline]
    pub(crate) fn of(msg: &Msg<'_>, flags: OpFlags, tagged: bool, buf: OnePiece) -> RxReq {
        let (tag, ignore) = if tagged {
            (msg.tag, msg.ignore)
        } else {
            (0, 0)
        };
        RxReq {
            tagged,
            tag,
            ignore,
            src: msg.addr,
            buf,
            context: msg.context,
            flags,
        }
    }
}

/// The buffer of a queued receive: one piece, or none.
pub(crate) type OnePiece = fabric_core::kit::rx::Pieces<1>;

/// `v` as a [`OnePiece`]: none for an empty piece, `None` for one whose
/// end overflows the address space.
#[inline]
pub(crate) fn one_piece(v: &IoVec) -> Option<OnePiece> {
    let mut p = OnePiece::EMPTY;
    if v.len == 0 {
        return Some(p);
    }
    (v.addr as usize).checked_add(v.len)?;
    p.set(std::slice::from_ref(v));
    Some(p)
}

/// Pieces as a [`OnePiece`] when there is at most one (checked as
/// [`one_piece`] checks).
#[inline]
pub(crate) fn one_piece_of(pieces: &[IoVec]) -> Option<OnePiece> {
    match pieces {
        [] => Some(OnePiece::EMPTY),
        [v] => one_piece(v),
        _ => None,
    }
}

/// Remote ranges of an RMA or atomic operation.
pub(crate) type RmaList = ([RmaIov; RMA_IOV_LIMIT], usize);

/// What an operation handed to the engine does.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TxKind {
    /// A message.
    Send { tagged: bool, tag: u64 },
    /// An RMA write of `buf`.
    Write { rma: RmaList },
    /// An RMA read into `buf`.
    Read { rma: RmaList },
    /// An atomic: `buf` holds the operands, `compare` the compare
    /// values, `result` receives the old values.
    Atomic {
        rma: RmaList,
        dt: Datatype,
        op: AtomicOp,
        kind: AtomicKind,
        compare: Pieces,
        result: Pieces,
    },
}

/// An operation handed to the engine (everything but eager messages,
/// which the calling thread sends itself).
#[derive(Debug)]
pub(crate) struct TxReq {
    pub peer: Arc<TxPeer>,
    pub kind: TxKind,
    pub buf: Pieces,
    pub flags: OpFlags,
    /// Remote CQ data (with FI_REMOTE_CQ_DATA in `flags`).
    pub data: u64,
    pub done: TxDone,
    /// A message's copy, chosen (cross-memory attach) by the calling
    /// thread (see `choice`).
    pub probe: Option<super::choice::Probe>,
}

/// Numbers endpoints within this process; a peer knows an endpoint by
/// (pid, this number).
static NEXT_EP: AtomicU32 = AtomicU32::new(1);

/// The lock-free part of an endpoint.
#[derive(Debug)]
pub(crate) struct EpShared {
    pub info: Info,
    /// The endpoint's number in this process (`src` of its commands).
    pub id: u32,
    /// Its region's name.
    pub region_name: String,
    /// `fi_shm://<region name>`.
    pub name: Address,
    pub peers: PeerTable,
    /// Receives and peeks on their way to the engine.
    pub posted: Handoff<RxReq>,
    /// Operations on their way to the engine.
    pub txq: ArrayQueue<TxReq>,
    /// Operations handed to the engine and not yet started there; while
    /// non-zero, eager sends queue behind them (send-after-send order).
    pub queued: AtomicUsize,
    /// Operations handed to the engine and not yet completed.
    pub outstanding: AtomicUsize,
    /// Commands taken from this endpoint's ring so far (as of the last
    /// progress pass that took one): a send that sees it moved since the
    /// last send to the same peer answers something, as in a ping-pong,
    /// rather than streams (see `TxPeer::mid_choice`).
    pub rx_taken: AtomicU64,
    pub binds: Mutex<Binds>,
    pub bound: OnceLock<Binds>,
    pub enabled: AtomicBool,
    /// Cross-memory attach is used by this endpoint.
    pub cma: bool,
    /// Largest message sent eagerly; larger ones go by rendezvous.
    pub eager_max: usize,
    /// A message above `eager_max` that fits one bounce buffer goes
    /// eagerly when nothing else is in flight (off when `FI_SHM_EAGER_MAX`
    /// sets the limit).
    pub lone_eager: bool,
    /// Smallest rendezvous split between receiver and sender.
    pub split_min: usize,
    /// Smallest RMA transfer copied by cross-memory attach (smaller ones
    /// are pushed through bounce buffers); the same for messages when set
    /// by `FI_SHM_CMA_MIN`.
    pub cma_min: usize,
    /// Rendezvous messages choose their copy by measurement
    /// ([`Choice`]); off when `FI_SHM_CMA_MIN` fixes a limit.
    pub adaptive: bool,
    pub mr: Arc<MrTable>,
    pub directed: bool,
    /// The peers by region name (several AV handles may name one), for
    /// `PAUSE` / `RESUME`, which name the region that sends them.
    pub by_region: Mutex<HashMap<String, Vec<Weak<TxPeer>>>>,
    /// A multi-receive buffer is released once less than this is left
    /// (`FI_OPT_MIN_MULTI_RECV`).
    pub min_multi_recv: AtomicUsize,
    /// The shared receive context (its id in the domain's engine) the
    /// endpoint receives through, once bound.
    pub srx: OnceLock<u32>,
}

impl EpShared {
    pub(crate) fn new(
        info: &Info,
        region_name: String,
        cma: bool,
        eager_max: usize,
        mr: Arc<MrTable>,
    ) -> EpShared {
        let tx = info.tx_attr.size.max(1);
        let rx = info.rx_attr.size.max(1);
        EpShared {
            info: info.clone(),
            id: NEXT_EP.fetch_add(1, Ordering::Relaxed),
            name: Address::Str(format!("{SCHEME}{region_name}")),
            region_name,
            peers: PeerTable::new(),
            posted: Handoff::new(rx),
            txq: ArrayQueue::new(tx),
            queued: AtomicUsize::new(0),
            rx_taken: AtomicU64::new(0),
            outstanding: AtomicUsize::new(0),
            binds: Mutex::new(Binds::default()),
            bound: OnceLock::new(),
            enabled: AtomicBool::new(false),
            cma,
            eager_max,
            lone_eager: crate::config::lone_eager(),
            split_min: crate::config::split_min(),
            cma_min: crate::config::cma_min().unwrap_or(crate::config::CMA_MIN),
            adaptive: crate::config::cma_min().is_none(),
            mr,
            directed: info.caps.contains(fabric_core::Caps::DIRECTED_RECV),
            by_region: Mutex::new(HashMap::new()),
            min_multi_recv: AtomicUsize::new(fabric_core::kit::rx::MIN_MULTI_RECV),
            srx: OnceLock::new(),
        }
    }

    /// The bindings, once enabled.
    #[inline]
    pub(crate) fn bound(&self) -> Result<&Binds> {
        self.bound.get().ok_or_else(|| {
            Error::new(
                ErrorKind::OpBadState,
                "shm: endpoint not enabled (call enable after binding its CQ and AV)",
            )
        })
    }

    /// The peer of `dest`, introduced and alive: from the table (the fast
    /// path: two loads, no reference count), or looked up in the AV,
    /// attached and introduced (the first operation towards it).
    #[inline]
    pub(crate) fn peer(&self, b: &Binds, dest: FiAddr) -> Result<PeerRef<'_>> {
        if let Some(p) = self.peers.get_ref(dest) {
            if p.ready() && b.av.as_ref().is_some_and(|av| p.valid_at(av.removals())) {
                return Ok(PeerRef::Ref(p));
            }
        }
        self.peer_arc(b, dest).map(PeerRef::Owned)
    }

    /// As [`peer`](Self::peer), as a shared handle (for operations the
    /// engine finishes).
    pub(crate) fn peer_arc(&self, b: &Binds, dest: FiAddr) -> Result<Arc<TxPeer>> {
        if dest == FiAddr::UNSPEC {
            // No AV entry is FI_ADDR_UNSPEC: as any handle not in the AV
            // (tcp and verbs alike).
            return Err(Error::new(
                ErrorKind::NoEnt,
                "shm: RDM operations need a destination address",
            ));
        }
        let av =
            b.av.as_ref()
                .ok_or_else(|| Error::from_kind(ErrorKind::NoAv))?;
        let removals = av.removals();
        let p = match self.peers.get(dest) {
            // A removed handle is invalid (fi_av(3)): checked again once
            // the AV removed any.
            Some(p) if p.valid_at(removals) => p,
            Some(p) => {
                av.lookup(dest)?;
                p.checked.store(removals, Ordering::Relaxed);
                p
            }
            None => {
                let addr = av.lookup(dest)?;
                let name = region_of(&addr)?;
                let region = attach(name)?;
                let local = region.same_pid_ns();
                let p = Arc::new(TxPeer {
                    sender: region.sender(),
                    pid: region.owner_pid(),
                    region,
                    hello: AtomicU8::new(HELLO_NONE),
                    // A pid of another PID namespace names some other
                    // process here: never cross-memory attach to it.
                    no_cma: AtomicBool::new(!local),
                    choice: Choice::default(),
                    rx_mark: AtomicU64::new(u64::MAX),
                    dead: AtomicBool::new(false),
                    paused: AtomicBool::new(false),
                    checked: AtomicU64::new(removals),
                });
                let p = self.peers.insert(dest, p);
                let mut map = lock(&self.by_region);
                let list = map.entry(p.region.name().to_owned()).or_default();
                list.retain(|w| w.strong_count() > 0);
                if !list
                    .iter()
                    .any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&p)))
                {
                    list.push(Arc::downgrade(&p));
                }
                drop(map);
                p
            }
        };
        if p.dead.load(Ordering::Relaxed) {
            return Err(peer_gone());
        }
        if !p.region.is_open() {
            p.dead.store(true, Ordering::Relaxed);
            return Err(peer_gone());
        }
        p.introduce(self)?;
        Ok(p)
    }
}

/// A peer borrowed from the table or held by reference count.
#[derive(Debug)]
pub(crate) enum PeerRef<'a> {
    Ref(&'a Arc<TxPeer>),
    Owned(Arc<TxPeer>),
}

impl PeerRef<'_> {
    /// A shared handle.
    pub(crate) fn arc(&self) -> Arc<TxPeer> {
        match self {
            PeerRef::Ref(p) => Arc::clone(p),
            PeerRef::Owned(p) => p.clone(),
        }
    }
}

impl std::ops::Deref for PeerRef<'_> {
    type Target = TxPeer;
    fn deref(&self) -> &TxPeer {
        match self {
            PeerRef::Ref(p) => p,
            PeerRef::Owned(p) => p,
        }
    }
}

impl EpShared {
    /// A `PAUSE` (`pause`) or `RESUME` from the owner (`pid`) of region
    /// `name`: applies to every peer of ours that is that region.
    pub(crate) fn flow(&self, name: &str, pid: u32, pause: bool) {
        let map = lock(&self.by_region);
        let Some(list) = map.get(name) else {
            return;
        };
        for p in list.iter().filter_map(Weak::upgrade) {
            if p.pid == pid {
                p.paused.store(pause, Ordering::Relaxed);
            }
        }
    }
}

impl TxPeer {
    /// Whether the peer still holds its endpoint open (system calls: for
    /// the engine's occasional liveness pass). Marks it dead otherwise.
    pub(crate) fn check_alive(&self) -> bool {
        if self.dead.load(Ordering::Relaxed) {
            return false;
        }
        if self.region.owner_status() != OwnerStatus::Alive {
            self.dead.store(true, Ordering::Relaxed);
            return false;
        }
        true
    }
}
