//! fi_getinfo(3) from C: a program built against `<rdma/fabric.h>` and
//! linked to this library runs every case below and prints each answer
//! (every field of every `fi_info`, read from the C structures); the test
//! computes the same text from `fabric::Registry::global()` for the same
//! request and compares. With no provider compiled in both say
//! `-FI_ENOSYS`; once providers land the same cases compare real lists.
//!
//! The hints of each case are a Rust `Info`, written out as C assignments
//! (`h->ep_attr->type = 3;`), so the C side exercises the conversion of
//! every field. Cases whose answer does not depend on the providers (bad
//! versions, unreadable hints, invalid requests) expect an exact code.
//! For every answer the program also checks that `fi_dupinfo` of each list
//! element prints the same and has `next == NULL`, and it frees every list
//! and every set of hints with `fi_freeinfo` (checked by valgrind in
//! `getinfo_cases_under_valgrind`).

mod common;

use std::fmt::Write as _;
use std::net::{Ipv6Addr, SocketAddrV4, SocketAddrV6};

use fabric::{
    AddrFormat, Address, AvType, Caps, EpType, ErrorKind, GetinfoFlags, Info, Mode, MrMode,
    Progress, Registry, Request, ResourceMgmt, Threading, Version,
};

const EINVAL: i32 = ErrorKind::Inval.code();
const ENOSYS: i32 = ErrorKind::NoSys.code();
const EBADFLAGS: i32 = ErrorKind::BadFlags.code();

