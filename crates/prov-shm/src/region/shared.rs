//! The one gateway to shared bytes: a mapping plus the local copy of its
//! layout, handing out atomics at checked offsets and copying payloads in
//! and out with volatile accesses.
//!
//! Everything else in the crate reaches the region through [`Mapping`], so
//! the rules of the module docs of [`crate::region`] ("Soundness") are
//! enforced here: no `&T` / `&mut T` to plain shared data exists anywhere,
//! only `&Atomic*` (whose contract is concurrent mutation) and raw pointers
//! that live inside one copy routine.

use std::fs::File;
use std::marker::PhantomData;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64};

use memmap2::MmapRaw;

use super::Layout;

/// A mapped region and the layout this process validated (or chose) for it.
///
/// The layout is local memory: a peer rewriting the header after we mapped
/// the region cannot change the bounds we use.
#[derive(Debug)]
pub(crate) struct Mapping {
    raw: MmapRaw,
    layout: Layout,
    /// The region's file, kept open to raise `IN_MODIFY` for receivers
    /// that block in `poll` on an inotify fd (see [`Mapping::poke`]).
    file: Option<File>,
}

impl Mapping {
    /// Wraps `raw`, which must be at least `layout.total_size()` bytes.
    pub(crate) fn new(raw: MmapRaw, layout: Layout) -> Mapping {
        assert!(
            raw.len() >= layout.total_size(),
            "mapping shorter than its layout"
        );
        Mapping {
            raw,
            layout,
            file: None,
        }
    }

    /// Keeps the region's file open for [`poke`](Mapping::poke).
    pub(crate) fn with_file(mut self, file: File) -> Mapping {
        self.file = Some(file);
        self
    }

    /// Writes the 4-byte wake word at `off` with `pwrite(2)` (not through
    /// the mapping): a write system call on the file is what makes inotify
    /// report `IN_MODIFY` to a receiver watching it. The value is not
    /// used by anyone. Errors are ignored: a lost poke delays a sleeping
    /// receiver until its next timed look, it loses nothing.
    pub(crate) fn poke(&self, off: usize) {
        if let Some(f) = &self.file {
            let _ = f.write_at(&[0u8; 4], off as u64);
        }
    }

    /// The region's file, when kept open.
    pub(crate) fn file(&self) -> Option<&File> {
        self.file.as_ref()
    }

    /// Gives the mapping back (to wrap it again with a validated layout).
    pub(crate) fn into_raw(self) -> MmapRaw {
        self.raw
    }

    /// The layout this process uses for the region.
    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Panics unless `[off, off + len)` lies in the mapping and `off` is a
    /// multiple of `align`. Offsets come from the local layout and masked or
    /// validated indices, so a failure here is a bug of this crate, never
    /// the effect of bytes a peer wrote.
    #[inline(always)]
    fn check(&self, off: usize, len: usize, align: usize) -> *mut u8 {
        assert!(
            off % align == 0
                && off
                    .checked_add(len)
                    .is_some_and(|end| end <= self.raw.len()),
            "shared offset {off}+{len} outside the {}-byte region",
            self.raw.len()
        );
        // SAFETY: `off + len <= raw.len()` was checked just above, so the
        // result stays inside (or one past the end of) the mapping.
        unsafe { self.raw.as_mut_ptr().add(off) }
    }

    /// The 64-bit atomic word at `off`.
    #[inline(always)]
    pub(crate) fn u64(&self, off: usize) -> &AtomicU64 {
        let p = self.check(off, 8, 8);
        // SAFETY: `p` is in bounds and 8-aligned (the mapping starts on a
        // page boundary and `off` is a multiple of 8). The memory stays
        // mapped for as long as `&self` lives. An `AtomicU64` may be mutated
        // concurrently by anyone, including another process, so handing out
        // a shared reference to it asserts nothing a peer can violate.
        unsafe { AtomicU64::from_ptr(p.cast()) }
    }

    /// The 32-bit atomic word at `off`.
    #[inline(always)]
    pub(crate) fn u32(&self, off: usize) -> &AtomicU32 {
        let p = self.check(off, 4, 4);
        // SAFETY: as in `u64`: in bounds, aligned, mapped while `&self`
        // lives, and atomics tolerate concurrent writers.
        unsafe { AtomicU32::from_ptr(p.cast()) }
    }

