//! Named shared-memory regions: one per endpoint, created by its owner (the
//! receiver) and attached by its peers (the senders).
//!
//! A region is a file `/dev/shm/fabric-shm-<uid>-<pid>-<counter>-<random>`
//! (or `/dev/shm/fabric-shm-<uid>-svc-<service>` for an endpoint opened
//! for a service: [`service_name`]), created with `O_CREAT | O_EXCL`, mode `0600`, reserved with
//! `posix_fallocate` (so a full `/dev/shm` is an error at creation instead
//! of a `SIGBUS` later) and mapped `MAP_SHARED`. Its header
//! ([`offsets`]; the table is in the [crate docs](crate::docs#region-layout)) is
//! published by setting `ready` with Release ordering after everything
//! else is initialised.
//!
//! - [`Region::create`] makes one; dropping the [`Region`] marks it closed
//!   (`alive = 0`) and unlinks the file.
//! - [`PeerRegion::attach`] maps another endpoint's region after checking
//!   the file (regular, ours, mode `0600`), and every header field: magic,
//!   version, sizes within limits, the offsets this library would compute
//!   for those sizes, a checksum over all of these, and a total equal to
//!   the file length. From then on the
//!   peer uses its *own* copy of the layout, so a header rewritten later
//!   cannot move any bound.
//! - [`reclaim_stale`] removes regions whose owner died without dropping
//!   them (crash, `SIGKILL`).
//!
//! # Soundness
//!
//! Any process of the same user can write any byte of a region at any time.
//! The rules that keep that from becoming undefined behaviour here:
//!
//! 1. **No references to plain shared data.** The crate never creates a
//!    `&T` or `&mut T` (nor a slice) over the mapping. Shared words are
//!    reached as `&AtomicU16/32/64` (types whose contract is mutation by
//!    others while the reference exists; aligned atomic loads and stores are
//!    single instructions that cannot tear), and payload bytes only through
//!    raw pointers inside two copy routines that write into, or read from,
//!    local memory with volatile accesses, or from 1-2 KiB on with one
//!    `rep movsb` in inline assembly, which the compiler treats as opaque
//!    just as it does a volatile access (as it does the non-temporal
//!    `vmovntdq` stores that may fill bounce buffers from 32 KiB on).
//! 2. **Read once, then validate the local copy.** Every value that comes
//!    from shared memory (a sequence number, a length, a buffer index) is
//!    loaded once into a local variable, validated there, and only the
//!    local copy is used; the compiler cannot re-fetch it, because atomic
//!    and volatile loads are never duplicated or rematerialised.
//! 3. **Bounds are local.** Offsets are computed from this process's
//!    [`Layout`] (validated at attach, never re-read) and from indices that
//!    are masked (`pos & (slots - 1)`) or checked against the layout
//!    (`bounce < count`). The single gateway, `Mapping`, also asserts each
//!    offset against the mapping length, so even a bug of ours panics
//!    instead of reading out of bounds.
//! 4. **Never wait on the peer without a bound.** Retry loops over shared
//!    words give up after a fixed number of turns, and sleeps have timeouts.
//!
//! What remains outside the guarantee: a peer of the same uid can also
//! `ftruncate` the file, after which touching the cut-off pages raises
//! `SIGBUS` (the same holds for libfabric's shm provider; the file mode
//! keeps other users out, and a same-uid process could as well `ptrace`
//! us). A peer can also feed wrong but well-formed data, or wedge the queue
//! (denial of service); those are reported as errors or `Again`, never as
//! memory unsafety.

mod proc;
pub(crate) mod shared;
pub(crate) mod stores;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use fabric_core::error::{Error, ErrorKind, Result};
use memmap2::{MmapOptions, MmapRaw};

pub use self::proc::process_gone;
use self::shared::Mapping;
use crate::ring::{self, Receiver, Sender};

/// Where regions live.
pub const SHM_DIR: &str = "/dev/shm";
/// Every region name starts with this.
pub const NAME_PREFIX: &str = "fabric-shm-";
/// The header's magic number: the bytes `fabrshm1` read as a little-endian
/// `u64`.
pub const MAGIC: u64 = u64::from_le_bytes(*b"fabrshm1");
/// The layout and protocol version this library writes and accepts: 2
/// since the split rendezvous's early `ACK` (flag `HEAD`), which a version 1
/// peer would not understand; 3 since the owner holds an exclusive
/// `flock(2)` on its region file and records its PID namespace
/// ([`offsets::OWNER_PID_NS`]), so that liveness holds across PID
/// namespaces, and since receivers pause senders that flood them with
/// unexpected messages (`PAUSE` / `RESUME`, see the
/// [crate docs](crate::docs#unexpected-messages)); 4 since big eager
/// messages are committed before their bounce buffer is full (ring flag
/// `STEPPED`, see [`crate::ring::slot::STEPPED`]),
/// which a version 3 receiver would drop as malformed.
pub const VERSION: u32 = 4;
/// Size of the header area; the bounce metadata starts right after it.
pub const HEADER_SIZE: usize = 512;
/// A cache line on the machines we target.
pub const CACHE_LINE: usize = 64;
/// The page size regions are rounded to.
pub const PAGE: usize = 4096;