/// The hints of a case.
enum Hints {
    /// NULL hints.
    Null,
    /// `fi_allocinfo()` with every field of the `Info` assigned, then the
    /// extra C statements (on `h`).
    Alloc(Info, &'static str),
    /// A bare `calloc`ed `fi_info` (NULL sub-structures) with the `Info`'s
    /// top-level fields.
    Partial(Info),
}

/// What a case must answer.
enum Expect {
    /// What the Rust registry answers.
    Same,
    /// As `Same`, and `-FI_ENODATA` whenever a provider is compiled in.
    NoData,
    /// Exactly this code, whatever the providers.
    Code(i32),
}

struct Case {
    name: &'static str,
    version: Version,
    node: Option<&'static [u8]>,
    service: Option<&'static str>,
    flags: GetinfoFlags,
    hints: Hints,
    expect: Expect,
}

impl Case {
    fn new(name: &'static str) -> Case {
        Case {
            name,
            version: Version::CURRENT,
            node: None,
            service: None,
            flags: GetinfoFlags::empty(),
            hints: Hints::Null,
            expect: Expect::Same,
        }
    }
    fn version(mut self, major: u16, minor: u16) -> Case {
        self.version = Version::new(major, minor);
        self
    }
    fn node(mut self, node: &'static str) -> Case {
        self.node = Some(node.as_bytes());
        self
    }
    fn service(mut self, service: &'static str) -> Case {
        self.service = Some(service);
        self
    }
    fn flags(mut self, flags: GetinfoFlags) -> Case {
        self.flags = flags;
        self
    }
    fn hints(mut self, f: impl FnOnce(&mut Info)) -> Case {
        let mut info = Info::default();
        f(&mut info);
        self.hints = Hints::Alloc(info, "");
        self
    }
    fn raw(mut self, c: &'static str) -> Case {
        self.hints = match self.hints {
            Hints::Alloc(info, _) => Hints::Alloc(info, c),
            _ => Hints::Alloc(Info::default(), c),
        };
        self
    }
    fn partial(mut self, f: impl FnOnce(&mut Info)) -> Case {
        let mut info = Info::default();
        f(&mut info);
        self.hints = Hints::Partial(info);
        self
    }
    fn expect(mut self, e: Expect) -> Case {
        self.expect = e;
        self
    }
}

fn in4(a: [u8; 4], port: u16) -> Address {
    Address::In(SocketAddrV4::new(a.into(), port))
}

fn cases() -> Vec<Case> {
    use GetinfoFlags as F;
    vec![
        // NULL hints: everything the providers offer.
        Case::new("null_hints"),
        Case::new("null_hints_api_1_0").version(1, 0),
        Case::new("null_hints_api_1_4").version(1, 4),
        Case::new("null_hints_api_1_5").version(1, 5),
        // A version newer than the library: FI_ENOSYS, before the hints are
        // even read.
        Case::new("api_1_18")
            .version(1, 18)
            .expect(Expect::Code(ENOSYS)),
        Case::new("api_2_0")
            .version(2, 0)
            .expect(Expect::Code(ENOSYS)),
        Case::new("api_1_18_unreadable_hints")
            .version(1, 18)
            .raw("h->addr_format = 999;")
            .expect(Expect::Code(ENOSYS)),
        // FI_PROV_ATTR_ONLY: one entry per provider.
        Case::new("prov_attr_only").flags(F::PROV_ATTR_ONLY),
        Case::new("prov_attr_only_with_hints")
            .flags(F::PROV_ATTR_ONLY)
            .hints(|h| h.caps = Caps::MSG),
        Case::new("prov_attr_only_and_source")
            .flags(F::PROV_ATTR_ONLY | F::SOURCE)
            .node("127.0.0.1"),
        // FI_SOURCE: node / service name the local side.
        Case::new("source_node_service")
            .node("127.0.0.1")
            .service("7471")
            .flags(F::SOURCE | F::NUMERICHOST)
            .hints(|h| {
                h.caps = Caps::MSG;
                h.ep_attr.ep_type = EpType::Msg;
            }),
        Case::new("source_service_only")
            .service("7471")
            .flags(F::SOURCE),
        Case::new("source_without_node_or_service")
            .flags(F::SOURCE)
            .expect(Expect::Code(EINVAL)),
        // src_addr is ignored with FI_SOURCE: bytes that are no address
        // do not fail the call.
        Case::new("source_ignores_src_addr")
            .node("127.0.0.1")
            .flags(F::SOURCE | F::NUMERICHOST)
            .hints(|h| {
                h.caps = Caps::MSG;
                h.addr_format = AddrFormat::SockaddrIn;
            })
            .raw(
                "h->addr_format = FI_SOCKADDR_IN; h->src_addr = memdup(\"abc\", 3); \
                 h->src_addrlen = 3;",
            ),
        // dest_addr is ignored when node or service is given (no FI_SOURCE).
        Case::new("node_ignores_dest_addr")
            .node("127.0.0.1")
            .service("7471")
            .flags(F::NUMERICHOST)
            .raw("h->dest_addr = memdup(\"abc\", 3); h->dest_addrlen = 3;"),
        Case::new("dest_node_service")
            .node("127.0.0.1")
            .service("7471")
            .flags(F::NUMERICHOST)
            .hints(|h| {
                h.caps = Caps::TAGGED;
                h.ep_attr.ep_type = EpType::Rdm;
            }),
        Case::new("node_addr_str").node("fi_sockaddr_in://127.0.0.1:7471"),
        Case::new("node_addr_str_with_service")
            .node("fi_sockaddr_in://127.0.0.1:7471")
            .service("7471")
            .expect(Expect::Code(EINVAL)),
        Case::new("empty_node")
            .node("")
            .expect(Expect::Code(EINVAL)),
        // caps / mode / ep_type hints.
        Case::new("caps_mode_ep_type").hints(|h| {
            h.caps = Caps::MSG | Caps::TAGGED;
            h.mode = Mode::CONTEXT;
            h.ep_attr.ep_type = EpType::Rdm;
        }),
        Case::new("no_modes_rdm").hints(|h| {
            h.caps = Caps::TAGGED;
            h.ep_attr.ep_type = EpType::Rdm;
        }),
        Case::new("rma_msg_ep").hints(|h| {
            h.caps = Caps::RMA | Caps::READ | Caps::WRITE;
            h.mode = Mode::all();
            h.ep_attr.ep_type = EpType::Msg;
        }),
        // The hints fi_info passes: every mode, every mr_mode but BASIC and
        // SCALABLE.
        Case::new("fi_info_defaults").hints(|h| {
            h.caps = Caps::MSG;
            h.mode = Mode::from_bits_retain(u64::MAX);
            h.domain_attr.mode = Mode::from_bits_retain(u64::MAX);
            h.domain_attr.mr_mode = MrMode::from_bits_retain(!3);
            h.ep_attr.ep_type = EpType::Msg;
        }),
        Case::new("attribute_minimums").hints(|h| {
            h.caps = Caps::MSG;
            h.mode = Mode::all();
            h.tx_attr.size = 16;
            h.tx_attr.iov_limit = 1;
            h.rx_attr.size = 16;
            h.ep_attr.ep_type = EpType::Rdm;
            h.ep_attr.max_msg_size = 1024;
            h.domain_attr.threading = Threading::Domain;
            h.domain_attr.data_progress = Progress::Manual;
            h.domain_attr.resource_mgmt = ResourceMgmt::Enabled;
            h.domain_attr.av_type = AvType::Table;
            h.domain_attr.mr_mode =
                MrMode::LOCAL | MrMode::VIRT_ADDR | MrMode::ALLOCATED | MrMode::PROV_KEY;
            h.domain_attr.cq_cnt = 1;
            h.fabric_attr.api_version = Version::new(1, 5);
        }),
        Case::new("hints_addresses_in").hints(|h| {
            h.addr_format = AddrFormat::SockaddrIn;
            h.src_addr = Some(in4([127, 0, 0, 1], 0));
            h.dest_addr = Some(in4([127, 0, 0, 1], 7471));
        }),
        Case::new("hints_address_in6").hints(|h| {
            h.addr_format = AddrFormat::SockaddrIn6;
            h.dest_addr = Some(Address::In6(SocketAddrV6::new(
                Ipv6Addr::LOCALHOST,
                7471,
                0,
                0,
            )));
        }),
        Case::new("hints_address_unspec_format").hints(|h| {
            h.dest_addr = Some(in4([127, 0, 0, 1], 7471));
        }),
        Case::new("hints_address_str").hints(|h| {
            h.addr_format = AddrFormat::Str;
            h.dest_addr = Some(Address::Str("fi_shm://peer".into()));
        }),
        Case::new("hints_auth_key").hints(|h| {
            h.ep_attr.auth_key = Some(vec![1, 2, 3, 4]);
            h.ep_attr.auth_key_size = 4;
        }),
        // FI_ENODATA: nothing can match.
        Case::new("nodata_prov_name")
            .hints(|h| h.fabric_attr.prov_name = Some("no-such-provider".into()))
            .expect(Expect::NoData),
        Case::new("nodata_fabric_name")
            .hints(|h| h.fabric_attr.name = Some("no-such-fabric".into()))
            .expect(Expect::NoData),
        Case::new("nodata_domain_name")
            .hints(|h| h.domain_attr.name = Some("no-such-domain".into()))
            .expect(Expect::NoData),
        Case::new("nodata_prov_version")
            .hints(|h| h.fabric_attr.prov_version = Version::new(999, 0))
            .expect(Expect::NoData),
        Case::new("nodata_ep_type_sock_dgram")
            .hints(|h| h.ep_attr.ep_type = EpType::SockDgram)
            .expect(Expect::NoData),
        // Invalid requests: FI_EBADFLAGS / FI_EINVAL whatever the providers.
        Case::new("unknown_flag_bit")
            .flags(GetinfoFlags::from_bits_retain(1 << 3))
            .expect(Expect::Code(EBADFLAGS)),
        Case::new("read_without_rma")
            .hints(|h| h.caps = Caps::READ)
            .expect(Expect::Code(EBADFLAGS)),
        Case::new("unknown_caps_bit")
            .hints(|h| h.caps = Caps::from_bits_retain(1 << 62))
            .expect(Expect::Code(EBADFLAGS)),
        // Partially filled hints: NULL sub-structures read as zeroed ones.
        Case::new("partial_hints_caps").partial(|h| {
            h.caps = Caps::MSG | Caps::TAGGED;
            h.mode = Mode::CONTEXT;
        }),
        Case::new("partial_hints_zero").partial(|_| {}),
        Case::new("partial_hints_address").partial(|h| {
            h.addr_format = AddrFormat::SockaddrIn;
            h.dest_addr = Some(in4([127, 0, 0, 1], 7471));
        }),
        // Hints this library cannot read: FI_EINVAL, nothing read past
        // the lengths given.
        Case::new("address_shorter_than_format")
            .raw(
                "h->addr_format = FI_SOCKADDR_IN; \
                 h->dest_addr = memdup(\"\\002\\000\\035\\057\", 4); h->dest_addrlen = 4;",
            )
            .expect(Expect::Code(EINVAL)),
        Case::new("address_family_mismatch")
            .raw(
                "h->addr_format = FI_SOCKADDR_IN6; { struct sockaddr_in6 a; \
                 memset(&a, 0, sizeof a); a.sin6_family = AF_INET; \
                 h->dest_addr = memdup(&a, sizeof a); h->dest_addrlen = sizeof a; }",
            )
            .expect(Expect::Code(EINVAL)),
        Case::new("address_length_zero")
            .raw("h->dest_addr = memdup(\"abcd\", 4); h->dest_addrlen = 0;")
            .expect(Expect::Code(EINVAL)),
        Case::new("address_length_huge")
            .raw("h->dest_addr = memdup(\"abcd\", 4); h->dest_addrlen = (size_t)1 << 40;")
            .expect(Expect::Code(EINVAL)),
        Case::new("unknown_addr_format")
            .raw("h->addr_format = 999;")
            .expect(Expect::Code(EINVAL)),
        Case::new("unknown_ep_type")
            .raw("h->ep_attr->type = (enum fi_ep_type) 77;")
            .expect(Expect::Code(EINVAL)),
        Case::new("unknown_protocol")
            .raw("h->ep_attr->protocol = 4242;")
            .expect(Expect::Code(EINVAL)),
        Case::new("unknown_threading")
            .raw("h->domain_attr->threading = (enum fi_threading) 42;")
            .expect(Expect::Code(EINVAL)),
        Case::new("prov_name_not_utf8")
            .raw("h->fabric_attr->prov_name = strdup(\"\\377\");")
            .expect(Expect::Code(EINVAL)),
        Case {
            node: Some(b"\xff\xfe"),
            ..Case::new("node_not_utf8").expect(Expect::Code(EINVAL))
        },
    ]
}

// ------------------------------------------------------------ the C side

const PRELUDE: &str = r#"#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

static void *memdup(const void *p, size_t n)
{
	void *q = malloc(n);
	if (!q)
		abort();
	memcpy(q, p, n);
	return q;
}

static void hex(FILE *f, const void *p, size_t n)
{
	const unsigned char *b = p;
	if (!p) {
		fprintf(f, " (null)");
		return;
	}
	fprintf(f, " ");
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%02x", b[i]);
}

static const char *str(const char *s)
{
	return s ? s : "(null)";
}

static const char *set(const void *p)
{
	return p ? "set" : "null";
}

#define X(v) ((unsigned long long) (v))

/* Every field of one fi_info, read from the C structures. */
static void dump(FILE *f, const struct fi_info *i)
{
	fprintf(f, "info\n caps 0x%llx mode 0x%llx addr_format %u\n", X(i->caps), X(i->mode),
		i->addr_format);
	fprintf(f, " src_addr %zu", i->src_addrlen);
	hex(f, i->src_addr, i->src_addrlen);
	fprintf(f, "\n dest_addr %zu", i->dest_addrlen);
	hex(f, i->dest_addr, i->dest_addrlen);
	fprintf(f, "\n handle %s nic %s\n", set(i->handle), set(i->nic));
	if (i->tx_attr) {
		const struct fi_tx_attr *t = i->tx_attr;
		fprintf(f, " tx 0x%llx 0x%llx 0x%llx 0x%llx 0x%llx %zu %zu %zu %zu %u\n", X(t->caps),
			X(t->mode), X(t->op_flags), X(t->msg_order), X(t->comp_order),
			t->inject_size, t->size, t->iov_limit, t->rma_iov_limit, t->tclass);
	} else {
		fprintf(f, " tx NULL\n");
	}
	if (i->rx_attr) {
		const struct fi_rx_attr *r = i->rx_attr;
		fprintf(f, " rx 0x%llx 0x%llx 0x%llx 0x%llx 0x%llx %zu %zu %zu\n", X(r->caps),
			X(r->mode), X(r->op_flags), X(r->msg_order), X(r->comp_order),
			r->total_buffered_recv, r->size, r->iov_limit);
	} else {
		fprintf(f, " rx NULL\n");
	}
	if (i->ep_attr) {
		const struct fi_ep_attr *e = i->ep_attr;
		fprintf(f, " ep %u %u %u %zu %zu %zu %zu %zu 0x%llx %zu %zu %zu", (unsigned) e->type,
			e->protocol, e->protocol_version, e->max_msg_size, e->msg_prefix_size,
			e->max_order_raw_size, e->max_order_war_size, e->max_order_waw_size,
			X(e->mem_tag_format), e->tx_ctx_cnt, e->rx_ctx_cnt, e->auth_key_size);
		hex(f, e->auth_key, e->auth_key_size);
		fprintf(f, "\n");
	} else {
		fprintf(f, " ep NULL\n");
	}
	if (i->domain_attr) {
		const struct fi_domain_attr *d = i->domain_attr;
		fprintf(f, " domain %s %s %u %u %u %u %u %d %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu 0x%llx 0x%llx %zu",
			set(d->domain), str(d->name), (unsigned) d->threading,
			(unsigned) d->control_progress, (unsigned) d->data_progress,
			(unsigned) d->resource_mgmt, (unsigned) d->av_type, d->mr_mode, d->mr_key_size,
			d->cq_data_size, d->cq_cnt, d->ep_cnt, d->tx_ctx_cnt, d->rx_ctx_cnt,
			d->max_ep_tx_ctx, d->max_ep_rx_ctx, d->max_ep_stx_ctx, d->max_ep_srx_ctx,
			d->cntr_cnt, d->mr_iov_limit, X(d->caps), X(d->mode), d->auth_key_size);
		hex(f, d->auth_key, d->auth_key_size);
		fprintf(f, " %zu %zu %u\n", d->max_err_data, d->mr_cnt, d->tclass);
	} else {
		fprintf(f, " domain NULL\n");
	}
	if (i->fabric_attr) {
		const struct fi_fabric_attr *a = i->fabric_attr;
		fprintf(f, " fabric %s %s %s %u %u\n", set(a->fabric), str(a->name),
			str(a->prov_name), a->prov_version, a->api_version);
	} else {
		fprintf(f, " fabric NULL\n");
	}
}

static char *dump_text(const struct fi_info *i)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (!f)
		abort();
	dump(f, i);
	fclose(f);
	return text;
}

