/*
 * fi_tostr for every enum fi_type of libfabric 1.17, on representative
 * values: every bit of the flag sets, every value of the enumerations with
 * their neighbours and out-of-range values, and zeroed, filled-in and odd
 * structures.
 *
 * Built once against <rdma/fabric.h> and run with Debian's libfabric and
 * with fabric-capi (tests/tostr.rs compares the two outputs). Each case is
 *
 *   @@ <label>
 *   <text>
 *
 * or "@@ <label> (NULL)" when fi_tostr returns NULL. Pointers that change
 * from run to run (objects and addresses of this program) are replaced by
 * <names>; made-up pointers are printed as they are. Each case also checks
 * that fi_tostr_r into a buffer of libfabric's size (8 KiB) gives the same
 * text, and says so if not.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <rdma/fabric.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_trigger.h>
#include <rdma/providers/fi_log.h>

/* ------------------------------------------------------------ output */

struct mask {
	const void *ptr;
	const char *name;
};

static struct mask masks[8];
static size_t nmasks;

static void mask(const void *ptr, const char *name)
{
	if (ptr && nmasks < sizeof masks / sizeof masks[0])
		masks[nmasks++] = (struct mask){ ptr, name };
}

static void unmask(void)
{
	nmasks = 0;
}

/* `text` with every "%p" form of a masked pointer replaced by its name. */
static char *masked(const char *text)
{
	char *out = strdup(text);
	if (!out)
		abort();
	for (size_t m = 0; m < nmasks; m++) {
		char p[32];
		snprintf(p, sizeof p, "%p", masks[m].ptr);
		char *hit;
		while ((hit = strstr(out, p))) {
			size_t head = (size_t)(hit - out);
			size_t len = strlen(out) - strlen(p) + strlen(masks[m].name) + 1;
			char *next = malloc(len);
			if (!next)
				abort();
			memcpy(next, out, head);
			strcpy(next + head, masks[m].name);
			strcat(next, hit + strlen(p));
			free(out);
			out = next;
		}
	}
	return out;
}

static char rbuf[8192];

static void show(const void *data, int type, const char *fmt, ...)
{
	char label[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(label, sizeof label, fmt, ap);
	va_end(ap);

	char *s = fi_tostr(data, (enum fi_type) type);
	char *text = s ? strdup(s) : NULL;
	if (s && !text)
		abort();

	memset(rbuf, 0x55, sizeof rbuf);
	char *r = fi_tostr_r(rbuf, sizeof rbuf, data, (enum fi_type) type);
	if ((r == NULL) != (text == NULL) || (r && (r != rbuf || strcmp(r, text))))
		printf("@@ %s: fi_tostr_r differs from fi_tostr\n", label);

	if (!text) {
		printf("@@ %s (NULL)\n", label);
		return;
	}
	char *m = masked(text);
	printf("@@ %s\n%s\n", label, m);
	free(m);
	free(text);
}

/* ------------------------------------------------------------ scalars */

static void sweep_enum(int type, const char *name, uint32_t last)
{
	static const uint32_t odd[] = { 255, 256, 257, 0x7fffffff, 0x80000000,
					0x80000001, 0xffffffff };
	for (uint32_t v = 0; v <= last + 2; v++)
		show(&v, type, "%s %u", name, v);
	for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++)
		show(&odd[i], type, "%s %#x", name, odd[i]);
}

static void sweep_flags(int type, const char *name, const uint64_t *combos, size_t n)
{
	uint64_t v = 0;
	show(&v, type, "%s 0", name);
	for (int b = 0; b < 64; b++) {
		v = 1ULL << b;
		show(&v, type, "%s bit %d", name, b);
	}
	v = ~0ULL;
	show(&v, type, "%s all", name);
	for (size_t i = 0; i < n; i++)
		show(&combos[i], type, "%s %#llx", name, (unsigned long long) combos[i]);
}

