/*
 * fi_getinfo as libfabric 1.17's own programs and MPI expect it (issue #18).
 *
 * Built once against libfabric-dev's headers and linked with -lfabric
 * (no rpath); tests/getinfo_diff.rs runs it on Debian's libfabric 1.17 and
 * on ours (LD_LIBRARY_PATH) and compares.
 *
 * Output, one line each:
 *   lib VERSION                  which library answered
 *   ok NAME                      a case passed
 *   FAIL NAME: REASON            a case failed
 *   data answer KEY RET COUNT    what one query answered (compared between
 *                                the two runs by the Rust side)
 *   data order KEY COUNT HEX     the msg_order hints accepted (bit k of HEX
 *                                set: the combination k of the nine basic
 *                                FI_ORDER_* bits matched)
 *   note TEXT                    information only
 *   done                         the program ran to its end
 *
 * Case names do not depend on the answers, so both runs print the same
 * names. Where libfabric 1.17 and its man pages disagree, the checks follow
 * the man pages: check_subset is the one check Debian's library fails for
 * it (the Rust test lists the cases); domain_caps lets shm answer
 * FI_LOCAL_COMM, which Debian's shm refuses.
 */

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#define V1_17 FI_VERSION(1, 17)
#define V1_5 FI_VERSION(1, 5)

/*
 * Capability classes, from libfabric 1.17's fi_getinfo(3) (CAPABILITIES)
 * and fi_endpoint(3) (the caps of the transmit and receive attributes).
 * The man page also lists FI_XPU as primary and as a tx/rx capability, but
 * the 1.17 headers define no FI_XPU bit (only the op flag FI_XPU_TRIGGER),
 * so it cannot appear here. FI_AV_USER_ID is described in CAPABILITIES but
 * is in none of the classes; neither provider offers it, so it counts as
 * foreign. libfabric 1.17's code treats FI_LOCAL_COMM and FI_REMOTE_COMM as
 * primary, its man page as secondary: either way they belong to fi_info's
 * caps (and to domain_attr's), not to the tx or rx attributes.
 */
#define PRIMARY_CAPS                                                                               \
	(FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_MULTICAST | FI_COLLECTIVE |                  \
	 FI_NAMED_RX_CTX | FI_DIRECTED_RECV | FI_VARIABLE_MSG | FI_HMEM)
#define PRIMARY_MODIFIERS                                                                          \
	(FI_READ | FI_WRITE | FI_RECV | FI_SEND | FI_REMOTE_READ | FI_REMOTE_WRITE)
#define SECONDARY_CAPS                                                                             \
	(FI_MULTI_RECV | FI_SOURCE | FI_RMA_EVENT | FI_SHARED_AV | FI_TRIGGER | FI_FENCE |          \
	 FI_LOCAL_COMM | FI_REMOTE_COMM | FI_SOURCE_ERR | FI_RMA_PMEM)
#define INFO_CAPS (PRIMARY_CAPS | PRIMARY_MODIFIERS | SECONDARY_CAPS)
#define TX_CAPS                                                                                    \
	(FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_READ | FI_WRITE | FI_SEND | FI_HMEM |        \
	 FI_TRIGGER | FI_FENCE | FI_MULTICAST | FI_RMA_PMEM | FI_NAMED_RX_CTX | FI_COLLECTIVE)
#define RX_CAPS                                                                                    \
	(FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_RECV |    \
	 FI_HMEM | FI_TRIGGER | FI_RMA_PMEM | FI_DIRECTED_RECV | FI_VARIABLE_MSG | FI_MULTI_RECV | \
	 FI_SOURCE | FI_RMA_EVENT | FI_SOURCE_ERR | FI_COLLECTIVE)
/* Operation flags that must never show up as capabilities. */
#define OP_FLAGS                                                                                   \
	(FI_REMOTE_CQ_DATA | FI_MORE | FI_PEEK | FI_PRIORITY | FI_COMPLETION | FI_INJECT |         \
	 FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_AFFINITY |          \
	 FI_COMMIT_COMPLETE | FI_MATCH_COMPLETE)

/* The nine basic ordering bits, FI_ORDER_RAR (bit 0) to FI_ORDER_SAS (bit 8). */
#define ORDER_BITS 9
#define ORDER_COMBOS (1u << ORDER_BITS)

/* ------------------------------------------------------------ names */

struct bitname {
	uint64_t bit;
	const char *name;
};

