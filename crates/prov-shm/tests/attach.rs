//! Attaching to regions: the happy path, cleanup on drop, and every way a
//! file in /dev/shm can be wrong (each must fail with a clear error, never
//! map out of bounds or panic).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use fabric_core::error::ErrorKind;
use proptest::prelude::*;
use prov_shm::region::{
    self, NAME_PREFIX, OwnerStatus, PeerRegion, Region, RegionConfig, SHM_DIR, offsets,
};
use prov_shm::ring::Command;

fn small() -> RegionConfig {
    RegionConfig {
        ring_slots: 4,
        slot_size: 128,
        bounce_count: 2,
        bounce_size: 256,
    }
}

/// Tests that forge files whose owner looks gone and tests that reclaim
/// the files of gone owners (which would remove the forgeries midway)
/// run one at a time: they hold this lock.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn path(name: &str) -> PathBuf {
    Path::new(SHM_DIR).join(name)
}

/// A hand-made file under /dev/shm with a region-like name, removed on
/// drop.
struct Forged {
    name: String,
    file: File,
}

impl Forged {
    /// An empty file, mode 0600.
    fn empty() -> Forged {
        static N: AtomicU32 = AtomicU32::new(0);
        let uid = std::fs::metadata("/proc/self").map_or(0, |m| {
            use std::os::unix::fs::MetadataExt;
            m.uid()
        });
        let name = format!(
            "{NAME_PREFIX}{uid}-{}-9{}-{:x}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        );
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path(&name))
            .expect("create forged file");
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
        Forged { name, file }
    }

    /// A byte-for-byte copy of a live region, whose owner's lock this
    /// test holds as a live owner does (version 3).
    fn copy_of(region: &Region) -> Forged {
        let f = Forged::empty();
        let bytes = std::fs::read(region.path()).expect("read region");
        f.file.write_all_at(&bytes, 0).expect("write copy");
        // SAFETY: flock on a descriptor this test owns; no memory passed.
        let rc = unsafe {
            libc::flock(
                std::os::fd::AsRawFd::as_raw_fd(&f.file),
                libc::LOCK_EX | libc::LOCK_NB,
            )
        };
        assert_eq!(rc, 0, "lock the copy");
        f
    }

    fn put_u32(&self, off: usize, v: u32) -> &Self {
        self.file
            .write_all_at(&v.to_ne_bytes(), off as u64)
            .expect("write");
        self
    }

    fn put_u64(&self, off: usize, v: u64) -> &Self {
        self.file
            .write_all_at(&v.to_ne_bytes(), off as u64)
            .expect("write");
        self
    }

    fn attach(&self) -> fabric_core::error::Result<PeerRegion> {
        PeerRegion::attach(&self.name)
    }
}

impl Drop for Forged {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(path(&self.name));
    }
}

fn kind_of(r: fabric_core::error::Result<PeerRegion>) -> (ErrorKind, String) {
    let e = r.expect_err("attach must fail");
    (e.kind(), e.detail().to_owned())
}

#[test]
fn create_attach_send_and_cleanup() {
    let region = Region::create(&RegionConfig::default()).expect("create");
    let p = region.path().to_owned();
    let meta = std::fs::metadata(&p).expect("file exists");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len() as usize, region.layout().total_size());
    assert!(region.name().starts_with(NAME_PREFIX));
    let peer = PeerRegion::attach(region.name()).expect("attach");
    assert_eq!(peer.layout(), region.layout());
    assert_eq!(peer.owner_pid(), std::process::id());
    assert_eq!(peer.owner_status(), OwnerStatus::Alive);
    let mut rx = region.receiver().expect("receiver");
    assert_eq!(
        region.receiver().expect_err("one receiver").kind(),
        ErrorKind::Busy
    );
    peer.sender()
        .try_send(&Command::default(), b"hi")
        .expect("send");
    assert_eq!(rx.try_recv_vec().expect("recv").1, b"hi");
    drop(region);
    assert!(!p.exists(), "dropping the region removes the file");
    assert_eq!(peer.owner_status(), OwnerStatus::Closed);
    // The receiver and peers keep their mappings: no fault after unlink.
    peer.sender()
        .try_send(&Command::default(), b"late")
        .expect("send");
    assert_eq!(rx.try_recv_vec().expect("recv").1, b"late");
}

