/*
 * Shared receive contexts (fi_srx_context) on a provider's RDM endpoints
 * (argv[1]: "tcp" or "shm"): endpoints 1 and 2 are bound to one context
 * (fi_ep_bind(ep, &srx->fid, 0)), endpoints 0 and 3 send to them. The
 * receives posted on the context (fi_recv, fi_recvv, fi_recvmsg with
 * FI_MULTI_RECV, fi_trecv, fi_trecvmsg with a directed source) take the
 * messages arriving at either endpoint in the order posted, one posted
 * before any endpoint existed included; each completion comes on the CQ
 * of the endpoint its message arrived at, with its source; fi_cancel on
 * the context reports on the first bound endpoint's CQ; fi_setopt /
 * fi_getopt set its multi-receive minimum; the bound endpoints' own
 * receives and the context's sends are refused; fi_close of a context
 * still bound is -FI_EBUSY, and succeeds once its endpoints are closed.
 *
 * When getinfo does not answer rx_ctx_cnt = FI_SHARED_CONTEXT, the
 * program prints "srx: not offered" and checks that the plain answer's
 * max_ep_srx_ctx is 0.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

static int failures;

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, \
				__LINE__, #cond);                              \
			failures++;                                            \
		}                                                              \
	} while (0)

#define OK(call)                                                               \
	do {                                                                   \
		int ret_ = (int)(call);                                        \
		if (ret_) {                                                    \
			fprintf(stderr, "%s:%d: %s = %d (%s)\n", __FILE__,     \
				__LINE__, #call, ret_, fi_strerror(-ret_));    \
			exit(3);                                               \
		}                                                              \
	} while (0)

#define NEP 4
static struct fid_cq *cq[NEP];

/* Posts an operation, retrying while the provider says -FI_EAGAIN and
 * driving progress meanwhile. */
#define POST(call)                                                             \
	do {                                                                   \
		ssize_t r_;                                                    \
		int tries_ = 0;                                                \
		while ((r_ = (call)) == -FI_EAGAIN && tries_++ < 1000000)      \
			(void)fi_cq_read(cq[0], NULL, 0);                      \
		OK(r_);                                                        \
	} while (0)

/* The next completion of endpoint i with its source (or -FI_EAVAIL). */
static ssize_t wait_cq(int i, struct fi_cq_tagged_entry *e, fi_addr_t *src)
{
	for (int k = 0; k < 4000000; k++) {
		ssize_t n = fi_cq_readfrom(cq[i], e, 1, src);
		if (n != -FI_EAGAIN)
			return n;
		/* Progress for the others too. */
		for (int j = 0; j < NEP; j++)
			if (j != i)
				(void)fi_cq_read(cq[j], NULL, 0);
	}
	return -FI_EAGAIN;
}

/* A successful completion on endpoint i, and none on the other bound
 * endpoint. */
static void ok_at(int i, struct fi_cq_tagged_entry *e, fi_addr_t *src)
{
	CHECK(wait_cq(i, e, src) == 1);
	struct fi_cq_tagged_entry none;
	int other = i == 1 ? 2 : 1;
	CHECK(fi_cq_read(cq[other], &none, 1) == -FI_EAGAIN);
}

/* The send completion of endpoint i. */
static void sent(int i)
{
	struct fi_cq_tagged_entry e;
	fi_addr_t src;
	CHECK(wait_cq(i, &e, &src) == 1);
	CHECK(e.flags & FI_SEND);
}

