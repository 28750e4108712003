/* SPDX-License-Identifier: GPL-2.0 */
/* Verbs helpers for rodp's data-path kselftests: devices, QPs brought to RTS, posting, polling. */
#ifndef RODP_VERBS_H
#define RODP_VERBS_H

#include <arpa/inet.h>
#include <poll.h>
#include <stdint.h>
#include <time.h>
#include "rodp_test.h"

#define ALL_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/*
 * rdma-core 45 appended wr_flush to struct ibv_qp_ex (and IBV_QP_EX_WITH_FLUSH, the FLUSH
 * access, capability and opcode values); the host's headers (Debian 12: rdma-core 44) lack
 * them, the guest's libibverbs has them.
 */
struct qp_ex_flush {
	struct ibv_qp_ex ex;
	void (*wr_flush)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, size_t len,
			 uint8_t type, uint8_t level);
};

#define QP_EX_WITH_FLUSH (1 << 11)
#define ACCESS_FLUSH_GLOBAL (1 << 8)
#define ACCESS_FLUSH_PERSISTENT (1 << 9)
#define DEVICE_FLUSH_GLOBAL (1ULL << 38)
#define DEVICE_FLUSH_PERSISTENT (1ULL << 39)
#define DEVICE_ATOMIC_WRITE (1ULL << 40)
#define ODP_SUPPORT_FLUSH (1 << 6)
#define ODP_SUPPORT_ATOMIC_WRITE (1 << 7)
#define WC_FLUSH 8
#define FLUSH_GLOBAL 1
#define FLUSH_PERSISTENT 2
#define FLUSH_RANGE 0
#define FLUSH_MR 1

struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	int gid_index;
	union ibv_gid gid;
};

/* Opens name, allocates a PD and picks the GID of the netdev's IPv4 address (or index 0). */
static inline int dev_open(struct dev *d, const char *name)
{
	memset(d, 0, sizeof(*d));
	d->ctx = open_dev(name);
	if (!d->ctx)
		return -1;
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd)
		return -1;
	for (int i = 0; i < 8; i++) {
		union ibv_gid g;

		if (ibv_query_gid(d->ctx, 1, i, &g))
			break;
		/* ::ffff:a.b.c.d */
		if (g.raw[10] == 0xff && g.raw[11] == 0xff && !g.global.subnet_prefix) {
			d->gid_index = i;
			d->gid = g;
			return 0;
		}
	}
	d->gid_index = 0;
	return ibv_query_gid(d->ctx, 1, 0, &d->gid);
}

static inline void dev_close(struct dev *d)
{
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
}

static inline struct ibv_qp *make_qp(struct dev *d, struct ibv_cq *scq, struct ibv_cq *rcq,
				     enum ibv_qp_type type, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = scq, .recv_cq = rcq, .srq = srq, .qp_type = type,
		.cap = { .max_send_wr = 64, .max_recv_wr = srq ? 0 : 64,
			 .max_send_sge = 4, .max_recv_sge = 4, .max_inline_data = 64 },
	};

	return ibv_create_qp(d->pd, &a);
}

/* An RC QP that can post RDMA WRITE and READ, ATOMIC WRITE and FLUSH through ibv_qp_ex. */
static inline struct ibv_qp *make_qp_ex(struct dev *d, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .pd = d->pd,
		.cap = { .max_send_wr = 64, .max_recv_wr = 16, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
				  IBV_QP_EX_WITH_ATOMIC_WRITE | QP_EX_WITH_FLUSH,
	};

	return ibv_create_qp_ex(d->ctx, &a);
}

/* Posts a signaled ATOMIC WRITE of the 8 bytes of v at raddr through rkey on a make_qp_ex QP. */
static inline int post_atomic_write(struct ibv_qp *qp, uint64_t wr_id, uint32_t rkey,
				    uint64_t raddr, uint64_t v)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);

	ibv_wr_start(x);
	x->wr_id = wr_id;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(x, rkey, raddr, &v);
	return ibv_wr_complete(x);
}

/* Posts a signaled FLUSH of len bytes at raddr through rkey on a make_qp_ex QP. */
static inline int post_flush(struct ibv_qp *qp, uint64_t wr_id, uint32_t rkey, uint64_t raddr,
			     size_t len, uint8_t type, uint8_t level)
{
	struct qp_ex_flush *x = (struct qp_ex_flush *)ibv_qp_to_qp_ex(qp);

	ibv_wr_start(&x->ex);
	x->ex.wr_id = wr_id;
	x->ex.wr_flags = IBV_SEND_SIGNALED;
	x->wr_flush(&x->ex, rkey, raddr, len, type, level);
	return ibv_wr_complete(&x->ex);
}