static const struct bitname cap_names[] = {
	{FI_MSG, "FI_MSG"},
	{FI_RMA, "FI_RMA"},
	{FI_TAGGED, "FI_TAGGED"},
	{FI_ATOMIC, "FI_ATOMIC"},
	{FI_MULTICAST, "FI_MULTICAST"},
	{FI_COLLECTIVE, "FI_COLLECTIVE"},
	{FI_READ, "FI_READ"},
	{FI_WRITE, "FI_WRITE"},
	{FI_RECV, "FI_RECV"},
	{FI_SEND, "FI_SEND"},
	{FI_REMOTE_READ, "FI_REMOTE_READ"},
	{FI_REMOTE_WRITE, "FI_REMOTE_WRITE"},
	{FI_MULTI_RECV, "FI_MULTI_RECV"},
	{FI_REMOTE_CQ_DATA, "FI_REMOTE_CQ_DATA"},
	{FI_MORE, "FI_MORE"},
	{FI_PEEK, "FI_PEEK"},
	{FI_TRIGGER, "FI_TRIGGER"},
	{FI_FENCE, "FI_FENCE"},
	{FI_PRIORITY, "FI_PRIORITY"},
	{FI_COMPLETION, "FI_COMPLETION"},
	{FI_INJECT, "FI_INJECT"},
	{FI_INJECT_COMPLETE, "FI_INJECT_COMPLETE"},
	{FI_TRANSMIT_COMPLETE, "FI_TRANSMIT_COMPLETE"},
	{FI_DELIVERY_COMPLETE, "FI_DELIVERY_COMPLETE"},
	{FI_AFFINITY, "FI_AFFINITY"},
	{FI_COMMIT_COMPLETE, "FI_COMMIT_COMPLETE"},
	{FI_MATCH_COMPLETE, "FI_MATCH_COMPLETE"},
	{FI_PEER_TRANSFER, "FI_PEER_TRANSFER"},
	{FI_AV_USER_ID, "FI_AV_USER_ID"},
	{FI_PEER, "FI_PEER"},
	{FI_XPU_TRIGGER, "FI_XPU_TRIGGER"},
	{FI_HMEM_HOST_ALLOC, "FI_HMEM_HOST_ALLOC"},
	{FI_HMEM_DEVICE_ONLY, "FI_HMEM_DEVICE_ONLY"},
	{FI_HMEM, "FI_HMEM"},
	{FI_VARIABLE_MSG, "FI_VARIABLE_MSG"},
	{FI_RMA_PMEM, "FI_RMA_PMEM"},
	{FI_SOURCE_ERR, "FI_SOURCE_ERR"},
	{FI_LOCAL_COMM, "FI_LOCAL_COMM"},
	{FI_REMOTE_COMM, "FI_REMOTE_COMM"},
	{FI_SHARED_AV, "FI_SHARED_AV"},
	{FI_PROV_ATTR_ONLY, "FI_PROV_ATTR_ONLY"},
	{FI_NUMERICHOST, "FI_NUMERICHOST"},
	{FI_RMA_EVENT, "FI_RMA_EVENT"},
	{FI_SOURCE, "FI_SOURCE"},
	{FI_NAMED_RX_CTX, "FI_NAMED_RX_CTX"},
	{FI_DIRECTED_RECV, "FI_DIRECTED_RECV"},
	{0, NULL},
};

static const struct bitname order_names[] = {
	{FI_ORDER_RAR, "FI_ORDER_RAR"},
	{FI_ORDER_RAW, "FI_ORDER_RAW"},
	{FI_ORDER_RAS, "FI_ORDER_RAS"},
	{FI_ORDER_WAR, "FI_ORDER_WAR"},
	{FI_ORDER_WAW, "FI_ORDER_WAW"},
	{FI_ORDER_WAS, "FI_ORDER_WAS"},
	{FI_ORDER_SAR, "FI_ORDER_SAR"},
	{FI_ORDER_SAW, "FI_ORDER_SAW"},
	{FI_ORDER_SAS, "FI_ORDER_SAS"},
	{FI_ORDER_DATA, "FI_ORDER_DATA"},
	{FI_ORDER_RMA_RAR, "FI_ORDER_RMA_RAR"},
	{FI_ORDER_RMA_RAW, "FI_ORDER_RMA_RAW"},
	{FI_ORDER_RMA_WAR, "FI_ORDER_RMA_WAR"},
	{FI_ORDER_RMA_WAW, "FI_ORDER_RMA_WAW"},
	{FI_ORDER_ATOMIC_RAR, "FI_ORDER_ATOMIC_RAR"},
	{FI_ORDER_ATOMIC_RAW, "FI_ORDER_ATOMIC_RAW"},
	{FI_ORDER_ATOMIC_WAR, "FI_ORDER_ATOMIC_WAR"},
	{FI_ORDER_ATOMIC_WAW, "FI_ORDER_ATOMIC_WAW"},
	{0, NULL},
};

/*
 * "A|B|C" for the bits of v ("0" for none, "bit N" for unnamed bits), in
 * one of a few rotating static buffers: several may be used in one printf.
 */
static const char *names(uint64_t v, const struct bitname *table)
{
	static char bufs[8][640];
	static unsigned next;
	char *buf = bufs[next++ % 8];
	size_t len = 0;

	buf[0] = '\0';
	if (!v) {
		strcpy(buf, "0");
		return buf;
	}
	for (int b = 0; b < 64; b++) {
		uint64_t bit = 1ULL << b;
		const char *name = NULL;
		char unnamed[16];

		if (!(v & bit))
			continue;
		for (const struct bitname *t = table; t->name; t++) {
			if (t->bit == bit) {
				name = t->name;
				break;
			}
		}
		if (!name) {
			snprintf(unnamed, sizeof unnamed, "bit%d", b);
			name = unnamed;
		}
		len += (size_t)snprintf(buf + len, sizeof bufs[0] - len, "%s%s", len ? "|" : "", name);
		if (len >= sizeof bufs[0])
			break;
	}
	return buf;
}

static const char *caps_str(uint64_t v)
{
	return names(v, cap_names);
}

static const char *order_str(uint64_t v)
{
	return names(v, order_names);
}

static const char *ep_str(enum fi_ep_type ep)
{
	switch (ep) {
	case FI_EP_UNSPEC:
		return "any";
	case FI_EP_MSG:
		return "msg";
	case FI_EP_RDM:
		return "rdm";
	case FI_EP_DGRAM:
		return "dgram";
	default:
		return "other";
	}
}

static const char *prov_of(const struct fi_info *i)
{
	if (!i->fabric_attr || !i->fabric_attr->prov_name)
		return "(null)";
	return i->fabric_attr->prov_name;
}

/* A short description of result number n. */
static const char *which(const struct fi_info *i, int n)
{
	static char bufs[4][256];
	static unsigned next;
	char *buf = bufs[next++ % 4];

	snprintf(buf, sizeof bufs[0], "#%d %s %s %s", n, prov_of(i),
		 i->domain_attr && i->domain_attr->name ? i->domain_attr->name : "(null)",
		 i->ep_attr ? ep_str(i->ep_attr->type) : "(no ep_attr)");
	return buf;
}

