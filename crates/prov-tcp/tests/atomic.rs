//! Atomics between two RDM endpoints in one process: every supported
//! operation on every supported type, with the fetch and compare forms,
//! checked against the same operation done locally; refusals; atomicity
//! under two concurrent initiators.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use fabric_core::objects::{
    AtomicMsg, AtomicOp, CompletionFlags, Datatype, FiAddr, MrAccess, RmaIov,
};
use fabric_core::*;

/// Element values as little-endian bytes, for any supported type.
trait V: Copy + PartialEq + std::fmt::Debug {
    const DT: Datatype;
    const INT: bool;
    fn bytes(self) -> Vec<u8>;
    fn from(b: &[u8]) -> Self;
    fn sample(i: u64) -> Self;
    fn expect(op: AtomicOp, old: Self, x: Self, cmp: Self) -> Self;
}

macro_rules! int_v {
    ($t:ty, $dt:expr) => {
        impl V for $t {
            const DT: Datatype = $dt;
            const INT: bool = true;
            fn bytes(self) -> Vec<u8> {
                self.to_le_bytes().to_vec()
            }
            fn from(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().unwrap())
            }
            fn sample(i: u64) -> Self {
                (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 3) as $t
            }
            fn expect(op: AtomicOp, old: Self, x: Self, c: Self) -> Self {
                use AtomicOp::*;
                let t = |b: bool| b as $t;
                match op {
                    Min => old.min(x),
                    Max => old.max(x),
                    Sum => old.wrapping_add(x),
                    Prod => old.wrapping_mul(x),
                    Lor => t(old != 0 || x != 0),
                    Land => t(old != 0 && x != 0),
                    Lxor => t((old != 0) ^ (x != 0)),
                    Bor => old | x,
                    Band => old & x,
                    Bxor => old ^ x,
                    AtomicRead => old,
                    AtomicWrite => x,
                    Cswap => {
                        if c == old {
                            x
                        } else {
                            old
                        }
                    }
                    CswapNe => {
                        if c != old {
                            x
                        } else {
                            old
                        }
                    }
                    CswapLe => {
                        if c <= old {
                            x
                        } else {
                            old
                        }
                    }
                    CswapLt => {
                        if c < old {
                            x
                        } else {
                            old
                        }
                    }
                    CswapGe => {
                        if c >= old {
                            x
                        } else {
                            old
                        }
                    }
                    CswapGt => {
                        if c > old {
                            x
                        } else {
                            old
                        }
                    }
                    Mswap => (x & c) | (old & !c),
                }
            }
        }
    };
}

int_v!(i8, Datatype::Int8);
int_v!(u8, Datatype::Uint8);
int_v!(i16, Datatype::Int16);
int_v!(u16, Datatype::Uint16);
int_v!(i32, Datatype::Int32);
int_v!(u32, Datatype::Uint32);
int_v!(i64, Datatype::Int64);
int_v!(u64, Datatype::Uint64);

macro_rules! float_v {
    ($t:ty, $dt:expr) => {
        impl V for $t {
            const DT: Datatype = $dt;
            const INT: bool = false;
            fn bytes(self) -> Vec<u8> {
                self.to_le_bytes().to_vec()
            }
            fn from(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().unwrap())
            }
            fn sample(i: u64) -> Self {
                (i % 17) as $t * 1.5 - 7.0
            }
            fn expect(op: AtomicOp, old: Self, x: Self, c: Self) -> Self {
                use AtomicOp::*;
                match op {
                    Min => {
                        if x < old {
                            x
                        } else {
                            old
                        }
                    }
                    Max => {
                        if x > old {
                            x
                        } else {
                            old
                        }
                    }
                    Sum => old + x,
                    Prod => old * x,
                    // C's `||`, `&&` on floating values: 1 or 0.
                    Lor => ((old != 0.0) || (x != 0.0)) as u8 as $t,
                    Land => ((old != 0.0) && (x != 0.0)) as u8 as $t,
                    Lxor => ((old != 0.0) != (x != 0.0)) as u8 as $t,
                    AtomicRead => old,
                    AtomicWrite => x,
                    Cswap => {
                        if c == old {
                            x
                        } else {
                            old
                        }
                    }
                    CswapNe => {
                        if c != old {
                            x
                        } else {
                            old
                        }
                    }
                    CswapLe => {
                        if c <= old {
                            x
                        } else {
                            old
                        }
                    }
                    CswapLt => {
                        if c < old {
                            x
                        } else {
                            old
                        }
                    }
                    CswapGe => {
                        if c >= old {
                            x
                        } else {
                            old
                        }
                    }
                    CswapGt => {
                        if c > old {
                            x
                        } else {
                            old
                        }
                    }
                    _ => unreachable!(),
                }
            }
        }
    };
}