#[test]
fn a_faithful_copy_attaches() {
    // The control case for the forgeries below.
    let region = Region::create(&small()).expect("create");
    let copy = Forged::copy_of(&region);
    assert_eq!(
        copy.attach().expect("copy attaches").layout(),
        region.layout()
    );
}

#[test]
fn bad_names_and_missing_regions() {
    for name in [
        "",
        "x",
        "fabric-shm-../../etc/passwd",
        "fabric-shm-A",
        "/dev/shm/fabric-shm-1",
    ] {
        assert_eq!(
            kind_of(PeerRegion::attach(name)).0,
            ErrorKind::Inval,
            "{name:?}"
        );
    }
    let (k, msg) = kind_of(PeerRegion::attach("fabric-shm-0-1-2-nosuch"));
    assert_eq!(k, ErrorKind::NoEnt, "{msg}");
}

#[test]
fn truncated_and_empty_files() {
    let _serial = serial();
    let f = Forged::empty();
    assert_eq!(
        kind_of(f.attach()).0,
        ErrorKind::Again,
        "empty: being created"
    );
    f.file.set_len(100).expect("len");
    let (k, msg) = kind_of(f.attach());
    assert_eq!(k, ErrorKind::Inval);
    assert!(msg.contains("truncated"), "{msg}");

    // A real region cut short by a page: the header describes more than
    // the file holds.
    let region = Region::create(&small()).expect("create");
    let copy = Forged::copy_of(&region);
    copy.file
        .set_len(region.layout().total_size() as u64 - 4096)
        .expect("len");
    let (k, msg) = kind_of(copy.attach());
    assert_eq!(k, ErrorKind::Inval);
    assert!(msg.contains("file holds"), "{msg}");
    // ... or longer than it says.
    copy.file
        .set_len(region.layout().total_size() as u64 + 4096)
        .expect("len");
    assert_eq!(kind_of(copy.attach()).0, ErrorKind::Inval);
}

/// One header word to overwrite.
enum Put {
    W32(usize, u32),
    W64(usize, u64),
}

#[test]
fn forged_headers_are_refused() {
    let _serial = serial();
    use Put::*;
    let region = Region::create(&small()).expect("create");
    let end = region.layout().total_size() as u64;
    let cases = [
        (
            "magic",
            W64(offsets::MAGIC, 0x1234),
            ErrorKind::Inval,
            "magic",
        ),
        (
            "version",
            W32(offsets::VERSION, 7),
            ErrorKind::Inval,
            "version 7",
        ),
        (
            "header size",
            W32(offsets::HEADER_SIZE, 64),
            ErrorKind::Inval,
            "header size",
        ),
        (
            "slots not 2^n",
            W32(offsets::RING_SLOTS, 3),
            ErrorKind::Inval,
            "ring_slots",
        ),
        (
            "huge slots",
            W32(offsets::RING_SLOTS, 1 << 31),
            ErrorKind::Inval,
            "ring_slots",
        ),
        // 8 slots of 128 bytes still fit before the first page boundary:
        // the offsets agree, only the checksum tells.
        (
            "more slots",
            W32(offsets::RING_SLOTS, 8),
            ErrorKind::Inval,
            "checksum",
        ),
        (
            "slot size",
            W32(offsets::SLOT_SIZE, 100),
            ErrorKind::Inval,
            "slot_size",
        ),
        (
            "bigger slots",
            W32(offsets::SLOT_SIZE, 4096),
            ErrorKind::Inval,
            "do not match",
        ),
        (
            "bounce count",
            W32(offsets::BOUNCE_COUNT, u32::MAX),
            ErrorKind::Inval,
            "bounce_count",
        ),
        (
            "bounce size",
            W32(offsets::BOUNCE_SIZE, 1 << 30),
            ErrorKind::Inval,
            "bounce_size",
        ),
        (
            "ring offset",
            W64(offsets::RING_OFFSET, end - 64),
            ErrorKind::Inval,
            "do not match",
        ),
        (
            "data offset",
            W64(offsets::BOUNCE_DATA_OFFSET, u64::MAX),
            ErrorKind::Inval,
            "do not match",
        ),
        (
            "total",
            W64(offsets::TOTAL_SIZE, 1 << 40),
            ErrorKind::Inval,
            "do not match",
        ),
        (
            "check",
            W32(offsets::LAYOUT_CHECK, 0),
            ErrorKind::Inval,
            "checksum",
        ),
        (
            "not ready",
            W32(offsets::READY, 0),
            ErrorKind::Again,
            "not initialised",
        ),
        (
            "ready garbage",
            W32(offsets::READY, 7),
            ErrorKind::Inval,
            "ready",
        ),
        (
            "closed",
            W64(offsets::ALIVE, 0),
            ErrorKind::ConnRefused,
            "closed",
        ),
        (
            "other uid",
            W32(offsets::OWNER_UID, 4242),
            ErrorKind::Access,
            "uid",
        ),
        (
            "pid 0",
            W32(offsets::OWNER_PID, 0),
            ErrorKind::ConnRefused,
            "exited",
        ),
        (
            "pid -1",
            W32(offsets::OWNER_PID, u32::MAX),
            ErrorKind::ConnRefused,
            "exited",
        ),
        (
            "reused pid",
            W64(offsets::OWNER_START_TIME, 1),
            ErrorKind::ConnRefused,
            "exited",
        ),
    ];
    for (what, put, kind, says) in cases {
        let f = Forged::copy_of(&region);
        match put {
            W32(off, v) => f.put_u32(off, v),
            W64(off, v) => f.put_u64(off, v),
        };
        let (k, msg) = kind_of(f.attach());
        assert_eq!(k, kind, "{what}: {msg}");
        assert!(
            msg.contains(says),
            "{what}: {msg:?} should mention {says:?}"
        );
    }
}