/* The hints as built, and as this library reads them. */
static void show_hints(const struct fi_info *h)
{
	char *text = dump_text(h);
	printf("hints\n%stostr\n%s", text, fi_tostr(h, FI_TYPE_INFO));
	free(text);
}

static void run_case(uint32_t version, const char *node, const char *service, uint64_t flags,
		     const struct fi_info *hints)
{
	static struct fi_info sentinel;
	struct fi_info *info = &sentinel;
	int ret = fi_getinfo(version, node, service, flags, hints, &info);

	printf("ret %d\n", ret);
	if (ret == 0) {
		if (!info)
			printf("error: success with a NULL list\n");
		for (struct fi_info *cur = info; cur; cur = cur->next) {
			char *text = dump_text(cur);
			struct fi_info *copy = fi_dupinfo(cur);
			char *copied = copy ? dump_text(copy) : NULL;
			fputs(text, stdout);
			if (!copy || copy->next)
				printf("error: fi_dupinfo of a list element\n");
			else if (strcmp(text, copied))
				printf("error: fi_dupinfo differs:\n%s", copied);
			free(text);
			free(copied);
			fi_freeinfo(copy);
		}
		fi_freeinfo(info);
	} else if (info) {
		printf("error: info is not NULL after an error\n");
	}
	printf("end\n");
}

