//! Atomic operations executed at the target, with the processor's atomic
//! instructions, on registered memory checked against the
//! [`MrTable`].
//!
//! Supported: the integer types `FI_INT8` to `FI_UINT64` with every
//! operation (`FI_MIN`, `FI_MAX`, `FI_SUM`, `FI_PROD`, the logical and
//! bitwise operations, `FI_ATOMIC_READ`, `FI_ATOMIC_WRITE`, the `FI_CSWAP*`
//! family and `FI_MSWAP`), and `FI_FLOAT` / `FI_DOUBLE` with the
//! arithmetic, logical (as C's `||`, `&&` on them: 1 or 0), read, write and
//! compare-swap operations (no bitwise operation, no `FI_MSWAP`), as
//! libfabric 1.17's providers answer `fi_atomicvalid`. Complex and long
//! double types are not supported.
//!
//! Each element is updated with a compare-and-swap loop on its bits, so
//! the update is atomic with respect to other peers' atomics and to the
//! target's own atomic accesses. An element that is not naturally aligned
//! is updated under a process-wide lock instead (atomic only with respect
//! to other atomics executed by this process).
//!
//! Operands, compare values and old values are the little-endian bytes of
//! the elements; atomics are offered on little-endian hosts only, where
//! that is the elements' memory layout.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering};

use super::mr::MrTable;
use crate::error::{Error, ErrorKind, Result};
use crate::objects::{AtomicOp, Datatype, MrAccess, RmaIov};

/// The three forms of an atomic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicKind {
    /// `fi_atomic`: no result.
    Plain,
    /// `fi_fetch_atomic`: the old values come back.
    Fetch,
    /// `fi_compare_atomic`: compare values go along, old values come back.
    Compare,
}

impl AtomicKind {
    /// The kind of an [`AtomicMsg`](crate::objects::AtomicMsg) with
    /// `compare` and `result` buffers given or not.
    pub fn of(has_compare: bool, has_result: bool) -> AtomicKind {
        match (has_compare, has_result) {
            (true, _) => AtomicKind::Compare,
            (false, true) => AtomicKind::Fetch,
            (false, false) => AtomicKind::Plain,
        }
    }

    /// Whether `op` belongs to this kind: the compare ops (`FI_CSWAP*`,
    /// `FI_MSWAP`) only to `Compare`, `FI_ATOMIC_READ` only to `Fetch`, the
    /// others to `Plain` and `Fetch`.
    pub fn allows(self, op: AtomicOp) -> bool {
        let compare = matches!(
            op,
            AtomicOp::Cswap
                | AtomicOp::CswapNe
                | AtomicOp::CswapLe
                | AtomicOp::CswapLt
                | AtomicOp::CswapGe
                | AtomicOp::CswapGt
                | AtomicOp::Mswap
        );
        match self {
            AtomicKind::Compare => compare,
            AtomicKind::Fetch => !compare,
            AtomicKind::Plain => !compare && op != AtomicOp::AtomicRead,
        }
    }

    /// Bytes of operands a request of this kind carries: `count` operands
    /// of `datatype` (none for `FI_ATOMIC_READ`), then as many compare
    /// values for `Compare`; `None` on overflow.
    pub fn payload_len(self, datatype: Datatype, op: AtomicOp, count: u64) -> Option<u64> {
        let size = u64::try_from(datatype.size()).ok()?;
        let per_elem = match (self, op) {
            (AtomicKind::Compare, _) => size.checked_mul(2)?,
            (AtomicKind::Fetch, AtomicOp::AtomicRead) => 0,
            _ => size,
        };
        count.checked_mul(per_elem)
    }

    /// The access a target region must grant: `FI_REMOTE_READ` for
    /// `FI_ATOMIC_READ`, `FI_REMOTE_WRITE` for plain updates, both for
    /// the other fetching and compare forms.
    pub fn access(self, op: AtomicOp) -> MrAccess {
        match (self, op) {
            (_, AtomicOp::AtomicRead) => MrAccess::REMOTE_READ,
            (AtomicKind::Plain, _) => MrAccess::REMOTE_WRITE,
            _ => MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        }
    }
}

fn is_int(dt: Datatype) -> bool {
    matches!(
        dt,
        Datatype::Int8
            | Datatype::Uint8
            | Datatype::Int16
            | Datatype::Uint16
            | Datatype::Int32
            | Datatype::Uint32
            | Datatype::Int64
            | Datatype::Uint64
    )
}