static void scalars(void)
{
	sweep_enum(FI_TYPE_EP_TYPE, "FI_TYPE_EP_TYPE", FI_EP_SOCK_DGRAM);
	sweep_enum(FI_TYPE_ADDR_FORMAT, "FI_TYPE_ADDR_FORMAT", FI_ADDR_CXI);
	sweep_enum(FI_TYPE_THREADING, "FI_TYPE_THREADING", FI_THREAD_ENDPOINT);
	sweep_enum(FI_TYPE_PROGRESS, "FI_TYPE_PROGRESS", FI_PROGRESS_MANUAL);
	sweep_enum(FI_TYPE_PROTOCOL, "FI_TYPE_PROTOCOL", FI_PROTO_XNET);
	sweep_enum(FI_TYPE_AV_TYPE, "FI_TYPE_AV_TYPE", FI_AV_TABLE);
	sweep_enum(FI_TYPE_ATOMIC_TYPE, "FI_TYPE_ATOMIC_TYPE", FI_UINT128);
	sweep_enum(FI_TYPE_ATOMIC_OP, "FI_TYPE_ATOMIC_OP", FI_MSWAP);
	sweep_enum(FI_TYPE_EQ_EVENT, "FI_TYPE_EQ_EVENT", FI_JOIN_COMPLETE);
	sweep_enum(FI_TYPE_OP_TYPE, "FI_TYPE_OP_TYPE", FI_OP_CNTR_ADD);
	sweep_enum(FI_TYPE_COLLECTIVE_OP, "FI_TYPE_COLLECTIVE_OP", FI_GATHER);
	sweep_enum(FI_TYPE_HMEM_IFACE, "FI_TYPE_HMEM_IFACE", FI_HMEM_SYNAPSEAI);
	sweep_enum(FI_TYPE_CQ_FORMAT, "FI_TYPE_CQ_FORMAT", FI_CQ_FORMAT_TAGGED);
	sweep_enum(FI_TYPE_LOG_LEVEL, "FI_TYPE_LOG_LEVEL", FI_LOG_MAX);
	sweep_enum(FI_TYPE_LOG_SUBSYS, "FI_TYPE_LOG_SUBSYS", FI_LOG_SUBSYS_MAX);

	static const uint64_t caps[] = {
		FI_MSG | FI_TAGGED,
		FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
		FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV | FI_SOURCE | FI_HMEM,
		FI_HMEM | FI_MSG | (1ULL << 62) | 1,
	};
	sweep_flags(FI_TYPE_CAPS, "FI_TYPE_CAPS", caps, sizeof caps / sizeof caps[0]);
	static const uint64_t op_flags[] = {
		FI_COMPLETION | FI_TRANSMIT_COMPLETE,
		FI_INJECT | FI_MULTICAST | FI_CLAIM | FI_DISCARD,
		FI_MATCH_COMPLETE | FI_AFFINITY | FI_PRIORITY | (1ULL << 63),
	};
	sweep_flags(FI_TYPE_OP_FLAGS, "FI_TYPE_OP_FLAGS", op_flags,
		    sizeof op_flags / sizeof op_flags[0]);
	static const uint64_t modes[] = {
		FI_CONTEXT | FI_CONTEXT2,
		FI_MSG_PREFIX | FI_LOCAL_MR | FI_RX_CQ_DATA | (1ULL << 60),
	};
	sweep_flags(FI_TYPE_MODE, "FI_TYPE_MODE", modes, sizeof modes / sizeof modes[0]);
	static const uint64_t orders[] = {
		FI_ORDER_STRICT,
		FI_ORDER_SAS | FI_ORDER_RMA_WAW | FI_ORDER_DATA,
		FI_ORDER_ATOMIC_RAR | FI_ORDER_RAR | (1ULL << 40),
	};
	sweep_flags(FI_TYPE_MSG_ORDER, "FI_TYPE_MSG_ORDER", orders,
		    sizeof orders / sizeof orders[0]);
	static const uint64_t cq_flags[] = {
		FI_SEND | FI_MSG,
		FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA | FI_MULTI_RECV,
		FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
		FI_RECV | FI_MORE | FI_CLAIM | FI_COMPLETION,
	};
	sweep_flags(FI_TYPE_CQ_EVENT_FLAGS, "FI_TYPE_CQ_EVENT_FLAGS", cq_flags,
		    sizeof cq_flags / sizeof cq_flags[0]);

	int mr = 0;
	show(&mr, FI_TYPE_MR_MODE, "FI_TYPE_MR_MODE 0");
	for (int b = 0; b < 32; b++) {
		mr = (int) (1U << b);
		show(&mr, FI_TYPE_MR_MODE, "FI_TYPE_MR_MODE bit %d", b);
	}
	mr = -1;
	show(&mr, FI_TYPE_MR_MODE, "FI_TYPE_MR_MODE -1");
	mr = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
	show(&mr, FI_TYPE_MR_MODE, "FI_TYPE_MR_MODE basic-like");
	mr = FI_MR_SCALABLE | FI_MR_HMEM | (1 << 20);
	show(&mr, FI_TYPE_MR_MODE, "FI_TYPE_MR_MODE with unknown");
}