    /// The `N` bytes at `off` as a [`Fixed`] window, checked once here
    /// (in the mapping, 8-aligned) so that its fields need no check.
    #[inline(always)]
    pub(crate) fn fixed<const N: usize>(&self, off: usize) -> Fixed<'_, N> {
        Fixed {
            p: self.check(off, N, 8),
            _map: PhantomData,
        }
    }

    /// Copies `dst.len()` shared bytes starting at `off` into `dst`.
    #[inline]
    pub(crate) fn copy_out(&self, off: usize, dst: &mut [u8]) {
        let p = self.check(off, dst.len(), 1);
        // SAFETY: `[p, p + dst.len())` is inside the mapping (checked), and
        // `dst` is local memory that cannot overlap the mapping (it is a
        // Rust slice, which this crate never creates over shared memory).
        unsafe { volatile_copy_out(p, dst) }
    }

    /// Copies `src` into the shared bytes starting at `off`.
    #[inline]
    pub(crate) fn copy_in(&self, off: usize, src: &[u8]) {
        let p = self.check(off, src.len(), 1);
        // SAFETY: as in `copy_out`, with the direction reversed.
        unsafe { volatile_copy_in(p, src) }
    }

    /// [`copy_in`](Self::copy_in) of the concatenation of `parts`, a
    /// bounce buffer's payload, in steps of `step` bytes (`usize::MAX`:
    /// one), calling `filled(done)` after each until it answers `false`.
    /// From [`stores::BULK_MIN`](super::stores::BULK_MIN) bytes on, the kind
    /// of stores is chosen by measurement (see
    /// [`stores::copy_in_steps`](super::stores::copy_in_steps)).
    #[inline]
    pub(crate) fn copy_in_steps(
        &self,
        off: usize,
        parts: &[&[u8]],
        step: usize,
        filled: impl FnMut(usize) -> bool,
    ) {
        let total = parts.iter().map(|p| p.len()).sum::<usize>();
        let p = self.check(off, total, 1);
        // SAFETY: as in `copy_in`, for the whole range.
        unsafe { super::stores::copy_in_steps(p, parts, step, filled) }
    }

    /// Asks the CPU to start fetching the cache lines of `[off, off + len)`
    /// (at most [`PREFETCH_MAX`] bytes of it) without waiting for them: a
    /// receiver calls it as soon as it sees a command, so that the
    /// payload's lines, written by another core, travel while it matches
    /// the command. A hint only: nothing is read, nothing can fault.
    #[inline]
    pub(crate) fn prefetch(&self, off: usize, len: usize) {
        #[cfg(target_arch = "x86_64")]
        self.each_line(off, len, |line| {
            // SAFETY: a prefetch reads nothing and cannot fault (the
            // addresses are in the mapping's lines anyway).
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(line.cast())
            }
        });
        #[cfg(not(target_arch = "x86_64"))]
        let _ = self.check(off, len.min(PREFETCH_MAX), 1);
    }

    /// Asks for the cache lines of `[off, off + len)` (at least one, at
    /// most [`PREFETCH_MAX`] bytes) with the intent to write them
    /// (`prefetchw`), so that a load of a line followed by stores takes
    /// one trip from another core's cache, not two (the load's, then the
    /// stores' claim of ownership), and several lines travel at once. Only
    /// a hint: no effect where the CPU lacks the instruction or off x86-64.
    #[inline(always)]
    pub(crate) fn prefetch_for_write(&self, off: usize, len: usize) {
        #[cfg(target_arch = "x86_64")]
        if prefetchw_ok() {
            self.each_line(off, len.max(1), |line| {
                // SAFETY: a prefetch reads and writes nothing and cannot
                // fault; the lines are the mapping's anyway.
                unsafe {
                    core::arch::asm!(
                        "prefetchw byte ptr [{0}]",
                        in(reg) line,
                        options(nostack, preserves_flags, readonly)
                    )
                }
            });
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = self.check(off, len.clamp(1, PREFETCH_MAX), 1);
    }

    /// Calls `f` with the address of every cache line holding a byte of
    /// `[off, off + len)` (at most [`PREFETCH_MAX`] bytes of it), from the
    /// line of the first byte to that of the last.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn each_line(&self, off: usize, len: usize, mut f: impl FnMut(*mut u8)) {
        let len = len.min(PREFETCH_MAX);
        let p = self.check(off, len, 1);
        let first = p.wrapping_sub(p as usize % 64);
        for k in 0..(p as usize % 64 + len).div_ceil(64) {
            f(first.wrapping_add(k * 64));
        }
    }

    /// The address of byte `off`, for the futex system call, which names a
    /// word by address.
    pub(crate) fn addr_of_u32(&self, off: usize) -> *mut u32 {
        self.check(off, 4, 4).cast()
    }
}