/// Whether the executor supports `op` on `dt` in form `kind`
/// (`fi_atomicvalid` and its fetch / compare forms, without the element
/// count, which is the provider's); `OpNotSupp` saying why not.
pub fn valid(dt: Datatype, op: AtomicOp, kind: AtomicKind) -> Result<()> {
    let unsupported = |why: &str| {
        Err(Error::new(
            ErrorKind::OpNotSupp,
            format!("{} on {}: {why}", op.fi_name(), dt.fi_name()),
        ))
    };
    if cfg!(target_endian = "big") {
        return unsupported("atomics need a little-endian host");
    }
    if !kind.allows(op) {
        return unsupported(match kind {
            AtomicKind::Plain => "not an fi_atomic operation",
            AtomicKind::Fetch => "not an fi_fetch_atomic operation",
            AtomicKind::Compare => "not an fi_compare_atomic operation",
        });
    }
    let float = matches!(dt, Datatype::Float | Datatype::Double);
    if !is_int(dt) && !float {
        return unsupported("datatype not supported");
    }
    let int_only = matches!(
        op,
        AtomicOp::Bor | AtomicOp::Band | AtomicOp::Bxor | AtomicOp::Mswap
    );
    if float && int_only {
        return unsupported("bitwise operations take integers");
    }
    Ok(())
}

/// An element type the target can update.
trait Elem: Copy + PartialOrd + Default {
    const SIZE: usize;
    fn from_bytes(b: &[u8]) -> Self;
    fn put(self, out: &mut Vec<u8>);
    /// The new value, or `None` to leave the element unchanged.
    fn combine(op: AtomicOp, old: Self, x: Self, cmp: Self) -> Option<Self>;
    /// Atomic load.
    ///
    /// # Safety
    ///
    /// `p` is valid for reads and writes and aligned for `Self`.
    unsafe fn load(p: *mut u8) -> Self;
    /// Atomic compare-and-swap of the bits; `true` if it swapped.
    ///
    /// # Safety
    ///
    /// As `load`.
    unsafe fn cas(p: *mut u8, old: Self, new: Self) -> bool;
}

/// The compare-swap family: `Some(Some(x))` when the condition holds,
/// `Some(None)` when it does not, `None` for other operations.
fn cswap<T: PartialOrd>(op: AtomicOp, old: T, x: T, cmp: T) -> Option<Option<T>> {
    let hit = match op {
        AtomicOp::Cswap => cmp == old,
        AtomicOp::CswapNe => cmp != old,
        AtomicOp::CswapLe => cmp <= old,
        AtomicOp::CswapLt => cmp < old,
        AtomicOp::CswapGe => cmp >= old,
        AtomicOp::CswapGt => cmp > old,
        _ => return None,
    };
    Some(hit.then_some(x))
}

macro_rules! int_elem {
    ($t:ty, $a:ty) => {
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();

            fn from_bytes(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                if let Some(src) = b.get(..Self::SIZE) {
                    a.copy_from_slice(src);
                }
                <$t>::from_le_bytes(a)
            }

            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }

            fn combine(op: AtomicOp, old: Self, x: Self, cmp: Self) -> Option<Self> {
                if let Some(r) = cswap(op, old, x, cmp) {
                    return r;
                }
                let truth = |b: bool| if b { 1 as $t } else { 0 as $t };
                Some(match op {
                    AtomicOp::Min => old.min(x),
                    AtomicOp::Max => old.max(x),
                    AtomicOp::Sum => old.wrapping_add(x),
                    AtomicOp::Prod => old.wrapping_mul(x),
                    AtomicOp::Lor => truth(old != 0 || x != 0),
                    AtomicOp::Land => truth(old != 0 && x != 0),
                    AtomicOp::Lxor => truth((old != 0) != (x != 0)),
                    AtomicOp::Bor => old | x,
                    AtomicOp::Band => old & x,
                    AtomicOp::Bxor => old ^ x,
                    AtomicOp::AtomicWrite => x,
                    AtomicOp::Mswap => (x & cmp) | (old & !cmp),
                    _ => return None,
                })
            }

            unsafe fn load(p: *mut u8) -> Self {
                // SAFETY: the caller guarantees a valid, aligned element.
                let a = unsafe { <$a>::from_ptr(p.cast()) };
                a.load(Ordering::Acquire) as $t
            }

            unsafe fn cas(p: *mut u8, old: Self, new: Self) -> bool {
                // SAFETY: as `load`.
                let a = unsafe { <$a>::from_ptr(p.cast()) };
                a.compare_exchange(old as _, new as _, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            }
        }
    };
}