/* ------------------------------------------------------------ structures */

static void attrs(void)
{
	struct fi_tx_attr tx = { 0 };
	show(&tx, FI_TYPE_TX_ATTR, "FI_TYPE_TX_ATTR zero");
	tx = (struct fi_tx_attr){
		.caps = FI_MSG | FI_TAGGED | FI_SEND | FI_HMEM,
		.mode = FI_CONTEXT | FI_CONTEXT2,
		.op_flags = FI_COMPLETION | FI_INJECT_COMPLETE,
		.msg_order = FI_ORDER_SAS | FI_ORDER_RMA_WAW,
		.comp_order = FI_ORDER_STRICT,
		.inject_size = 64,
		.size = 1024,
		.iov_limit = 4,
		.rma_iov_limit = 1,
		.tclass = FI_TC_BULK_DATA,
	};
	show(&tx, FI_TYPE_TX_ATTR, "FI_TYPE_TX_ATTR filled");
	static const uint64_t comp[] = { FI_ORDER_NONE, FI_ORDER_DATA, FI_ORDER_STRICT | FI_ORDER_DATA,
					 FI_ORDER_RAR | FI_ORDER_RAW, 0x200, ~0ULL };
	for (size_t i = 0; i < sizeof comp / sizeof comp[0]; i++) {
		tx.comp_order = comp[i];
		show(&tx, FI_TYPE_TX_ATTR, "FI_TYPE_TX_ATTR comp_order %#llx",
		     (unsigned long long) comp[i]);
	}
	tx = (struct fi_tx_attr){
		.caps = 1 | (1ULL << 7) | (1ULL << 62) | (1ULL << 63),
		.mode = 1 | (1ULL << 60),
		.op_flags = 1 | FI_PRIORITY | (1ULL << 63),
		.msg_order = FI_ORDER_DATA | (1ULL << 40),
		.comp_order = 1ULL << 40,
		.inject_size = SIZE_MAX,
		.size = SIZE_MAX - 1,
		.iov_limit = SIZE_MAX,
		.rma_iov_limit = SIZE_MAX,
		.tclass = 0xffffffff,
	};
	show(&tx, FI_TYPE_TX_ATTR, "FI_TYPE_TX_ATTR unknown bits and maxima");

	struct fi_rx_attr rx = { 0 };
	show(&rx, FI_TYPE_RX_ATTR, "FI_TYPE_RX_ATTR zero");
	rx = (struct fi_rx_attr){
		.caps = FI_MSG | FI_RECV | FI_MULTI_RECV | FI_SOURCE,
		.mode = FI_CONTEXT | FI_RX_CQ_DATA,
		.op_flags = FI_MULTI_RECV | FI_COMPLETION,
		.msg_order = FI_ORDER_SAS,
		.comp_order = FI_ORDER_DATA,
		.total_buffered_recv = 65536,
		.size = 2048,
		.iov_limit = 8,
	};
	show(&rx, FI_TYPE_RX_ATTR, "FI_TYPE_RX_ATTR filled");
	rx = (struct fi_rx_attr){
		.caps = (1ULL << 63) | FI_RMA_EVENT,
		.mode = (1ULL << 61),
		.op_flags = (1ULL << 40),
		.msg_order = ~0ULL,
		.comp_order = FI_ORDER_STRICT,
		.total_buffered_recv = SIZE_MAX,
		.size = SIZE_MAX,
		.iov_limit = SIZE_MAX,
	};
	show(&rx, FI_TYPE_RX_ATTR, "FI_TYPE_RX_ATTR unknown bits and maxima");

	struct fi_ep_attr ep = { 0 };
	show(&ep, FI_TYPE_EP_ATTR, "FI_TYPE_EP_ATTR zero");
	static uint8_t key[] = { 1, 2, 3 };
	ep = (struct fi_ep_attr){
		.type = FI_EP_RDM,
		.protocol = FI_PROTO_XNET,
		.protocol_version = 3,
		.max_msg_size = SIZE_MAX,
		.msg_prefix_size = 16,
		.max_order_raw_size = 1,
		.max_order_war_size = 2,
		.max_order_waw_size = 3,
		.mem_tag_format = 0xaaaaaaaaaaaaaaaaULL,
		.tx_ctx_cnt = 1,
		.rx_ctx_cnt = FI_SHARED_CONTEXT,
		.auth_key_size = sizeof key,
		.auth_key = key,
	};
	show(&ep, FI_TYPE_EP_ATTR, "FI_TYPE_EP_ATTR filled");
	ep = (struct fi_ep_attr){
		.type = (enum fi_ep_type) 77,
		.protocol = FI_PROV_SPECIFIC | 5,
		.protocol_version = 0xffffffff,
		.mem_tag_format = 0x1234,
		.tx_ctx_cnt = FI_SHARED_CONTEXT,
		.rx_ctx_cnt = SIZE_MAX - 1,
	};
	show(&ep, FI_TYPE_EP_ATTR, "FI_TYPE_EP_ATTR unknown values");
	ep.protocol = 7; /* FI_PROTO_MXM: Unknown, as libfabric says */
	ep.protocol_version = 0x80000000;
	show(&ep, FI_TYPE_EP_ATTR, "FI_TYPE_EP_ATTR deprecated protocol");

	struct fi_domain_attr dom = { 0 };
	show(&dom, FI_TYPE_DOMAIN_ATTR, "FI_TYPE_DOMAIN_ATTR zero");
	dom = (struct fi_domain_attr){
		.domain = (struct fid_domain *) (uintptr_t) 0x10000,
		.name = "eth0",
		.threading = FI_THREAD_DOMAIN,
		.control_progress = FI_PROGRESS_AUTO,
		.data_progress = FI_PROGRESS_MANUAL,
		.resource_mgmt = FI_RM_ENABLED,
		.av_type = FI_AV_TABLE,
		.mr_mode = FI_MR_LOCAL | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR,
		.mr_key_size = 8,
		.cq_data_size = 8,
		.cq_cnt = 10,
		.ep_cnt = 11,
		.tx_ctx_cnt = 12,
		.rx_ctx_cnt = 13,
		.max_ep_tx_ctx = 14,
		.max_ep_rx_ctx = 15,
		.max_ep_stx_ctx = 16,
		.max_ep_srx_ctx = 17,
		.cntr_cnt = 18,
		.mr_iov_limit = 19,
		.caps = FI_LOCAL_COMM | FI_REMOTE_COMM | FI_SHARED_AV,
		.mode = FI_RESTRICTED_COMP,
		.auth_key = key,
		.auth_key_size = sizeof key,
		.max_err_data = 20,
		.mr_cnt = 21,
		.tclass = FI_TC_LOW_LATENCY,
	};
	show(&dom, FI_TYPE_DOMAIN_ATTR, "FI_TYPE_DOMAIN_ATTR filled");
	char odd_name[] = { 'n', (char) 0xe9, (char) 0xff, ' ', '%', 's', '\t', 0 };
	dom = (struct fi_domain_attr){
		.domain = (struct fid_domain *) (uintptr_t) 0xfedcba98,
		.name = odd_name,
		.threading = 6,
		.control_progress = 3,
		.data_progress = 0xffffffff,
		.resource_mgmt = 3,
		.av_type = 3,
		.mr_mode = -1,
		.tx_ctx_cnt = FI_SHARED_CONTEXT,
		.max_ep_stx_ctx = SIZE_MAX,
		.caps = ~(FI_AV_USER_ID),
		.mode = ~0ULL,
		.tclass = 0xffffffff,
	};
	show(&dom, FI_TYPE_DOMAIN_ATTR, "FI_TYPE_DOMAIN_ATTR unknown values");
	/* libfabric prints only the low 32 bits of the domain pointer. */
	dom.domain = (struct fid_domain *) (uintptr_t) 0x123456789abcULL;
	show(&dom, FI_TYPE_DOMAIN_ATTR, "FI_TYPE_DOMAIN_ATTR 48-bit domain");

	struct fi_fabric_attr fab = { 0 };
	show(&fab, FI_TYPE_FABRIC_ATTR, "FI_TYPE_FABRIC_ATTR zero");
	fab = (struct fi_fabric_attr){
		.fabric = (struct fid_fabric *) (uintptr_t) 0x20000,
		.name = "192.0.2.0/24",
		.prov_name = "tcp;ofi_rxm",
		.prov_version = FI_VERSION(117, 0),
		.api_version = FI_VERSION(1, 17),
	};
	show(&fab, FI_TYPE_FABRIC_ATTR, "FI_TYPE_FABRIC_ATTR filled");
	fab = (struct fi_fabric_attr){
		.name = "",
		.prov_version = 0xffffffff,
		.api_version = FI_VERSION(65535, 1),
	};
	show(&fab, FI_TYPE_FABRIC_ATTR, "FI_TYPE_FABRIC_ATTR odd versions");
}