/// Limits a region's sizes must respect (checked at creation and attach).
pub mod limits {
    /// Most ring slots (a power of two, at least 2).
    pub const MAX_RING_SLOTS: u32 = 1 << 16;
    /// Smallest slot: the 64-byte command header and one line of payload.
    pub const MIN_SLOT_SIZE: u32 = 128;
    /// Largest slot (a multiple of 64).
    pub const MAX_SLOT_SIZE: u32 = 64 * 1024 + 64;
    /// Most bounce buffers.
    pub const MAX_BOUNCE_COUNT: u32 = 1 << 16;
    /// Largest bounce buffer (a multiple of 64).
    pub const MAX_BOUNCE_SIZE: u32 = 16 << 20;
    /// Largest region.
    pub const MAX_REGION_SIZE: u64 = 1 << 30;
}

/// Byte offsets of the header fields (all little-endian machine words,
/// accessed atomically). The table with their meaning is in the
/// [crate docs](crate::docs#region-layout).
pub mod offsets {
    /// `u64`: [`MAGIC`](super::MAGIC).
    pub const MAGIC: usize = 0;
    /// `u32`: [`VERSION`](super::VERSION).
    pub const VERSION: usize = 8;
    /// `u32`: [`HEADER_SIZE`](super::HEADER_SIZE).
    pub const HEADER_SIZE: usize = 12;
    /// `u64`: the file length.
    pub const TOTAL_SIZE: usize = 16;
    /// `u32`: number of ring slots.
    pub const RING_SLOTS: usize = 24;
    /// `u32`: bytes per ring slot.
    pub const SLOT_SIZE: usize = 28;
    /// `u32`: number of bounce buffers.
    pub const BOUNCE_COUNT: usize = 32;
    /// `u32`: bytes per bounce buffer.
    pub const BOUNCE_SIZE: usize = 36;
    /// `u64`: offset of slot 0.
    pub const RING_OFFSET: usize = 40;
    /// `u64`: offset of the bounce metadata array.
    pub const BOUNCE_META_OFFSET: usize = 48;
    /// `u64`: offset of bounce buffer 0.
    pub const BOUNCE_DATA_OFFSET: usize = 56;
    /// `u32`: the owner's pid.
    pub const OWNER_PID: usize = 64;
    /// `u32`: the owner's uid.
    pub const OWNER_UID: usize = 68;
    /// `u64`: the owner's start time (`/proc/<pid>/stat` field 22).
    pub const OWNER_START_TIME: usize = 72;
    /// `u64`: the generation while the owner holds the region open, 0 once
    /// it closed it.
    pub const ALIVE: usize = 80;
    /// `u32`: 1 once the region is initialised (stored with Release).
    pub const READY: usize = 88;
    /// `u32`: FNV-1a hash of the words from `MAGIC` to
    /// `BOUNCE_DATA_OFFSET`, so that a size overwritten with another value
    /// that happens to give a self-consistent layout is still noticed.
    pub const LAYOUT_CHECK: usize = 92;
    /// `u32`: the wake word. Its value means nothing: senders `pwrite(2)`
    /// it to wake a receiver that blocks in `poll` on an inotify watch of
    /// the file (`IN_MODIFY`), see [`crate::ring::Receiver::announce_poll_sleep`].
    pub const WAKE_WORD: usize = 96;
    /// `u64`: the inode of the owner's PID namespace (`/proc/self/ns/pid`),
    /// 0 if unknown: an owner of another namespace is never judged by its
    /// pid (version 3).
    pub const OWNER_PID_NS: usize = 104;
    /// `u64`: the ring's tail, the next position producers claim (own line).
    pub const RING_TAIL: usize = 128;
    /// `u32`: the futex word senders bump to wake the receiver.
    pub const WAIT_FUTEX: usize = 192;
    /// `u32`: how the receiver is (about to be) asleep: bit 0 on the
    /// futex ([`crate::ring::Receiver::wait`]), bit 1 in `poll` on an
    /// inotify watch of the file (the provider's blocking reads).
    pub const WAIT_SLEEPING: usize = 196;
    /// `u64`: head of the bounce free list, `tag << 32 | index` (own line).
    pub const BOUNCE_FREE: usize = 256;
}

/// The sizes of a region's parts, chosen by its creator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionConfig {
    /// Ring depth: how many commands can wait for the receiver. A power of
    /// two.
    pub ring_slots: u32,
    /// Bytes per slot, a multiple of 64: a 64-byte command header, then
    /// `slot_size - 64` bytes of inline payload.
    pub slot_size: u32,
    /// Number of bounce buffers (0: no pool, inline messages only).
    pub bounce_count: u32,
    /// Bytes per bounce buffer, a multiple of 64.
    pub bounce_size: u32,
}

impl Default for RegionConfig {
    /// 256 slots of 4160 bytes (4 KiB inline), 64 bounce buffers of 128 KiB:
    /// about 9.0 MiB. The [crate docs](crate::docs#slot-size) justify the sizes.
    fn default() -> Self {
        RegionConfig {
            ring_slots: 256,
            slot_size: 4160,
            bounce_count: 64,
            bounce_size: 128 * 1024,
        }
    }
}