/// `N` shared bytes whose bounds and alignment were checked when the
/// window was made ([`Mapping::fixed`]); its atomic fields are named by
/// constant offsets, which are checked against `N` at compile time. The
/// hot paths (a slot's header) use it instead of checking every field.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fixed<'a, const N: usize> {
    /// Start of the window: inside the mapping, 8-aligned, `N` bytes to
    /// the mapping's end at least.
    p: *mut u8,
    _map: PhantomData<&'a Mapping>,
}

impl<const N: usize> Fixed<'_, N> {
    /// The 64-bit atomic word at `OFF`.
    #[inline(always)]
    pub(crate) fn u64<const OFF: usize>(&self) -> &AtomicU64 {
        const { assert!(OFF % 8 == 0 && OFF + 8 <= N) };
        // SAFETY: `p + OFF` is in the window (checked at compile time
        // against `N`, and the window against the mapping when made) and
        // 8-aligned (`p` is, and `OFF` is a multiple of 8). As in
        // `Mapping::u64`, atomics tolerate concurrent writers, and the
        // memory stays mapped while the borrow of the mapping lives.
        unsafe { AtomicU64::from_ptr(self.p.add(OFF).cast()) }
    }

    /// The 32-bit atomic word at `OFF`.
    #[inline(always)]
    pub(crate) fn u32<const OFF: usize>(&self) -> &AtomicU32 {
        const { assert!(OFF % 4 == 0 && OFF + 4 <= N) };
        // SAFETY: as in `u64`, for 4 aligned bytes.
        unsafe { AtomicU32::from_ptr(self.p.add(OFF).cast()) }
    }

    /// The 16-bit atomic word at `OFF`.
    #[inline(always)]
    pub(crate) fn u16<const OFF: usize>(&self) -> &AtomicU16 {
        const { assert!(OFF % 2 == 0 && OFF + 2 <= N) };
        // SAFETY: as in `u64`, for 2 aligned bytes.
        unsafe { AtomicU16::from_ptr(self.p.add(OFF).cast()) }
    }
}

/// Most bytes [`Mapping::prefetch`] asks for at once: enough for the
/// payload of a slot or the first 4 KiB of a bounce buffer.
const PREFETCH_MAX: usize = 4096;

/// The chunk of the portable copy loops ([`narrow_copy`]). On x86-64
/// SSE2 is part of the base instruction set, so 16-byte volatile loads and
/// stores compile to single `movdqa` instructions everywhere.
#[cfg(target_arch = "x86_64")]
type Chunk = core::arch::x86_64::__m128i;
#[cfg(not(target_arch = "x86_64"))]
type Chunk = u64;

/// From this many bytes on, copies into shared memory use the CPU's string
/// copy (see [`string_copy`]). It writes whole cache lines without first
/// fetching them from the core that read them last, which is what a copy
/// into a ring slot or bounce buffer mostly waits for. One-way
/// `fabric pingpong -p shm` times on the 2-vCPU AMD EPYC host, against the
/// 16-byte loop: 1 KiB 0.270 -> 0.260 us in the host's fast mode and
/// 0.79 -> 0.70 us in its slow mode (with the copy out too), 4 KiB
/// 0.50 -> 0.41 us; below 1 KiB it measured slower (256 B 0.215 -> 0.233 us).
const STRING_COPY_IN_MIN: usize = 1024;

/// From this many bytes on, copies out of shared memory use the string copy
/// too. Reading gains less than writing (at 1 KiB the 16-byte loop with
/// its prefetch was as fast or faster in the fast mode); from 2 KiB on, it
/// saves 10% (2 KiB 0.367 -> 0.333 us, 4 KiB 0.455 -> 0.410 us with both).
const STRING_COPY_OUT_MIN: usize = 2048;

/// Copies shorter than this go byte by byte, without the checks and the
/// call that choose a wider loop: a 1-byte inline payload costs about 40
/// instructions less on each side (Callgrind, `fabric pingpong -p shm
/// -S 1`: the copy out of a slot 90 -> 51 with its bounds check, the send
/// into one 276 -> 237).
const TINY_COPY: usize = 16;