/* ------------------------------------------------------------ objects */

static int plain_tostr(const struct fid *fid, char *buf, size_t len)
{
	return snprintf(buf, len, "object of class %zu, context %p, room %zu", fid->fclass,
			fid->context, len);
}

static int nic_tostr(const struct fid *fid, char *buf, size_t len)
{
	return snprintf(buf, len, "nic tostr: class %zu, room %zu\n", fid->fclass, len);
}

static int failing_tostr(const struct fid *fid, char *buf, size_t len)
{
	(void) fid;
	(void) buf;
	(void) len;
	return -FI_EINVAL;
}

static void fids(void)
{
	struct fid fid = { 0 };
	mask(&fid, "<fid>");
	for (size_t c = 0; c <= FI_CLASS_PEER_AV_SET + 2; c += 3) {
		fid.fclass = c;
		fid.context = (void *) (uintptr_t) (0x100 + c);
		show(&fid, FI_TYPE_FID, "FI_TYPE_FID class %zu, no ops", c);
	}
	struct fi_ops ops = { .size = sizeof ops };
	fid.fclass = FI_CLASS_EP;
	fid.ops = &ops;
	show(&fid, FI_TYPE_FID, "FI_TYPE_FID ops without tostr");
	ops.tostr = plain_tostr;
	show(&fid, FI_TYPE_FID, "FI_TYPE_FID ops with tostr");
	char small[12];
	char *r = fi_tostr_r(small, sizeof small, &fid, FI_TYPE_FID);
	printf("@@ FI_TYPE_FID tostr into 12 bytes\n%s\n", r ? r : "(NULL)");
	ops.size = offsetof(struct fi_ops, tostr);
	show(&fid, FI_TYPE_FID, "FI_TYPE_FID ops table too short for tostr");
	ops.size = offsetof(struct fi_ops, tostr) + sizeof ops.tostr;
	show(&fid, FI_TYPE_FID, "FI_TYPE_FID ops table just long enough");
	ops.tostr = failing_tostr;
	show(&fid, FI_TYPE_FID, "FI_TYPE_FID tostr failing");
	unmask();
}