/// Where each part of a region lies: computed from a [`RegionConfig`] with
/// checked arithmetic, the same way by the creator and by every peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    ring_slots: u32,
    slot_size: u32,
    bounce_count: u32,
    bounce_size: u32,
    ring_offset: usize,
    bounce_meta_offset: usize,
    bounce_data_offset: usize,
    total_size: usize,
}

fn align_up(x: u64, a: u64) -> Option<u64> {
    debug_assert!(a.is_power_of_two());
    Some(x.checked_add(a - 1)? & !(a - 1))
}

impl Layout {
    /// Validates `cfg` against [`limits`] and lays the region out: header,
    /// bounce metadata (8 bytes per buffer), ring slots (cache-line
    /// aligned), bounce buffers (page aligned), total rounded to a page.
    pub fn new(cfg: &RegionConfig) -> Result<Layout> {
        use limits::*;
        let bad = |what: String| Err(Error::inval(what));
        if !cfg.ring_slots.is_power_of_two() || !(2..=MAX_RING_SLOTS).contains(&cfg.ring_slots) {
            return bad(format!(
                "ring_slots {} must be a power of two from 2 to {MAX_RING_SLOTS}",
                cfg.ring_slots
            ));
        }
        if cfg.slot_size % CACHE_LINE as u32 != 0
            || !(MIN_SLOT_SIZE..=MAX_SLOT_SIZE).contains(&cfg.slot_size)
        {
            return bad(format!(
                "slot_size {} must be a multiple of 64 from {MIN_SLOT_SIZE} to {MAX_SLOT_SIZE}",
                cfg.slot_size
            ));
        }
        if cfg.bounce_count > MAX_BOUNCE_COUNT {
            return bad(format!(
                "bounce_count {} exceeds {MAX_BOUNCE_COUNT}",
                cfg.bounce_count
            ));
        }
        let bounce_size = if cfg.bounce_count == 0 {
            0
        } else {
            if cfg.bounce_size % CACHE_LINE as u32 != 0
                || !(CACHE_LINE as u32..=MAX_BOUNCE_SIZE).contains(&cfg.bounce_size)
            {
                return bad(format!(
                    "bounce_size {} must be a multiple of 64 from 64 to {MAX_BOUNCE_SIZE}",
                    cfg.bounce_size
                ));
            }
            cfg.bounce_size
        };
        let too_big = || {
            Error::inval(format!(
                "a region with {cfg:?} would exceed {MAX_REGION_SIZE} bytes"
            ))
        };
        let meta = HEADER_SIZE as u64;
        let meta_len =
            align_up(u64::from(cfg.bounce_count) * 8, CACHE_LINE as u64).ok_or_else(too_big)?;
        let ring = meta + meta_len;
        let ring_len = u64::from(cfg.ring_slots) * u64::from(cfg.slot_size);
        let data = align_up(ring + ring_len, PAGE as u64).ok_or_else(too_big)?;
        let data_len = u64::from(cfg.bounce_count) * u64::from(bounce_size);
        let total = align_up(data + data_len, PAGE as u64).ok_or_else(too_big)?;
        if total > MAX_REGION_SIZE {
            return Err(too_big());
        }
        // All values fit in usize: total <= 1 GiB.
        Ok(Layout {
            ring_slots: cfg.ring_slots,
            slot_size: cfg.slot_size,
            bounce_count: cfg.bounce_count,
            bounce_size,
            ring_offset: ring as usize,
            bounce_meta_offset: meta as usize,
            bounce_data_offset: data as usize,
            total_size: total as usize,
        })
    }

    /// A layout covering only the header, used while a file is checked.
    fn header_only() -> Layout {
        Layout {
            ring_slots: 0,
            slot_size: 0,
            bounce_count: 0,
            bounce_size: 0,
            ring_offset: HEADER_SIZE,
            bounce_meta_offset: HEADER_SIZE,
            bounce_data_offset: HEADER_SIZE,
            total_size: HEADER_SIZE,
        }
    }

    /// The configuration this layout was made from (with `bounce_size` 0
    /// when there is no pool).
    pub fn config(&self) -> RegionConfig {
        RegionConfig {
            ring_slots: self.ring_slots,
            slot_size: self.slot_size,
            bounce_count: self.bounce_count,
            bounce_size: self.bounce_size,
        }
    }
    /// Number of ring slots.
    pub fn ring_slots(&self) -> u32 {
        self.ring_slots
    }
    /// Bytes per slot.
    pub fn slot_size(&self) -> usize {
        self.slot_size as usize
    }
    /// Inline payload capacity of a slot.
    pub fn inline_capacity(&self) -> usize {
        self.slot_size as usize - ring::SLOT_HEADER
    }
    /// Number of bounce buffers.
    pub fn bounce_count(&self) -> u32 {
        self.bounce_count
    }
    /// Bytes per bounce buffer (0 without a pool).
    pub fn bounce_size(&self) -> usize {
        self.bounce_size as usize
    }
    /// Offset of slot 0.
    pub fn ring_offset(&self) -> usize {
        self.ring_offset
    }
    /// Offset of the bounce metadata (`next: u32, holder: u32` per buffer).
    pub fn bounce_meta_offset(&self) -> usize {
        self.bounce_meta_offset
    }
    /// Offset of bounce buffer 0.
    pub fn bounce_data_offset(&self) -> usize {
        self.bounce_data_offset
    }
    /// File length.
    pub fn total_size(&self) -> usize {
        self.total_size
    }
    /// Offset of the slot for ring position `pos` (masked, so always in
    /// bounds).
    #[inline(always)]
    pub(crate) fn slot(&self, pos: u64) -> usize {
        let idx = (pos & u64::from(self.ring_slots - 1)) as usize;
        self.ring_offset + idx * self.slot_size as usize
    }
    /// Offset of bounce buffer `idx`'s metadata; `idx < bounce_count`.
    #[inline(always)]
    pub(crate) fn bounce_meta(&self, idx: u32) -> usize {
        debug_assert!(idx < self.bounce_count);
        self.bounce_meta_offset + idx as usize * 8
    }
    /// Offset of bounce buffer `idx`; `idx < bounce_count`.
    #[inline(always)]
    pub(crate) fn bounce_data(&self, idx: u32) -> usize {
        debug_assert!(idx < self.bounce_count);
        self.bounce_data_offset + idx as usize * self.bounce_size as usize
    }
}

