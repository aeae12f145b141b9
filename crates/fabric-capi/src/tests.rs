//! Unit tests of the conversions and of the exported functions called from
//! Rust. The C programs of `tests/` check the same through the C ABI.

use std::ffi::{CStr, CString, c_void};
use std::net::{Ipv6Addr, SocketAddrV4, SocketAddrV6};
use std::ptr;

use fabric::{
    AddrFormat, Address, AvType, Caps, CompOrder, EpType, ErrorKind, Handle, Info, Mode, MrMode,
    MsgOrder, OpFlags, Progress, Protocol, ResourceMgmt, SockaddrIb, Threading, Version,
};

use crate::convert::{self, AddrUse};
use crate::types::fi_type::*;
use crate::types::{FiEpAttr, FiInfo};
use crate::*;

/// An Info with every field set to something non-zero.
fn rich() -> Info {
    let mut i = Info {
        caps: Caps::MSG | Caps::TAGGED | Caps::SEND | Caps::RECV | Caps::from_bits_retain(1 << 62),
        mode: Mode::CONTEXT | Mode::MSG_PREFIX,
        addr_format: AddrFormat::SockaddrIn,
        src_addr: Some(Address::In(SocketAddrV4::new([192, 0, 2, 1].into(), 7471))),
        dest_addr: Some(Address::In(SocketAddrV4::new([192, 0, 2, 2].into(), 0))),
        handle: Some(Handle(0x1000)),
        ..Info::default()
    };
    i.tx_attr.caps = Caps::MSG | Caps::SEND;
    i.tx_attr.mode = Mode::CONTEXT;
    i.tx_attr.op_flags = OpFlags::INJECT_COMPLETE;
    i.tx_attr.msg_order = MsgOrder::SAS | MsgOrder::RMA_WAW;
    i.tx_attr.comp_order = CompOrder::STRICT;
    i.tx_attr.inject_size = 64;
    i.tx_attr.size = 1024;
    i.tx_attr.iov_limit = 4;
    i.tx_attr.rma_iov_limit = 2;
    i.tx_attr.tclass = 0x200;
    i.rx_attr.caps = Caps::MSG | Caps::RECV;
    i.rx_attr.mode = Mode::CONTEXT;
    i.rx_attr.op_flags = OpFlags::MULTI_RECV;
    i.rx_attr.msg_order = MsgOrder::SAS;
    i.rx_attr.comp_order = CompOrder::DATA;
    i.rx_attr.total_buffered_recv = 65536;
    i.rx_attr.size = 2048;
    i.rx_attr.iov_limit = 8;
    i.ep_attr.ep_type = EpType::Rdm;
    i.ep_attr.protocol = Protocol::Xnet;
    i.ep_attr.protocol_version = 3;
    i.ep_attr.max_msg_size = usize::MAX;
    i.ep_attr.msg_prefix_size = 16;
    i.ep_attr.max_order_raw_size = 1;
    i.ep_attr.max_order_war_size = 2;
    i.ep_attr.max_order_waw_size = 3;
    i.ep_attr.mem_tag_format = 0xaaaa_aaaa_aaaa_aaaa;
    i.ep_attr.tx_ctx_cnt = 1;
    i.ep_attr.rx_ctx_cnt = fabric::SHARED_CONTEXT;
    i.ep_attr.auth_key_size = 3;
    i.ep_attr.auth_key = Some(vec![1, 2, 3]);
    let d = &mut i.domain_attr;
    d.domain = Some(Handle(0x2000));
    d.name = Some("eth0".into());
    d.threading = Threading::Domain;
    d.control_progress = Progress::Auto;
    d.data_progress = Progress::Manual;
    d.resource_mgmt = ResourceMgmt::Enabled;
    d.av_type = AvType::Table;
    d.mr_mode = MrMode::LOCAL | MrMode::PROV_KEY | MrMode::from_bits_retain(1 << 31);
    d.mr_key_size = 8;
    d.cq_data_size = 8;
    d.cq_cnt = 10;
    d.ep_cnt = 11;
    d.tx_ctx_cnt = 12;
    d.rx_ctx_cnt = 13;
    d.max_ep_tx_ctx = 14;
    d.max_ep_rx_ctx = 15;
    d.max_ep_stx_ctx = 16;
    d.max_ep_srx_ctx = 17;
    d.cntr_cnt = 18;
    d.mr_iov_limit = 19;
    d.caps = Caps::LOCAL_COMM | Caps::REMOTE_COMM;
    d.mode = Mode::LOCAL_MR;
    d.auth_key = Some(vec![9; 5]);
    d.auth_key_size = 5;
    d.max_err_data = 20;
    d.mr_cnt = 21;
    d.tclass = 0x100;
    let f = &mut i.fabric_attr;
    f.fabric = Some(Handle(0x3000));
    f.name = Some("192.0.2.0/24".into());
    f.prov_name = Some("tcp".into());
    f.prov_version = Version::new(117, 0);
    f.api_version = Version::CURRENT;
    i
}