/* ------------------------------------------------------------ fi_info */

static struct fi_tx_attr z_tx;
static struct fi_rx_attr z_rx;
static struct fi_ep_attr z_ep;
static struct fi_domain_attr z_dom;
static struct fi_fabric_attr z_fab;

static void infos(void)
{
	struct fi_info bare = { 0 };
	show(&bare, FI_TYPE_INFO, "FI_TYPE_INFO bare (NULL sub-structures)");

	struct fi_info alloc = { .tx_attr = &z_tx, .rx_attr = &z_rx, .ep_attr = &z_ep,
				 .domain_attr = &z_dom, .fabric_attr = &z_fab };
	show(&alloc, FI_TYPE_INFO, "FI_TYPE_INFO zeroed (fi_allocinfo)");

	static uint8_t key[] = { 9, 8, 7, 6 };
	struct fi_tx_attr tx = { .caps = FI_MSG | FI_SEND, .mode = FI_CONTEXT,
				 .op_flags = FI_INJECT_COMPLETE, .msg_order = FI_ORDER_SAS,
				 .comp_order = FI_ORDER_STRICT, .inject_size = 128, .size = 512,
				 .iov_limit = 4, .rma_iov_limit = 4, .tclass = FI_TC_DSCP | 46 };
	struct fi_rx_attr rx = { .caps = FI_MSG | FI_RECV, .mode = FI_CONTEXT,
				 .msg_order = FI_ORDER_SAS | FI_ORDER_RAR, .size = 512,
				 .iov_limit = 4 };
	struct fi_ep_attr ep = { .type = FI_EP_MSG, .protocol = FI_PROTO_SOCK_TCP,
				 .protocol_version = 1, .max_msg_size = 1 << 30,
				 .max_order_raw_size = SIZE_MAX, .tx_ctx_cnt = 1, .rx_ctx_cnt = 1,
				 .auth_key = key, .auth_key_size = sizeof key };
	struct fi_domain_attr dom = { .name = "lo", .threading = FI_THREAD_SAFE,
				      .control_progress = FI_PROGRESS_MANUAL,
				      .data_progress = FI_PROGRESS_MANUAL,
				      .resource_mgmt = FI_RM_ENABLED, .av_type = FI_AV_UNSPEC,
				      .mr_mode = FI_MR_BASIC, .mr_key_size = 4, .cq_cnt = 256,
				      .ep_cnt = 8192, .tx_ctx_cnt = 256, .rx_ctx_cnt = 256,
				      .max_ep_tx_ctx = 1, .max_ep_rx_ctx = 1, .max_ep_stx_ctx = 1,
				      .max_ep_srx_ctx = 1, .mr_iov_limit = 1,
				      .caps = FI_LOCAL_COMM | FI_REMOTE_COMM,
				      .max_err_data = 64, .mr_cnt = 1 << 16 };
	struct fi_fabric_attr fab = { .name = "127.0.0.0/8", .prov_name = "tcp",
				      .prov_version = FI_VERSION(1, 17), .api_version = FI_VERSION(1, 5) };
	struct sockaddr_in src = { .sin_family = AF_INET, .sin_port = htons(47592) };
	struct sockaddr_in dest = { .sin_family = AF_INET, .sin_port = htons(9228) };
	inet_pton(AF_INET, "127.0.0.1", &src.sin_addr);
	inet_pton(AF_INET, "127.0.0.2", &dest.sin_addr);
	struct fid handle = { .fclass = FI_CLASS_CONNREQ };
	struct fid_nic nic = { .fid = { .fclass = FI_CLASS_NIC } };
	struct fi_info full = {
		.caps = FI_MSG | FI_SEND | FI_RECV | FI_SOURCE,
		.mode = FI_CONTEXT | FI_MSG_PREFIX,
		.addr_format = FI_SOCKADDR_IN,
		.src_addrlen = sizeof src,
		.dest_addrlen = sizeof dest,
		.src_addr = &src,
		.dest_addr = &dest,
		.handle = &handle,
		.tx_attr = &tx,
		.rx_attr = &rx,
		.ep_attr = &ep,
		.domain_attr = &dom,
		.fabric_attr = &fab,
		.nic = &nic,
	};
	mask(&handle, "<handle>");
	mask(&nic, "<nic>");
	show(&full, FI_TYPE_INFO, "FI_TYPE_INFO filled (handle and nic without ops)");
	struct fi_ops short_ops = { .size = offsetof(struct fi_ops, tostr), .tostr = nic_tostr };
	nic.fid.ops = &short_ops;
	handle.ops = &short_ops;
	show(&full, FI_TYPE_INFO, "FI_TYPE_INFO handle and nic without tostr");
	unmask();

	/* The next element is not shown. */
	struct fi_info first = bare;
	first.next = &full;
	first.caps = FI_RMA;
	show(&first, FI_TYPE_INFO, "FI_TYPE_INFO with next");

	struct fi_info odd = alloc;
	odd.caps = ~0ULL & ~FI_AV_USER_ID;
	odd.mode = ~0ULL;
	odd.addr_format = 16;
	odd.src_addrlen = 3;
	odd.dest_addrlen = 0;
	show(&odd, FI_TYPE_INFO, "FI_TYPE_INFO unknown format, NULL addresses with lengths");
	odd.addr_format = FI_PROV_SPECIFIC | 2;
	show(&odd, FI_TYPE_INFO, "FI_TYPE_INFO provider-specific format");

	/* A nic object with a tostr operation. */
	struct fi_ops nic_ops = { .size = sizeof nic_ops, .tostr = nic_tostr };
	struct fid_nic nic2 = { .fid = { .fclass = FI_CLASS_NIC, .ops = &nic_ops } };
	struct fi_info with_nic = bare;
	with_nic.nic = &nic2;
	show(&with_nic, FI_TYPE_INFO, "FI_TYPE_INFO nic with tostr");
}