/* Whether result i comes from provider prov ("tcp" matches "tcp;ofi_rxm"). */
static bool from_prov(const struct fi_info *i, const char *prov)
{
	const char *name = prov_of(i);
	size_t len = strlen(prov);

	return !strncmp(name, prov, len) && (name[len] == '\0' || name[len] == ';');
}

/* ------------------------------------------------------------ verdicts */

static char reason[4096];
static size_t reason_len;
static int reason_count;

/* Records one failure of the current case (the first few are kept). */
static void failf(const char *fmt, ...)
{
	va_list ap;

	if (reason_count++ >= 4)
		return;
	if (reason_len && reason_len < sizeof reason)
		reason_len += (size_t)snprintf(reason + reason_len, sizeof reason - reason_len, "; ");
	if (reason_len >= sizeof reason)
		return;
	va_start(ap, fmt);
	reason_len += (size_t)vsnprintf(reason + reason_len, sizeof reason - reason_len, fmt, ap);
	va_end(ap);
}

/* Prints the verdict of the current case and starts the next one. */
static void verdict(const char *name)
{
	if (reason_count > 4)
		printf("FAIL %s: %s; (%d more)\n", name, reason, reason_count - 4);
	else if (reason_count)
		printf("FAIL %s: %s\n", name, reason);
	else
		printf("ok %s\n", name);
	fflush(stdout);
	reason[0] = '\0';
	reason_len = 0;
	reason_count = 0;
}

/* ------------------------------------------------------------ queries */

static struct fi_info *new_hints(const char *prov, enum fi_ep_type ep)
{
	struct fi_info *h = fi_allocinfo();

	if (!h) {
		printf("FAIL setup: fi_allocinfo returned NULL\n");
		exit(1);
	}
	if (prov)
		h->fabric_attr->prov_name = strdup(prov);
	h->ep_attr->type = ep;
	return h;
}

/*
 * fi_getinfo, with the checks every call gets (success means a non-empty
 * list, an error a NULL one) and a "data answer" line when key is set.
 */
static int query(const char *key, uint32_t version, const char *node, const char *service,
		 uint64_t flags, const struct fi_info *hints, struct fi_info **out)
{
	struct fi_info *info = NULL;
	int count = 0;
	int ret = fi_getinfo(version, node, service, flags, hints, &info);

	if (ret == 0 && !info)
		failf("fi_getinfo returned FI_SUCCESS with an empty list");
	if (ret != 0 && info) {
		failf("fi_getinfo returned %d but set a list", ret);
		fi_freeinfo(info);
		info = NULL;
	}
	for (struct fi_info *cur = info; cur; cur = cur->next)
		count++;
	if (key)
		printf("data answer %s %d %d\n", key, ret, count);
	*out = info;
	return ret;
}

/* The sub-structures every result must carry. */
static bool complete(const struct fi_info *i, int n)
{
	if (i->tx_attr && i->rx_attr && i->ep_attr && i->domain_attr && i->fabric_attr)
		return true;
	failf("%s: a NULL attribute structure", which(i, n));
	return false;
}

/*
 * Case 1's checks on one result: only 1.17 capability bits in each caps
 * field, and every requested capability present in fi_info's caps
 * (fi_getinfo(3): a non-zero hint must be supported or the call fails;
 * "If requested, a provider must support the capability" for secondary
 * ones).
 */
static void check_caps(const struct fi_info *i, int n, uint64_t requested)
{
	uint64_t caps = i->caps;

	if (!complete(i, n))
		return;
	if (caps & OP_FLAGS)
		failf("%s: caps holds operation flags %s", which(i, n), caps_str(caps & OP_FLAGS));
	if (caps & ~INFO_CAPS & ~OP_FLAGS)
		failf("%s: caps holds %s, not 1.17 primary or secondary capabilities", which(i, n),
		      caps_str(caps & ~INFO_CAPS & ~OP_FLAGS));
	if (i->tx_attr->caps & ~TX_CAPS)
		failf("%s: tx_attr->caps holds %s, not transmit capabilities", which(i, n),
		      caps_str(i->tx_attr->caps & ~TX_CAPS));
	if (i->rx_attr->caps & ~RX_CAPS)
		failf("%s: rx_attr->caps holds %s, not receive capabilities", which(i, n),
		      caps_str(i->rx_attr->caps & ~RX_CAPS));
	if (requested & ~caps)
		failf("%s: requested %s missing from caps %s", which(i, n),
		      caps_str(requested & ~caps), caps_str(caps));
}

/*
 * fi_endpoint(3): the caps of the transmit and receive attributes "must be
 * a subset of those requested of the associated endpoint", and with a zero
 * hint "the applicable capability bits from the fi_info structure will be
 * used". libfabric 1.17 refills the direction modifiers of an attribute
 * whose hint is zero (hints FI_MSG|FI_SEND give rx_attr->caps
 * FI_MSG|FI_RECV under fi_info caps FI_MSG|FI_SEND), which breaks the
 * subset rule: the man page wins here.
 */
static void check_subset(const struct fi_info *i, int n)
{
	if (!complete(i, n))
		return;
	if (i->tx_attr->caps & ~i->caps)
		failf("%s: tx_attr->caps has %s beyond fi_info caps %s", which(i, n),
		      caps_str(i->tx_attr->caps & ~i->caps), caps_str(i->caps));
	if (i->rx_attr->caps & ~i->caps)
		failf("%s: rx_attr->caps has %s beyond fi_info caps %s", which(i, n),
		      caps_str(i->rx_attr->caps & ~i->caps), caps_str(i->caps));
}

