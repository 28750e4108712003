// SPDX-License-Identifier: GPL-2.0
/*
 * Extended memory windows' figures for `make bench` (issue 15's benchmark): a non-contiguous
 * object on DEV_A moved by RDMA WRITE into a contiguous buffer registered on DEV_B, three ways:
 *   sge     scatter/gather lists: one SGE per piece, as many WRs as the device's max_sge
 *           forces (one chain, the last signaled)
 *   pack    the pieces copied into a registered contiguous buffer, then one WRITE
 *   layout  one WRITE whose one SGE names an extended window bound to the object (rodp only;
 *           "n/a" on a device without extended windows)
 * Objects: a matrix column of COL_N 8-byte cells 8 KiB apart (a 1,024 x 1,024 matrix of
 * doubles, row-major), and a 2-D tile of TILE_ROWS rows of TILE_ROW bytes 8 KiB apart.
 *
 *   bench_xmw DEV_A DEV_B
 *
 * Prints "name value" lines: <object>_<way>_us, the mean microseconds of one move (from posting
 * to the completion, after WARMUP moves, for at least RUN_S seconds and MIN_MOVES moves), and
 * max_sge. Each way's data is checked at the destination before it is timed; a wrong byte ends
 * the program with status 1.
 */
#include "rodp_verbs.h"
#include <rodp-xmw.h>

#define ROW 8192			/* bytes from one row of the matrix to the next */
#define ROWS 1024
#define COL_N ROWS			/* the column: 1,024 cells of 8 bytes */
#define TILE_ROWS 32			/* the tile: 32 rows of 256 bytes (32 x 32 cells) */
#define TILE_ROW 256
#define WINDOW 0x100000ULL		/* the window's own address */
#define WARMUP 20
#define MIN_MOVES 100
#define RUN_S 1.0

struct obj {
	const char *name;
	size_t off, piece, n;		/* first byte in the matrix, piece length, pieces */
};

static const struct obj objs[] = {
	{ "column", 5 * 8, 8, COL_N },
	{ "tile", 64 * 8, TILE_ROW, TILE_ROWS },
};

struct bench {
	struct dev a, b;
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	int max_sge;
	char *matrix, *pack, *dst;
	struct ibv_mr *matrix_mr, *pack_mr, *dst_mr;
	struct ibv_mw *mw;
	struct ibv_sge *sge;
	struct ibv_send_wr *wr;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Waits for the one signaled completion of a move, polling without sleeping. */
static int done(struct bench *b)
{
	struct ibv_wc wc;
	double end = now_s() + 60;
	int n;

	while (!(n = ibv_poll_cq(b->cq[0], 1, &wc)) && now_s() < end)
		;
	if (n != 1 || wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "bench_xmw: completion %d, status %s\n", n,
			n == 1 ? ibv_wc_status_str(wc.status) : "none");
		return -1;
	}
	return 0;
}

/* Posts n WRs of b->wr[] (chained, the last signaled) and waits. */
static int post(struct bench *b, int n)
{
	struct ibv_send_wr *bad;

	for (int i = 0; i < n; i++) {
		b->wr[i].next = i + 1 < n ? &b->wr[i + 1] : NULL;
		b->wr[i].send_flags = i + 1 < n ? 0 : IBV_SEND_SIGNALED;
	}
	if (ibv_post_send(b->qp[0], b->wr, &bad)) {
		perror("bench_xmw: post");
		return -1;
	}
	return done(b);
}

/* One WR at wr[i]: a WRITE of sges SGEs from sge[first] to dst + off. */
static void write_wr(struct bench *b, int i, int first, int sges, size_t off)
{
	b->wr[i] = (struct ibv_send_wr){
		.wr_id = i, .sg_list = &b->sge[first], .num_sge = sges,
		.opcode = IBV_WR_RDMA_WRITE,
		.wr.rdma = { .remote_addr = (uintptr_t)b->dst + off, .rkey = b->dst_mr->rkey },
	};
}

/* One move of o the way way: 0 or -1. */
static int move(struct bench *b, const struct obj *o, const char *way)
{
	size_t len = o->piece * o->n;
	int n = 0;

	if (!strcmp(way, "sge")) {
		for (size_t p = 0; p < o->n; p++)
			b->sge[p] = (struct ibv_sge){ (uintptr_t)b->matrix + o->off + p * ROW,
						      o->piece, b->matrix_mr->lkey };
		for (size_t p = 0; p < o->n; p += b->max_sge, n++)
			write_wr(b, n, p, o->n - p < (size_t)b->max_sge ? o->n - p : b->max_sge,
				 p * o->piece);
		return post(b, n);
	}
	if (!strcmp(way, "pack")) {
		for (size_t p = 0; p < o->n; p++)
			memcpy(b->pack + p * o->piece, b->matrix + o->off + p * ROW, o->piece);
		b->sge[0] = (struct ibv_sge){ (uintptr_t)b->pack, len, b->pack_mr->lkey };
	} else {
		b->sge[0] = (struct ibv_sge){ WINDOW, len, b->mw->rkey };
	}
	write_wr(b, 0, 0, 1, 0);
	return post(b, 1);
}

/* Binds o to the window (rodp's extended windows): 0, or -1 where the device has none. */
static int bind_obj(struct bench *b, const struct obj *o)
{
	struct rodp_xmw_entry e = {
		.key = b->matrix_mr->lkey, .ndims = 1, .start = (uintptr_t)b->matrix + o->off,
		.len = o->piece, .repeat_count = 1, .dims = { { .stride = ROW, .count = o->n } },
	};

	if (!b->mw)
		return -1;
	return rodp_xmw_bind_layout(b->qp[0], b->mw, WINDOW, IBV_ACCESS_REMOTE_READ,
				    RODP_XMW_KIND_COMPOSITE, &e, 1, NULL) ? -1 : 0;
}

