//! The JSON form of `Info`: C field names, flag sets as arrays of FI_
//! names, enums as FI_ names; round trips; partial input; strictness.

#![allow(clippy::field_reassign_with_default, clippy::unwrap_used)]

use fabric_core::*;

fn full() -> Info {
    let mut i = Info::default();
    i.caps = Caps::MSG | Caps::TAGGED | Caps::SEND | Caps::RECV | Caps::REMOTE_CQ_DATA;
    i.mode = Mode::CONTEXT;
    i.addr_format = AddrFormat::SockaddrIn;
    i.src_addr = Some("fi_sockaddr_in://127.0.0.1:7471".parse().unwrap());
    i.dest_addr = Some("fi_sockaddr_in://10.0.0.2:1".parse().unwrap());
    i.tx_attr.inject_size = 64;
    i.tx_attr.msg_order = MsgOrder::SAS | MsgOrder::RMA_WAW;
    i.tx_attr.comp_order = CompOrder::STRICT;
    i.rx_attr.op_flags = OpFlags::MULTI_RECV;
    i.ep_attr.ep_type = EpType::Rdm;
    i.ep_attr.protocol = Protocol::Xnet;
    i.ep_attr.tx_ctx_cnt = SHARED_CONTEXT;
    i.ep_attr.auth_key = Some(vec![1, 2, 3]);
    i.ep_attr.auth_key_size = 3;
    i.domain_attr.name = Some("lo".into());
    i.domain_attr.threading = Threading::Domain;
    i.domain_attr.mr_mode = MrMode::LOCAL | MrMode::PROV_KEY;
    i.domain_attr.av_type = AvType::Table;
    i.fabric_attr.name = Some("127.0.0.1/32".into());
    i.fabric_attr.prov_name = Some("tcp".into());
    i.fabric_attr.prov_version = Version::new(1, 0);
    i.fabric_attr.api_version = Version::CURRENT;
    i
}

#[test]
fn round_trip() {
    let i = full();
    let json = serde_json::to_string(&i).unwrap();
    let back: Info = serde_json::from_str(&json).unwrap();
    assert_eq!(back, i);
    assert_eq!(
        serde_json::from_str::<Info>(&serde_json::to_string(&Info::default()).unwrap()).unwrap(),
        Info::default()
    );
}

#[test]
fn field_and_value_names_are_libfabric_s() {
    let v = serde_json::to_value(full()).unwrap();
    assert_eq!(
        v["caps"],
        serde_json::json!([
            "FI_MSG",
            "FI_TAGGED",
            "FI_RECV",
            "FI_SEND",
            "FI_REMOTE_CQ_DATA"
        ])
    );
    assert_eq!(v["ep_attr"]["type"], "FI_EP_RDM");
    assert_eq!(v["fabric_attr"]["prov_name"], "tcp");
    assert_eq!(v["fabric_attr"]["api_version"], "1.17");
    assert_eq!(v["addr_format"], "FI_SOCKADDR_IN");
    assert_eq!(v["src_addr"], "fi_sockaddr_in://127.0.0.1:7471");
    assert_eq!(
        v["domain_attr"]["mr_mode"],
        serde_json::json!(["FI_MR_LOCAL", "FI_MR_PROV_KEY"])
    );
    assert_eq!(
        v["tx_attr"]["msg_order"],
        serde_json::json!(["FI_ORDER_SAS", "FI_ORDER_RMA_WAW"])
    );
    assert_eq!(
        v["tx_attr"]["comp_order"],
        serde_json::json!(["FI_ORDER_STRICT"])
    );
    assert_eq!(v["domain_attr"]["threading"], "FI_THREAD_DOMAIN");
    assert_eq!(v["mode"], serde_json::json!(["FI_CONTEXT"]));
}

#[test]
fn partial_input_is_zero_elsewhere() {
    let i: Info = serde_json::from_str(
        r#"{"caps":["FI_MSG","fi_tagged"],"ep_attr":{"type":"FI_EP_RDM"},"tx_attr":{"size":16}}"#,
    )
    .unwrap();
    assert_eq!(i.caps, Caps::MSG | Caps::TAGGED);
    assert_eq!(i.ep_attr.ep_type, EpType::Rdm);
    assert_eq!(i.tx_attr.size, 16);
    assert_eq!(i.mode, Mode::empty());
    assert_eq!(i.domain_attr, DomainAttr::default());
    // A flag set may also be one `|`-separated string or a number.
    let i: Info = serde_json::from_str(r#"{"caps":"FI_MSG|FI_RMA","mode":0}"#).unwrap();
    assert_eq!(i.caps, Caps::MSG | Caps::RMA);
}

#[test]
fn unknown_names_and_fields_are_refused() {
    for bad in [
        r#"{"caps":["FI_BOGUS"]}"#,
        r#"{"ep_attr":{"type":"FI_EP_NOPE"}}"#,
        r#"{"cpas":["FI_MSG"]}"#,
        r#"{"ep_attr":{"typ":"FI_EP_RDM"}}"#,
        r#"{"src_addr":"fi_sockaddr_in://1.2.3.4:99999"}"#,
        r#"{"fabric_attr":{"api_version":"1.x"}}"#,
    ] {
        let e = serde_json::from_str::<Info>(bad).unwrap_err();
        assert!(!e.to_string().is_empty(), "{bad}");
    }
}

#[test]
fn verbose_display_is_fi_info_style() {
    let text = full().verbose().to_string();
    assert!(
        text.starts_with(
            "fi_info:\n    caps: [ FI_MSG, FI_TAGGED, FI_RECV, FI_SEND, FI_REMOTE_CQ_DATA ]\n"
        ),
        "{text}"
    );
    assert!(text.contains("    src_addr: fi_sockaddr_in://127.0.0.1:7471\n"));
    assert!(text.contains("    fi_ep_attr:\n        type: FI_EP_RDM\n"));
    assert!(text.contains("        mr_mode: [ FI_MR_LOCAL, FI_MR_PROV_KEY ]\n"));
    assert!(text.contains("        op_flags: [  ]\n"));
    assert!(text.ends_with("        api_version: 1.17"));
    let short = full().to_string();
    assert_eq!(
        short,
        "provider: tcp\n    fabric: 127.0.0.1/32\n    domain: lo\n    version: 1.0\n    type: FI_EP_RDM\n    protocol: FI_PROTO_XNET"
    );
}