/// The second field of a service region's name:
/// `fabric-shm-<uid>-svc-<service>`.
const SERVICE_TAG: &str = "svc";

/// Opens `path` as a new file (`O_EXCL`, mode 0600, no symlinks).
fn open_new(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// The error of a failed region creation at `path`.
fn create_error(path: &Path, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        return Error::new(ErrorKind::NoDev, format!("{SHM_DIR} is not available: {e}"));
    }
    let err = Error::from(e);
    Error::new(
        err.kind(),
        format!("cannot create {}: {err}", path.display()),
    )
}

/// A region name for this process no region has had:
/// `fabric-shm-<uid>-<pid>-<counter>-<random>`.
pub fn fresh_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{NAME_PREFIX}{}-{}-{n}-{:016x}",
        proc::my_uid(),
        proc::my_pid(),
        proc::random_u64()
    )
}

/// The region name of `service` for this user,
/// `fabric-shm-<uid>-svc-<service>`: the well-known address of an endpoint
/// opened for that service (getinfo with FI_SOURCE and a service), which
/// its peers compute from the service alone. A service is 1 to 64 digits,
/// lowercase letters and dashes (`Inval` otherwise).
pub fn service_name(service: &str) -> Result<String> {
    let ok = (1..=64).contains(&service.len())
        && service
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-');
    if !ok {
        return Err(Error::inval(format!(
            "shm service {service:?}: 1 to 64 digits, lowercase letters and dashes"
        )));
    }
    Ok(format!(
        "{NAME_PREFIX}{}-{SERVICE_TAG}-{service}",
        proc::my_uid()
    ))
}

/// Whether `name` is a [`service_name`] (of any user).
pub fn is_service(name: &str) -> bool {
    name.strip_prefix(NAME_PREFIX)
        .and_then(|r| r.split('-').nth(1))
        .is_some_and(|tag| tag == SERVICE_TAG)
}

