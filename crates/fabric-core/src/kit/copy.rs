//! Copies of message bytes between buffers whose addresses the application
//! chose.
//!
//! glibc's `memcpy` copies a few KiB and more with the CPU's string copy
//! (`rep movsb`). On the AMD EPYC hosts this project measures on, that
//! runs 15-25 times slower when the destination lies 1 to 63 bytes after
//! the source modulo 4 KiB (`memcpy` of 4 KiB: 46.8 GB/s at distance 0,
//! 1.8 GB/s at distance 16; see also prov-shm's `region::shared`). Buffers
//! from `malloc` fall there now and then, and a receive then copies at a
//! tenth of its speed. [`copy_bytes`] copies such ranges in pieces small
//! enough for `memcpy`'s vector loops instead (10.2-10.8 GB/s at distance
//! 16 from 4 to 64 KiB).

/// Page size the distance is taken modulo.
const PAGE: usize = 4096;

/// Distances below this (other than 0) are near: see [`near`].
pub const NEAR: usize = 64;

/// Whether `dst` lies 1 to [`NEAR`]` - 1` bytes after `src` modulo 4 KiB,
/// where the CPU's string copy crawls (see the module docs). Copy
/// routines that use `rep movsb` themselves (prov-shm's) ask this too.
#[inline(always)]
pub fn near(src: *const u8, dst: *const u8) -> bool {
    let d = (dst as usize).wrapping_sub(src as usize) % PAGE;
    d != 0 && d < NEAR
}

/// Bytes per piece: below every `memcpy` string-copy threshold of
/// glibc's x86-64 variants (2 KiB and up).
const PIECE: usize = 1024;

/// Copies `n` bytes from `src` to `dst`, as [`std::ptr::copy_nonoverlapping`]
/// does, but in pieces of 1 KiB when `dst` lies 1 to 63 bytes after `src`
/// modulo 4 KiB (see the module docs).
///
/// # Safety
///
/// As for [`std::ptr::copy_nonoverlapping`]: `src` valid for reads and
/// `dst` for writes of `n` bytes, the two ranges not overlapping.
#[inline]
pub unsafe fn copy_bytes(src: *const u8, dst: *mut u8, n: usize) {
    if n <= PIECE || !near(src, dst) {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { in_pieces(src, dst, n) };

    /// The copy in pieces of [`PIECE`] bytes; the contract of `copy_bytes`.
    #[cold]
    unsafe fn in_pieces(src: *const u8, dst: *mut u8, n: usize) {
        let mut at = 0;
        while at < n {
            let k = PIECE.min(n - at);
            // SAFETY: `at + k <= n`: within both ranges of the caller's
            // contract.
            unsafe { std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), k) };
            at += k;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_is_1_to_63_bytes_ahead_modulo_a_page() {
        let src = 0x10_0000usize as *const u8;
        let at = |d: usize| (src as usize).wrapping_add(d) as *const u8;
        assert!(!near(src, at(0)));
        assert!(!near(src, at(3 * PAGE)));
        for d in 1..NEAR {
            assert!(near(src, at(d)), "distance {d}");
            assert!(near(src, at(2 * PAGE + d)), "distance {d} plus pages");
        }
        assert!(!near(src, at(NEAR)));
        assert!(!near(src, at(usize::MAX - 15)), "16 bytes before");
    }

    #[test]
    fn copies_every_byte_at_near_and_far_distances() {
        let src: Vec<u8> = (0..3 * PAGE as u32).map(|i| (i * 31 + 11) as u8).collect();
        let mut dst = vec![0u8; 3 * PAGE];
        let (from, base) = (src.as_ptr() as usize, dst.as_ptr() as usize);
        for d in [0, 1, 16, 48, 63, 64, 200] {
            for n in [0, 1, PIECE, PIECE + 1, 4096, 2 * PAGE - 3] {
                // `dst[to]` lies `d` bytes after `src[0]` modulo a page.
                let to = (from + d).wrapping_sub(base) % PAGE;
                dst.fill(0);
                // SAFETY: `to + n <= dst.len()`, `n <= src.len()`; two
                // vectors.
                unsafe { copy_bytes(src.as_ptr(), dst.as_mut_ptr().add(to), n) };
                assert_eq!(&dst[to..to + n], &src[..n], "distance {d}, {n} bytes");
                assert!(dst[..to].iter().chain(&dst[to + n..]).all(|&b| b == 0));
            }
        }
    }
}