/* A pattern that shows misplaced bytes: depends on the seed and index. */
static void fill(char *p, size_t n, unsigned seed)
{
	for (size_t k = 0; k < n; k++)
		p[k] = (char)((k * 131u + seed * 17u + (k >> 8)) & 0xff);
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	int tcp = !strcmp(prov, "tcp");
	struct fi_info *hints = fi_allocinfo(), *info, *plain;
	hints->caps = FI_MSG | FI_TAGGED | FI_MULTI_RECV | FI_DIRECTED_RECV | FI_SOURCE;
	hints->ep_attr->type = FI_EP_RDM;
	hints->mode = FI_CONTEXT;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(prov);
	if (tcp)
		hints->addr_format = FI_SOCKADDR_IN;
	const char *node = tcp ? "127.0.0.1" : NULL;
	uint64_t gflags = tcp ? FI_SOURCE : 0;
	OK(fi_getinfo(FI_VERSION(1, 17), node, NULL, gflags, hints, &plain));
	hints->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
	int ret = fi_getinfo(FI_VERSION(1, 17), node, NULL, gflags, hints, &info);
	if (ret == -FI_ENODATA) {
		CHECK(plain->domain_attr->max_ep_srx_ctx == 0);
		printf("srx: not offered\n");
		fi_freeinfo(plain);
		fi_freeinfo(hints);
		return failures ? 1 : 0;
	}
	OK(ret);
	CHECK(info->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT);
	CHECK(info->domain_attr->max_ep_srx_ctx >= 2);
	CHECK(plain->domain_attr->max_ep_srx_ctx >= 2);

	struct fid_fabric *fabric;
	OK(fi_fabric(info->fabric_attr, &fabric, NULL));
	struct fid_domain *domain;
	OK(fi_domain(fabric, info, &domain, NULL));

	struct fid_ep *srx;
	OK(fi_srx_context(domain, info->rx_attr, &srx, NULL));
	CHECK(srx->fid.fclass == FI_CLASS_SRX_CTX);

	/* A receive posted before any endpoint exists. */
	static char early[256];
	memset(early, 0xee, sizeof(early));
	struct fi_context early_ctx;
	POST(fi_recv(srx, early, sizeof(early), NULL, FI_ADDR_UNSPEC, &early_ctx));

	struct fi_av_attr av_attr = { .type = FI_AV_MAP };
	struct fid_av *av;
	OK(fi_av_open(domain, &av_attr, &av, NULL));
	struct fid_ep *ep[NEP];
	fi_addr_t addr[NEP];
	plain->ep_attr->rx_ctx_cnt = 1;
	for (int i = 0; i < NEP; i++) {
		int bound = i == 1 || i == 2;
		struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .size = 128 };
		OK(fi_cq_open(domain, &cq_attr, &cq[i], NULL));
		OK(fi_endpoint(domain, bound ? info : plain, &ep[i], NULL));
		OK(fi_ep_bind(ep[i], &av->fid, 0));
		OK(fi_ep_bind(ep[i], &cq[i]->fid, FI_TRANSMIT | FI_RECV));
		if (bound) {
			CHECK(fi_ep_bind(ep[i], &srx->fid, FI_RECV) == -FI_EBADFLAGS);
			OK(fi_ep_bind(ep[i], &srx->fid, 0));
		}
		OK(fi_enable(ep[i]));
		char name[128];
		size_t len = sizeof(name);
		OK(fi_getname(&ep[i]->fid, name, &len));
		CHECK(fi_av_insert(av, name, 1, &addr[i], 0, NULL) == 1);
	}
	/* An endpoint opened without FI_SHARED_CONTEXT takes no context. */
	CHECK(fi_ep_bind(ep[0], &srx->fid, 0) != 0);
	CHECK(fi_close(&srx->fid) == -FI_EBUSY);
	printf("srx: opened, bound to two endpoints, busy\n");

	struct fi_cq_tagged_entry e;
	fi_addr_t src;

	/* The early receive takes the first message, at endpoint 2. */
	static char msg[4096];
	fill(msg, 200, 1);
	POST(fi_send(ep[3], msg, 200, NULL, addr[2], NULL));
	ok_at(2, &e, &src);
	CHECK(e.op_context == &early_ctx && e.len == 200 && src == addr[3]);
	CHECK((e.flags & (FI_RECV | FI_MSG)) == (FI_RECV | FI_MSG));
	CHECK(!memcmp(early, msg, 200) && (unsigned char)early[200] == 0xee);
	sent(3);

	/* fi_recv, fi_recvv and fi_recvmsg on the context, taken in order by
	 * messages from both senders at both endpoints. */
	static char r[3][512];
	memset(r, 0xee, sizeof(r));
	struct fi_context rctx[3];
	POST(fi_recv(srx, r[0], sizeof(r[0]), NULL, FI_ADDR_UNSPEC, &rctx[0]));
	struct iovec iov[2] = { { r[1], 100 }, { r[1] + 100, 412 } };
	POST(fi_recvv(srx, iov, NULL, 2, FI_ADDR_UNSPEC, &rctx[1]));
	struct iovec iov1 = { r[2], sizeof(r[2]) };
	struct fi_msg m = { .msg_iov = &iov1, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &rctx[2] };
	POST(fi_recvmsg(srx, &m, 0));
	int from[3] = { 0, 3, 0 }, to[3] = { 1, 2, 2 };
	size_t lens[3] = { 300, 150, 480 };
	for (int k = 0; k < 3; k++) {
		fill(msg, lens[k], 10 + k);
		POST(fi_send(ep[from[k]], msg, lens[k], NULL, addr[to[k]], NULL));
		ok_at(to[k], &e, &src);
		CHECK(e.op_context == &rctx[k] && e.len == lens[k] && src == addr[from[k]]);
		CHECK(!memcmp(r[k], msg, lens[k]) && (unsigned char)r[k][lens[k]] == 0xee);
		sent(from[k]);
	}
	printf("srx: fi_recv, fi_recvv, fi_recvmsg\n");

	/* A multi-receive buffer: messages at both endpoints, placed one
	 * after the other; the one leaving less than the minimum set by
	 * fi_setopt releases it. */
	size_t min = 100, got = 0, glen = sizeof(got);
	OK(fi_setopt(&srx->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)));
	OK(fi_getopt(&srx->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got, &glen));
	CHECK(got == 100 && glen == sizeof(size_t));
	static char multi[256];
	memset(multi, 0xee, sizeof(multi));
	struct fi_context mctx;
	struct iovec miov = { multi, sizeof(multi) };
	struct fi_msg mm = { .msg_iov = &miov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &mctx };
	POST(fi_recvmsg(srx, &mm, FI_MULTI_RECV));
	int mfrom[3] = { 0, 3, 3 }, mto[3] = { 1, 2, 1 };
	for (int k = 0; k < 3; k++) {
		fill(msg, 60, 20 + k);
		POST(fi_send(ep[mfrom[k]], msg, 60, NULL, addr[mto[k]], NULL));
		ok_at(mto[k], &e, &src);
		CHECK(e.op_context == &mctx && e.len == 60 && src == addr[mfrom[k]]);
		CHECK(e.buf == multi + 60 * k);
		CHECK(!!(e.flags & FI_MULTI_RECV) == (k == 2));
		CHECK(!memcmp(multi + 60 * k, msg, 60));
		sent(mfrom[k]);
	}
	CHECK((unsigned char)multi[180] == 0xee && (unsigned char)multi[255] == 0xee);
	printf("srx: multi-recv\n");

	/* Tagged: a receive directed at endpoint 3 (fi_trecvmsg), then one
	 * from anyone (fi_trecv); endpoint 0's message takes the second. */
	static char t[2][128];
	memset(t, 0xee, sizeof(t));
	struct fi_context tctx[2];
	struct iovec tiov = { t[0], sizeof(t[0]) };
	struct fi_msg_tagged tm = { .msg_iov = &tiov, .iov_count = 1, .addr = addr[3],
				    .tag = 7, .ignore = 0, .context = &tctx[0] };
	POST(fi_trecvmsg(srx, &tm, 0));
	POST(fi_trecv(srx, t[1], sizeof(t[1]), NULL, FI_ADDR_UNSPEC, 7, 0, &tctx[1]));
	fill(msg, 50, 30);
	POST(fi_tsend(ep[0], msg, 50, NULL, addr[1], 7, NULL));
	ok_at(1, &e, &src);
	CHECK(e.op_context == &tctx[1] && e.len == 50 && e.tag == 7 && src == addr[0]);
	CHECK((e.flags & (FI_RECV | FI_TAGGED)) == (FI_RECV | FI_TAGGED));
	CHECK(!memcmp(t[1], msg, 50));
	sent(0);
	fill(msg, 70, 31);
	POST(fi_tsend(ep[3], msg, 70, NULL, addr[2], 7, NULL));
	ok_at(2, &e, &src);
	CHECK(e.op_context == &tctx[0] && e.len == 70 && src == addr[3]);
	CHECK(!memcmp(t[0], msg, 70) && (unsigned char)t[0][70] == 0xee);
	sent(3);
	printf("srx: tagged, directed\n");

	/* fi_cancel on the context: the first bound endpoint's CQ. */
	static char c[64];
	struct fi_context cctx;
	POST(fi_recv(srx, c, sizeof(c), NULL, FI_ADDR_UNSPEC, &cctx));
	OK(fi_cancel(&srx->fid, &cctx));
	CHECK(wait_cq(1, &e, &src) == -FI_EAVAIL);
	struct fi_cq_err_entry err;
	memset(&err, 0, sizeof(err));
	CHECK(fi_cq_readerr(cq[1], &err, 0) == 1);
	CHECK(err.op_context == &cctx && err.err == FI_ECANCELED);
	CHECK(fi_cancel(&srx->fid, &cctx) == -FI_ENOENT);
	printf("srx: cancel\n");

	/* Refusals: the bound endpoints' own receives, the context's
	 * sends. */
	CHECK(fi_recv(ep[1], c, sizeof(c), NULL, FI_ADDR_UNSPEC, NULL) == -FI_EOPNOTSUPP);
	CHECK(fi_trecv(ep[2], c, sizeof(c), NULL, FI_ADDR_UNSPEC, 1, 0, NULL) == -FI_EOPNOTSUPP);
	CHECK(fi_send(srx, c, 8, NULL, addr[1], NULL) == -FI_EOPNOTSUPP);
	CHECK(fi_inject(srx, c, 8, addr[1]) == -FI_EOPNOTSUPP);
	printf("srx: refusals\n");

	/* Closing: the context once its endpoints are gone. */
	for (int i = 0; i < NEP; i++)
		OK(fi_close(&ep[i]->fid));
	OK(fi_close(&srx->fid));
	for (int i = 0; i < NEP; i++)
		OK(fi_close(&cq[i]->fid));
	OK(fi_close(&av->fid));
	OK(fi_close(&domain->fid));
	OK(fi_close(&fabric->fid));
	fi_freeinfo(info);
	fi_freeinfo(plain);
	fi_freeinfo(hints);
	printf("srx: closed\n");
	return failures ? 1 : 0;
}
