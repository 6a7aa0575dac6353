/* Out-of-line wrappers for the verbs that <infiniband/verbs.h> defines static inline: they
 * dispatch through the device context's ops table, so Rust cannot call them directly. */
#ifndef RDMABLK_SHIM_H
#define RDMABLK_SHIM_H
#include <infiniband/verbs.h>

int rdmablk_shim_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int rdmablk_shim_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int rdmablk_shim_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			       struct ibv_recv_wr **bad);
int rdmablk_shim_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int rdmablk_shim_req_notify_cq(struct ibv_cq *cq, int solicited_only);
struct ibv_mw *rdmablk_shim_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int rdmablk_shim_dealloc_mw(struct ibv_mw *mw);
uint32_t rdmablk_shim_inc_rkey(uint32_t rkey);
int rdmablk_shim_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);

#endif