/* The destination holds o's pieces in order. */
static int right(struct bench *b, const struct obj *o)
{
	for (size_t p = 0; p < o->n; p++)
		if (memcmp(b->dst + p * o->piece, b->matrix + o->off + p * ROW, o->piece))
			return 0;
	return 1;
}

/* The mean microseconds of one move of o the way way; -1 where it cannot be done. */
static double measure(struct bench *b, const struct obj *o, const char *way)
{
	double t0, el;
	long moves = 0;

	if (!strcmp(way, "layout") && bind_obj(b, o))
		return -1;
	memset(b->dst, 0, o->piece * o->n);
	if (move(b, o, way))
		return -1;
	if (!right(b, o)) {
		fprintf(stderr, "bench_xmw: %s by %s: wrong data at the destination\n", o->name,
			way);
		exit(1);
	}
	for (int i = 0; i < WARMUP; i++)
		if (move(b, o, way))
			return -1;
	t0 = now_s();
	do {
		if (move(b, o, way))
			return -1;
		moves++;
		el = now_s() - t0;
	} while (el < RUN_S || moves < MIN_MOVES);
	return el * 1e6 / moves;
}

int main(int argc, char **argv)
{
	static const char *const ways[] = { "sge", "pack", "layout" };
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC };
	struct ibv_device_attr attr;
	struct bench b;

	if (argc < 3 || dev_open(&b.a, argv[1]) || dev_open(&b.b, argv[2]))
		return fprintf(stderr, "usage: bench_xmw DEV_A DEV_B\n"), 1;
	if (ibv_query_device(b.a.ctx, &attr))
		return perror("query device"), 1;
	b.max_sge = attr.max_sge < COL_N ? attr.max_sge : COL_N;
	for (int i = 0; i < 2; i++) {
		struct dev *d = i ? &b.b : &b.a;

		b.cq[i] = ibv_create_cq(d->ctx, 64, NULL, NULL, 0);
		qa.send_cq = qa.recv_cq = b.cq[i];
		qa.cap = (struct ibv_qp_init_attr){}.cap;
		qa.cap.max_send_wr = COL_N / b.max_sge + 2;
		qa.cap.max_recv_wr = 1;
		qa.cap.max_send_sge = i ? 1 : b.max_sge;
		qa.cap.max_recv_sge = 1;
		b.qp[i] = b.cq[i] ? ibv_create_qp(d->pd, &qa) : NULL;
		if (!b.qp[i])
			return perror("qp"), 1;
	}
	if (rc_connect(b.qp[0], &b.a, b.qp[1]->qp_num, &b.b.gid, &rc_default) ||
	    rc_connect(b.qp[1], &b.b, b.qp[0]->qp_num, &b.a.gid, &rc_default))
		return perror("connect"), 1;
	b.matrix = aligned_alloc(4096, (size_t)ROWS * ROW);
	b.pack = aligned_alloc(4096, COL_N * 8 + TILE_ROWS * TILE_ROW);
	b.dst = aligned_alloc(4096, COL_N * 8 + TILE_ROWS * TILE_ROW);
	b.sge = calloc(COL_N, sizeof(*b.sge));
	b.wr = calloc(COL_N, sizeof(*b.wr));
	if (!b.matrix || !b.pack || !b.dst || !b.sge || !b.wr)
		return perror("alloc"), 1;
	fill(b.matrix, (size_t)ROWS * ROW, 3);
	b.matrix_mr = ibv_reg_mr(b.a.pd, b.matrix, (size_t)ROWS * ROW,
				 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	b.pack_mr = ibv_reg_mr(b.a.pd, b.pack, COL_N * 8 + TILE_ROWS * TILE_ROW,
			       IBV_ACCESS_LOCAL_WRITE);
	b.dst_mr = ibv_reg_mr(b.b.pd, b.dst, COL_N * 8 + TILE_ROWS * TILE_ROW, ALL_ACCESS);
	if (!b.matrix_mr || !b.pack_mr || !b.dst_mr)
		return perror("reg"), 1;
	b.mw = rodp_xmw_grant_noncontig(b.matrix_mr) ? NULL :
	       rodp_xmw_alloc_mw_ex(b.a.pd, IBV_MW_TYPE_1, 1);
	printf("max_sge %d\n", b.max_sge);
	for (size_t k = 0; k < sizeof(objs) / sizeof(objs[0]); k++)
		for (size_t w = 0; w < 3; w++) {
			double v = measure(&b, &objs[k], ways[w]);

			if (v < 0)
				printf("%s_%s_us n/a\n", objs[k].name, ways[w]);
			else
				printf("%s_%s_us %.1f\n", objs[k].name, ways[w], v);
			fflush(stdout);
		}
	if (b.mw)
		ibv_dealloc_mw(b.mw);
	ibv_dereg_mr(b.dst_mr);
	ibv_dereg_mr(b.pack_mr);
	ibv_dereg_mr(b.matrix_mr);
	for (int i = 0; i < 2; i++) {
		ibv_destroy_qp(b.qp[i]);
		ibv_destroy_cq(b.cq[i]);
	}
	dev_close(&b.a);
	dev_close(&b.b);
	return 0;
}