/// Copies `n` bytes from `src` to `dst` with one `rep movsb` when the
/// CPU's string copy is the fast kind (ERMS, checked once by the standard
/// library and cached) and returns `true`; else copies nothing and returns
/// `false`.
///
/// Inline assembly is opaque to the compiler, as volatile accesses are: it
/// can neither re-read the shared side nor assume it unchanged, so a peer
/// writing meanwhile yields wrong bytes, never undefined behaviour.
///
/// # Safety
///
/// Both ranges must be mapped (`src` readable, `dst` writable) and must not
/// overlap.
#[inline(always)]
unsafe fn string_copy(dst: *mut u8, src: *const u8, n: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("ermsb") {
        // SAFETY: the caller's contract; `rep movsb` moves exactly `rcx`
        // bytes forward (the direction flag is clear on entry to Rust
        // code, as the ABI requires) and touches no stack.
        unsafe {
            core::arch::asm!(
                "rep movsb",
                inout("rcx") n => _,
                inout("rdi") dst => _,
                inout("rsi") src => _,
                options(nostack, preserves_flags),
            );
        }
        return true;
    }
    let _ = (dst, src, n);
    false
}

/// Whether the string copy suits a copy from `src` to `dst`: not when the
/// destination lies 1 to 63 bytes after the source modulo 4 KiB
/// ([`fabric_core::kit::copy::near`], the rule every copy of application
/// buffers follows). On the
/// 2-vCPU AMD EPYC host (ERMS and FSRM) `rep movsb` then ran 15-25 times
/// slower than at other distances, in both speed modes seen while
/// measuring (one thread copying one pair of buffers in a loop, GB/s,
/// `rep movsb` / 32-byte loop: 64 KiB at distance 0 40.8 / 43.8, 8 1.6 /
/// 29.9, 16 1.8 / 32.9, 24 2.7 / 33.5, 40-56 24 / 33, 64 46.3 / 40.2;
/// 4 KiB at 16 1.5 / 40.1; glibc's `memcpy`, which takes `rep movsb` at
/// these sizes, the same). Bounce buffers start on a page, so a receive
/// buffer 16 bytes past a page boundary (as `malloc` may give) copied every
/// message out at that speed: `fabric pingpong -p shm --buf-offset 16` at
/// 16 KiB took 7.5-11.3 us one-way, and 1.7-2.6 us with this check;
/// `fabric bw` at 64 KiB went from 2.2-2.4 to 12.3-14.8 GB/s (alternating
/// runs). A ring slot's payload lies 48 bytes past a 64-byte boundary, so
/// even a page-aligned receive buffer is at distance 16 from one slot in
/// 64, whose messages of 2-4 KiB were copied out at that speed.
#[inline(always)]
fn string_copy_suits(dst: *mut u8, src: *const u8) -> bool {
    !fabric_core::kit::copy::near(src, dst)
}

/// Copy loops with 32-byte AVX2 accesses, which replace the 16-byte loops
/// below when the CPU has AVX2 (detected at run time, cached by the
/// standard library). The shared side is accessed only with volatile loads
/// or stores aligned to their width, as in the 16-byte loops; the local
/// side with plain unaligned ones. `fabric pingpong -p shm`, 2-vCPU AMD
/// EPYC (Zen 4) guest, fast mode, medians of 6 alternating rounds,
/// one-way us, 16-byte / 32-byte loops: 64 B 0.152 / 0.144, 256 B 0.154 /
/// 0.149, 512 B 0.161 / 0.152, 1 KiB 0.174 / 0.177 (where the copy in is
/// already a string copy); a second series of 6: 256 B 0.160 / 0.144,
/// 1 KiB 0.183 / 0.183, 2 KiB 0.245 / 0.247. Used for the string copies'
/// sizes too they were slower (2 KiB 0.248 / 0.270).
#[cfg(target_arch = "x86_64")]
mod wide {
    use core::arch::x86_64::{__m128i, __m256i};

    use super::{Local, Shared, Side, copy_chunks};