#[test]
fn files_open_to_others_or_not_regular_are_refused() {
    let _serial = serial();
    let region = Region::create(&small()).expect("create");
    let f = Forged::copy_of(&region);
    f.file
        .set_permissions(std::fs::Permissions::from_mode(0o644))
        .expect("chmod");
    let (k, msg) = kind_of(f.attach());
    assert_eq!(k, ErrorKind::Access, "{msg}");

    // A symlink with a region name is not followed.
    let link = Forged::empty();
    std::fs::remove_file(path(&link.name)).expect("rm");
    std::os::unix::fs::symlink(region.path(), path(&link.name)).expect("symlink");
    assert!(link.attach().is_err());
    // A directory with a region name.
    let dir = Forged::empty();
    std::fs::remove_file(path(&dir.name)).expect("rm");
    std::fs::create_dir(path(&dir.name)).expect("mkdir");
    assert!(dir.attach().is_err());
    std::fs::remove_dir(path(&dir.name)).expect("rmdir");
}

#[test]
fn reclaim_spots_a_reused_pid() {
    let _serial = serial();
    // A region whose header names this (live) pid with another start time:
    // the pid was reused, the real owner is gone.
    let region = Region::create(&small()).expect("create");
    let f = OpenOptions::new()
        .write(true)
        .open(region.path())
        .expect("open");
    f.write_all_at(&1u64.to_ne_bytes(), offsets::OWNER_START_TIME as u64)
        .expect("write");
    let live = Region::create(&small()).expect("create");
    region::reclaim_stale().expect("reclaim");
    assert!(
        !region.path().exists(),
        "region of a reused pid left behind"
    );
    assert!(live.path().exists(), "live region reclaimed");
}

#[test]
fn reclaim_leaves_malformed_files_of_live_pids_alone() {
    let _serial = serial();
    let f = Forged::empty();
    f.file.set_len(10).expect("len");
    region::reclaim_stale().expect("reclaim");
    assert!(path(&f.name).exists());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any one header word overwritten with any value: attach fails cleanly
    /// or yields exactly the original layout.
    #[test]
    fn any_header_word_any_value(word in 0usize..64, value: u64, wide: bool) {
        let region = Region::create(&small()).expect("create");
        let f = Forged::copy_of(&region);
        if wide {
            f.put_u64(word / 2 * 8, value);
        } else {
            f.put_u32(word * 4, value as u32);
        }
        if let Ok(peer) = f.attach() {
            prop_assert_eq!(peer.layout(), region.layout());
            // Whatever the header says, an accepted layout never reaches
            // past the file.
            let len = f.file.metadata().expect("stat").len();
            prop_assert_eq!(peer.layout().total_size() as u64, len);
        }
    }

    /// Random bytes as a whole file never attach.
    #[test]
    fn random_files_never_attach(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let f = Forged::empty();
        f.file.write_all_at(&bytes, 0).expect("write");
        prop_assert!(f.attach().is_err());
    }
}