int main(void)
{
	struct fi_info *h;

	printf("lib %s\n", fi_tostr("", FI_TYPE_VERSION));
"#;

/// C statements assigning every field of `info` to `h`; only the
/// top-level ones when `partial`.
fn c_hints(info: &Info, partial: bool) -> String {
    let mut c = String::new();
    let mut set = |lhs: &str, rhs: String| {
        let _ = writeln!(c, "\th->{lhs} = {rhs};");
    };
    let u = |v: u64| format!("0x{v:x}ULL");
    let z = |v: usize| format!("(size_t) {v}ULL");
    let bytes = |b: &[u8]| {
        let list: Vec<String> = b.iter().map(|x| format!("0x{x:02x}")).collect();
        format!(
            "memdup((const unsigned char[]){{ {} }}, {})",
            list.join(", "),
            b.len()
        )
    };
    let string = |s: &Option<String>| {
        s.as_ref().map_or("NULL".to_string(), |s| {
            format!("strdup({})", common::c_literal(s.as_bytes()))
        })
    };
    set("caps", u(info.caps.bits()));
    set("mode", u(info.mode.bits()));
    set("addr_format", info.addr_format.as_u32().to_string());
    for (name, addr) in [("src", &info.src_addr), ("dest", &info.dest_addr)] {
        if let Some(a) = addr {
            let b = a.to_bytes();
            set(&format!("{name}_addr"), bytes(&b));
            set(&format!("{name}_addrlen"), z(b.len()));
        }
    }
    if partial {
        return c;
    }
    let t = &info.tx_attr;
    set("tx_attr->caps", u(t.caps.bits()));
    set("tx_attr->mode", u(t.mode.bits()));
    set("tx_attr->op_flags", u(t.op_flags.bits()));
    set("tx_attr->msg_order", u(t.msg_order.bits()));
    set("tx_attr->comp_order", u(t.comp_order.bits()));
    set("tx_attr->inject_size", z(t.inject_size));
    set("tx_attr->size", z(t.size));
    set("tx_attr->iov_limit", z(t.iov_limit));
    set("tx_attr->rma_iov_limit", z(t.rma_iov_limit));
    set("tx_attr->tclass", t.tclass.to_string());
    let r = &info.rx_attr;
    set("rx_attr->caps", u(r.caps.bits()));
    set("rx_attr->mode", u(r.mode.bits()));
    set("rx_attr->op_flags", u(r.op_flags.bits()));
    set("rx_attr->msg_order", u(r.msg_order.bits()));
    set("rx_attr->comp_order", u(r.comp_order.bits()));
    set("rx_attr->total_buffered_recv", z(r.total_buffered_recv));
    set("rx_attr->size", z(r.size));
    set("rx_attr->iov_limit", z(r.iov_limit));
    let e = &info.ep_attr;
    set(
        "ep_attr->type",
        format!("(enum fi_ep_type) {}", e.ep_type.as_u32()),
    );
    set("ep_attr->protocol", e.protocol.as_u32().to_string());
    set("ep_attr->protocol_version", e.protocol_version.to_string());
    set("ep_attr->max_msg_size", z(e.max_msg_size));
    set("ep_attr->msg_prefix_size", z(e.msg_prefix_size));
    set("ep_attr->max_order_raw_size", z(e.max_order_raw_size));
    set("ep_attr->max_order_war_size", z(e.max_order_war_size));
    set("ep_attr->max_order_waw_size", z(e.max_order_waw_size));
    set("ep_attr->mem_tag_format", u(e.mem_tag_format));
    set("ep_attr->tx_ctx_cnt", z(e.tx_ctx_cnt));
    set("ep_attr->rx_ctx_cnt", z(e.rx_ctx_cnt));
    set("ep_attr->auth_key_size", z(e.auth_key_size));
    if let Some(k) = &e.auth_key {
        set("ep_attr->auth_key", bytes(k));
    }
    let d = &info.domain_attr;
    set("domain_attr->name", string(&d.name));
    set(
        "domain_attr->threading",
        format!("(enum fi_threading) {}", d.threading.as_u32()),
    );
    set(
        "domain_attr->control_progress",
        format!("(enum fi_progress) {}", d.control_progress.as_u32()),
    );
    set(
        "domain_attr->data_progress",
        format!("(enum fi_progress) {}", d.data_progress.as_u32()),
    );
    set(
        "domain_attr->resource_mgmt",
        format!("(enum fi_resource_mgmt) {}", d.resource_mgmt.as_u32()),
    );
    set(
        "domain_attr->av_type",
        format!("(enum fi_av_type) {}", d.av_type.as_u32()),
    );
    set(
        "domain_attr->mr_mode",
        format!("(int) 0x{:x}U", d.mr_mode.bits()),
    );
    set("domain_attr->mr_key_size", z(d.mr_key_size));
    set("domain_attr->cq_data_size", z(d.cq_data_size));
    set("domain_attr->cq_cnt", z(d.cq_cnt));
    set("domain_attr->ep_cnt", z(d.ep_cnt));
    set("domain_attr->tx_ctx_cnt", z(d.tx_ctx_cnt));
    set("domain_attr->rx_ctx_cnt", z(d.rx_ctx_cnt));
    set("domain_attr->max_ep_tx_ctx", z(d.max_ep_tx_ctx));
    set("domain_attr->max_ep_rx_ctx", z(d.max_ep_rx_ctx));
    set("domain_attr->max_ep_stx_ctx", z(d.max_ep_stx_ctx));
    set("domain_attr->max_ep_srx_ctx", z(d.max_ep_srx_ctx));
    set("domain_attr->cntr_cnt", z(d.cntr_cnt));
    set("domain_attr->mr_iov_limit", z(d.mr_iov_limit));
    set("domain_attr->caps", u(d.caps.bits()));
    set("domain_attr->mode", u(d.mode.bits()));
    set("domain_attr->auth_key_size", z(d.auth_key_size));
    if let Some(k) = &d.auth_key {
        set("domain_attr->auth_key", bytes(k));
    }
    set("domain_attr->max_err_data", z(d.max_err_data));
    set("domain_attr->mr_cnt", z(d.mr_cnt));
    set("domain_attr->tclass", d.tclass.to_string());
    let f = &info.fabric_attr;
    set("fabric_attr->name", string(&f.name));
    set("fabric_attr->prov_name", string(&f.prov_name));
    set(
        "fabric_attr->prov_version",
        f.prov_version.to_u32().to_string(),
    );
    set(
        "fabric_attr->api_version",
        f.api_version.to_u32().to_string(),
    );
    c
}

fn program(cases: &[Case]) -> String {
    let mut c = PRELUDE.to_string();
    for case in cases {
        let node = case.node.map_or("NULL".to_string(), common::c_literal);
        let service = case
            .service
            .map_or("NULL".to_string(), |s| common::c_literal(s.as_bytes()));
        let _ = writeln!(c, "\n\t/* {0} */\n\tprintf(\"case {0}\\n\");", case.name);
        match &case.hints {
            Hints::Null => c += "\th = NULL;\n",
            Hints::Alloc(info, raw) => {
                c += "\th = fi_allocinfo();\n";
                c += &c_hints(info, false);
                if raw.is_empty() {
                    c += "\tshow_hints(h);\n";
                } else {
                    let _ = writeln!(c, "\t{raw}");
                }
            }
            Hints::Partial(info) => {
                c += "\th = calloc(1, sizeof *h);\n";
                c += &c_hints(info, true);
                c += "\tshow_hints(h);\n";
            }
        }
        let _ = writeln!(
            c,
            "\trun_case({}U, {node}, {service}, 0x{:x}ULL, h);\n\tfi_freeinfo(h);",
            case.version.to_u32(),
            case.flags.bits()
        );
    }
    c += "\treturn 0;\n}\n";
    c
}

// ------------------------------------------------------------ the Rust side

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn opt(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or("(null)")
}

fn set<T>(h: &Option<T>) -> &'static str {
    if h.is_some() { "set" } else { "null" }
}