    /// Whether this CPU runs the loops below.
    #[inline(always)]
    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx2")
    }

    /// [`copy_chunks`] in 32-byte chunks.
    ///
    /// # Safety
    ///
    /// The CPU has AVX2, and the contract of `copy_chunks`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn copy<S: Side, D: Side>(
        src: *const u8,
        dst: *mut u8,
        n: usize,
        shared: usize,
    ) {
        // SAFETY: the caller's contract; both chunk types are as wide as
        // they are aligned.
        unsafe { copy_chunks::<__m256i, __m128i, S, D>(src, dst, n, shared) }
    }

    /// Copies `n` bytes from local `src` to shared `dst`: the ends with
    /// volatile stores ([`copy_chunks`]), the 32-aligned middle with
    /// `vmovntdq` (inline assembly, opaque to the compiler as a volatile
    /// store is), then `sfence`.
    ///
    /// # Safety
    ///
    /// The CPU has AVX2; `[src, src + n)` readable, `[dst, dst + n)`
    /// writable, no overlap.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn stream_in(src: *const u8, dst: *mut u8, n: usize) {
        use core::arch::x86_64::_mm256_loadu_si256;
        let head = (dst as usize).wrapping_neg() % 32;
        let head = head.min(n);
        // SAFETY: the first `head <= n` bytes of both ranges.
        unsafe { copy_chunks::<__m256i, __m128i, Local, Shared>(src, dst, head, dst as usize) };
        let mut i = head;
        while i + 128 <= n {
            // SAFETY: `[i, i + 128)` lies in both ranges; `dst + i` is
            // 32-aligned (`head` brought it there, steps are multiples of
            // 32), as `vmovntdq` requires; the loads are unaligned ones of
            // local memory.
            unsafe {
                let s = src.add(i).cast::<__m256i>();
                let (a, b) = (_mm256_loadu_si256(s), _mm256_loadu_si256(s.add(1)));
                let (c, e) = (_mm256_loadu_si256(s.add(2)), _mm256_loadu_si256(s.add(3)));
                core::arch::asm!(
                    "vmovntdq [{p}], {a}",
                    "vmovntdq [{p} + 32], {b}",
                    "vmovntdq [{p} + 64], {c}",
                    "vmovntdq [{p} + 96], {e}",
                    p = in(reg) dst.add(i),
                    a = in(ymm_reg) a,
                    b = in(ymm_reg) b,
                    c = in(ymm_reg) c,
                    e = in(ymm_reg) e,
                    options(nostack, preserves_flags),
                );
            }
            i += 128;
        }
        // SAFETY: the rest of both ranges (`i <= n`); then the fence, which
        // touches no memory of Rust's.
        unsafe {
            copy_chunks::<__m256i, __m128i, Local, Shared>(
                src.add(i),
                dst.add(i),
                n - i,
                dst as usize + i,
            );
            core::arch::asm!("sfence", options(nostack, preserves_flags));
        }
    }
}

/// Copies `src` into shared memory at `dst` with non-temporal stores,
/// which go to memory without first taking the destination's lines from
/// the core that read them last, and returns `true`; `false` (nothing
/// copied) when the CPU lacks AVX2. Ends with a store fence, so the bytes
/// are ordered before any later store, as with the other copies (a
/// non-temporal store is not ordered by a Release store alone). See
/// [`super::stores`] for when it pays.
///
/// # Safety
///
/// `[dst, dst + src.len())` must be mapped, writable memory that does not
/// overlap `src`.
#[inline]
pub(crate) unsafe fn stream_copy_in(dst: *mut u8, src: &[u8]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if wide::available() {
        // SAFETY: the CPU has AVX2; the rest is the caller's contract.
        unsafe { wide::stream_in(src.as_ptr(), dst, src.len()) };
        return true;
    }
    let _ = (dst, src);
    false
}

/// How one side of a copy is accessed.
trait Side {
    /// Reads a `T` at `p`.
    ///
    /// # Safety
    ///
    /// `p` is readable for `size_of::<T>()` bytes, and aligned to `T` on
    /// the [`Shared`] side.
    unsafe fn read<T>(p: *const T) -> T;

    /// Writes `v` at `p`.
    ///
    /// # Safety
    ///
    /// As for [`Side::read`], writable.
    unsafe fn write<T>(p: *mut T, v: T);
}

/// Shared memory: every access volatile (read or written exactly once,
/// never re-read or used as scratch space), aligned to its width.
enum Shared {}

/// Local memory: plain accesses, unaligned.
enum Local {}

impl Side for Shared {
    #[inline(always)]
    unsafe fn read<T>(p: *const T) -> T {
        // SAFETY: the caller's contract (readable, aligned).
        unsafe { p.read_volatile() }
    }

    #[inline(always)]
    unsafe fn write<T>(p: *mut T, v: T) {
        // SAFETY: the caller's contract (writable, aligned).
        unsafe { p.write_volatile(v) }
    }
}

impl Side for Local {
    #[inline(always)]
    unsafe fn read<T>(p: *const T) -> T {
        // SAFETY: the caller's contract (readable).
        unsafe { p.read_unaligned() }
    }

    #[inline(always)]
    unsafe fn write<T>(p: *mut T, v: T) {
        // SAFETY: the caller's contract (writable).
        unsafe { p.write_unaligned(v) }
    }
}