struct rc_opts {
	int access;		/* qp_access_flags of the responder */
	uint8_t rnr_retry, min_rnr_timer, timeout, retry_cnt, rd_atomic;
	uint8_t uc;		/* rc_pair_open makes UC QPs (rc_connect ignores the RC fields) */
};

static const struct rc_opts rc_default = {
	.access = ALL_ACCESS, .rnr_retry = 7, .min_rnr_timer = 1, .timeout = 14,
	.retry_cnt = 7, .rd_atomic = 4,
};

/* RESET -> INIT -> RTR -> RTS, connected to dqpn at dgid; a UC QP takes only UC's attributes. */
static inline int rc_connect(struct ibv_qp *qp, struct dev *d, uint32_t dqpn,
			     const union ibv_gid *dgid, const struct rc_opts *o)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = o->access };
	int uc = qp->qp_type == IBV_QPT_UC;
	int ret;

	ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			    IBV_QP_ACCESS_FLAGS);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dqpn;
	a.max_dest_rd_atomic = o->rd_atomic;
	a.min_rnr_timer = o->min_rnr_timer;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.sgid_index = d->gid_index;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			    (uc ? 0 : IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	if (uc)
		return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	a.timeout = o->timeout;
	a.retry_cnt = o->retry_cnt;
	a.rnr_retry = o->rnr_retry;
	a.max_rd_atomic = o->rd_atomic;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* UD: RESET -> INIT -> RTR -> RTS with qkey. */
static inline int ud_ready(struct ibv_qp *qp, uint32_t qkey)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = qkey };

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return -1;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -1;
	a.qp_state = IBV_QPS_RTS;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

/* An address handle in pd for d's own GID (its QPs are reachable through it). */
static inline struct ibv_ah *make_ah(struct dev *d, struct ibv_pd *pd, uint8_t sgid_index)
{
	struct ibv_ah_attr a = { .is_global = 1, .port_num = 1 };

	a.grh.dgid = d->gid;
	a.grh.sgid_index = sgid_index;
	a.grh.hop_limit = 1;
	return ibv_create_ah(pd, &a);
}

static inline int qp_to_err(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

static inline enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;

	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &i))
		return -1;
	return a.qp_state;
}

/* Posts one send WR with one SGE (len 0: no SGE). */
static inline int post_send(struct ibv_qp *qp, enum ibv_wr_opcode op, void *addr, uint32_t len,
			    uint32_t lkey, uint64_t raddr, uint32_t rkey, int flags, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = len ? 1 : 0, .opcode = op,
		.send_flags = flags | IBV_SEND_SIGNALED,
	}, *bad;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

static inline int post_atomic(struct ibv_qp *qp, enum ibv_wr_opcode op, void *addr, uint32_t lkey,
			      uint64_t raddr, uint32_t rkey, uint64_t cmp_add, uint64_t swap)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = 8, .lkey = lkey };
	struct ibv_send_wr wr = {
		.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;

	wr.wr.atomic.remote_addr = raddr;
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = cmp_add;
	wr.wr.atomic.swap = swap;
	return ibv_post_send(qp, &wr, &bad);
}

static inline int post_recv(struct ibv_qp *qp, void *addr, uint32_t len, uint32_t lkey,
			    uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(qp, &wr, &bad);
}

static inline int post_srq_recv(struct ibv_srq *srq, void *addr, uint32_t len, uint32_t lkey,
				uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_srq_recv(srq, &wr, &bad);
}

/*
 * Hardware counter name of dev's port 1, as sysfs shows it, or -1. ib_core serves a read in
 * the same jiffy as the port's last one from its cache, and a send that completes in the
 * doorbell can come and go within one: each read waits 11 ms first (a jiffy at HZ >= 100).
 */
static inline long hw_counter(const char *dev, const char *name)
{
	char path[256];

	usleep(11000);
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/hw_counters/%s", dev, name);
	return read_long(path);
}

/* Polls one completion within ms milliseconds: 1 if found, 0 on timeout, -1 on error. */
static inline int poll1(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
	long end = now_ms() + ms;

	do {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n)
			return n;
		usleep(200);
	} while (now_ms() < end);
	return 0;
}

/*
 * In a kselftest_harness test: expects one completion in cq within 10 s with status_, its
 * opcode_ when successful, and wr_id id_.
 */