/// Whether `name` has the form of a region name this library creates:
/// [`NAME_PREFIX`] then lowercase letters, digits and dashes, at most 128
/// bytes. Anything else (a `/`, `..`, NUL) is refused before touching the
/// file system.
pub(crate) fn check_name(name: &str) -> Result<()> {
    let rest = name.strip_prefix(NAME_PREFIX);
    let ok = name.len() <= 128
        && rest.is_some_and(|r| {
            !r.is_empty()
                && r.bytes()
                    .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(Error::inval(format!(
            "{name:?} is not a shm region name (expected {NAME_PREFIX}<uid>-<pid>-<n>-<hex> or {NAME_PREFIX}<uid>-svc-<service>)"
        )))
    }
}

fn path_of(name: &str) -> PathBuf {
    Path::new(SHM_DIR).join(name)
}

fn map_file(file: &File, len: usize) -> Result<MmapRaw> {
    MmapOptions::new()
        .len(len)
        .populate()
        .map_raw(file)
        .map_err(|e| Error::new(ErrorKind::NoMem, format!("mmap of {len} bytes failed: {e}")))
}

/// An endpoint's own region: it receives through it, and removes it when
/// dropped.
#[derive(Debug)]
pub struct Region {
    map: Arc<Mapping>,
    name: String,
    path: PathBuf,
    dev_ino: (u64, u64),
    generation: u64,
    receiver_taken: AtomicBool,
}

impl Region {
    /// Creates, initialises and publishes a new region under [`SHM_DIR`].
    ///
    /// Errors: `Inval` for a configuration outside [`limits`], `NoSpc` when
    /// `/dev/shm` cannot hold it, `NoDev` when `/dev/shm` is missing, other
    /// I/O errors with their errno kind.
    pub fn create(config: &RegionConfig) -> Result<Region> {
        let layout = Layout::new(config)?;
        let mut attempt = 0;
        let (name, path, file) = loop {
            let name = fresh_name();
            let path = path_of(&name);
            match open_new(&path) {
                Ok(f) => break (name, path, f),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 8 => {
                    attempt += 1;
                }
                Err(e) => return Err(create_error(&path, e)),
            }
        };
        Region::init(layout, name, path, file)
    }

    /// Creates a region under a name chosen beforehand: one of
    /// [`fresh_name`] (this process's), or a [`service_name`] of this
    /// user. A service region left by an owner that has died is replaced.
    ///
    /// Errors: as [`Region::create`]; `Inval` for a name this process may
    /// not create (another user's, another process's); `AddrInUse` when a
    /// live region has the name.
    pub fn create_named(config: &RegionConfig, name: &str) -> Result<Region> {
        check_name(name)?;
        let rest = name.strip_prefix(NAME_PREFIX).unwrap_or_default();
        let mut fields = rest.split('-');
        let uid = fields.next().and_then(|u| u.parse::<u32>().ok());
        let second = fields.next().unwrap_or_default();
        let ours = uid == Some(proc::my_uid())
            && (second == SERVICE_TAG || second.parse::<u32>().ok() == Some(proc::my_pid()));
        if !ours {
            return Err(Error::inval(format!(
                "{name:?} names a region of another process or user: it cannot be created here"
            )));
        }
        let layout = Layout::new(config)?;
        let path = path_of(name);
        let file = match open_new(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let owner = read_owner(&path);
                if owner.as_ref().is_some_and(Owner::gone) {
                    // Left by an owner that died: take the name over once.
                    let _ = std::fs::remove_file(&path);
                    open_new(&path).map_err(|e| create_error(&path, e))?
                } else {
                    let by = owner
                        .filter(|o| o.ready)
                        .map_or_else(String::new, |o| format!(" by pid {}", o.pid));
                    return Err(Error::new(
                        ErrorKind::AddrInUse,
                        format!("shm address fi_shm://{name} is in use{by}"),
                    ));
                }
            }
            Err(e) => return Err(create_error(&path, e)),
        };
        Region::init(layout, name.to_owned(), path, file)
    }

    /// Sizes, maps, initialises and publishes a region file just created.
    fn init(layout: Layout, name: String, path: PathBuf, file: File) -> Result<Region> {
        // From here on, a failure must remove the file again.
        let cleanup = |e: Error| {
            let _ = std::fs::remove_file(&path);
            e
        };
        // The owner's lock, before anything else: while it is held, no
        // process (of any PID namespace) takes the region for stale.
        proc::lock_owner(&file).map_err(|e| {
            cleanup(Error::new(
                ErrorKind::Busy,
                format!("cannot lock {}: {e}", path.display()),
            ))
        })?;
        // The umask can only clear bits; make the mode exactly 0600.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| cleanup(e.into()))?;
        let total = layout.total_size();
        // SAFETY: plain system call on a file descriptor we own; no memory
        // is passed.
        let rc = unsafe {
            libc::posix_fallocate(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
                total as libc::off_t,
            )
        };
        if rc != 0 {
            let kind = if rc == libc::ENOSPC {
                ErrorKind::NoSpc
            } else {
                ErrorKind::from_errno(rc).unwrap_or(ErrorKind::Other)
            };
            return Err(cleanup(Error::new(
                kind,
                format!(
                    "cannot reserve {total} bytes in {SHM_DIR} for {name}: {}",
                    std::io::Error::from_raw_os_error(rc)
                ),
            )));
        }
        let meta = file.metadata().map_err(|e| cleanup(e.into()))?;
        let raw = map_file(&file, total).map_err(cleanup)?;
        let map = Mapping::new(raw, layout).with_file(file);
        let generation = proc::random_u64() | 1;
        init_region(&map, generation);
        Ok(Region {
            map: Arc::new(map),
            name,
            path,
            dev_ino: (meta.dev(), meta.ino()),
            generation,
            receiver_taken: AtomicBool::new(false),
        })
    }

    /// The region's name (what peers pass to [`PeerRegion::attach`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        *self.map.layout()
    }

    /// The random non-zero generation stored in `alive` while this region
    /// is open.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The region's one receiver (the consumer side of its ring). A second
    /// call fails with `Busy`: the ring has a single consumer.
    pub fn receiver(&self) -> Result<Receiver> {
        if self.receiver_taken.swap(true, Ordering::AcqRel) {
            return Err(Error::new(
                ErrorKind::Busy,
                format!("the receiver of region {} was already taken", self.name),
            ));
        }
        Ok(Receiver::new(self.map.clone()))
    }

    /// A sender into this region from this process (loopback).
    pub fn sender(&self) -> Sender {
        Sender::new(self.map.clone())
    }
}