/* Every result comes from prov, with the requested endpoint type. */
static void check_origin(const struct fi_info *i, int n, const char *prov, enum fi_ep_type ep)
{
	if (prov && !from_prov(i, prov))
		failf("%s: not a result of provider %s", which(i, n), prov);
	if (ep != FI_EP_UNSPEC && i->ep_attr && i->ep_attr->type != ep)
		failf("%s: endpoint type %d, hint %d", which(i, n), i->ep_attr->type, ep);
}

/* The mode bits of a result are bits the application said it supports. */
static void check_mode(const struct fi_info *i, int n, uint64_t hint_mode)
{
	if (i->mode & ~hint_mode)
		failf("%s: mode %#llx beyond the hint's %#llx", which(i, n),
		      (unsigned long long)i->mode, (unsigned long long)hint_mode);
}

/* ------------------------------------------------------------ case 1 */

static const char *const provs[] = {"tcp", "shm"};
static const enum fi_ep_type eps[] = {FI_EP_MSG, FI_EP_RDM};
#define NPROVS (sizeof provs / sizeof provs[0])
#define NEPS (sizeof eps / sizeof eps[0])

static const uint64_t cap_hints[] = {
	0,
	FI_MSG,
	FI_TAGGED,
	FI_MSG | FI_SEND,
	FI_MSG | FI_RECV,
	FI_TAGGED | FI_RECV,
	FI_RMA,
	FI_RMA | FI_READ,
	FI_RMA | FI_WRITE,
	FI_RMA | FI_REMOTE_READ,
	FI_RMA | FI_REMOTE_WRITE,
	FI_ATOMIC,
	FI_ATOMIC | FI_WRITE,
	FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC,
	FI_TAGGED | FI_DIRECTED_RECV,
	FI_MSG | FI_MULTI_RECV,
	FI_TAGGED | FI_MULTI_RECV,
	FI_MSG | FI_SOURCE,
	FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE,
	FI_RMA | FI_RMA_EVENT,
	FI_MSG | FI_FENCE,
	FI_MSG | FI_SHARED_AV,
	FI_REMOTE_COMM,
	FI_LOCAL_COMM,
	FI_LOCAL_COMM | FI_REMOTE_COMM,
	FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_DIRECTED_RECV,
};

static void caps_null_hints(void)
{
	struct fi_info *info;
	int n = 0;

	query("caps/null", V1_17, NULL, NULL, 0, NULL, &info);
	for (struct fi_info *i = info; i; i = i->next, n++) {
		if (from_prov(i, "tcp") || from_prov(i, "shm"))
			check_caps(i, n, 0);
	}
	verdict("caps/null");
	n = 0;
	for (struct fi_info *i = info; i; i = i->next, n++) {
		if (from_prov(i, "tcp") || from_prov(i, "shm"))
			check_subset(i, n);
	}
	verdict("subset/null");
	fi_freeinfo(info);
}

static void caps_hints(const char *prov, enum fi_ep_type ep, uint64_t caps)
{
	char name[256];
	struct fi_info *h = new_hints(prov, ep);
	struct fi_info *info;
	int n = 0;

	h->caps = caps;
	snprintf(name, sizeof name, "caps/%s/%s/%s", prov, ep_str(ep), caps_str(caps));
	query(name, V1_17, NULL, NULL, 0, h, &info);
	for (struct fi_info *i = info; i; i = i->next, n++) {
		check_origin(i, n, prov, ep);
		check_caps(i, n, caps);
	}
	verdict(name);
	snprintf(name, sizeof name, "subset/%s/%s/%s", prov, ep_str(ep), caps_str(caps));
	n = 0;
	for (struct fi_info *i = info; i; i = i->next, n++)
		check_subset(i, n);
	verdict(name);
	fi_freeinfo(info);
	fi_freeinfo(h);
}

/* ------------------------------------------------------------ case 2 */

/*
 * Requested domain capabilities are kept in fi_info's caps and in
 * domain_attr's. tcp reaches local and remote peers, so it must answer
 * each. shm reaches only this host (fi_getinfo(3), FI_LOCAL_COMM: "a
 * shared memory provider ... may only be used to communicate between
 * processes on the same system"), so a request that includes
 * FI_REMOTE_COMM must fail with FI_ENODATA; FI_LOCAL_COMM alone it may
 * answer (Debian's 1.17 shm does not list FI_LOCAL_COMM and says
 * FI_ENODATA, which the man page allows).
 */
static void domain_caps(const char *prov, enum fi_ep_type ep, uint64_t caps)
{
	char name[256];
	struct fi_info *h = new_hints(prov, ep);
	struct fi_info *info;
	int n = 0;
	int ret;
	bool local_only = !strcmp(prov, "shm");

	h->caps = caps;
	snprintf(name, sizeof name, "domcaps/%s/%s/%s", prov, ep_str(ep), caps_str(caps));
	ret = query(name, V1_17, NULL, NULL, 0, h, &info);
	if (local_only && (caps & FI_REMOTE_COMM) && ret == 0)
		failf("%s answers a request for FI_REMOTE_COMM", prov);
	if (!local_only && ret != 0)
		failf("no result (%d)", ret);
	for (struct fi_info *i = info; i; i = i->next, n++) {
		if (!complete(i, n))
			continue;
		check_origin(i, n, prov, ep);
		if (caps & ~i->caps)
			failf("%s: caps %s lacks %s", which(i, n), caps_str(i->caps),
			      caps_str(caps & ~i->caps));
		if (caps & ~i->domain_attr->caps)
			failf("%s: domain_attr->caps %s lacks %s", which(i, n),
			      caps_str(i->domain_attr->caps), caps_str(caps & ~i->domain_attr->caps));
	}
	verdict(name);
	fi_freeinfo(info);
	fi_freeinfo(h);
}