/// What the C side allocates for a key: at least `size` bytes, zero
/// padded (see `convert::key_to_c`).
fn key(k: &Option<Vec<u8>>, size: usize) -> (usize, String) {
    match k {
        Some(k) if !k.is_empty() => {
            let n = size.max(k.len());
            let mut b = k.clone();
            b.resize(n, 0);
            (n, hex(&b))
        }
        _ => (size, "(null)".to_string()),
    }
}

/// The text the C `dump` prints for `i`.
fn dump(i: &Info) -> String {
    let addr = |a: &Option<Address>| {
        a.as_ref().map_or("0 (null)".to_string(), |a| {
            let b = a.to_bytes();
            format!("{} {}", b.len(), hex(&b))
        })
    };
    let t = &i.tx_attr;
    let r = &i.rx_attr;
    let e = &i.ep_attr;
    let d = &i.domain_attr;
    let f = &i.fabric_attr;
    let (e_key_size, e_key) = key(&e.auth_key, e.auth_key_size);
    let (d_key_size, d_key) = key(&d.auth_key, d.auth_key_size);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "info\n caps {:#x} mode {:#x} addr_format {}",
        i.caps.bits(),
        i.mode.bits(),
        i.addr_format.as_u32()
    );
    let _ = writeln!(s, " src_addr {}", addr(&i.src_addr));
    let _ = writeln!(s, " dest_addr {}", addr(&i.dest_addr));
    let _ = writeln!(s, " handle {} nic null", set(&i.handle));
    let _ = writeln!(
        s,
        " tx {:#x} {:#x} {:#x} {:#x} {:#x} {} {} {} {} {}",
        t.caps.bits(),
        t.mode.bits(),
        t.op_flags.bits(),
        t.msg_order.bits(),
        t.comp_order.bits(),
        t.inject_size,
        t.size,
        t.iov_limit,
        t.rma_iov_limit,
        t.tclass
    );
    let _ = writeln!(
        s,
        " rx {:#x} {:#x} {:#x} {:#x} {:#x} {} {} {}",
        r.caps.bits(),
        r.mode.bits(),
        r.op_flags.bits(),
        r.msg_order.bits(),
        r.comp_order.bits(),
        r.total_buffered_recv,
        r.size,
        r.iov_limit
    );
    let _ = writeln!(
        s,
        " ep {} {} {} {} {} {} {} {} {:#x} {} {} {} {}",
        e.ep_type.as_u32(),
        e.protocol.as_u32(),
        e.protocol_version,
        e.max_msg_size,
        e.msg_prefix_size,
        e.max_order_raw_size,
        e.max_order_war_size,
        e.max_order_waw_size,
        e.mem_tag_format,
        e.tx_ctx_cnt,
        e.rx_ctx_cnt,
        e_key_size,
        e_key
    );
    let _ = writeln!(
        s,
        " domain {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {:#x} {:#x} {} {} {} {} {}",
        set(&d.domain),
        opt(&d.name),
        d.threading.as_u32(),
        d.control_progress.as_u32(),
        d.data_progress.as_u32(),
        d.resource_mgmt.as_u32(),
        d.av_type.as_u32(),
        d.mr_mode.bits() as i32,
        d.mr_key_size,
        d.cq_data_size,
        d.cq_cnt,
        d.ep_cnt,
        d.tx_ctx_cnt,
        d.rx_ctx_cnt,
        d.max_ep_tx_ctx,
        d.max_ep_rx_ctx,
        d.max_ep_stx_ctx,
        d.max_ep_srx_ctx,
        d.cntr_cnt,
        d.mr_iov_limit,
        d.caps.bits(),
        d.mode.bits(),
        d_key_size,
        d_key,
        d.max_err_data,
        d.mr_cnt,
        d.tclass
    );
    let _ = writeln!(
        s,
        " fabric {} {} {} {} {}",
        set(&f.fabric),
        opt(&f.name),
        opt(&f.prov_name),
        f.prov_version.to_u32(),
        f.api_version.to_u32()
    );
    s
}