float_v!(f32, Datatype::Float);
float_v!(f64, Datatype::Double);

const PLAIN: [AtomicOp; 11] = [
    AtomicOp::Min,
    AtomicOp::Max,
    AtomicOp::Sum,
    AtomicOp::Prod,
    AtomicOp::Lor,
    AtomicOp::Land,
    AtomicOp::Lxor,
    AtomicOp::Bor,
    AtomicOp::Band,
    AtomicOp::Bxor,
    AtomicOp::AtomicWrite,
];

const COMPARE: [AtomicOp; 7] = [
    AtomicOp::Cswap,
    AtomicOp::CswapNe,
    AtomicOp::CswapLe,
    AtomicOp::CswapLt,
    AtomicOp::CswapGe,
    AtomicOp::CswapGt,
    AtomicOp::Mswap,
];

/// The operations on integers only: bitwise ones (the logical ones take
/// floating values too, as in libfabric 1.17).
fn int_only(op: AtomicOp) -> bool {
    matches!(
        op,
        AtomicOp::Bor | AtomicOp::Band | AtomicOp::Bxor | AtomicOp::Mswap
    )
}

fn bytes_of<T: V>(v: &[T]) -> Vec<u8> {
    v.iter().flat_map(|x| x.bytes()).collect()
}

fn values<T: V>(b: &[u8]) -> Vec<T> {
    b.chunks(std::mem::size_of::<T>()).map(T::from).collect()
}

struct Ctx {
    a: Side,
    b: Side,
    b_at_a: FiAddr,
}

/// Runs one atomic operation of `kind` on 3 elements (in two remote ranges)
/// and checks target memory and fetched values against the local result.
fn check<T: V>(c: &Ctx, op: AtomicOp, fetch: bool, compare: bool, round: u64) {
    let n = 3;
    let size = std::mem::size_of::<T>();
    let old: Vec<T> = (0..n).map(|i| T::sample(round * 31 + i)).collect();
    let x: Vec<T> = (0..n).map(|i| T::sample(round * 17 + i + 5)).collect();
    // Compare values equal to the target for the first element, so both
    // branches of the compare ops run.
    let cmpv: Vec<T> = (0..n)
        .map(|i| {
            if i == 0 {
                old[0]
            } else {
                T::sample(round * 7 + i + 11)
            }
        })
        .collect();
    let mut target = bytes_of(&old);
    target.extend_from_slice(&[0xcc; 8]);
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let mr = unsafe {
        reg(
            c.b.domain.as_ref(),
            &mut target,
            MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            1000 + round,
        )
    };
    let mut xb = bytes_of(&x);
    let mut cb = bytes_of(&cmpv);
    let mut result = vec![0u8; n as usize * size];
    let xiov = iov(&mut xb);
    let ciov = iov(&mut cb);
    let riov = iov(&mut result);
    let remote = [
        RmaIov {
            addr: 0,
            len: 1,
            key: mr.key(),
        },
        RmaIov {
            addr: size as u64,
            len: 2,
            key: mr.key(),
        },
    ];
    let m = AtomicMsg {
        iov: if op == AtomicOp::AtomicRead {
            &[]
        } else {
            &xiov
        },
        desc: &[],
        addr: c.b_at_a,
        rma_iov: &remote,
        datatype: T::DT,
        op,
        result: if fetch || compare { &riov } else { &[] },
        compare: if compare { &ciov } else { &[] },
        context: round,
        data: 0,
    };
    // SAFETY: all buffers outlive the completion read below.
    unsafe { c.a.ep.atomicmsg(&m, OpFlags::empty()) }
        .unwrap_or_else(|e| panic!("{} on {}: {e}", op.fi_name(), T::DT.fi_name()));
    let e = next(c.a.cq.as_ref(), &[c.b.cq.as_ref()])
        .unwrap_or_else(|e| panic!("{} on {}: {e:?}", op.fi_name(), T::DT.fi_name()));
    assert_eq!(e.context, round);
    assert!(e.flags.contains(CompletionFlags::ATOMIC));
    let want: Vec<T> = (0..n as usize)
        .map(|i| T::expect(op, old[i], x[i], cmpv[i]))
        .collect();
    let got: Vec<T> = values(&target[..n as usize * size]);
    assert_eq!(
        got,
        want,
        "{} on {} (fetch {fetch}, compare {compare})",
        op.fi_name(),
        T::DT.fi_name()
    );
    assert_eq!(
        &target[n as usize * size..],
        &[0xcc; 8],
        "nothing past the range"
    );
    if fetch || compare {
        assert_eq!(values::<T>(&result), old, "old values of {}", op.fi_name());
    }
    drop(mr);
}

