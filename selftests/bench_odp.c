// SPDX-License-Identifier: GPL-2.0
/*
 * ODP figures for `make bench`, on any device with ODP (rodp, rxe): RDMA writes from a pinned
 * buffer on DEV_A into memory registered on DEV_B, in 1 MiB messages.
 *
 *   bench_odp DEV_A DEV_B [MiB]     (default 1024: the range of the first-touch test)
 *
 * Prints one "name value" line per figure ("n/a" where the device refuses the setup):
 *   first_touch_pages_per_s   writing MiB of fresh memory through an explicit ODP MR
 *   first_xfer_us             a 16 MiB write (in 1 MiB messages) into fresh ODP memory
 *   first_xfer_prefetched_us  the same after a flushed prefetch of the range (not timed)
 *   first_page_us             a 4 KiB write into a fresh page (mean of 256 messages)
 *   first_page_prefetched_us  the same after a flushed prefetch of the pages (not timed)
 *   odp_MBps                  steady state through an explicit ODP MR (256 MiB, all mapped)
 *   pinned_MBps               the same through a pinned MR
 *   implicit_MBps             the same through an implicit ODP MR
 *   invalidate_ms             munmap of the MiB range the device has mapped, less the time
 *                             the same munmap takes without an MR
 */
#include "rodp_verbs.h"
#include <sys/mman.h>

#define MSG (1 << 20)
#define STEADY (256ull << 20)
#define FIRST (16 << 20)
#define ODP (ALL_ACCESS | IBV_ACCESS_ON_DEMAND)