/// Address variants the C form must carry unchanged.
fn addresses() -> Vec<(AddrFormat, Address)> {
    vec![
        (
            AddrFormat::SockaddrIn6,
            Address::In6(SocketAddrV6::new(
                "2001:db8::1".parse().expect("ip"),
                7471,
                5,
                2,
            )),
        ),
        (
            AddrFormat::SockaddrIb,
            Address::Ib(SockaddrIb {
                pkey: 0xffff,
                flowinfo: 0,
                gid: Ipv6Addr::LOCALHOST,
                sid: 0x0106_1d2f,
                scope_id: 0,
            }),
        ),
        (AddrFormat::Str, Address::Str("fi_shm://rank0".into())),
        (
            AddrFormat::Efa,
            Address::Raw {
                format: AddrFormat::Efa,
                bytes: vec![0xab; 32],
            },
        ),
    ]
}

fn round_trip(info: &Info) -> Info {
    let c = convert::info_to_c(info).expect("allocation");
    // SAFETY: `c` is a fresh, fully allocated fi_info, freed once here.
    unsafe {
        let back = convert::info_from_c(&*c, AddrUse::ALL).expect("convertible");
        fi_freeinfo(c);
        back
    }
}

#[test]
fn rust_to_c_to_rust_keeps_every_field() {
    let info = rich();
    assert_eq!(round_trip(&info), info);
    assert_eq!(round_trip(&Info::default()), Info::default());
    for (format, addr) in addresses() {
        let info = Info {
            addr_format: format,
            src_addr: Some(addr.clone()),
            dest_addr: Some(addr),
            ..Info::default()
        };
        assert_eq!(round_trip(&info), info);
    }
}