fn all_ops<T: V>(c: &Ctx) {
    let mut round = 0;
    for op in PLAIN {
        let valid = c.a.ep.atomic_valid(T::DT, op, false, false);
        if !T::INT && int_only(op) {
            assert_eq!(valid.unwrap_err().kind(), ErrorKind::OpNotSupp);
            continue;
        }
        assert!(valid.unwrap() >= 3);
        assert!(c.a.ep.atomic_valid(T::DT, op, true, false).is_ok());
        for fetch in [false, true] {
            round += 1;
            check::<T>(c, op, fetch, false, round);
        }
    }
    round += 1;
    check::<T>(c, AtomicOp::AtomicRead, true, false, round);
    assert_eq!(
        c.a.ep
            .atomic_valid(T::DT, AtomicOp::AtomicRead, false, false)
            .unwrap_err()
            .kind(),
        ErrorKind::OpNotSupp
    );
    for op in COMPARE {
        let valid = c.a.ep.atomic_valid(T::DT, op, false, true);
        if !T::INT && int_only(op) {
            assert_eq!(valid.unwrap_err().kind(), ErrorKind::OpNotSupp);
            continue;
        }
        assert!(valid.is_ok());
        assert_eq!(
            c.a.ep
                .atomic_valid(T::DT, op, false, false)
                .unwrap_err()
                .kind(),
            ErrorKind::OpNotSupp
        );
        round += 1;
        check::<T>(c, op, false, true, round);
    }
}

#[test]
fn every_op_on_every_type() {
    let (a, b, b_at_a, _) = pair();
    let c = Ctx { a, b, b_at_a };
    all_ops::<i8>(&c);
    all_ops::<u8>(&c);
    all_ops::<i16>(&c);
    all_ops::<u16>(&c);
    all_ops::<i32>(&c);
    all_ops::<u32>(&c);
    all_ops::<i64>(&c);
    all_ops::<u64>(&c);
    all_ops::<f32>(&c);
    all_ops::<f64>(&c);
    for dt in [
        Datatype::FloatComplex,
        Datatype::DoubleComplex,
        Datatype::LongDouble,
        Datatype::LongDoubleComplex,
    ] {
        assert_eq!(
            c.a.ep
                .atomic_valid(dt, AtomicOp::Sum, false, false)
                .unwrap_err()
                .kind(),
            ErrorKind::OpNotSupp
        );
    }
}

#[test]
fn refused_atomics_change_nothing() {
    let (a, b, b_at_a, _) = pair();
    let mut target = 5u64.to_le_bytes().to_vec();
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let _ro = unsafe { reg(b.domain.as_ref(), &mut target, MrAccess::REMOTE_READ, 1) };
    let mut x = 1u64.to_le_bytes().to_vec();
    let mut out = vec![0u8; 8];
    let xiov = iov(&mut x);
    let oiov = iov(&mut out);
    let no_write = "memory key 0x1 does not grant FI_REMOTE_WRITE";
    let cases = [
        (1u64, 0u64, false, ErrorKind::Access, no_write),
        (1, 0, true, ErrorKind::Access, no_write),
        (
            2,
            0,
            false,
            ErrorKind::KeyRejected,
            "no memory region with key 0x2",
        ),
        (1, 8, true, ErrorKind::Access, no_write),
    ];
    for (i, (key, addr, fetch, kind, says)) in cases.into_iter().enumerate() {
        let remote = [RmaIov { addr, len: 1, key }];
        let m = AtomicMsg {
            iov: &xiov,
            desc: &[],
            addr: b_at_a,
            rma_iov: &remote,
            datatype: Datatype::Uint64,
            op: AtomicOp::Sum,
            result: if fetch { &oiov } else { &[] },
            compare: &[],
            context: i as u64,
            data: 0,
        };
        // SAFETY: the buffers outlive the completion.
        unsafe { a.ep.atomicmsg(&m, OpFlags::empty()).unwrap() };
        let e = next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap_err();
        assert_eq!((e.err, e.entry.context), (kind, i as u64));
        // The target's reason comes back (protocol version 2), and the
        // length is the operation's (one u64), as on shm.
        let want = format!("tcp: the peer refused the atomic operation: {says}");
        assert_eq!(e.err_text, want);
        assert_eq!(e.entry.len, 8);
    }
    assert_eq!(u64::from_le_bytes(target[..].try_into().unwrap()), 5);
    // A read is allowed by the read-only region.
    let remote = [RmaIov {
        addr: 0,
        len: 1,
        key: 1,
    }];
    let m = AtomicMsg {
        iov: &[],
        desc: &[],
        addr: b_at_a,
        rma_iov: &remote,
        datatype: Datatype::Uint64,
        op: AtomicOp::AtomicRead,
        result: &oiov,
        compare: &[],
        context: 9,
        data: 0,
    };
    // SAFETY: as above.
    unsafe { a.ep.atomicmsg(&m, OpFlags::empty()).unwrap() };
    assert_eq!(next(a.cq.as_ref(), &[b.cq.as_ref()]).unwrap().context, 9);
    assert_eq!(u64::from_le_bytes(out[..].try_into().unwrap()), 5);
}

