/* See shim.h. Each wrapper is the static inline body from <infiniband/verbs.h>, called once. */
#include "shim.h"

int rdmablk_shim_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	return ibv_post_send(qp, wr, bad);
}

int rdmablk_shim_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return ibv_post_recv(qp, wr, bad);
}

int rdmablk_shim_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			       struct ibv_recv_wr **bad)
{
	return ibv_post_srq_recv(srq, wr, bad);
}

int rdmablk_shim_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, num_entries, wc);
}

int rdmablk_shim_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return ibv_req_notify_cq(cq, solicited_only);
}

struct ibv_mw *rdmablk_shim_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	return ibv_alloc_mw(pd, type);
}

int rdmablk_shim_dealloc_mw(struct ibv_mw *mw)
{
	return ibv_dealloc_mw(mw);
}

uint32_t rdmablk_shim_inc_rkey(uint32_t rkey)
{
	return ibv_inc_rkey(rkey);
}

int rdmablk_shim_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	return ibv_query_port(ctx, port, attr);
}