/// FNV-1a over the layout-defining header words (see
/// [`offsets::LAYOUT_CHECK`]).
fn layout_check(words: [u64; 11]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in words.iter().flat_map(|w| w.to_le_bytes()) {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h
}

/// Writes a fresh region's contents, then publishes it with `ready`.
fn init_region(map: &Mapping, generation: u64) {
    let l = *map.layout();
    let r = Ordering::Relaxed;
    map.u64(offsets::MAGIC).store(MAGIC, r);
    map.u32(offsets::VERSION).store(VERSION, r);
    map.u32(offsets::HEADER_SIZE).store(HEADER_SIZE as u32, r);
    map.u64(offsets::TOTAL_SIZE).store(l.total_size as u64, r);
    map.u32(offsets::RING_SLOTS).store(l.ring_slots, r);
    map.u32(offsets::SLOT_SIZE).store(l.slot_size, r);
    map.u32(offsets::BOUNCE_COUNT).store(l.bounce_count, r);
    map.u32(offsets::BOUNCE_SIZE).store(l.bounce_size, r);
    map.u64(offsets::RING_OFFSET).store(l.ring_offset as u64, r);
    map.u64(offsets::BOUNCE_META_OFFSET)
        .store(l.bounce_meta_offset as u64, r);
    map.u64(offsets::BOUNCE_DATA_OFFSET)
        .store(l.bounce_data_offset as u64, r);
    map.u32(offsets::OWNER_PID).store(proc::my_pid(), r);
    map.u32(offsets::OWNER_UID).store(proc::my_uid(), r);
    map.u64(offsets::OWNER_START_TIME)
        .store(proc::my_start_time(), r);
    map.u64(offsets::OWNER_PID_NS).store(proc::my_pid_ns(), r);
    map.u64(offsets::ALIVE).store(generation, r);
    let check = layout_check([
        MAGIC,
        u64::from(VERSION),
        HEADER_SIZE as u64,
        l.total_size as u64,
        u64::from(l.ring_slots),
        u64::from(l.slot_size),
        u64::from(l.bounce_count),
        u64::from(l.bounce_size),
        l.ring_offset as u64,
        l.bounce_meta_offset as u64,
        l.bounce_data_offset as u64,
    ]);
    map.u32(offsets::LAYOUT_CHECK).store(check, r);
    ring::init(map);
    map.u32(offsets::READY).store(1, Ordering::Release);
}

impl Drop for Region {
    fn drop(&mut self) {
        self.map.u64(offsets::ALIVE).store(0, Ordering::Release);
        // Unlink only the file we created: if the name now points to
        // another file, it is not ours to remove.
        if let Ok(meta) = std::fs::symlink_metadata(&self.path) {
            if (meta.dev(), meta.ino()) == self.dev_ino {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// What a peer knows about a region's owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerStatus {
    /// The owner holds the region open.
    Alive,
    /// The owner closed the region (dropped its [`Region`]).
    Closed,
    /// The owner process exited without closing it.
    Gone,
}

/// Another endpoint's region, mapped to send into it.
#[derive(Debug)]
pub struct PeerRegion {
    map: Arc<Mapping>,
    name: String,
    owner_pid: u32,
    owner_start_time: u64,
    owner_ns: u64,
    generation: u64,
}

/// The header fields as read once from a mapping.
#[derive(Debug)]
struct Snapshot {
    ready: u32,
    magic: u64,
    version: u32,
    header_size: u32,
    total_size: u64,
    config: RegionConfig,
    ring_offset: u64,
    bounce_meta_offset: u64,
    bounce_data_offset: u64,
    owner_pid: u32,
    owner_uid: u32,
    owner_start_time: u64,
    owner_ns: u64,
    alive: u64,
    layout_check: u32,
}

impl Snapshot {
    fn read(map: &Mapping) -> Snapshot {
        let r = Ordering::Relaxed;
        // `ready` first, with Acquire: the other fields read after it are at
        // least as new as the creator's initialisation.
        let ready = map.u32(offsets::READY).load(Ordering::Acquire);
        Snapshot {
            ready,
            magic: map.u64(offsets::MAGIC).load(r),
            version: map.u32(offsets::VERSION).load(r),
            header_size: map.u32(offsets::HEADER_SIZE).load(r),
            total_size: map.u64(offsets::TOTAL_SIZE).load(r),
            config: RegionConfig {
                ring_slots: map.u32(offsets::RING_SLOTS).load(r),
                slot_size: map.u32(offsets::SLOT_SIZE).load(r),
                bounce_count: map.u32(offsets::BOUNCE_COUNT).load(r),
                bounce_size: map.u32(offsets::BOUNCE_SIZE).load(r),
            },
            ring_offset: map.u64(offsets::RING_OFFSET).load(r),
            bounce_meta_offset: map.u64(offsets::BOUNCE_META_OFFSET).load(r),
            bounce_data_offset: map.u64(offsets::BOUNCE_DATA_OFFSET).load(r),
            owner_pid: map.u32(offsets::OWNER_PID).load(r),
            owner_uid: map.u32(offsets::OWNER_UID).load(r),
            owner_start_time: map.u64(offsets::OWNER_START_TIME).load(r),
            owner_ns: map.u64(offsets::OWNER_PID_NS).load(r),
            alive: map.u64(offsets::ALIVE).load(r),
            layout_check: map.u32(offsets::LAYOUT_CHECK).load(r),
        }
    }

    /// Checks everything; the layout returned is recomputed locally and
    /// matches the file length.
    fn validate(&self, name: &str, file: &File, file_len: u64) -> Result<Layout> {
        let bad = |why: String| Err(Error::inval(format!("region {name} is malformed: {why}")));
        if self.magic != MAGIC {
            return bad(format!("bad magic {:#018x}", self.magic));
        }
        match self.ready {
            1 => {}
            0 => {
                return Err(Error::new(
                    ErrorKind::Again,
                    format!("region {name} is not initialised yet"),
                ));
            }
            v => return bad(format!("ready flag holds {v}")),
        }
        if self.version != VERSION {
            return bad(format!(
                "layout version {} (this library speaks version {VERSION})",
                self.version
            ));
        }
        if self.header_size as usize != HEADER_SIZE {
            return bad(format!(
                "header size {} (expected {HEADER_SIZE})",
                self.header_size
            ));
        }
        let layout = Layout::new(&self.config)
            .or_else(|e| bad(format!("sizes out of range: {}", e.detail())))?;
        let stored = (
            self.ring_offset,
            self.bounce_meta_offset,
            self.bounce_data_offset,
            self.total_size,
            self.config.bounce_size,
        );
        let expected = (
            layout.ring_offset as u64,
            layout.bounce_meta_offset as u64,
            layout.bounce_data_offset as u64,
            layout.total_size as u64,
            layout.bounce_size,
        );
        if stored != expected {
            return bad(format!(
                "offsets (ring, meta, data, total, bounce size) {stored:?} do not match \
                 the sizes, which give {expected:?}"
            ));
        }
        let check = layout_check([
            self.magic,
            u64::from(self.version),
            u64::from(self.header_size),
            self.total_size,
            u64::from(self.config.ring_slots),
            u64::from(self.config.slot_size),
            u64::from(self.config.bounce_count),
            u64::from(self.config.bounce_size),
            self.ring_offset,
            self.bounce_meta_offset,
            self.bounce_data_offset,
        ]);
        if check != self.layout_check {
            return bad(format!(
                "layout checksum {:#010x} does not match the header's sizes and offsets ({check:#010x})",
                self.layout_check
            ));
        }
        if file_len != layout.total_size as u64 {
            return bad(format!(
                "the file holds {file_len} bytes but the header describes {}",
                layout.total_size
            ));
        }
        if self.owner_uid != proc::my_uid() {
            return Err(Error::new(
                ErrorKind::Access,
                format!("region {name} names owner uid {}, not ours", self.owner_uid),
            ));
        }
        if self.alive == 0 {
            return Err(Error::new(
                ErrorKind::ConnRefused,
                format!("region {name} was closed by its owner"),
            ));
        }
        if proc::owner_gone(file, self.owner_pid, self.owner_start_time, self.owner_ns) {
            return Err(Error::new(
                ErrorKind::ConnRefused,
                format!(
                    "the owner of region {name} (pid {}) has exited",
                    self.owner_pid
                ),
            ));
        }
        Ok(layout)
    }
}

impl PeerRegion {
    /// Maps the region `name` (as given by [`Region::name`]) after checking
    /// the file and its whole header.
    ///
    /// Errors: `Inval` for a bad name or a malformed region (each check says
    /// what it found), `NoEnt` when there is no such region, `Access` when
    /// the file is not ours or is open to group or others, `Again` when the
    /// region is still being initialised, `ConnRefused` when its owner
    /// closed it or died.
    pub fn attach(name: &str) -> Result<PeerRegion> {
        check_name(name)?;
        let path = path_of(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| {
                let err = Error::from(e);
                Error::new(err.kind(), format!("cannot open region {name}: {err}"))
            })?;
        let meta = file.metadata()?;
        if !meta.file_type().is_file() {
            return Err(Error::inval(format!("region {name} is not a regular file")));
        }
        if meta.uid() != proc::my_uid() || meta.mode() & 0o077 != 0 {
            return Err(Error::new(
                ErrorKind::Access,
                format!(
                    "region {name} is owned by uid {} with mode {:o}; only our own 0600 regions are used",
                    meta.uid(),
                    meta.mode() & 0o7777
                ),
            ));
        }
        let len = meta.len();
        if len == 0 {
            return Err(Error::new(
                ErrorKind::Again,
                format!("region {name} is empty (being created?)"),
            ));
        }
        if len < HEADER_SIZE as u64 {
            return Err(Error::inval(format!(
                "region {name} is malformed: truncated to {len} bytes, the header alone needs {HEADER_SIZE}"
            )));
        }
        if len > limits::MAX_REGION_SIZE {
            return Err(Error::inval(format!(
                "region {name} is malformed: {len} bytes exceeds the {} limit",
                limits::MAX_REGION_SIZE
            )));
        }
        let raw = map_file(&file, len as usize)?;
        let probe = Mapping::new(raw, Layout::header_only());
        let snap = Snapshot::read(&probe);
        let layout = snap.validate(name, &file, len)?;
        let raw = probe.into_raw();
        Ok(PeerRegion {
            map: Arc::new(Mapping::new(raw, layout).with_file(file)),
            name: name.to_owned(),
            owner_pid: snap.owner_pid,
            owner_start_time: snap.owner_start_time,
            owner_ns: snap.owner_ns,
            generation: snap.alive,
        })
    }

    /// The region's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The layout validated at attach (this process's copy).
    pub fn layout(&self) -> Layout {
        *self.map.layout()
    }

    /// The owner's pid, as its header said at attach.
    pub fn owner_pid(&self) -> u32 {
        self.owner_pid
    }

    /// Whether the owner is of this process's PID namespace (as its header
    /// recorded): only then does its pid name it here, for cross-memory
    /// attach (a pid of another namespace names some other process here,
    /// or none).
    pub fn same_pid_ns(&self) -> bool {
        proc::same_pid_ns(self.owner_ns)
    }

    /// A sender into this region. Senders are cheap to clone and can be
    /// used from many threads at once.
    pub fn sender(&self) -> Sender {
        Sender::new(self.map.clone())
    }

    /// Whether the owner still holds the region open, from the region's
    /// `alive` word alone (one atomic load, no system call): `false` once
    /// the owner closed it. An owner killed without closing still reads as
    /// open; [`owner_status`](Self::owner_status) notices that.
    pub fn is_open(&self) -> bool {
        self.map.u64(offsets::ALIVE).load(Ordering::Acquire) == self.generation
    }

    /// Whether the owner still has the region open: `Closed` once it
    /// dropped it (or the generation changed), `Gone` when its process no
    /// longer holds the region's lock, or (an owner of our PID namespace)
    /// its pid and start time recorded at attach no longer name a process.
    pub fn owner_status(&self) -> OwnerStatus {
        let gone = match self.map.file() {
            Some(f) => proc::owner_gone(f, self.owner_pid, self.owner_start_time, self.owner_ns),
            None => proc::gone(self.owner_pid, Some(self.owner_start_time), true),
        };
        if gone {
            OwnerStatus::Gone
        } else if self.map.u64(offsets::ALIVE).load(Ordering::Acquire) != self.generation {
            OwnerStatus::Closed
        } else {
            OwnerStatus::Alive
        }
    }
}

/// Removes the regions of this user whose owner is gone, and returns
/// their names.
///
/// A file qualifies when its name is `fabric-shm-<our uid>-...` and it is
/// a regular file owned by us, and:
///
/// - an initialised region of version 3 or later: nobody holds the
///   owner's lock on it, or (an owner of our PID namespace, recorded in the
///   header) its owner pid no longer exists, is a zombie, or now belongs to
///   a process with another start time (the pid was reused). Owners in
///   other PID namespaces (containers sharing `/dev/shm`) are judged by the
///   lock alone, so their live regions stay.
/// - an initialised region of an older version (no lock): the pid in its
///   name or its header's owner is gone, as above.
/// - a file whose header is not initialised (being created, or left by a
///   creator that died early): nobody holds a lock on it, the pid in its
///   name is gone here, and it was last changed at least
///   [`UNREADY_GRACE`] ago (a creator of another PID namespace takes its
///   lock an instant after creating the file).
///
/// Regions of live processes, this one included, are left alone.
pub fn reclaim_stale() -> Result<Vec<String>> {
    let uid = proc::my_uid();
    let prefix = format!("{NAME_PREFIX}{uid}-");
    let dir = std::fs::read_dir(SHM_DIR)
        .map_err(|e| Error::new(ErrorKind::NoDev, format!("cannot list {SHM_DIR}: {e}")))?;
    let mut removed = Vec::new();
    for entry in dir.flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        if check_name(&name).is_err() {
            continue;
        }
        // Service regions name no pid: their header's owner decides.
        let name_pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.file_type().is_file() || meta.uid() != uid {
            continue;
        }
        let Some(owner) = read_owner(&path) else {
            continue;
        };
        let stale = if owner.ready && owner.version >= 3 {
            owner.gone()
        } else if owner.ready {
            name_pid.is_some_and(|p| proc::gone(p, None, true)) || owner.gone()
        } else {
            let old = meta
                .modified()
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= UNREADY_GRACE);
            old && name_pid.is_some_and(|p| proc::gone(p, None, true)) && owner.gone()
        };
        if stale && std::fs::remove_file(&path).is_ok() {
            removed.push(name);
        }
    }
    Ok(removed)
}

/// How long [`reclaim_stale`] leaves a region file with an uninitialised
/// header alone.
pub const UNREADY_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// What a region file says about its owner, read with `pread` (no
/// mapping, so a file truncated meanwhile cannot fault), with the file
/// open to probe the owner's lock.
#[derive(Debug)]
struct Owner {
    file: File,
    /// The header is initialised (magic and `ready`); the fields below
    /// mean something only then.
    ready: bool,
    version: u32,
    pid: u32,
    start_time: u64,
    ns: u64,
}

impl Owner {
    /// Whether the owner is gone: by its lock (version 3 on, and any file
    /// that is not initialised) and, for an owner of our PID namespace or
    /// an older version, by its pid.
    fn gone(&self) -> bool {
        if !self.ready {
            return proc::lock_free(&self.file);
        }
        if self.version >= 3 {
            proc::owner_gone(&self.file, self.pid, self.start_time, self.ns)
        } else {
            proc::gone(self.pid, Some(self.start_time), true)
        }
    }
}

fn read_owner(path: &Path) -> Option<Owner> {
    use std::os::unix::fs::FileExt;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let mut h = [0u8; 128];
    let ok = file.read_exact_at(&mut h, 0).is_ok();
    let u32_at = |o: usize| u32::from_ne_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
    let u64_at = |o: usize| u64::from(u32_at(o)) | u64::from(u32_at(o + 4)) << 32;
    let ready = ok && u64_at(offsets::MAGIC) == MAGIC && u32_at(offsets::READY) == 1;
    let version = u32_at(offsets::VERSION);
    Some(Owner {
        ready,
        version,
        pid: u32_at(offsets::OWNER_PID),
        start_time: u64_at(offsets::OWNER_START_TIME),
        ns: if version >= 3 {
            u64_at(offsets::OWNER_PID_NS)
        } else {
            0
        },
        file,
    })
}

#[cfg(test)]
mod tests;