/// What the C program prints for the hints it built (and read back
/// through `fi_tostr`, libfabric's text); nothing for NULL hints or hints
/// changed by raw C statements.
fn shown_hints(hints: &Hints) -> String {
    let (text, tostr) = match hints {
        Hints::Null => return String::new(),
        Hints::Alloc(_, raw) if !raw.is_empty() => return String::new(),
        Hints::Alloc(info, _) => (dump(info), fabric_capi::info_text(info)),
        Hints::Partial(info) => {
            // A bare fi_info: the sub-structure lines say NULL.
            let mut text = String::new();
            for line in dump(info).lines() {
                let head = line.split(' ').nth(1).unwrap_or_default();
                if ["tx", "rx", "ep", "domain", "fabric"].contains(&head) {
                    let _ = writeln!(text, " {head} NULL");
                } else {
                    let _ = writeln!(text, "{line}");
                }
            }
            // fi_tostr says `(null)` for each sub-structure.
            let mut tostr = String::new();
            for line in fabric_capi::info_text(info).lines() {
                if line.starts_with("        ") {
                    continue;
                }
                if line.starts_with("    fi_") && line.ends_with(':') {
                    let _ = writeln!(tostr, "{line} (null)");
                } else {
                    let _ = writeln!(tostr, "{line}");
                }
            }
            (text, tostr)
        }
    };
    format!("hints\n{text}tostr\n{tostr}")
}