/* ------------------------------------------------------------ case 3 */

/*
 * Default operation flags: when the same hints without op_flags match,
 * hints with tx (or rx) op_flags must match too, and each result's
 * op_flags equal the hints' on both attributes (libfabric 1.17 copies the
 * hint, zero included).
 */
static void op_flags(const char *prov, enum fi_ep_type ep, uint64_t caps, uint64_t tx,
		     uint64_t rx)
{
	char name[256];
	struct fi_info *h = new_hints(prov, ep);
	struct fi_info *info;
	int n = 0;
	int base;

	h->caps = caps;
	base = query(NULL, V1_17, NULL, NULL, 0, h, &info);
	fi_freeinfo(info);
	h->tx_attr->op_flags = tx;
	h->rx_attr->op_flags = rx;
	snprintf(name, sizeof name, "opflags/%s/%s/%s/tx=%s/rx=%s", prov, ep_str(ep), caps_str(caps),
		 caps_str(tx), caps_str(rx));
	if (query(name, V1_17, NULL, NULL, 0, h, &info) != 0 && base == 0)
		failf("no result, though the same hints without op_flags match");
	for (struct fi_info *i = info; i; i = i->next, n++) {
		if (!complete(i, n))
			continue;
		check_origin(i, n, prov, ep);
		if (i->tx_attr->op_flags != tx)
			failf("%s: tx_attr->op_flags %s, hint %s", which(i, n),
			      caps_str(i->tx_attr->op_flags), caps_str(tx));
		if (i->rx_attr->op_flags != rx)
			failf("%s: rx_attr->op_flags %s, hint %s", which(i, n),
			      caps_str(i->rx_attr->op_flags), caps_str(rx));
	}
	verdict(name);
	fi_freeinfo(info);
	fi_freeinfo(h);
}

/*
 * Open MPI 4.1.4's OFI MTL (pml cm), as an LD_PRELOAD spy of fi_getinfo
 * saw it on this system: API 1.5, no provider name (the MTL filters the
 * list afterwards), caps FI_TAGGED|FI_LOCAL_COMM|FI_REMOTE_COMM|
 * FI_DIRECTED_RECV, mode FI_CONTEXT|FI_CONTEXT2, FI_EP_RDM, tx and rx
 * op_flags FI_COMPLETION and msg_order FI_ORDER_SAS, FI_THREAD_DOMAIN,
 * FI_RM_ENABLED, FI_AV_MAP, cq_data_size 4. Progress and mr_mode are left
 * unspecified.
 */
static struct fi_info *mtl_hints(const char *prov)
{
	struct fi_info *h = new_hints(prov, FI_EP_RDM);

	h->caps = FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_DIRECTED_RECV;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->tx_attr->op_flags = FI_COMPLETION;
	h->rx_attr->op_flags = FI_COMPLETION;
	h->tx_attr->msg_order = FI_ORDER_SAS;
	h->rx_attr->msg_order = FI_ORDER_SAS;
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	h->domain_attr->resource_mgmt = FI_RM_ENABLED;
	h->domain_attr->av_type = FI_AV_MAP;
	h->domain_attr->cq_data_size = 4;
	return h;
}

static void check_mtl_result(const struct fi_info *i, int n, const struct fi_info *h)
{
	enum fi_threading t;

	if (!complete(i, n))
		return;
	check_caps(i, n, h->caps);
	check_mode(i, n, h->mode);
	if (i->ep_attr->type != FI_EP_RDM)
		failf("%s: not FI_EP_RDM", which(i, n));
	if (i->tx_attr->op_flags != FI_COMPLETION || i->rx_attr->op_flags != FI_COMPLETION)
		failf("%s: op_flags tx %s rx %s, hint FI_COMPLETION", which(i, n),
		      caps_str(i->tx_attr->op_flags), caps_str(i->rx_attr->op_flags));
	if (!(i->tx_attr->msg_order & FI_ORDER_SAS) || !(i->rx_attr->msg_order & FI_ORDER_SAS))
		failf("%s: msg_order tx %s rx %s without FI_ORDER_SAS", which(i, n),
		      order_str(i->tx_attr->msg_order), order_str(i->rx_attr->msg_order));
	/* FI_THREAD_DOMAIN or a level that serializes less. */
	t = i->domain_attr->threading;
	if (t != FI_THREAD_DOMAIN && t != FI_THREAD_COMPLETION && t != FI_THREAD_ENDPOINT &&
	    t != FI_THREAD_FID && t != FI_THREAD_SAFE)
		failf("%s: threading %d, hint FI_THREAD_DOMAIN", which(i, n), t);
	if (i->domain_attr->av_type != FI_AV_MAP)
		failf("%s: av_type %d, hint FI_AV_MAP", which(i, n), i->domain_attr->av_type);
	if (i->domain_attr->resource_mgmt != FI_RM_ENABLED)
		failf("%s: resource_mgmt %d, hint FI_RM_ENABLED", which(i, n),
		      i->domain_attr->resource_mgmt);
	if (i->domain_attr->cq_data_size < 4)
		failf("%s: cq_data_size %zu, hint 4", which(i, n), i->domain_attr->cq_data_size);
}