/// Copies `n` bytes from `src` (side `S`) to `dst` (side `D`) in chunks of
/// `W`, aligned on the shared side, whose address is `shared`: bytes until
/// it is 16-aligned, one `H` (16 bytes) if that leaves it short of `W`'s
/// alignment, four chunks per turn, single chunks, one `H`, bytes.
///
/// # Safety
///
/// `[src, src + n)` readable, `[dst, dst + n)` writable, no overlap;
/// `shared` is `src` or `dst`, the side that is [`Shared`]; `H` is at most
/// 16 bytes and `W` at most 32, both with alignment equal to their size.
#[inline(always)]
unsafe fn copy_chunks<W, H, S: Side, D: Side>(
    src: *const u8,
    dst: *mut u8,
    n: usize,
    shared: usize,
) {
    let (w, h) = (size_of::<W>(), size_of::<H>());
    let mut i = 0;
    // Every access below lies in `[i, i + width)` with `i + width <= n`
    // (each loop or `if` checks it), so in both ranges. The shared side
    // is accessed at addresses aligned to the width: the byte loop stops
    // at 16-alignment, the `H` step brings it to 32 when `W` needs it,
    // and every later step is a multiple of the width that follows it.
    while i < n && (shared + i) % 16 != 0 {
        // SAFETY: as said above, for one byte.
        unsafe { D::write(dst.add(i), S::read(src.add(i))) };
        i += 1;
    }
    if i + h <= n && (shared + i) % w != 0 {
        // SAFETY: as said above, for one `H`.
        unsafe { D::write(dst.add(i).cast::<H>(), S::read(src.add(i).cast::<H>())) };
        i += h;
    }
    while i + 4 * w <= n {
        // SAFETY: as said above, for four `W`.
        unsafe {
            let (s, d) = (src.add(i).cast::<W>(), dst.add(i).cast::<W>());
            let a = S::read(s);
            let b = S::read(s.add(1));
            let c = S::read(s.add(2));
            let e = S::read(s.add(3));
            D::write(d, a);
            D::write(d.add(1), b);
            D::write(d.add(2), c);
            D::write(d.add(3), e);
        }
        i += 4 * w;
    }
    while i + w <= n {
        // SAFETY: as said above, for one `W`.
        unsafe { D::write(dst.add(i).cast::<W>(), S::read(src.add(i).cast::<W>())) };
        i += w;
    }
    if i + h <= n {
        // SAFETY: as said above, for one `H`.
        unsafe { D::write(dst.add(i).cast::<H>(), S::read(src.add(i).cast::<H>())) };
        i += h;
    }
    while i < n {
        // SAFETY: as said above, for one byte.
        unsafe { D::write(dst.add(i), S::read(src.add(i))) };
        i += 1;
    }
}

/// Copies `dst.len()` bytes from shared memory at `src` into `dst`.
///
/// Every byte of the source is read exactly once, with volatile accesses:
/// the compiler may neither re-read the source later (a peer could have
/// changed it in between) nor assume two reads agree. The aligned middle
/// goes by the CPU's string copy from [`STRING_COPY_OUT_MIN`] bytes on,
/// else in 32-byte ([`wide`], with AVX2) or 16-byte chunks; the ends byte
/// by byte.
///
/// # Safety
///
/// `[src, src + dst.len())` must be mapped, readable memory that does not
/// overlap `dst`.
#[inline]
pub(crate) unsafe fn volatile_copy_out(src: *const u8, dst: &mut [u8]) {
    // SAFETY: the caller's contract; the shared side is `src`.
    unsafe {
        volatile_copy::<Shared, Local>(
            src,
            dst.as_mut_ptr(),
            dst.len(),
            src as usize,
            STRING_COPY_OUT_MIN,
        )
    }
}

/// Copies `src` into shared memory at `dst` with volatile stores (each
/// destination byte written exactly once; the compiler may not use the
/// destination as scratch space or drop a store).
///
/// # Safety
///
/// `[dst, dst + src.len())` must be mapped, writable memory that does not
/// overlap `src`.
#[inline]
pub(crate) unsafe fn volatile_copy_in(dst: *mut u8, src: &[u8]) {
    // SAFETY: the caller's contract; the shared side is `dst`.
    unsafe {
        volatile_copy::<Local, Shared>(
            src.as_ptr(),
            dst,
            src.len(),
            dst as usize,
            STRING_COPY_IN_MIN,
        )
    }
}