/// What the Rust registry answers for `case`, as the C program prints it.
fn expected(case: &Case) -> String {
    let shown = shown_hints(&case.hints);
    let block = |ret: i32, body: &str| format!("case {}\n{shown}ret {ret}\n{body}end\n", case.name);
    if let Expect::Code(code) = case.expect {
        return block(code, "");
    }
    let node = case
        .node
        .map(|b| std::str::from_utf8(b).expect("cases compared with Rust have UTF-8 nodes"));
    let hints = match &case.hints {
        Hints::Null => None,
        Hints::Alloc(info, _) | Hints::Partial(info) => Some(info.clone()),
    };
    let answer = Registry::global().getinfo(&Request {
        version: case.version,
        node,
        service: case.service,
        flags: case.flags,
        hints: hints.as_ref(),
    });
    if matches!(case.expect, Expect::NoData) && Registry::global().providers().next().is_some() {
        let kind = answer.as_ref().err().map(|e| e.kind());
        assert_eq!(kind, Some(ErrorKind::NoData), "case {}", case.name);
    }
    match answer {
        Ok(list) => block(0, &list.iter().map(dump).collect::<String>()),
        Err(e) => block(e.code(), ""),
    }
}

/// Compares the program's output with the expected blocks, case by case.
fn compare(cases: &[Case], stdout: &str) {
    let (first, rest) = stdout.split_once('\n').expect("output");
    assert!(
        first.starts_with("lib fabric-rs "),
        "the program must run on this library, not on an installed libfabric: {first}"
    );
    let blocks: Vec<String> = rest.split_inclusive("end\n").map(str::to_string).collect();
    assert_eq!(blocks.len(), cases.len(), "one block per case:\n{stdout}");
    for (case, got) in cases.iter().zip(&blocks) {
        assert_eq!(
            mask_fresh_shm(got),
            mask_fresh_shm(&expected(case)),
            "case {}",
            case.name
        );
    }
}

