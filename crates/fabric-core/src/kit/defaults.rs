//! The default operation flags an endpoint is opened with
//! (`tx_attr.op_flags`, `rx_attr.op_flags` of its info): the flags of the
//! short forms of the operations (`fi_send`, `fi_recv`, `fi_write`, ...),
//! which carry no flags of their own (fi_endpoint(3)).

use crate::{Error, Info, OpFlags, Result};

/// Checks that the defaults of `info` are among those the provider `prov`
/// accepts (`tx` and `rx`, what its offers list); `BadFlags` naming the
/// rest otherwise.
pub fn check(info: &Info, prov: &str, tx: OpFlags, rx: OpFlags) -> Result<()> {
    for (what, asked, accepted) in [
        ("tx_attr.op_flags", info.tx_attr.op_flags, tx),
        ("rx_attr.op_flags", info.rx_attr.op_flags, rx),
    ] {
        let rest = asked - accepted;
        if !rest.is_empty() {
            return Err(Error::bad_flags(format!(
                "{prov}: {what} {rest} cannot be default flags of this endpoint"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_must_be_accepted() {
        let mut i = Info::default();
        i.tx_attr.op_flags = OpFlags::DELIVERY_COMPLETE;
        let tx = OpFlags::COMPLETION | OpFlags::DELIVERY_COMPLETE;
        assert!(check(&i, "p", tx, OpFlags::empty()).is_ok());
        i.rx_attr.op_flags = OpFlags::MULTI_RECV;
        let e = check(&i, "p", tx, OpFlags::COMPLETION).unwrap_err();
        assert!(
            e.to_string().contains("rx_attr.op_flags FI_MULTI_RECV"),
            "{e}"
        );
    }
}