/// Copies `n` bytes from `src` to `dst`: by the CPU's string copy from
/// `string_min` bytes on, else with [`wide`] chunks when the CPU has AVX2,
/// else with [`narrow_copy`].
///
/// # Safety
///
/// As for [`copy_chunks`].
#[inline(always)]
unsafe fn volatile_copy<S: Side, D: Side>(
    src: *const u8,
    dst: *mut u8,
    n: usize,
    shared: usize,
    string_min: usize,
) {
    if n < TINY_COPY {
        for i in 0..n {
            // SAFETY: the caller's contract; `i < n`, one byte needs no
            // alignment.
            unsafe { D::write(dst.add(i), S::read(src.add(i))) };
        }
        return;
    }
    // SAFETY: the caller's contract, as for the loops below.
    if n >= string_min && string_copy_suits(dst, src) && unsafe { string_copy(dst, src, n) } {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if wide::available() {
        // SAFETY: the CPU has AVX2 (checked); the rest as the caller
        // guarantees.
        unsafe { wide::copy::<S, D>(src, dst, n, shared) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { narrow_copy::<S, D>(src, dst, n, shared) }
}

/// [`copy_chunks`] in [`Chunk`]s, for CPUs without AVX2 (and other
/// architectures). Out of line: x86-64 CPUs of the last decade take the
/// [`wide`] loops, and kept inline this code shifted the hot paths enough
/// to cost 2 KiB messages 20 ns.
///
/// # Safety
///
/// As for [`copy_chunks`].
#[cold]
#[inline(never)]
unsafe fn narrow_copy<S: Side, D: Side>(src: *const u8, dst: *mut u8, n: usize, shared: usize) {
    // SAFETY: the caller's contract; a chunk is as wide as it is aligned.
    unsafe { copy_chunks::<Chunk, Chunk, S, D>(src, dst, n, shared) }
}

/// Whether the CPU has `prefetchw` (CPUID's PRFCHW bit: AMD since 3DNow!,
/// Intel since Broadwell). Asked once per process.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetchw_ok() -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    static OK: AtomicU8 = AtomicU8::new(0);
    match OK.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            // CPUID 8000_0001h, ECX bit 8: PRFCHW (3DNowPrefetch).
            let ok = {
                use core::arch::x86_64::__cpuid;
                __cpuid(0x8000_0000).eax >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 8) != 0
            };
            OK.store(if ok { 1 } else { 2 }, Ordering::Relaxed);
            ok
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_alignment_and_length() {
        let src: Vec<u8> = (0..600u32).map(|i| (i * 7 + 3) as u8).collect();
        for off in 0..20 {
            for len in [0, 1, 7, 15, 16, 17, 63, 64, 65, 130, 300, 579] {
                copy_both_ways(&src, off, len);
            }
        }
    }

    #[test]
    fn copies_past_the_string_copy_thresholds() {
        let src: Vec<u8> = (0..9000u32).map(|i| (i * 13 + 5) as u8).collect();
        for off in [0, 1, 15, 16, 33] {
            for len in [
                STRING_COPY_IN_MIN - 1,
                STRING_COPY_IN_MIN,
                STRING_COPY_OUT_MIN - 1,
                STRING_COPY_OUT_MIN,
                4096 + 7,
                8191,
            ] {
                copy_both_ways(&src, off, len);
            }
        }
    }

    #[test]
    fn the_string_copy_keeps_away_from_near_distances() {
        let src = 0x10_0000usize;
        let suits = |dst: usize| string_copy_suits(dst as *mut u8, src as *const u8);
        assert!(suits(src));
        assert!(suits(src + 3 * crate::region::PAGE));
        for d in 1..fabric_core::kit::copy::NEAR {
            assert!(!suits(src + d), "distance {d}");
            assert!(
                !suits(src + 5 * crate::region::PAGE + d),
                "distance {d} plus pages"
            );
        }
        assert!(suits(src + fabric_core::kit::copy::NEAR));
        assert!(suits(src + 4080));
        // A destination just before its source is far ahead modulo a page.
        assert!(suits(src - 16));
    }

    /// Copies at the distances the string copy is kept from, through the
    /// loops that take them instead.
    #[test]
    fn copies_at_near_distances() {
        let src: Vec<u8> = (0..(3 * crate::region::PAGE) as u32)
            .map(|i| (i * 29 + 7) as u8)
            .collect();
        let mut dst = vec![0u8; 3 * crate::region::PAGE];
        let page = crate::region::PAGE;
        let (from, base) = (src.as_ptr() as usize, dst.as_ptr() as usize);
        for d in [0, 8, 16, 48, 63, 64, 100] {
            // `dst[to]` lies `d` bytes after `src[0]` modulo a page.
            let to = (from + d).wrapping_sub(base) % page;
            assert_eq!((base + to).wrapping_sub(from) % page, d);
            let len = 4096 + 5;
            dst.fill(0);
            // SAFETY: `to + len < dst.len()`, `len < src.len()`; distinct
            // vectors.
            unsafe { volatile_copy_out(src.as_ptr(), &mut dst[to..to + len]) };
            assert_eq!(&dst[to..to + len], &src[..len], "distance {d}");
            dst.fill(0);
            // SAFETY: as above.
            unsafe { volatile_copy_in(dst.as_mut_ptr().add(to), &src[..len]) };
            assert_eq!(&dst[to..to + len], &src[..len], "distance {d}");
        }
    }

    /// [`copy_both_ways`] with the 16-byte loops and, where the CPU has
    /// AVX2, the 32-byte ones, whichever the dispatch would pick.
    #[test]
    fn both_loop_widths_copy_every_alignment_and_length() {
        let src: Vec<u8> = (0..2200u32).map(|i| (i * 11 + 1) as u8).collect();
        for off in 0..40 {
            for len in [
                0, 1, 15, 16, 17, 31, 32, 33, 47, 127, 128, 129, 200, 1024, 2100,
            ] {
                let mut out = vec![0u8; len];
                let mut back = vec![0u8; src.len()];
                // SAFETY: `off + len <= src.len()`, distinct vectors.
                unsafe {
                    let at = src.as_ptr().add(off);
                    narrow_copy::<Shared, Local>(at, out.as_mut_ptr(), len, at as usize);
                    assert_eq!(&out[..], &src[off..off + len]);
                    let to = back.as_mut_ptr().add(off);
                    narrow_copy::<Local, Shared>(out.as_ptr(), to, len, to as usize);
                }
                assert_eq!(&back[off..off + len], &src[off..off + len]);
                assert!(
                    back[..off]
                        .iter()
                        .chain(&back[off + len..])
                        .all(|&b| b == 0)
                );
                #[cfg(target_arch = "x86_64")]
                if wide::available() {
                    let mut out = vec![0u8; len];
                    let mut back = vec![0u8; src.len()];
                    // SAFETY: as above; the CPU has AVX2.
                    unsafe {
                        let at = src.as_ptr().add(off);
                        wide::copy::<Shared, Local>(at, out.as_mut_ptr(), len, at as usize);
                        assert_eq!(&out[..], &src[off..off + len]);
                        let to = back.as_mut_ptr().add(off);
                        wide::copy::<Local, Shared>(out.as_ptr(), to, len, to as usize);
                    }
                    assert_eq!(&back[off..off + len], &src[off..off + len]);
                    assert!(
                        back[..off]
                            .iter()
                            .chain(&back[off + len..])
                            .all(|&b| b == 0)
                    );
                }
            }
        }
    }

    /// The streaming copy writes every byte once at every alignment and
    /// length, and nothing around them.
    #[test]
    fn the_streaming_copy_copies_every_alignment_and_length() {
        let src: Vec<u8> = (0..20_000u32).map(|i| (i * 17 + 9) as u8).collect();
        for off in [0, 1, 15, 16, 31, 32, 33, 63, 64, 100] {
            for len in [0, 1, 31, 32, 127, 128, 129, 255, 4096, 16_385, 19_000] {
                let mut back = vec![0u8; 20_200];
                // SAFETY: `off + len <= back.len()`, distinct vectors.
                let done = unsafe { stream_copy_in(back.as_mut_ptr().add(off), &src[..len]) };
                if !done {
                    return; // no AVX2: the callers take the other copies
                }
                assert_eq!(&back[off..off + len], &src[..len], "off {off} len {len}");
                assert!(back[..off].iter().all(|&b| b == 0));
                assert!(back[off + len..].iter().all(|&b| b == 0));
            }
        }
    }

    /// Copies `src[off..off + len]` out and back in at `off`, checking the
    /// bytes copied and that nothing around them was touched.
    fn copy_both_ways(src: &[u8], off: usize, len: usize) {
        assert!(off + len <= src.len());
        let mut out = vec![0u8; len];
        // SAFETY: `off + len <= src.len()`, local vectors, no overlap.
        unsafe { volatile_copy_out(src.as_ptr().add(off), &mut out) };
        assert_eq!(&out[..], &src[off..off + len]);
        let mut back = vec![0u8; src.len()];
        // SAFETY: `off + len <= back.len()`, distinct vectors.
        unsafe { volatile_copy_in(back.as_mut_ptr().add(off), &out) };
        assert_eq!(&back[off..off + len], &src[off..off + len]);
        assert!(back[..off].iter().all(|&b| b == 0));
        assert!(back[off + len..].iter().all(|&b| b == 0));
    }
}
