//! Whether an endpoint may start an operation: its capabilities
//! (`info.caps`) name the classes of operations it was opened for, and an
//! operation outside them is refused with `OpNotSupp` (fi_getinfo(3):
//! FI_RMA / FI_ATOMIC enable those operations; FI_READ / FI_WRITE narrow
//! them to one direction when either is given).

use crate::{Caps, Error, ErrorKind, Result};

/// Checks that an endpoint with `caps` may initiate an operation of
/// `class` (`Caps::RMA` or `Caps::ATOMIC`) in direction `dir`
/// (`Caps::READ` for reads and fetching atomics, `Caps::WRITE` for writes
/// and plain atomics); `prov` and `what` name it in the error.
#[inline]
pub fn initiate(caps: Caps, class: Caps, dir: Caps, prov: &str, what: &str) -> Result<()> {
    let dirs = Caps::READ | Caps::WRITE;
    if caps.contains(class) && (!caps.intersects(dirs) || caps.contains(dir)) {
        return Ok(());
    }
    Err(refused(caps, class, dir, prov, what))
}

#[cold]
fn refused(caps: Caps, class: Caps, dir: Caps, prov: &str, what: &str) -> Error {
    let need = if caps.contains(class) { dir } else { class };
    Error::new(
        ErrorKind::OpNotSupp,
        format!("{prov}: {what} needs {need} in the endpoint's capabilities (it has {caps})"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_and_directions() {
        let rma = Caps::MSG | Caps::RMA;
        assert!(initiate(rma, Caps::RMA, Caps::READ, "p", "read").is_ok());
        assert!(initiate(rma, Caps::RMA, Caps::WRITE, "p", "write").is_ok());
        let e = initiate(
            Caps::MSG | Caps::TAGGED,
            Caps::RMA,
            Caps::WRITE,
            "p",
            "write",
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OpNotSupp);
        assert!(e.to_string().contains("FI_RMA"), "{e}");
        let reads = Caps::RMA | Caps::READ;
        assert!(initiate(reads, Caps::RMA, Caps::READ, "p", "read").is_ok());
        let e = initiate(reads, Caps::RMA, Caps::WRITE, "p", "write").unwrap_err();
        assert!(e.to_string().contains("FI_WRITE"), "{e}");
        assert_eq!(
            initiate(rma, Caps::ATOMIC, Caps::WRITE, "p", "atomic")
                .unwrap_err()
                .kind(),
            ErrorKind::OpNotSupp
        );
    }
}
