//! The `#[repr(C)]` structures against libfabric's installed header: a C
//! program prints `sizeof`, `_Alignof` and, for every field, `offsetof` and
//! the field's size; the test compares them with Rust's `size_of`,
//! `align_of` and `offset_of!`. It also reads the field names of each
//! structure from the header, so that a field missing on the Rust side is
//! caught even where it would hide in padding, and compares the constants
//! (flag bits, enumeration values, error codes) the Rust model shares with
//! C.

mod common;

use std::collections::BTreeMap;
use std::mem::{align_of, offset_of, size_of};

use fabric::{
    AddrFormat, AvType, Caps, CompOrder, EpType, ErrorKind, GetinfoFlags, Mode, MrMode, MsgOrder,
    OpFlags, Progress, Protocol, ResourceMgmt, Threading,
};
use fabric_capi::types::*;

/// One C structure: its Rust twin's size, alignment and fields
/// `(name, offset, size)`.
struct Layout {
    c_name: &'static str,
    /// Only the leading fields of the C structure are declared in Rust
    /// (its size and remaining fields are not compared).
    prefix: bool,
    size: usize,
    align: usize,
    fields: Vec<(String, usize, usize)>,
}

fn size_of_field<T, F>(_: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

macro_rules! layouts {
    ($($rust:ty => $c:literal $(($prefix:ident))? { $($field:ident),* $(,)? })*) => {
        vec![$(Layout {
            c_name: $c,
            prefix: false $(|| stringify!($prefix) == "prefix")?,
            size: size_of::<$rust>(),
            align: align_of::<$rust>(),
            fields: vec![$((
                stringify!($field).trim_start_matches("r#").to_string(),
                offset_of!($rust, $field),
                size_of_field::<$rust, _>(|s| &s.$field),
            )),*],
        }),*]
    };
}

fn layouts() -> Vec<Layout> {
    layouts! {
        FiTxAttr => "fi_tx_attr" {
            caps, mode, op_flags, msg_order, comp_order, inject_size, size, iov_limit,
            rma_iov_limit, tclass,
        }
        FiRxAttr => "fi_rx_attr" {
            caps, mode, op_flags, msg_order, comp_order, total_buffered_recv, size, iov_limit,
        }
        FiEpAttr => "fi_ep_attr" {
            r#type, protocol, protocol_version, max_msg_size, msg_prefix_size,
            max_order_raw_size, max_order_war_size, max_order_waw_size, mem_tag_format,
            tx_ctx_cnt, rx_ctx_cnt, auth_key_size, auth_key,
        }
        FiDomainAttr => "fi_domain_attr" {
            domain, name, threading, control_progress, data_progress, resource_mgmt, av_type,
            mr_mode, mr_key_size, cq_data_size, cq_cnt, ep_cnt, tx_ctx_cnt, rx_ctx_cnt,
            max_ep_tx_ctx, max_ep_rx_ctx, max_ep_stx_ctx, max_ep_srx_ctx, cntr_cnt,
            mr_iov_limit, caps, mode, auth_key, auth_key_size, max_err_data, mr_cnt, tclass,
        }
        FiFabricAttr => "fi_fabric_attr" {
            fabric, name, prov_name, prov_version, api_version,
        }
        FiInfo => "fi_info" {
            next, caps, mode, addr_format, src_addrlen, dest_addrlen, src_addr, dest_addr,
            handle, tx_attr, rx_attr, ep_attr, domain_attr, fabric_attr, nic,
        }
        FiParam => "fi_param" {
            name, r#type, help_string, value,
        }
    }
}

/// The structures of the objects opened from C (`fabric_capi::obj`).
fn object_layouts() -> Vec<Layout> {
    use fabric_capi::obj::atomic::*;
    use fabric_capi::obj::av::*;
    use fabric_capi::obj::cntr::*;
    use fabric_capi::obj::cq::*;
    use fabric_capi::obj::domain::*;
    use fabric_capi::obj::ep::*;
    use fabric_capi::obj::eq::*;
    use fabric_capi::obj::fabric::*;
    use fabric_capi::obj::mr::*;
    use fabric_capi::obj::msg::*;
    use fabric_capi::obj::passive::*;
    use fabric_capi::obj::rma::*;
    use fabric_capi::obj::*;
    layouts! {
        Fid => "fid" { fclass, context, ops }
        FiOps => "fi_ops" { size, close, bind, control, ops_open, tostr, ops_set }
        FidFabric => "fid_fabric" { fid, ops, api_version }
        FiOpsFabric => "fi_ops_fabric" {
            size, domain, passive_ep, eq_open, wait_open, trywait, domain2,
        }
        FidDomain => "fid_domain" { fid, ops, mr }
        FiOpsDomain => "fi_ops_domain" {
            size, av_open, cq_open, endpoint, scalable_ep, cntr_open, poll_open, stx_ctx,
            srx_ctx, query_atomic, query_collective, endpoint2,
        }
        FiOpsMr => "fi_ops_mr" { size, reg, regv, regattr }
        FidMr => "fid_mr" { fid, mem_desc, key }
        FiMrAttr => "fi_mr_attr" (prefix) {
            mr_iov, iov_count, access, offset, requested_key, context,
        }
        FidEp => "fid_ep" { fid, ops, cm, msg, rma, tagged, atomic, collective }
        FidPep => "fid_pep" { fid, ops, cm }
        FiOpsEp => "fi_ops_ep" {
            size, cancel, getopt, setopt, tx_ctx, rx_ctx, rx_size_left, tx_size_left,
        }
        FiOpsCm => "fi_ops_cm" {
            size, setname, getname, getpeer, connect, listen, accept, reject, shutdown, join,
        }
        FiOpsMsg => "fi_ops_msg" {
            size, recv, recvv, recvmsg, send, sendv, sendmsg, inject, senddata, injectdata,
        }
        FiOpsTagged => "fi_ops_tagged" {
            size, recv, recvv, recvmsg, send, sendv, sendmsg, inject, senddata, injectdata,
        }
        FiMsg => "fi_msg" { msg_iov, desc, iov_count, addr, context, data }
        FiMsgTagged => "fi_msg_tagged" {
            msg_iov, desc, iov_count, addr, tag, ignore, context, data,
        }
        FiRmaIov => "fi_rma_iov" { addr, len, key }
        FiMsgRma => "fi_msg_rma" {
            msg_iov, desc, iov_count, addr, rma_iov, rma_iov_count, context, data,
        }
        FiOpsRma => "fi_ops_rma" {
            size, read, readv, readmsg, write, writev, writemsg, inject, writedata, injectdata,
        }
        FiIoc => "fi_ioc" { addr, count }
        FiRmaIoc => "fi_rma_ioc" { addr, count, key }
        FiAtomicAttr => "fi_atomic_attr" { count, size }
        FiMsgAtomic => "fi_msg_atomic" {
            msg_iov, desc, iov_count, addr, rma_iov, rma_iov_count, datatype, op, context, data,
        }
        FiOpsAtomic => "fi_ops_atomic" {
            size, write, writev, writemsg, inject, readwrite, readwritev, readwritemsg,
            compwrite, compwritev, compwritemsg, writevalid, readwritevalid, compwritevalid,
        }
        FiCqAttr => "fi_cq_attr" {
            size, flags, format, wait_obj, signaling_vector, wait_cond, wait_set,
        }
        FiCqTaggedEntry => "fi_cq_tagged_entry" { op_context, flags, len, buf, data, tag }
        FiCqErrEntry => "fi_cq_err_entry" {
            op_context, flags, len, buf, data, tag, olen, err, prov_errno, err_data,
            err_data_size,
        }
        FiOpsCq => "fi_ops_cq" {
            size, read, readfrom, readerr, sread, sreadfrom, signal, strerror,
        }
        FidCq => "fid_cq" { fid, ops }
        FiAvAttr => "fi_av_attr" {
            r#type, rx_ctx_bits, count, ep_per_node, name, map_addr, flags,
        }
        FiOpsAv => "fi_ops_av" {
            size, insert, insertsvc, insertsym, remove, lookup, straddr, av_set,
        }
        FidAv => "fid_av" { fid, ops }
        FiEqAttr => "fi_eq_attr" { size, flags, wait_obj, signaling_vector, wait_set }
        FiEqEntry => "fi_eq_entry" { fid, context, data }
        FiEqCmEntry => "fi_eq_cm_entry" (prefix) { fid, info }
        FiEqErrEntry => "fi_eq_err_entry" {
            fid, context, data, err, prov_errno, err_data, err_data_size,
        }
        FiOpsEq => "fi_ops_eq" { size, read, readerr, write, sread, strerror }
        FidEq => "fid_eq" { fid, ops }
        FiCntrAttr => "fi_cntr_attr" { events, wait_obj, wait_set, flags }
        FiOpsCntr => "fi_ops_cntr" { size, read, readerr, add, set, wait, adderr, seterr }
        FidCntr => "fid_cntr" { fid, ops }
    }
}

/// The headers declaring the structures.
const HEADERS: &[&str] = &[
    "fabric.h",
    "fi_errno.h",
    "fi_domain.h",
    "fi_endpoint.h",
    "fi_cm.h",
    "fi_tagged.h",
    "fi_rma.h",
    "fi_atomic.h",
    "fi_eq.h",
];

/// The field names of `struct <name>` in the header text, in order.
fn header_fields(header: &str, name: &str) -> Vec<String> {
    let start = header
        .find(&format!("struct {name} {{"))
        .unwrap_or_else(|| panic!("struct {name} not in the header"));
    let body = &header[start..];
    let body = &body[body.find('{').expect("{") + 1..body.find("};").expect("};")];
    // Without comments.
    let mut text = String::new();
    let mut rest = body;
    while let Some(i) = rest.find("/*") {
        text += &rest[..i];
        rest = &rest[rest[i..].find("*/").map_or(rest.len(), |j| i + j + 2)..];
    }
    text += rest;
    text.split(';')
        .map(|decl| decl.trim())
        .filter(|decl| !decl.is_empty())
        .map(|decl| {
            // A function pointer: `ret (*name)(args)`.
            if let Some(i) = decl.find("(*") {
                let name = &decl[i + 2..];
                return name[..name.find(')').expect(")")].trim().to_string();
            }
            decl.rsplit(|c: char| c.is_whitespace() || c == '*')
                .next()
                .expect("a declarator")
                .to_string()
        })
        .collect()
}

/// The constants shared with C: `(C name, value)`.
fn constants() -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = Vec::new();
    v.extend(Caps::named().map(|(n, f)| (n, f.bits())));
    v.extend(Mode::named().map(|(n, f)| (n, f.bits())));
    v.extend(MrMode::named().map(|(n, f)| (n, u64::from(f.bits()))));
    v.extend(MsgOrder::named().map(|(n, f)| (n, f.bits())));
    v.extend(CompOrder::named().map(|(n, f)| (n, f.bits())));
    v.extend(OpFlags::named().map(|(n, f)| (n, f.bits())));
    v.extend(GetinfoFlags::named().map(|(n, f)| (n, f.bits())));
    macro_rules! enums {
        ($($t:ty),*) => {$(
            v.extend(<$t>::ALL.iter().map(|e| (e.fi_name().to_string(), u64::from(e.as_u32()))));
        )*};
    }
    enums!(
        EpType,
        Protocol,
        Threading,
        Progress,
        ResourceMgmt,
        AvType,
        AddrFormat
    );
    v.extend(
        ErrorKind::ALL
            .iter()
            .map(|k| (k.c_name().to_string(), k.errno() as u64)),
    );
    use fabric_capi::types::fi_type::*;
    for (n, x) in [
        ("FI_TYPE_INFO", FI_TYPE_INFO),
        ("FI_TYPE_EP_TYPE", FI_TYPE_EP_TYPE),
        ("FI_TYPE_CAPS", FI_TYPE_CAPS),
        ("FI_TYPE_OP_FLAGS", FI_TYPE_OP_FLAGS),
        ("FI_TYPE_ADDR_FORMAT", FI_TYPE_ADDR_FORMAT),
        ("FI_TYPE_TX_ATTR", FI_TYPE_TX_ATTR),
        ("FI_TYPE_RX_ATTR", FI_TYPE_RX_ATTR),
        ("FI_TYPE_EP_ATTR", FI_TYPE_EP_ATTR),
        ("FI_TYPE_DOMAIN_ATTR", FI_TYPE_DOMAIN_ATTR),
        ("FI_TYPE_FABRIC_ATTR", FI_TYPE_FABRIC_ATTR),
        ("FI_TYPE_THREADING", FI_TYPE_THREADING),
        ("FI_TYPE_PROGRESS", FI_TYPE_PROGRESS),
        ("FI_TYPE_PROTOCOL", FI_TYPE_PROTOCOL),
        ("FI_TYPE_MSG_ORDER", FI_TYPE_MSG_ORDER),
        ("FI_TYPE_MODE", FI_TYPE_MODE),
        ("FI_TYPE_AV_TYPE", FI_TYPE_AV_TYPE),
        ("FI_TYPE_ATOMIC_TYPE", FI_TYPE_ATOMIC_TYPE),
        ("FI_TYPE_ATOMIC_OP", FI_TYPE_ATOMIC_OP),
        ("FI_TYPE_VERSION", FI_TYPE_VERSION),
        ("FI_TYPE_EQ_EVENT", FI_TYPE_EQ_EVENT),
        ("FI_TYPE_CQ_EVENT_FLAGS", FI_TYPE_CQ_EVENT_FLAGS),
        ("FI_TYPE_MR_MODE", FI_TYPE_MR_MODE),
        ("FI_TYPE_OP_TYPE", FI_TYPE_OP_TYPE),
        ("FI_TYPE_FID", FI_TYPE_FID),
        ("FI_TYPE_COLLECTIVE_OP", FI_TYPE_COLLECTIVE_OP),
        ("FI_TYPE_HMEM_IFACE", FI_TYPE_HMEM_IFACE),
        ("FI_TYPE_CQ_FORMAT", FI_TYPE_CQ_FORMAT),
        ("FI_TYPE_LOG_LEVEL", FI_TYPE_LOG_LEVEL),
        ("FI_TYPE_LOG_SUBSYS", FI_TYPE_LOG_SUBSYS),
        ("FI_PARAM_STRING", FI_PARAM_STRING),
        ("FI_PARAM_INT", FI_PARAM_INT),
        ("FI_PARAM_BOOL", FI_PARAM_BOOL),
        ("FI_PARAM_SIZE_T", FI_PARAM_SIZE_T),
    ] {
        v.push((n.to_string(), u64::from(x)));
    }
    v.push(("FI_MAJOR_VERSION".into(), 1));
    v.push(("FI_MINOR_VERSION".into(), 17));
    v
}