int_elem!(i8, AtomicU8);
int_elem!(u8, AtomicU8);
int_elem!(i16, AtomicU16);
int_elem!(u16, AtomicU16);
int_elem!(i32, AtomicU32);
int_elem!(u32, AtomicU32);
int_elem!(i64, AtomicU64);
int_elem!(u64, AtomicU64);

macro_rules! float_elem {
    ($t:ty, $a:ty) => {
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();

            fn from_bytes(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                if let Some(src) = b.get(..Self::SIZE) {
                    a.copy_from_slice(src);
                }
                <$t>::from_le_bytes(a)
            }

            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }

            fn combine(op: AtomicOp, old: Self, x: Self, cmp: Self) -> Option<Self> {
                if let Some(r) = cswap(op, old, x, cmp) {
                    return r;
                }
                let truth = |b: bool| if b { 1.0 } else { 0.0 };
                Some(match op {
                    AtomicOp::Min => {
                        if x < old {
                            x
                        } else {
                            old
                        }
                    }
                    AtomicOp::Max => {
                        if x > old {
                            x
                        } else {
                            old
                        }
                    }
                    AtomicOp::Sum => old + x,
                    AtomicOp::Prod => old * x,
                    // As C's `||`, `&&` on floating values: 1 or 0, and
                    // a NaN is true.
                    AtomicOp::Lor => truth(old != 0.0 || x != 0.0),
                    AtomicOp::Land => truth(old != 0.0 && x != 0.0),
                    AtomicOp::Lxor => truth((old != 0.0) != (x != 0.0)),
                    AtomicOp::AtomicWrite => x,
                    _ => return None,
                })
            }

            unsafe fn load(p: *mut u8) -> Self {
                // SAFETY: the caller guarantees a valid, aligned element.
                let a = unsafe { <$a>::from_ptr(p.cast()) };
                <$t>::from_bits(a.load(Ordering::Acquire))
            }

            unsafe fn cas(p: *mut u8, old: Self, new: Self) -> bool {
                // SAFETY: as `load`.
                let a = unsafe { <$a>::from_ptr(p.cast()) };
                a.compare_exchange(
                    old.to_bits(),
                    new.to_bits(),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            }
        }
    };
}

float_elem!(f32, AtomicU32);
float_elem!(f64, AtomicU64);

/// Serializes updates of misaligned elements.
static MISALIGNED: Mutex<()> = Mutex::new(());

/// Applies `op` to `n` elements at `base`; appends the old values to
/// `results` when `fetch`.
///
/// # Safety
///
/// `base..base + n * T::SIZE` must be valid for reads and writes (checked
/// registered memory whose registration is held).
unsafe fn apply<T: Elem>(
    op: AtomicOp,
    base: usize,
    n: usize,
    operands: &[u8],
    compare: &[u8],
    results: &mut Vec<u8>,
    fetch: bool,
) {
    for i in 0..n {
        let at = i * T::SIZE;
        let p = (base + at) as *mut u8;
        let x = operands.get(at..).map(T::from_bytes).unwrap_or_default();
        let c = compare.get(at..).map(T::from_bytes).unwrap_or_default();
        let old = if (base + at) % T::SIZE == 0 {
            loop {
                // SAFETY: inside the checked range, and aligned.
                let old = unsafe { T::load(p) };
                match T::combine(op, old, x, c) {
                    None => break old,
                    // SAFETY: as above.
                    Some(new) if unsafe { T::cas(p, old, new) } => break old,
                    Some(_) => {}
                }
            }
        } else {
            let _g = MISALIGNED
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // SAFETY: inside the checked range; unaligned access is allowed
            // with read_unaligned / write_unaligned.
            let old = unsafe { p.cast::<T>().read_unaligned() };
            if let Some(new) = T::combine(op, old, x, c) {
                // SAFETY: as above.
                unsafe { p.cast::<T>().write_unaligned(new) };
            }
            old
        };
        if fetch {
            old.put(results);
        }
    }
}

