/*
 * The `static inline` data-path functions of <infiniband/verbs.h>, made
 * callable, for fabric-sys's equivalence test (built only with the
 * `bindgen` feature, where the headers are installed): the test checks that
 * the Rust versions in src/inline.rs call the same driver op with the same
 * arguments as the C versions do. These inlines only go through the
 * context's ops table, so this file references no libibverbs symbol.
 */
#include <infiniband/verbs.h>

int fabric_sys_c_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                           struct ibv_send_wr **bad)
{
	return ibv_post_send(qp, wr, bad);
}

int fabric_sys_c_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                           struct ibv_recv_wr **bad)
{
	return ibv_post_recv(qp, wr, bad);
}

int fabric_sys_c_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
                               struct ibv_recv_wr **bad)
{
	return ibv_post_srq_recv(srq, wr, bad);
}

int fabric_sys_c_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, n, wc);
}

int fabric_sys_c_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return ibv_req_notify_cq(cq, solicited_only);
}

struct verbs_context *fabric_sys_c_verbs_get_ctx(struct ibv_context *ctx)
{
	return verbs_get_ctx(ctx);
}