/* ------------------------------------------------------------ addresses */

static void addr_case(const char *what, uint32_t format, const void *src, size_t srclen,
		      const void *dest, size_t destlen)
{
	struct fi_info i = {
		.addr_format = format,
		.src_addr = (void *) src,
		.src_addrlen = srclen,
		.dest_addr = (void *) dest,
		.dest_addrlen = destlen,
	};
	mask(src, "<src_addr>");
	mask(dest, "<dest_addr>");
	show(&i, FI_TYPE_INFO, "FI_TYPE_INFO address %s", what);
	unmask();
}

static void addresses(void)
{
	struct sockaddr_in in4 = { .sin_family = AF_INET, .sin_port = htons(4242) };
	inet_pton(AF_INET, "10.1.2.3", &in4.sin_addr);
	struct sockaddr_in any4 = { .sin_family = AF_INET };
	addr_case("FI_SOCKADDR_IN", FI_SOCKADDR_IN, &in4, sizeof in4, &any4, sizeof any4);
	addr_case("FI_SOCKADDR with sockaddr_in", FI_SOCKADDR, &in4, sizeof in4, NULL, 0);

	static const char *v6[] = {
		"::", "::1", "::2:3", "::ffff:192.0.2.1", "::192.0.2.1", "::ffff:0.0.0.0",
		"1::", "1:2:3:4:5:6:7:8", "2001:db8::1", "2001:db8:0:0:1:0:0:1",
		"1:0:1:0:1:0:1:0", "fe80::1", "ff02::1:ff00:1", "0:0:1::", "1:0:0:2::",
		"::1:0:0:0", "0:0:0:0:0:1:0:0", "64:ff9b::192.0.2.33", "::ffff:1:2",
		"abcd:ef01:2345:6789:abcd:ef01:2345:6789", "0:1:0:0:1:0:0:0",
	};
	for (size_t k = 0; k < sizeof v6 / sizeof v6[0]; k++) {
		struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_port = htons(7),
					  .sin6_flowinfo = htonl(5), .sin6_scope_id = 3 };
		if (inet_pton(AF_INET6, v6[k], &a.sin6_addr) != 1)
			abort();
		char what[96];
		snprintf(what, sizeof what, "FI_SOCKADDR_IN6 %s", v6[k]);
		addr_case(what, FI_SOCKADDR_IN6, &a, sizeof a, NULL, 0);
		snprintf(what, sizeof what, "FI_SOCKADDR %s", v6[k]);
		addr_case(what, FI_SOCKADDR, NULL, 0, &a, sizeof a);
	}

	/* libfabric decodes the address field of sockaddr_in / sockaddr_in6 by
	 * the family it holds. */
	struct sockaddr_in6 in6 = { .sin6_family = AF_INET6, .sin6_port = htons(80) };
	inet_pton(AF_INET6, "2001:db8::1", &in6.sin6_addr);
	addr_case("FI_SOCKADDR_IN holding sockaddr_in6", FI_SOCKADDR_IN, &in6, sizeof in6, NULL, 0);
	addr_case("FI_SOCKADDR_IN6 holding sockaddr_in", FI_SOCKADDR_IN6, &in4, sizeof in4, NULL, 0);

	/* Bytes with a known pattern for the other formats. */
	static uint8_t pat[64];
	for (size_t k = 0; k < sizeof pat; k++)
		pat[k] = (uint8_t) (k * 7 + 3);
	static uint8_t zero[64];
	for (uint32_t f = FI_FORMAT_UNSPEC; f <= FI_ADDR_CXI + 2; f++) {
		if (f == FI_ADDR_STR)
			continue;
		char what[64];
		snprintf(what, sizeof what, "format %u pattern", f);
		addr_case(what, f, pat, sizeof pat, zero, sizeof zero);
	}
	addr_case("format FI_PROV_SPECIFIC|1 pattern", FI_PROV_SPECIFIC | 1, pat, sizeof pat, NULL, 0);

	/* Families libfabric does not print for FI_SOCKADDR. */
	uint8_t fam[64];
	memcpy(fam, pat, sizeof fam);
	uint16_t family = AF_IB;
	memcpy(fam, &family, sizeof family);
	addr_case("FI_SOCKADDR AF_IB", FI_SOCKADDR, fam, sizeof fam, NULL, 0);
	addr_case("FI_SOCKADDR_IB AF_IB", FI_SOCKADDR_IB, fam, sizeof fam, NULL, 0);
	addr_case("FI_SOCKADDR_IN AF_IB", FI_SOCKADDR_IN, fam, sizeof fam, NULL, 0);
	family = AF_UNIX;
	memcpy(fam, &family, sizeof family);
	addr_case("FI_SOCKADDR AF_UNIX", FI_SOCKADDR, fam, sizeof fam, NULL, 0);
	addr_case("FI_SOCKADDR_IN6 AF_UNIX", FI_SOCKADDR_IN6, fam, sizeof fam, NULL, 0);

	/* A sockaddr_ib: family, pkey, flowinfo, gid, service id (RDMA_PS_TCP,
	 * port 1111), its mask, scope id. */
	uint8_t ib[48] = { 0 };
	family = AF_IB;
	memcpy(ib, &family, sizeof family);
	ib[2] = 0xff;
	ib[3] = 0xff;
	inet_pton(AF_INET6, "fe80::21e:6703:1:2", ib + 8);
	const uint8_t sid[8] = { 0, 0, 0, 0, 0x01, 0x06, 0x04, 0x57 };
	memcpy(ib + 24, sid, sizeof sid);
	memset(ib + 32, 0xff, 8);
	ib[47] = 5;
	addr_case("FI_SOCKADDR_IB", FI_SOCKADDR_IB, ib, sizeof ib, NULL, 0);

	/* FI_ADDR_STR: the string, with its NUL. */
	static const char str[] = "fi_addr_str://hello";
	static const char other[] = "fi_sockaddr_in://192.0.2.1:80";
	addr_case("FI_ADDR_STR", FI_ADDR_STR, str, sizeof str, other, sizeof other);
	/* Shorter than the string: libfabric reads on to the NUL. */
	addr_case("FI_ADDR_STR cut by its length", FI_ADDR_STR, str, 5, NULL, 0);
	/* Shorter than what the format prints: libfabric reads past it. */
	addr_case("FI_SOCKADDR_IN6 cut by its length", FI_SOCKADDR_IN6, &in6, 16, NULL, 0);
}