/* The MTL's hints restricted to prov: tcp must answer them. */
static void mpi_mtl(const char *prov)
{
	char name[64];
	struct fi_info *h = mtl_hints(prov);
	struct fi_info *info;
	int n = 0;

	snprintf(name, sizeof name, "mpi-mtl/%s", prov);
	if (query(name, V1_5, NULL, NULL, 0, h, &info) != 0 && !strcmp(prov, "tcp"))
		failf("no result");
	for (struct fi_info *i = info; i; i = i->next, n++) {
		check_origin(i, n, prov, FI_EP_RDM);
		check_mtl_result(i, n, h);
	}
	verdict(name);
	fi_freeinfo(info);
	fi_freeinfo(h);
}

/* The MTL's hints as Open MPI passes them: some tcp result in the list. */
static void mpi_mtl_any(void)
{
	struct fi_info *h = mtl_hints(NULL);
	struct fi_info *info;
	bool tcp = false;
	int n = 0;

	query("mpi-mtl/any", V1_5, NULL, NULL, 0, h, &info);
	for (struct fi_info *i = info; i; i = i->next, n++) {
		if (from_prov(i, "tcp") || from_prov(i, "shm"))
			check_mtl_result(i, n, h);
		tcp |= from_prov(i, "tcp");
	}
	if (!tcp)
		failf("no tcp result");
	verdict("mpi-mtl/any");
	fi_freeinfo(info);
	fi_freeinfo(h);
}

/*
 * Open MPI 4.1.4's OFI BTL (one-sided), as seen on this system: API 1.5,
 * caps FI_RMA|FI_ATOMIC, mode FI_CONTEXT|FI_CONTEXT2, FI_EP_RDM, tx
 * op_flags FI_DELIVERY_COMPLETE, tx and rx iov_limit 1, mr_mode
 * FI_MR_VIRT_ADDR|FI_MR_ALLOCATED|FI_MR_PROV_KEY. The Rust side asserts
 * the same outcome as Debian's.
 */
static void mpi_btl(const char *prov)
{
	const int mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	char name[64];
	struct fi_info *h = new_hints(prov, FI_EP_RDM);
	struct fi_info *info;
	int n = 0;

	h->caps = FI_RMA | FI_ATOMIC;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
	h->tx_attr->iov_limit = 1;
	h->rx_attr->iov_limit = 1;
	h->domain_attr->mr_mode = mr_mode;
	snprintf(name, sizeof name, "mpi-btl/%s", prov);
	query(name, V1_5, NULL, NULL, 0, h, &info);
	for (struct fi_info *i = info; i; i = i->next, n++) {
		if (!complete(i, n))
			continue;
		check_origin(i, n, prov, FI_EP_RDM);
		check_caps(i, n, h->caps);
		check_mode(i, n, h->mode);
		if (i->tx_attr->op_flags != FI_DELIVERY_COMPLETE || i->rx_attr->op_flags != 0)
			failf("%s: op_flags tx %s rx %s, hints FI_DELIVERY_COMPLETE and 0",
			      which(i, n), caps_str(i->tx_attr->op_flags),
			      caps_str(i->rx_attr->op_flags));
		if (i->domain_attr->mr_mode & ~mr_mode)
			failf("%s: mr_mode %#x beyond the hint's %#x", which(i, n),
			      (unsigned)i->domain_attr->mr_mode, (unsigned)mr_mode);
		if (i->tx_attr->iov_limit < 1 || i->rx_attr->iov_limit < 1)
			failf("%s: iov_limit below the hint", which(i, n));
	}
	verdict(name);
	fi_freeinfo(info);
	fi_freeinfo(h);
}

/*
 * The hints issue #18 calls Open MPI's RMA (osc) hints: caps
 * FI_MSG|FI_RMA|FI_READ|FI_RECV|FI_SEND|FI_REMOTE_READ|FI_REMOTE_WRITE,
 * mode FI_CONTEXT|FI_RX_CQ_DATA at API 1.5. (On this system the spy shows
 * them coming from ofi_rxm's own query for core FI_EP_MSG endpoints, made
 * while serving the MTL; Open MPI's BTL asks as mpi_btl does.) The Rust
 * side asserts Debian's outcome.
 */
static void rxm_core(const char *prov, enum fi_ep_type ep)
{
	char name[64];
	struct fi_info *h = new_hints(prov, ep);
	struct fi_info *info;
	int n = 0;

	h->caps = FI_MSG | FI_RMA | FI_READ | FI_RECV | FI_SEND | FI_REMOTE_READ | FI_REMOTE_WRITE;
	h->mode = FI_CONTEXT | FI_RX_CQ_DATA;
	snprintf(name, sizeof name, "mpi-rma/%s/%s", prov, ep_str(ep));
	query(name, V1_5, NULL, NULL, 0, h, &info);
	for (struct fi_info *i = info; i; i = i->next, n++) {
		check_origin(i, n, prov, ep);
		check_caps(i, n, h->caps);
		check_mode(i, n, h->mode);
	}
	verdict(name);
	fi_freeinfo(info);
	fi_freeinfo(h);
}

/* ------------------------------------------------------------ case 4 */

/*
 * Every combination of the nine basic ordering bits as msg_order hints:
 * on both attributes ("both"), on tx only, on rx only. The accepted
 * combinations go to a "data order" line; each accepted result must offer
 * at least the requested ordering (fi_getinfo(3): output values are
 * greater than or equal to the requested ones).
 */
