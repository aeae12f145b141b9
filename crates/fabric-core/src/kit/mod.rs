//! Building blocks every provider needs, written once: the completion
//! queue core, the spin-then-block wait, the check of an endpoint's default
//! operation flags, counters, tag matching with the unexpected queue, the
//! receive engine built on it ([`rx`]), the memory-region key table, the
//! address-vector table, the executor of atomic operations at the target, and the small
//! helpers every provider had its own copy of (a poison-tolerant [`lock`],
//! a fast [`hash`]er for maps keyed by local numbers, [`net`] naming).
//!
//! None of these know about a transport. Providers wrap them in their
//! object types and drive them from their progress engines.

// The executor updates registered memory with the processor's atomic
// instructions through raw pointers, which needs `unsafe`; each block
// states why it is sound.
#[allow(unsafe_code)]
pub mod atomic;
pub mod av;
pub mod binds;
pub mod caps;
pub mod cntr;
// Copies between raw buffers the application vouched for; each block
// states why it is sound.
#[allow(unsafe_code)]
pub mod copy;
pub mod cq;
pub mod defaults;
pub mod hash;
pub mod mr;
pub mod net;
pub mod objects;
pub mod rx;
pub mod tag;
pub mod wait;

/// Locks a mutex, recovering from poisoning: the kit's and providers'
/// state behind a mutex is changed by whole operations, so a panicking
/// holder cannot leave it half-changed.
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Takes spin lock `m`, calling `wait` with the number of failed tries
/// (from 1, wrapping) after each one.
#[inline]
fn take<T>(
    m: &spin::mutex::SpinMutex<T>,
    mut wait: impl FnMut(u32),
) -> spin::mutex::SpinMutexGuard<'_, T> {
    let mut tries = 0u32;
    loop {
        if let Some(g) = m.try_lock() {
            return g;
        }
        tries = tries.wrapping_add(1);
        wait(tries);
    }
}

/// Takes a spin lock held only for a few instructions (a queue's push or
/// pop): spins, and yields now and then, since its holder may have been
/// preempted.
#[inline]
pub fn spin_lock<T>(m: &spin::mutex::SpinMutex<T>) -> spin::mutex::SpinMutexGuard<'_, T> {
    take(m, |tries| {
        if tries % 64 == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    })
}

/// Takes a spin lock that may be held for a while (a progress pass that
/// reads a large payload, opening or closing an endpoint): spins briefly,
/// then yields the CPU between tries, then sleeps 50 µs between them, so
/// that a waiter never burns a core for long. Its release is a plain
/// store, where a `std` mutex's is a locked swap: on a busy-polling
/// endpoint, whose every look takes and releases such locks, each locked
/// instruction costs about 45 TSC ticks here.
pub fn patient_lock<T>(m: &spin::mutex::SpinMutex<T>) -> spin::mutex::SpinMutexGuard<'_, T> {
    take(m, |tries| {
        if tries < 64 {
            std::hint::spin_loop();
        } else if tries < 128 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    })
}

/// A 64-bit value nobody can predict from earlier ones: the process's
/// randomly keyed SipHash (std's `RandomState`, seeded by the operating
/// system) over a counter, the pid and the time. For keys and nonces a
/// peer must not guess (provider-chosen memory keys, endpoint nonces).
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    h.finish()
}