#define EXPECT_WC(cq, status_, opcode_, id_) do {				\
	struct ibv_wc wc_;							\
	ASSERT_EQ(1, poll1(cq, &wc_, 10000));					\
	EXPECT_EQ(status_, wc_.status);					\
	if ((status_) == IBV_WC_SUCCESS)					\
		EXPECT_EQ(opcode_, wc_.opcode);				\
	EXPECT_EQ(id_, wc_.wr_id);						\
} while (0)

static inline void fill(void *buf, size_t len, unsigned int seed)
{
	unsigned char *p = buf;

	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 8));
}


/*
 * A loopback RC pair on one device: QP 0 and QP 1 connected to each other with options o, each
 * with its own CQ and a buffer of len bytes registered with ALL_ACCESS, all in one PD. QP 0 is
 * the requester of rc_xfer().
 */
struct rc_pair {
	struct dev *d;
	struct ibv_pd *pd;
	struct rc_opts o;
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	char *buf[2];
	struct ibv_mr *mr[2];
	size_t len;
};

#define RC_PAIR_CQE 256

/* Undoes rc_pair_open, also a partial one. */
static inline void rc_pair_close(struct rc_pair *p)
{
	for (int i = 0; i < 2; i++) {
		if (p->qp[i])
			ibv_destroy_qp(p->qp[i]);
		if (p->mr[i])
			ibv_dereg_mr(p->mr[i]);
		if (p->cq[i])
			ibv_destroy_cq(p->cq[i]);
		if (p->buf[i])
			munmap(p->buf[i], p->len);
	}
	memset(p, 0, sizeof(*p));
}

/*
 * Opens an RC pair on d in pd (NULL: d's PD): 0, or -1 with what failed on stderr and what was
 * made left for rc_pair_close.
 */
static inline int rc_pair_open(struct rc_pair *p, struct dev *d, struct ibv_pd *pd, size_t len,
			       const struct rc_opts *o)
{
	struct dev in_pd = *d;
	const char *what = NULL;

	memset(p, 0, sizeof(*p));
	p->d = d;
	p->pd = in_pd.pd = pd ? pd : d->pd;
	p->o = *o;
	p->len = len;
	for (int i = 0; i < 2 && !what; i++) {
		void *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				 -1, 0);

		p->buf[i] = buf == MAP_FAILED ? NULL : buf;
		if (!p->buf[i])
			what = "mmap";
		else if (!(p->mr[i] = ibv_reg_mr(p->pd, p->buf[i], len, ALL_ACCESS)))
			what = "ibv_reg_mr";
		else if (!(p->cq[i] = ibv_create_cq(d->ctx, RC_PAIR_CQE, NULL, NULL, 0)))
			what = "ibv_create_cq";
		else if (!(p->qp[i] = make_qp(&in_pd, p->cq[i], p->cq[i],
					       o->uc ? IBV_QPT_UC : IBV_QPT_RC, NULL)))
			what = "ibv_create_qp";
	}
	for (int i = 0; i < 2 && !what; i++)
		if (rc_connect(p->qp[i], d, p->qp[!i]->qp_num, &d->gid, o))
			what = "rc_connect";
	if (what)
		fprintf(stderr, "# rc_pair_open: %s failed: %s\n", what, strerror(errno));
	return what ? -1 : 0;
}

/* Both QPs back to RESET and connected again: after an error completion moved them to ERR. */
static inline int rc_reset_pair(struct rc_pair *p)
{
	struct ibv_qp_attr r = { .qp_state = IBV_QPS_RESET };

	if (ibv_modify_qp(p->qp[0], &r, IBV_QP_STATE) || ibv_modify_qp(p->qp[1], &r, IBV_QP_STATE))
		return -1;
	if (rc_connect(p->qp[0], p->d, p->qp[1]->qp_num, &p->d->gid, &p->o))
		return -1;
	return rc_connect(p->qp[1], p->d, p->qp[0]->qp_num, &p->d->gid, &p->o);
}

/*
 * QP 0 runs op between its buffer at off and raddr through rkey and waits for the completion:
 * its status, or -1 if the WR could not be posted or did not complete within 30 s.
 */
static inline int rc_xfer(struct rc_pair *p, enum ibv_wr_opcode op, size_t off, uint32_t len,
			  uint64_t raddr, uint32_t rkey)
{
	struct ibv_wc wc;

	if (post_send(p->qp[0], op, p->buf[0] + off, len, p->mr[0]->lkey, raddr, rkey, 0, 1) ||
	    poll1(p->cq[0], &wc, 30000) != 1)
		return -1;
	return wc.status;
}

#endif