#[test]
fn c_values_are_libfabric_values() {
    let c = convert::info_to_c(&rich()).expect("allocation");
    // SAFETY: fresh fi_info from info_to_c; freed once.
    unsafe {
        let i = &*c;
        assert!(i.next.is_null() && i.nic.is_null());
        assert_eq!(i.addr_format, 2);
        assert_eq!(i.src_addrlen, 16);
        let src = std::slice::from_raw_parts(i.src_addr.cast::<u8>(), 16);
        assert_eq!(&src[..8], &[2, 0, 0x1d, 0x2f, 192, 0, 2, 1]);
        assert_eq!(i.handle.expose_provenance(), 0x1000);
        assert_eq!((*i.ep_attr).r#type, 3);
        assert_eq!((*i.ep_attr).auth_key_size, 3);
        assert_eq!(*(*i.ep_attr).auth_key.add(2), 3);
        assert_eq!((*i.domain_attr).threading, 3);
        assert_eq!(
            (*i.domain_attr).mr_mode,
            (1u32 << 2 | 1 << 6 | 1 << 31) as i32
        );
        assert_eq!(CStr::from_ptr((*i.domain_attr).name), c"eth0");
        assert_eq!(CStr::from_ptr((*i.fabric_attr).prov_name), c"tcp");
        assert_eq!((*i.fabric_attr).prov_version, 117 << 16);
        fi_freeinfo(c);
    }
}

#[test]
fn list_keeps_order_and_dup_copies_one_element() {
    let mut a = rich();
    a.fabric_attr.prov_name = Some("first".into());
    let mut b = rich();
    b.fabric_attr.prov_name = Some("second".into());
    let list = convert::list_to_c(&[a, b.clone()]).expect("allocation");
    // SAFETY: fresh list of two; the copy and the list are freed once.
    unsafe {
        let second = (*list).next;
        assert!(!second.is_null() && (*second).next.is_null());
        let copy = fi_dupinfo(second);
        assert!(!copy.is_null() && (*copy).next.is_null());
        assert_ne!((*copy).src_addr, (*second).src_addr);
        assert_ne!((*(*copy).domain_attr).name, (*(*second).domain_attr).name);
        let back = convert::info_from_c(&*copy, AddrUse::ALL).expect("convertible");
        assert_eq!(back, b);
        fi_freeinfo(copy);
        fi_freeinfo(list);
    }
}

#[test]
fn allocinfo_is_zeroed_and_complete() {
    // SAFETY: NULL asks for fi_allocinfo; the result is freed once.
    unsafe {
        let i = fi_dupinfo(ptr::null());
        assert!(!i.is_null());
        let r = &*i;
        for p in [
            r.tx_attr.cast::<c_void>(),
            r.rx_attr.cast(),
            r.ep_attr.cast(),
            r.domain_attr.cast(),
            r.fabric_attr.cast(),
        ] {
            assert!(!p.is_null());
        }
        assert!(r.next.is_null() && r.src_addr.is_null() && r.handle.is_null());
        assert_eq!(
            convert::info_from_c(r, AddrUse::ALL).expect("zero"),
            Info::default()
        );
        fi_freeinfo(i);
    }
}

#[test]
fn dup_keeps_null_substructures() {
    let mut src: FiInfo = convert_zeroed();
    src.caps = Caps::MSG.bits();
    // SAFETY: `src` is a valid fi_info with null pointers; the copy is
    // freed once.
    unsafe {
        let copy = fi_dupinfo(&src);
        assert!((*copy).tx_attr.is_null() && (*copy).fabric_attr.is_null());
        assert_eq!((*copy).caps, Caps::MSG.bits());
        fi_freeinfo(copy);
    }
}

fn convert_zeroed() -> FiInfo {
    // SAFETY: FiInfo is integers and raw pointers, all valid when zero.
    unsafe { std::mem::zeroed() }
}

fn hints_result(hints: &FiInfo, flags: u64, node: Option<&CStr>) -> i32 {
    let mut out: *mut FiInfo = ptr::null_mut();
    // SAFETY: valid hints and out pointer; a result list is freed.
    unsafe {
        let ret = fi_getinfo(
            Version::CURRENT.to_u32(),
            node.map_or(ptr::null(), CStr::as_ptr),
            ptr::null(),
            flags,
            hints,
            &mut out,
        );
        fi_freeinfo(out);
        ret
    }
}

#[test]
fn unreadable_hints_are_einval() {
    let inval = ErrorKind::Inval.code();
    let mut h = convert_zeroed();
    h.addr_format = 999;
    assert_eq!(hints_result(&h, 0, None), inval);

    // An address shorter than its format.
    let bytes = [2u8, 0, 0, 1, 127, 0, 0, 1];
    let mut h = convert_zeroed();
    h.addr_format = AddrFormat::SockaddrIn.as_u32();
    h.src_addr = bytes.as_ptr().cast_mut().cast();
    h.src_addrlen = bytes.len();
    assert_eq!(hints_result(&h, 0, None), inval);
    // ... ignored with FI_SOURCE, so no longer an error of the hints.
    let source = fabric::GetinfoFlags::SOURCE.bits();
    assert_ne!(hints_result(&h, source, Some(c"127.0.0.1")), inval);
    // A set address with length 0.
    h.src_addrlen = 0;
    assert_eq!(hints_result(&h, 0, None), inval);

    let mut ep = FiEpAttr {
        r#type: 77,
        protocol: 0,
        protocol_version: 0,
        max_msg_size: 0,
        msg_prefix_size: 0,
        max_order_raw_size: 0,
        max_order_war_size: 0,
        max_order_waw_size: 0,
        mem_tag_format: 0,
        tx_ctx_cnt: 0,
        rx_ctx_cnt: 0,
        auth_key_size: 0,
        auth_key: ptr::null_mut(),
    };
    let mut h = convert_zeroed();
    h.ep_attr = &mut ep;
    assert_eq!(hints_result(&h, 0, None), inval);

    let bad = CString::new(vec![0xffu8, 0xfe]).expect("no NUL");
    assert_eq!(hints_result(&convert_zeroed(), 0, Some(&bad)), inval);
}

#[test]
fn getinfo_arguments() {
    let hints = convert_zeroed();
    // SAFETY: the hints are valid; a NULL out pointer is the case tested.
    let ret = unsafe {
        fi_getinfo(
            Version::CURRENT.to_u32(),
            ptr::null(),
            ptr::null(),
            0,
            &hints,
            ptr::null_mut(),
        )
    };
    assert_eq!(ret, ErrorKind::Inval.code());
    let mut out = 0x10 as *mut FiInfo;
    // SAFETY: NULL hints, writable out pointer.
    let ret = unsafe {
        fi_getinfo(
            Version::new(1, 18).to_u32(),
            ptr::null(),
            ptr::null(),
            0,
            ptr::null(),
            &mut out,
        )
    };
    assert_eq!(ret, ErrorKind::NoSys.code());
    assert!(out.is_null(), "info is NULL after an error");
}

/// `fi_tostr`'s text, or `None` for NULL.
fn tostr_opt(data: *const c_void, ty: u32) -> Option<String> {
    // SAFETY: callers pass data of the type named.
    let p = unsafe { fi_tostr(data, ty) };
    // SAFETY: fi_tostr returns NULL or a C string in this thread's buffer.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

fn tostr(data: *const c_void, ty: u32) -> String {
    tostr_opt(data, ty).expect("fi_tostr gave NULL")
}

/// libfabric 1.17's texts (`tests/tostr.rs` compares them all with
/// Debian's library).
#[test]
fn tostr_types() {
    let caps = (Caps::MSG | Caps::TAGGED).bits();
    assert_eq!(
        tostr((&raw const caps).cast(), FI_TYPE_CAPS),
        "FI_MSG, FI_TAGGED"
    );
    let ep = EpType::Rdm.as_u32();
    assert_eq!(tostr((&raw const ep).cast(), FI_TYPE_EP_TYPE), "FI_EP_RDM");
    let bogus = 99u32;
    assert_eq!(tostr((&raw const bogus).cast(), FI_TYPE_EP_TYPE), "Unknown");
    let fmt = AddrFormat::SockaddrIn6.as_u32();
    assert_eq!(
        tostr((&raw const fmt).cast(), FI_TYPE_ADDR_FORMAT),
        "FI_SOCKADDR_IN6"
    );
    let order = 0u64;
    assert_eq!(tostr((&raw const order).cast(), FI_TYPE_MSG_ORDER), "");
    assert!(tostr(ptr::null(), FI_TYPE_VERSION).starts_with("fabric-rs "));
    assert_eq!(tostr_opt(ptr::null(), FI_TYPE_CAPS), None);
    assert_eq!(tostr((&raw const caps).cast(), 4242), "Unknown type");
    // The low 32 bits of FI_MSG | FI_TAGGED: 0xa, FI_ATOMIC_READ.
    assert_eq!(
        tostr((&raw const caps).cast(), FI_TYPE_ATOMIC_OP),
        "FI_ATOMIC_READ"
    );

    // fi_tostr reads `handle` as an object: a real one, or none.
    let info = Info {
        handle: None,
        ..rich()
    };
    let c = convert::info_to_c(&info).expect("allocation");
    let text = tostr(c.cast(), FI_TYPE_INFO);
    assert_eq!(text, crate::info_text(&info));
    assert!(text.starts_with("fi_info:\n    caps: [ FI_MSG, FI_TAGGED, FI_RECV, FI_SEND ]\n"));
    assert!(text.contains("\n    src_addr: fi_sockaddr_in://192.0.2.1:7471\n"));
    assert!(text.contains("\n        domain: 0x2000\n"));
    assert!(text.ends_with("\n    nic: (nil)\n"), "{text}");
    // SAFETY: `c` is a fresh fi_info; its tx_attr is valid.
    let tx = tostr(unsafe { (*c).tx_attr }.cast(), FI_TYPE_TX_ATTR);
    assert!(
        tx.starts_with("fi_tx_attr:\n    caps: [ FI_MSG, FI_SEND ]\n"),
        "{tx}"
    );
    assert!(tx.ends_with("    tclass: 0x200\n"), "{tx}");
    // SAFETY: as above.
    let fa = tostr(unsafe { (*c).fabric_attr }.cast(), FI_TYPE_FABRIC_ATTR);
    assert!(fa.contains("    prov_name: tcp\n"), "{fa}");

    let mut buf = [0x55 as std::ffi::c_char; 8];
    // SAFETY: `buf` is writable for its length; `c` is valid.
    let p = unsafe { fi_tostr_r(buf.as_mut_ptr(), buf.len(), c.cast(), FI_TYPE_INFO) };
    assert_eq!(p, buf.as_mut_ptr());
    // SAFETY: fi_tostr_r wrote a NUL within the buffer.
    assert_eq!(unsafe { CStr::from_ptr(p) }, c"fi_info");
    // SAFETY: freed once.
    unsafe { fi_freeinfo(c) };
}

#[test]
fn strerror_and_version() {
    let s = |code| {
        // SAFETY: fi_strerror returns static C strings.
        unsafe { CStr::from_ptr(fi_strerror(code)) }
            .to_str()
            .expect("text")
    };
    assert_eq!(s(61), "No data available");
    assert_eq!(s(-61), "No data available");
    assert_eq!(s(265), "Truncation error");
    assert_eq!(s(0), "Success");
    assert_eq!(s(9999), "Unknown error");
    assert_eq!(s(i32::MIN), "Unknown error");
    assert_eq!(fi_version(), (1 << 16) | 17);
}

#[test]
fn params_list_the_registry_variables() {
    let mut params = ptr::null_mut();
    let mut count = 0;
    // SAFETY: writable out pointers; the array is freed once.
    unsafe {
        assert_eq!(fi_getparams(&mut params, &mut count), 0);
        let list = std::slice::from_raw_parts(params, count as usize + 1);
        assert!(list[count as usize].name.is_null());
        let names: Vec<_> = list[..count as usize]
            .iter()
            .map(|p| CStr::from_ptr(p.name).to_string_lossy().into_owned())
            .collect();
        let expected: Vec<_> = fabric::Registry::global()
            .env_vars()
            .iter()
            .map(|v| v.name.to_string())
            .collect();
        assert_eq!(names, expected);
        assert!(!list[0].help_string.is_null());
        fi_freeparams(params);
        assert_eq!(
            fi_getparams(ptr::null_mut(), &mut count),
            ErrorKind::Inval.code()
        );
    }
}

#[test]
fn fabric_without_attributes_is_invalid() {
    let mut fabric = 0x10 as *mut crate::types::FidFabric;
    // SAFETY: writable out pointer.
    let ret = unsafe { fi_fabric(ptr::null_mut(), &mut fabric, ptr::null_mut()) };
    assert_eq!(ret, ErrorKind::Inval.code());
    assert!(fabric.is_null());
    // SAFETY: NULL out pointer: refused without a write.
    let ret = unsafe { fi_fabric(ptr::null_mut(), ptr::null_mut(), ptr::null_mut()) };
    assert_eq!(ret, ErrorKind::Inval.code());
}

#[test]
fn a_close_and_a_new_dependant_exclude_each_other() {
    use crate::obj::Refs;
    let r = Refs::default();
    // A dependant that fails lets the close through.
    drop(r.hold().expect("open"));
    let kept = r.hold().expect("open");
    kept.keep();
    assert!(!r.close(), "busy while a dependant counts");
    r.release();
    assert!(r.close());
    assert!(r.hold().is_none(), "closing: no new dependant");
    assert!(!r.close(), "closed once");
    // Racing threads: each close that wins saw no dependant.
    for _ in 0..200 {
        let r = std::sync::Arc::new(Refs::default());
        let r2 = r.clone();
        let t = std::thread::spawn(move || r2.hold().map(crate::obj::Hold::keep).is_some());
        let closed = r.close();
        let held = t.join().unwrap();
        // One of the two, never both, never neither.
        assert_ne!(closed, held);
    }
}