/// Executes an atomic request against registered memory.
///
/// `ranges` are the target ranges with lengths in elements; `payload`
/// holds the operands, then (for `Compare`) the compare values, as
/// [`AtomicKind::payload_len`] counts them. Every range is checked first
/// (key, bounds, access rights: an unknown key is `KeyRejected`, a range
/// outside its region or a missing right `Access`), so a refused request
/// changes nothing; then the elements are updated in order and, for
/// fetching and compare requests, their old values appended to `results`.
/// Returns the refusal's error kind.
pub fn execute(
    mr: &MrTable,
    kind: AtomicKind,
    dt: Datatype,
    op: AtomicOp,
    ranges: &[RmaIov],
    payload: &[u8],
    results: &mut Vec<u8>,
) -> std::result::Result<(), ErrorKind> {
    valid(dt, op, kind).map_err(|e| e.kind())?;
    let size = dt.size();
    let need = kind.access(op);
    let refuse = |e: Error| match e.kind() {
        ErrorKind::NoKey => ErrorKind::KeyRejected,
        k => k,
    };
    let mut count = 0usize;
    for r in ranges {
        let bytes = r.len.checked_mul(size).ok_or(ErrorKind::Inval)?;
        mr.check(r.key, r.addr, bytes, need).map_err(refuse)?;
        count = count.checked_add(r.len).ok_or(ErrorKind::Inval)?;
    }
    let (operands, compare) = match kind {
        AtomicKind::Compare => payload.split_at(count.saturating_mul(size).min(payload.len())),
        _ => (payload, &[][..]),
    };
    let fetch = kind != AtomicKind::Plain;
    let mut done = 0usize;
    for r in ranges {
        let bytes = r.len * size;
        let from = done * size;
        let ops = operands.get(from..).unwrap_or_default();
        let cmp = compare.get(from..).unwrap_or_default();
        mr.with_access(r.key, r.addr, bytes, need, |base| {
            // SAFETY: the range was checked inside the region and the
            // registration is held while this runs; mr_reg's contract lets
            // peers read and write registered memory.
            unsafe {
                match dt {
                    Datatype::Int8 => apply::<i8>(op, base, r.len, ops, cmp, results, fetch),
                    Datatype::Uint8 => apply::<u8>(op, base, r.len, ops, cmp, results, fetch),
                    Datatype::Int16 => apply::<i16>(op, base, r.len, ops, cmp, results, fetch),
                    Datatype::Uint16 => apply::<u16>(op, base, r.len, ops, cmp, results, fetch),
                    Datatype::Int32 => apply::<i32>(op, base, r.len, ops, cmp, results, fetch),
                    Datatype::Uint32 => apply::<u32>(op, base, r.len, ops, cmp, results, fetch),
                    Datatype::Int64 => apply::<i64>(op, base, r.len, ops, cmp, results, fetch),
                    Datatype::Uint64 => apply::<u64>(op, base, r.len, ops, cmp, results, fetch),
                    Datatype::Float => apply::<f32>(op, base, r.len, ops, cmp, results, fetch),
                    Datatype::Double => apply::<f64>(op, base, r.len, ops, cmp, results, fetch),
                    _ => {}
                }
            }
        })
        .map_err(refuse)?;
        done += r.len;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::mr::Region;

    #[test]
    fn combine_rules() {
        use AtomicOp::*;
        assert_eq!(i32::combine(Min, 5, -3, 0), Some(-3));
        assert_eq!(u8::combine(Sum, 250, 10, 0), Some(4));
        assert_eq!(u16::combine(Bxor, 0b1100, 0b1010, 0), Some(0b0110));
        assert_eq!(u64::combine(Lxor, 7, 0, 0), Some(1));
        assert_eq!(u32::combine(Cswap, 5, 9, 5), Some(9));
        assert_eq!(u32::combine(Cswap, 5, 9, 4), None);
        assert_eq!(u32::combine(CswapLt, 5, 9, 4), Some(9));
        assert_eq!(u32::combine(CswapGt, 5, 9, 4), None);
        assert_eq!(
            u8::combine(Mswap, 0b1111_0000, 0b0000_1111, 0b0011_1100),
            Some(0b1100_1100)
        );
        assert_eq!(f64::combine(Max, 1.5, 2.5, 0.0), Some(2.5));
        assert_eq!(f32::combine(AtomicRead, 1.0, 2.0, 0.0), None);
        // Logical operations on floating values: 1 or 0, a NaN true.
        assert_eq!(f64::combine(Lor, 0.0, 2.5, 0.0), Some(1.0));
        assert_eq!(f64::combine(Lor, 0.0, -0.0, 0.0), Some(0.0));
        assert_eq!(f32::combine(Land, 3.0, f32::NAN, 0.0), Some(1.0));
        assert_eq!(f32::combine(Land, 3.0, 0.0, 0.0), Some(0.0));
        assert_eq!(f64::combine(Lxor, 3.0, 4.0, 0.0), Some(0.0));
        assert_eq!(f64::combine(Lxor, 0.0, 4.0, 0.0), Some(1.0));
    }

    #[test]
    fn validity() {
        assert!(valid(Datatype::Uint64, AtomicOp::Sum, AtomicKind::Plain).is_ok());
        assert_eq!(
            valid(Datatype::Double, AtomicOp::Bor, AtomicKind::Plain)
                .unwrap_err()
                .kind(),
            ErrorKind::OpNotSupp
        );
        assert!(valid(Datatype::Double, AtomicOp::Cswap, AtomicKind::Compare).is_ok());
        assert!(valid(Datatype::Float, AtomicOp::Lxor, AtomicKind::Fetch).is_ok());
        assert_eq!(
            valid(Datatype::Float, AtomicOp::Mswap, AtomicKind::Compare)
                .unwrap_err()
                .kind(),
            ErrorKind::OpNotSupp
        );
        assert_eq!(
            valid(Datatype::Int8, AtomicOp::Cswap, AtomicKind::Plain)
                .unwrap_err()
                .kind(),
            ErrorKind::OpNotSupp
        );
        assert_eq!(
            valid(Datatype::LongDouble, AtomicOp::Sum, AtomicKind::Plain)
                .unwrap_err()
                .kind(),
            ErrorKind::OpNotSupp
        );
        assert!(valid(Datatype::Int8, AtomicOp::AtomicRead, AtomicKind::Fetch).is_ok());
        assert_eq!(
            valid(Datatype::Int8, AtomicOp::AtomicRead, AtomicKind::Plain)
                .unwrap_err()
                .kind(),
            ErrorKind::OpNotSupp
        );
        assert_eq!(AtomicKind::of(true, true), AtomicKind::Compare);
        assert_eq!(
            AtomicKind::Compare.payload_len(Datatype::Uint32, AtomicOp::Cswap, 3),
            Some(24)
        );
        assert_eq!(
            AtomicKind::Fetch.payload_len(Datatype::Uint32, AtomicOp::AtomicRead, 3),
            Some(0)
        );
    }

    #[test]
    fn execute_checks_every_range_before_touching_memory() {
        let mut mem = [0u64; 4];
        let t = MrTable::new(false, false);
        t.insert(
            1,
            Region {
                base: mem.as_mut_ptr() as usize,
                len: 32,
                access: MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
                offset: 0,
            },
        )
        .expect("register");
        let mut results = Vec::new();
        let add = 5u64.to_le_bytes().repeat(2);
        let ok = [RmaIov {
            addr: 8,
            len: 2,
            key: 1,
        }];
        execute(
            &t,
            AtomicKind::Fetch,
            Datatype::Uint64,
            AtomicOp::Sum,
            &ok,
            &add,
            &mut results,
        )
        .expect("in bounds");
        assert_eq!(results, [0u8; 16]);
        let bad = [
            RmaIov {
                addr: 0,
                len: 1,
                key: 1,
            },
            RmaIov {
                addr: 24,
                len: 2,
                key: 1,
            },
        ];
        let e = execute(
            &t,
            AtomicKind::Plain,
            Datatype::Uint64,
            AtomicOp::Sum,
            &bad,
            &add,
            &mut results,
        );
        assert_eq!(e, Err(ErrorKind::Access));
        let nokey = [RmaIov {
            addr: 0,
            len: 1,
            key: 9,
        }];
        let e = execute(
            &t,
            AtomicKind::Plain,
            Datatype::Uint64,
            AtomicOp::Sum,
            &nokey,
            &add,
            &mut results,
        );
        assert_eq!(e, Err(ErrorKind::KeyRejected));
        assert_eq!(mem, [0, 5, 5, 0], "the refused requests changed nothing");
    }
}