struct bench {
	struct dev a, b;
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	char *src;
	struct ibv_mr *src_mr;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static char *fresh(size_t len)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* One completion, polled without sleeping (the figures are in microseconds). */
static int poll_busy(struct ibv_cq *cq, struct ibv_wc *wc)
{
	long end = now_ms() + 600000;
	int n;

	while (!(n = ibv_poll_cq(cq, 1, wc)) && now_ms() < end)
		;
	return n;
}

/* Writes len bytes at dst through rkey in messages of up to msg bytes, 8 in flight. */
static int write_msgs(struct bench *b, char *dst, size_t len, uint32_t rkey, size_t msg)
{
	size_t posted = 0, done = 0;
	struct ibv_wc wc;

	while (done < len) {
		while (posted < len && posted - done < 8 * msg) {
			size_t n = len - posted < msg ? len - posted : msg;

			if (post_send(b->qp[0], IBV_WR_RDMA_WRITE, b->src, n, b->src_mr->lkey,
				      (uintptr_t)dst + posted, rkey, 0, n))
				return -1;
			posted += n;
		}
		if (poll_busy(b->cq[0], &wc) != 1 || wc.status != IBV_WC_SUCCESS)
			return -1;
		done += wc.wr_id;
	}
	return 0;
}

static int write_range(struct bench *b, char *dst, size_t len, uint32_t rkey)
{
	return write_msgs(b, dst, len, rkey, MSG);
}

/*
 * The first transfer into fresh memory through a new ODP MR, in msg-byte messages (8 in
 * flight), without (pre 0) and with (pre 1) a flushed prefetch first: microseconds in all.
 */
static double first_xfer(struct bench *b, size_t len, size_t msg, int pre)
{
	char *f = fresh(len);
	struct ibv_mr *m = f ? ibv_reg_mr(b->b.pd, f, len, ODP) : NULL;
	double t, v = -1;

	if (m) {
		struct ibv_sge sge = { (uintptr_t)f, len, m->lkey };

		if (!pre || !ibv_advise_mr(b->b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
					   IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1)) {
			t = now_s();
			if (!write_msgs(b, f, len, m->rkey, msg))
				v = (now_s() - t) * 1e6;
		}
		ibv_dereg_mr(m);
	}
	if (f)
		munmap(f, len);
	return v;
}

/* MB/s (10^6 bytes per second) of two passes over an all-mapped range through rkey. */
static double steady(struct bench *b, char *dst, uint32_t rkey)
{
	double t;

	if (write_range(b, dst, STEADY, rkey))
		return -1;
	t = now_s();
	if (write_range(b, dst, STEADY, rkey) || write_range(b, dst, STEADY, rkey))
		return -1;
	return 2 * STEADY / (now_s() - t) / 1e6;
}

static void put(const char *name, double v)
{
	if (v < 0)
		printf("%s n/a\n", name);
	else
		printf("%s %.0f\n", name, v);
}

int main(int argc, char **argv)
{
	size_t range = (argc > 3 ? atol(argv[3]) : 1024) << 20;
	struct bench b;
	struct ibv_mr *mr;
	char *r, *s;
	double t, v;

	if (argc < 3 || dev_open(&b.a, argv[1]) || dev_open(&b.b, argv[2]))
		return fprintf(stderr, "usage: bench_odp DEV_A DEV_B [MiB]\n"), 1;
	for (int i = 0; i < 2; i++) {
		struct dev *d = i ? &b.b : &b.a;

		b.cq[i] = ibv_create_cq(d->ctx, 64, NULL, NULL, 0);
		b.qp[i] = b.cq[i] ? make_qp(d, b.cq[i], b.cq[i], IBV_QPT_RC, NULL) : NULL;
		if (!b.qp[i])
			return perror("qp"), 1;
	}
	if (rc_connect(b.qp[0], &b.a, b.qp[1]->qp_num, &b.b.gid, &rc_default) ||
	    rc_connect(b.qp[1], &b.b, b.qp[0]->qp_num, &b.a.gid, &rc_default))
		return perror("connect"), 1;
	b.src = fresh(MSG);
	memset(b.src, 0x5a, MSG);
	b.src_mr = ibv_reg_mr(b.a.pd, b.src, MSG, ALL_ACCESS);
	if (!b.src_mr)
		return perror("reg"), 1;

	/* First touch of the whole range, then steady state on its first 256 MiB. */
	r = fresh(range);
	mr = r ? ibv_reg_mr(b.b.pd, r, range, ODP) : NULL;
	v = -1;
	if (mr) {
		t = now_s();
		if (!write_range(&b, r, range, mr->rkey))
			v = range / 4096 / (now_s() - t);
	}
	put("first_touch_pages_per_s", v);
	put("odp_MBps", mr ? steady(&b, r, mr->rkey) : -1);

	/* The first transfer into fresh memory, without and with a prefetch. */
	put("first_xfer_us", first_xfer(&b, FIRST, MSG, 0));
	put("first_xfer_prefetched_us", first_xfer(&b, FIRST, MSG, 1));
	v = first_xfer(&b, 256 * 4096, 4096, 0);
	put("first_page_us", v < 0 ? v : v / 256);
	v = first_xfer(&b, 256 * 4096, 4096, 1);
	put("first_page_prefetched_us", v < 0 ? v : v / 256);

	/* Pinned and implicit over the same (now mapped) memory. */
	s = fresh(STEADY);
	memset(s, 1, STEADY);
	{
		struct ibv_mr *p = ibv_reg_mr(b.b.pd, s, STEADY, ALL_ACCESS);

		put("pinned_MBps", p ? steady(&b, s, p->rkey) : -1);
		if (p)
			ibv_dereg_mr(p);
	}
	{
		struct ibv_mr *imr = ibv_reg_mr(b.b.pd, NULL, SIZE_MAX, ODP);

		put("implicit_MBps", imr ? steady(&b, r, imr->rkey) : -1);
		if (imr)
			ibv_dereg_mr(imr);
	}

	/* Invalidating the mapped range: munmap with the MR, less munmap without one. */
	if (mr) {
		double with, without;

		write_range(&b, r, range, mr->rkey);
		t = now_s();
		munmap(r, range);
		with = now_s() - t;
		r = fresh(range);
		memset(r, 2, range);
		t = now_s();
		munmap(r, range);
		without = now_s() - t;
		put("invalidate_ms", (with - without) * 1e3);
		ibv_dereg_mr(mr);
	} else {
		put("invalidate_ms", -1);
	}
	return 0;
}