#[test]
fn local_argument_errors() {
    let (a, _b, b_at_a, _) = pair();
    let mut x = vec![0u8; 8];
    let xiov = iov(&mut x);
    let remote = [RmaIov {
        addr: 0,
        len: 2,
        key: 1,
    }];
    let base = AtomicMsg {
        iov: &xiov,
        desc: &[],
        addr: b_at_a,
        rma_iov: &remote,
        datatype: Datatype::Uint64,
        op: AtomicOp::Sum,
        result: &[],
        compare: &[],
        context: 0,
        data: 0,
    };
    // SAFETY: each call is refused before anything is queued.
    unsafe {
        assert_eq!(
            a.ep.atomicmsg(&base, OpFlags::empty()).unwrap_err().kind(),
            ErrorKind::Inval,
            "8 operand bytes for 2 elements"
        );
        let m = AtomicMsg {
            op: AtomicOp::Cswap,
            ..base
        };
        assert_eq!(
            a.ep.atomicmsg(&m, OpFlags::empty()).unwrap_err().kind(),
            ErrorKind::OpNotSupp,
            "a compare op without compare values"
        );
        let m = AtomicMsg {
            datatype: Datatype::Double,
            op: AtomicOp::Bor,
            ..base
        };
        assert_eq!(
            a.ep.atomicmsg(&m, OpFlags::empty()).unwrap_err().kind(),
            ErrorKind::OpNotSupp
        );
    }
}

#[test]
fn concurrent_sums_are_atomic() {
    let info = rdm_info();
    let target_side = side(&info);
    let mut counter = vec![0u8; 8];
    // SAFETY: the buffer is declared before the region, so it outlives it.
    let mr = unsafe {
        reg(
            target_side.domain.as_ref(),
            &mut counter,
            MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ,
            55,
        )
    };
    let name = target_side.ep.getname().unwrap();
    let per = 500u64;
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let stop = &stop;
        let ts = &target_side;
        s.spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                settle(&[ts.cq.as_ref()], 1);
            }
        });
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let name = name.clone();
                let key = mr.key();
                let info = info.clone();
                s.spawn(move || {
                    let me = side(&info);
                    let dest = insert(&me, &name);
                    let mut one = 1u64.to_le_bytes().to_vec();
                    let oiov = iov(&mut one);
                    let remote = [RmaIov {
                        addr: 0,
                        len: 1,
                        key,
                    }];
                    for i in 0..per {
                        let m = AtomicMsg {
                            iov: &oiov,
                            desc: &[],
                            addr: dest,
                            rma_iov: &remote,
                            datatype: Datatype::Uint64,
                            op: AtomicOp::Sum,
                            result: &[],
                            compare: &[],
                            context: i,
                            data: 0,
                        };
                        // SAFETY: `one` outlives the completion.
                        unsafe { me.ep.atomicmsg(&m, OpFlags::empty()).unwrap() };
                        assert_eq!(next(me.cq.as_ref(), &[]).unwrap().context, i);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    assert_eq!(u64::from_le_bytes(counter[..].try_into().unwrap()), 2 * per);
}