/// A dump with the `src_addr` lines that hold a fresh shm region name
/// (chosen per getinfo call, so per process: `fi_shm://fabric-shm-` then
/// uid, pid, counter and random number) as `src_addr fresh-shm`.
fn mask_fresh_shm(dump: &str) -> String {
    let fresh = hex(b"fi_shm://fabric-shm-");
    let service = hex(b"-svc-");
    dump.split_inclusive('\n')
        .map(|l| {
            let addr = l
                .strip_prefix(" src_addr ")
                .and_then(|r| r.split(' ').nth(1));
            match addr {
                Some(h) if h.starts_with(&fresh) && !h.contains(&service) => {
                    " src_addr fresh-shm\n".to_string()
                }
                _ => l.to_string(),
            }
        })
        .collect()
}

#[test]
fn c_programs_get_the_same_answers_as_rust() {
    let Some(stage) = common::Stage::new("getinfo", true) else {
        return;
    };
    let cases = cases();
    let exe = stage.compile("getinfo", &program(&cases));
    let out = stage.run(&exe, &[], false);
    common::assert_ok("getinfo program", &out);
    compare(&cases, &common::text(&out.stdout));
}

#[test]
fn getinfo_cases_under_valgrind() {
    let test = "getinfo_valgrind";
    let Some(stage) = common::Stage::new(test, true) else {
        return;
    };
    let cases = cases();
    let exe = stage.compile("getinfo", &program(&cases));
    let Some(out) = stage.valgrind(test, &exe, &[], false) else {
        return;
    };
    common::assert_ok("getinfo program under valgrind", &out);
    compare(&cases, &common::text(&out.stdout));
}