static void orders(const char *prov, enum fi_ep_type ep, uint64_t caps, const char *dir)
{
	bool tx = strcmp(dir, "rx") != 0;
	bool rx = strcmp(dir, "tx") != 0;
	uint8_t set[ORDER_COMBOS / 8];
	char name[256];
	int count = 0;

	memset(set, 0, sizeof set);
	snprintf(name, sizeof name, "order/%s/%s/%s/%s", prov, ep_str(ep), caps_str(caps), dir);
	for (unsigned combo = 0; combo < ORDER_COMBOS; combo++) {
		struct fi_info *h = new_hints(prov, ep);
		struct fi_info *info;
		int n = 0;

		h->caps = caps;
		if (tx)
			h->tx_attr->msg_order = combo;
		if (rx)
			h->rx_attr->msg_order = combo;
		if (query(NULL, V1_17, NULL, NULL, 0, h, &info) == 0) {
			set[combo / 8] |= (uint8_t)(1u << (combo % 8));
			count++;
		}
		for (struct fi_info *i = info; i; i = i->next, n++) {
			if (!complete(i, n))
				continue;
			check_origin(i, n, prov, ep);
			if (tx && (combo & ~i->tx_attr->msg_order))
				failf("%s: hint %s, tx msg_order %s", which(i, n), order_str(combo),
				      order_str(i->tx_attr->msg_order));
			if (rx && (combo & ~i->rx_attr->msg_order))
				failf("%s: hint %s, rx msg_order %s", which(i, n), order_str(combo),
				      order_str(i->rx_attr->msg_order));
		}
		fi_freeinfo(info);
		fi_freeinfo(h);
	}
	printf("data order %s %d ", name, count);
	for (size_t b = sizeof set; b-- > 0;)
		printf("%02x", set[b]);
	printf("\n");
	verdict(name);
}

/* A single ordering bit on shm must match, on both attributes. */
static void order_bit(uint64_t bit, uint64_t caps)
{
	char name[256];
	struct fi_info *h = new_hints("shm", FI_EP_RDM);
	struct fi_info *info;
	int n = 0;

	h->caps = caps;
	h->tx_attr->msg_order = bit;
	h->rx_attr->msg_order = bit;
	snprintf(name, sizeof name, "order1/shm/rdm/%s/%s", caps_str(caps), order_str(bit));
	if (query(name, V1_17, NULL, NULL, 0, h, &info) != 0)
		failf("no result");
	for (struct fi_info *i = info; i; i = i->next, n++) {
		if (!complete(i, n))
			continue;
		if (!(i->tx_attr->msg_order & bit) || !(i->rx_attr->msg_order & bit))
			failf("%s: msg_order tx %s rx %s", which(i, n),
			      order_str(i->tx_attr->msg_order), order_str(i->rx_attr->msg_order));
	}
	verdict(name);
	fi_freeinfo(info);
	fi_freeinfo(h);
}

/* ------------------------------------------------------------ case 5 */

/*
 * Each result of a query, duplicated with fi_dupinfo and passed back as
 * hints, matches again: FI_SUCCESS, and a result of the same provider and
 * endpoint type among the answers.
 */
static void feedback(const char *name, uint32_t version, const struct fi_info *hints,
		     bool ours_only)
{
	struct fi_info *info;
	int n = 0;

	query(NULL, version, NULL, NULL, 0, hints, &info);
	if (!info)
		printf("note %s: nothing to feed back\n", name);
	for (struct fi_info *i = info; i; i = i->next, n++) {
		struct fi_info *dup;
		struct fi_info *again = NULL;
		bool same = false;
		int ret;

		if (ours_only && !from_prov(i, "tcp") && !from_prov(i, "shm"))
			continue;
		dup = fi_dupinfo(i);
		if (!dup) {
			failf("%s: fi_dupinfo returned NULL", which(i, n));
			continue;
		}
		ret = fi_getinfo(version, NULL, NULL, 0, dup, &again);
		if (ret != 0 || !again) {
			failf("%s: fed back as hints, fi_getinfo returned %d (%s)", which(i, n), ret,
			      again ? "with a list" : "no list");
		}
		for (struct fi_info *a = again; a; a = a->next) {
			if (a->ep_attr && i->ep_attr && a->ep_attr->type == i->ep_attr->type &&
			    !strcmp(prov_of(a), prov_of(i)))
				same = true;
		}
		if (ret == 0 && again && !same)
			failf("%s: fed back as hints, no result of the same provider and endpoint "
			      "type",
			      which(i, n));
		fi_freeinfo(again);
		fi_freeinfo(dup);
	}
	verdict(name);
	fi_freeinfo(info);
}

static void feedbacks(void)
{
	struct fi_info *h;

	/* Every result of NULL hints, whatever the provider. */
	feedback("feedback/null", V1_17, NULL, false);

	h = new_hints("tcp", FI_EP_MSG);
	h->caps = FI_MSG;
	feedback("feedback/tcp/msg/FI_MSG", V1_17, h, false);
	fi_freeinfo(h);

	h = new_hints("tcp", FI_EP_RDM);
	h->caps = FI_TAGGED;
	feedback("feedback/tcp/rdm/FI_TAGGED", V1_17, h, false);
	fi_freeinfo(h);

	h = new_hints("tcp", FI_EP_RDM);
	h->caps = FI_MSG | FI_RMA;
	h->mode = FI_CONTEXT;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	feedback("feedback/tcp/rdm/FI_MSG|FI_RMA", V1_17, h, false);
	fi_freeinfo(h);

	h = new_hints("shm", FI_EP_RDM);
	feedback("feedback/shm/rdm/0", V1_17, h, false);
	fi_freeinfo(h);

	h = new_hints("shm", FI_EP_RDM);
	h->caps = FI_MSG | FI_RMA | FI_ATOMIC;
	feedback("feedback/shm/rdm/FI_MSG|FI_RMA|FI_ATOMIC", V1_17, h, false);
	fi_freeinfo(h);

	h = mtl_hints(NULL);
	feedback("feedback/mpi-mtl", V1_5, h, true);
	fi_freeinfo(h);
}

/* ------------------------------------------------------------ case 6 */