/* ------------------------------------------------------------ the rest */

static void others(void)
{
	uint64_t caps = FI_MSG | FI_RMA;
	show("x", FI_TYPE_VERSION, "FI_TYPE_VERSION");
	show(NULL, FI_TYPE_VERSION, "FI_TYPE_VERSION NULL data");
	for (int t = FI_TYPE_INFO; t <= FI_TYPE_LOG_SUBSYS + 1; t++)
		if (t != FI_TYPE_VERSION)
			show(NULL, t, "NULL data, type %d", t);
	static const int unknown[] = { FI_TYPE_LOG_SUBSYS + 1, FI_TYPE_LOG_SUBSYS + 2, 1000,
				       0x7fffffff, -1 };
	for (size_t k = 0; k < sizeof unknown / sizeof unknown[0]; k++)
		show(&caps, unknown[k], "unknown type %d", unknown[k]);

	/* fi_tostr_r: NULL buffer, no room, NULL data, short buffers. */
	char buf[32];
	memset(buf, '#', sizeof buf);
	buf[sizeof buf - 1] = 0;
	printf("@@ fi_tostr_r NULL buffer\n%s\n",
	       fi_tostr_r(NULL, sizeof buf, &caps, FI_TYPE_CAPS) ? "buffer" : "(NULL)");
	printf("@@ fi_tostr_r no room\n%s\n",
	       fi_tostr_r(buf, 0, &caps, FI_TYPE_CAPS) ? "buffer" : "(NULL)");
	printf("@@ fi_tostr_r NULL data\n%s %s\n",
	       fi_tostr_r(buf, sizeof buf, NULL, FI_TYPE_CAPS) ? "buffer" : "(NULL)", buf);
	static const size_t lens[] = { 1, 3, 10, 20 };
	for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
		char *r = fi_tostr_r(buf, lens[k], &caps, FI_TYPE_CAPS);
		printf("@@ fi_tostr_r FI_TYPE_CAPS into %zu bytes\n%s\n", lens[k],
		       r == buf ? r : "(not the buffer)");
	}
}

int main(void)
{
	scalars();
	attrs();
	fids();
	infos();
	addresses();
	others();
	return 0;
}
