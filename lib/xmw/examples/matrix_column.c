// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * A worked example of librodp-xmw (Documentation/xmw.rst, "A worked example"): one column of a
 * row-major matrix of 8-byte cells, written and read as one contiguous range through an
 * extended memory window.
 *
 *   cc matrix_column.c $(pkg-config --cflags --libs rodp-xmw) -libverbs -o matrix_column
 *   ./matrix_column [DEVICE [COLUMN]]
 *
 * DEVICE is a rodp device (default: the first device); COLUMN is 0 .. N - 1 (default 3). The
 * program talks to itself: one RC QP connected to itself, as a peer on another host would
 * use the window's key and address. Exit status 0 when every cell is where it belongs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <rodp-xmw.h>

#define N 64			/* an N x N matrix of uint64_t: a column's cells are N * 8 apart */
#define WINDOW_BASE 0x100000	/* the window's own address; any value will do */

static int die(const char *what, int err)
{
	fprintf(stderr, "matrix_column: %s: %s\n", what, strerror(err));
	exit(1);
}

/* Connects qp to itself (RESET -> INIT -> RTR -> RTS) over GID index 0. */
static void connect_to_self(struct ibv_context *ctx, struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						    IBV_ACCESS_REMOTE_READ };
	union ibv_gid gid;

	if (ibv_query_gid(ctx, 1, 0, &gid))
		die("query GID", errno);
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		die("QP to INIT", errno);
	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = qp->qp_num,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 1,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = gid, .sgid_index = 0, .hop_limit = 1 } },
	};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		die("QP to RTR", errno);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
				  .rnr_retry = 7, .max_rd_atomic = 1 };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("QP to RTS", errno);
}

/* One RDMA WRITE or READ of len bytes between vec (lkey) and the window; waits for it. */
static void transfer(struct ibv_qp *qp, struct ibv_cq *cq, enum ibv_wr_opcode op, void *vec,
		     uint32_t len, uint32_t lkey, uint64_t addr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)vec, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { .remote_addr = addr, .rkey = rkey } }, *bad;
	struct ibv_wc wc;
	int n;

	if (ibv_post_send(qp, &wr, &bad))
		die("post", errno);
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	if (n < 0 || wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "matrix_column: %s\n", ibv_wc_status_str(wc.status));
		exit(1);
	}
}

int main(int argc, char **argv)
{
	static uint64_t matrix[N][N], vec[2][N];
	uint64_t *column = vec[0], *back = vec[1];
	int col = argc > 2 ? atoi(argv[2]) : 3, num, bad = 0, err;
	struct ibv_device **list = ibv_get_device_list(&num);
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct rodp_xmw_entry cells;
	struct ibv_device *dev = NULL;
	struct ibv_mr *mr, *vecs;
	struct ibv_context *ctx;
	struct ibv_mw *mw;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint64_t total;

	for (int i = 0; list && i < num && !dev; i++)
		if (argc < 2 || !strcmp(ibv_get_device_name(list[i]), argv[1]))
			dev = list[i];
	if (!dev || col < 0 || col >= N) {
		fprintf(stderr, "usage: matrix_column [DEVICE [COLUMN]]\n");
		return 2;
	}
	ctx = ibv_open_device(dev);
	if (!ctx)
		die("open device", errno);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	if (!pd || !cq)
		die("PD and CQ", errno);
	qa.send_cq = qa.recv_cq = cq;
	qp = ibv_create_qp(pd, &qa);
	if (!qp)
		die("create QP", errno);
	connect_to_self(ctx, qp);

	/* 1. The matrix, registered once, may be bound non-contiguously (MW_BIND + the grant). */
	mr = ibv_reg_mr(pd, matrix, sizeof(matrix), IBV_ACCESS_LOCAL_WRITE |
			IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
	vecs = ibv_reg_mr(pd, vec, sizeof(vec), IBV_ACCESS_LOCAL_WRITE);
	if (!mr || !vecs)
		die("register memory", errno);
	err = rodp_xmw_grant_noncontig(mr);
	if (err)
		die("grant non-contiguous binding", err);

	/* 2. A window with room for one layout entry. */
	mw = rodp_xmw_alloc_mw_ex(pd, IBV_MW_TYPE_1, 1);
	if (!mw)
		die("allocate the window", errno);

	/* 3. The layout: N cells of 8 bytes from matrix[0][col], N * 8 bytes apart. */
	memset(&cells, 0, sizeof(cells));
	cells.key = mr->lkey;
	cells.start = (uintptr_t)&matrix[0][col];
	cells.len = sizeof(uint64_t);
	cells.repeat_count = 1;
	cells.ndims = 1;
	cells.dims[0].stride = sizeof(matrix[0]);
	cells.dims[0].count = N;
	err = rodp_xmw_bind_layout(qp, mw, WINDOW_BASE, IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_WRITE, RODP_XMW_KIND_COMPOSITE, &cells, 1,
				   &total);
	if (err)
		die("bind the layout", err);

	/* 4. One WRITE puts a vector into the column, one READ brings the column back. */
	for (int r = 0; r < N; r++)
		column[r] = 1000 * r + col;
	transfer(qp, cq, IBV_WR_RDMA_WRITE, column, total, vecs->lkey, WINDOW_BASE, mw->rkey);
	transfer(qp, cq, IBV_WR_RDMA_READ, back, total, vecs->lkey, WINDOW_BASE, mw->rkey);
	for (int r = 0; r < N; r++)
		for (int c = 0; c < N; c++)
			bad |= matrix[r][c] != (c == col ? column[r] : 0);
	bad |= memcmp(column, back, sizeof(vec[0])) != 0;
	printf("matrix_column: column %d of a %dx%d matrix (a %llu-byte window, cells %zu bytes "
	       "apart) written and read in one operation each: %s\n", col, N, N,
	       (unsigned long long)total, sizeof(matrix[0]), bad ? "WRONG" : "ok");

	/* 5. Unbind by deallocating the window; then the MRs may go. */
	ibv_dealloc_mw(mw);
	ibv_dereg_mr(vecs);
	ibv_dereg_mr(mr);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return bad;
}