/* Every shm result has a source address (and, if dest, a destination). */
static void shm_addresses(const char *name, const char *node, const char *service,
			  uint64_t flags, bool with_hints, bool dest)
{
	struct fi_info *h = with_hints ? new_hints("shm", FI_EP_UNSPEC) : NULL;
	struct fi_info *info;
	int shm = 0;
	int n = 0;

	if (query(name, V1_17, node, service, flags, h, &info) != 0)
		failf("no result");
	for (struct fi_info *i = info; i; i = i->next, n++) {
		if (!from_prov(i, "shm"))
			continue;
		shm++;
		if (!i->src_addr || i->src_addrlen == 0)
			failf("%s: src_addr %p src_addrlen %zu", which(i, n), i->src_addr,
			      i->src_addrlen);
		if (dest && (!i->dest_addr || i->dest_addrlen == 0))
			failf("%s: dest_addr %p dest_addrlen %zu", which(i, n), i->dest_addr,
			      i->dest_addrlen);
		if (shm == 1)
			printf("note %s: addr_format %u src_addrlen %zu dest_addrlen %zu\n", name,
			       i->addr_format, i->src_addrlen, i->dest_addrlen);
	}
	if (!shm)
		failf("no shm result");
	verdict(name);
	fi_freeinfo(info);
	fi_freeinfo(h);
}

/* ------------------------------------------------------------ main */

int main(void)
{
	static const uint64_t tx_flags[] = {FI_COMPLETION, FI_TRANSMIT_COMPLETE,
					    FI_DELIVERY_COMPLETE, FI_INJECT_COMPLETE};
	static const char *const dirs[] = {"both", "tx", "rx"};

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("lib %s api %u.%u\n", fi_tostr("", FI_TYPE_VERSION), FI_MAJOR(fi_version()),
	       FI_MINOR(fi_version()));

	/* 1. Capability hygiene. */
	caps_null_hints();
	for (size_t p = 0; p < NPROVS; p++)
		for (size_t e = 0; e < NEPS; e++)
			for (size_t c = 0; c < sizeof cap_hints / sizeof cap_hints[0]; c++)
				caps_hints(provs[p], eps[e], cap_hints[c]);

	/* 2. Requested domain capabilities. */
	for (size_t p = 0; p < NPROVS; p++) {
		for (size_t e = 0; e < NEPS; e++) {
			/* shm has no FI_EP_MSG endpoint: nothing to check. */
			if (!strcmp(provs[p], "shm") && eps[e] == FI_EP_MSG)
				continue;
			domain_caps(provs[p], eps[e], FI_REMOTE_COMM);
			domain_caps(provs[p], eps[e], FI_LOCAL_COMM | FI_REMOTE_COMM);
			domain_caps(provs[p], eps[e], FI_LOCAL_COMM);
		}
	}

	/* 3. Default operation flags, and Open MPI's hints. */
	for (size_t p = 0; p < NPROVS; p++) {
		for (size_t e = 0; e < NEPS; e++) {
			for (size_t f = 0; f < sizeof tx_flags / sizeof tx_flags[0]; f++)
				op_flags(provs[p], eps[e], FI_MSG, tx_flags[f], 0);
			op_flags(provs[p], eps[e], FI_MSG, 0, FI_COMPLETION);
			op_flags(provs[p], eps[e], FI_MSG | FI_MULTI_RECV, 0, FI_MULTI_RECV);
			op_flags(provs[p], eps[e], FI_TAGGED, FI_DELIVERY_COMPLETE, FI_COMPLETION);
		}
	}
	mpi_mtl("tcp");
	mpi_mtl("shm");
	mpi_mtl_any();
	mpi_btl("tcp");
	mpi_btl("shm");
	for (size_t p = 0; p < NPROVS; p++)
		for (size_t e = 0; e < NEPS; e++)
			rxm_core(provs[p], eps[e]);

	/*
	 * 4. Message ordering. tcp's FI_EP_MSG has no atomics in 1.17; on
	 * FI_EP_RDM atomics change what libfabric's tcp;ofi_rxm orders, so
	 * tcp's RDM runs with and without them.
	 */
	for (size_t d = 0; d < 3; d++) {
		orders("tcp", FI_EP_MSG, FI_MSG | FI_RMA, dirs[d]);
		orders("tcp", FI_EP_RDM, FI_MSG | FI_RMA, dirs[d]);
		orders("tcp", FI_EP_RDM, FI_MSG | FI_RMA | FI_ATOMIC, dirs[d]);
		orders("shm", FI_EP_RDM, FI_MSG | FI_RMA | FI_ATOMIC, dirs[d]);
	}
	order_bit(FI_ORDER_RAW, 0);
	order_bit(FI_ORDER_WAR, 0);
	order_bit(FI_ORDER_WAW, 0);
	order_bit(FI_ORDER_RAW, FI_RMA | FI_ATOMIC);
	order_bit(FI_ORDER_WAR, FI_RMA | FI_ATOMIC);
	order_bit(FI_ORDER_WAW, FI_RMA | FI_ATOMIC);

	/* 5. A result fed back as hints matches again. */
	feedbacks();

	/* 6. shm addresses, with and without node/service. */
	shm_addresses("shm-addr/null-hints", NULL, NULL, 0, false, false);
	shm_addresses("shm-addr/hints", NULL, NULL, 0, true, false);
	shm_addresses("shm-addr/node-service", "127.0.0.1", "9228", 0, true, true);
	shm_addresses("shm-addr/node-service-source", "127.0.0.1", "9228", FI_SOURCE, true,
		      false);
	shm_addresses("shm-addr/service-source", NULL, "9228", FI_SOURCE, true, false);

	printf("done\n");
	return 0;
}