/// Names the Rust model has that libfabric 1.17's header does not define
/// (kfi capabilities without a libfabric constant).
const NOT_IN_HEADER: &[&str] = &["FI_CANCEL"];

fn program(layouts: &[Layout], constants: &[(String, u64)]) -> String {
    let mut c = String::from("#include <stddef.h>\n#include <stdio.h>\n");
    for h in HEADERS {
        c += &format!("#include <rdma/{h}>\n");
    }
    c += "\nint main(void)\n{\n";
    for l in layouts {
        let t = format!("struct {}", l.c_name);
        c += &format!(
            "\tprintf(\"{} %zu %zu\\n\", sizeof({t}), _Alignof({t}));\n",
            l.c_name
        );
        for (f, _, _) in &l.fields {
            c += &format!(
                "\tprintf(\"{0}.{f} %zu %zu\\n\", offsetof({t}, {f}), sizeof((({t} *)0)->{f}));\n",
                l.c_name
            );
        }
    }
    for (name, _) in constants {
        if !NOT_IN_HEADER.contains(&name.as_str()) {
            c += &format!("\tprintf(\"{name} %llu\\n\", (unsigned long long)({name}));\n");
        }
    }
    c += "\treturn 0;\n}\n";
    c
}

#[test]
fn structures_match_the_installed_header() {
    let Some(stage) = common::Stage::new("layout", true) else {
        return;
    };
    let mut layouts = layouts();
    layouts.extend(object_layouts());
    let constants = constants();
    let exe = stage.compile("layout", &program(&layouts, &constants));
    let out = stage.run(&exe, &[], false);
    common::assert_ok("layout program", &out);
    let stdout = common::text(&out.stdout);
    let c: BTreeMap<&str, &str> = stdout.lines().filter_map(|l| l.split_once(' ')).collect();

    let dir = std::path::Path::new(common::HEADER)
        .parent()
        .expect("the headers' directory");
    let header: String = HEADERS
        .iter()
        .map(|h| std::fs::read_to_string(dir.join(h)).expect("read a header"))
        .collect();
    let mut checked = 0;
    for l in &layouts {
        if !l.prefix {
            assert_eq!(
                c[l.c_name],
                format!("{} {}", l.size, l.align),
                "sizeof / _Alignof of struct {}",
                l.c_name
            );
        }
        for (f, offset, size) in &l.fields {
            let key = format!("{}.{f}", l.c_name);
            assert_eq!(
                c[key.as_str()],
                format!("{offset} {size}"),
                "offset / size of {key}"
            );
            checked += 1;
        }
        let rust_names: Vec<&str> = l.fields.iter().map(|(f, _, _)| f.as_str()).collect();
        let mut c_names = header_fields(&header, l.c_name);
        if l.prefix {
            c_names.truncate(rust_names.len());
        }
        assert_eq!(c_names, rust_names, "fields of struct {}", l.c_name);
    }
    for (name, value) in &constants {
        if NOT_IN_HEADER.contains(&name.as_str()) {
            continue;
        }
        assert_eq!(c[name.as_str()], value.to_string(), "value of {name}");
    }
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "layout: {} structures, {checked} fields and {} constants match {}\n",
            layouts.len(),
            constants.len() - NOT_IN_HEADER.len(),
            common::HEADER
        )
        .as_bytes(),
    );
}
