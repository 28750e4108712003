// SPDX-License-Identifier: GPL-2.0
/*
 * rodp memory window stress: for 60 s (RODP_STRESS_SECONDS), one thread writes through memory
 * windows (type 1 and 2B, over a pinned and an explicit ODP MR) and through an MR that keeps
 * being re-registered, while another thread rebinds, invalidates, deallocates and reallocates
 * the windows and re-registers both MRs (moving one between two buffers and between pinned and
 * ODP; the windows' MR is refused with EBUSY while bound). A write either succeeds and is found
 * exactly where its window or MR placed it, or fails with a remote access error (its key went
 * stale under it). Afterwards slab objects and the module count are back to their baseline and
 * no ODP page stays mapped.
 */
#include "rodp_mw.h"
#include "rodp_harness.h"
#include <pthread.h>
#include <stdatomic.h>

#define PAGE 4096
#define NW 8			/* windows; slot i of the window memory belongs to window i */
#define SLOT (4 * PAGE)
#define HALF (NW / 2 * SLOT)	/* windows 0..3 over the pinned MR, 4..7 over the ODP MR */
#define BUF (4 * PAGE)		/* each buffer the re-registered MR moves between */
#define MR_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND)
#define SLAB_SLACK 600

struct shared {
	pthread_mutex_t lock;
	struct rc_pair rc;	/* QP 0 writes, QP 1 binds and invalidates */
	struct ibv_mr *wmr[2];	/* pinned, ODP: what windows bind to */
	struct ibv_mw *mw[NW];
	uint32_t key[NW];
	int bound[NW];
	struct ibv_mr *mr;	/* re-registered under traffic */
	char *buf[2];
	char *mem;
	int cur;		/* which buffer mr translates */
	int need_reset;		/* QP 1 failed outside the traffic thread's view */
	atomic_int stop;
	long binds, invalidates, reallocs, reregs, busy;
};

static char *slot(struct shared *s, int i)
{
	return s->mem + i * SLOT;
}

/* One change by the churn thread, under the lock. */
static void churn_one(struct shared *s, unsigned int *seed)
{
	int i = rand_r(seed) % NW, st;
	struct ibv_mr *wmr = s->wmr[i >= NW / 2];
	uint64_t off = (rand_r(seed) % 2) * PAGE, len = SLOT - off;
	unsigned int rights = rand_r(seed) % 4 ? WIN_RIGHTS : IBV_ACCESS_REMOTE_READ;

	switch (rand_r(seed) % 5) {
	case 0:
	case 1:
		if (s->mw[i]->type == IBV_MW_TYPE_1) {
			uint32_t old = s->mw[i]->rkey;

			if (rand_r(seed) % 4 == 0)
				len = 0;
			st = bind1(s->rc.qp[1], s->rc.cq[1], s->mw[i], wmr, slot(s, i) + off, len,
				   rights);
			if (st != IBV_WC_SUCCESS) {
				/* The provider updated the key before the bind failed. */
				s->mw[i]->rkey = old;
				s->need_reset = 1;
				break;
			}
			s->key[i] = s->mw[i]->rkey;
			s->bound[i] = len > 0;
			s->binds++;
		} else if (s->bound[i]) {
			if (local_inv(s->rc.qp[1], s->rc.cq[1], s->key[i]) != IBV_WC_SUCCESS) {
				s->need_reset = 1;
				break;
			}
			s->bound[i] = 0;
			s->invalidates++;
		} else {
			uint32_t key = next_key(s->key[i]);

			if (bind2(s->rc.qp[1], s->rc.cq[1], s->mw[i], key, wmr,
				  (uintptr_t)slot(s, i) + off, len, rights) != IBV_WC_SUCCESS) {
				s->need_reset = 1;
				break;
			}
			s->key[i] = key;
			s->bound[i] = 1;
			s->binds++;
		}
		break;
	case 2:
		/* Deallocating a bound window unbinds it. */
		if (ibv_dealloc_mw(s->mw[i]))
			break;
		s->mw[i] = ibv_alloc_mw(s->rc.pd, i % 2 ? IBV_MW_TYPE_2 : IBV_MW_TYPE_1);
		if (!s->mw[i]) {
			atomic_store(&s->stop, 2);
			break;
		}
		s->key[i] = s->mw[i]->rkey;
		s->bound[i] = 0;
		s->reallocs++;
		break;
	case 3: {
		/* The MR under traffic: the other buffer, sometimes ODP, sometimes pinned. */
		int to = !s->cur;
		int acc = ALL_ACCESS | (rand_r(seed) % 2 ? IBV_ACCESS_ON_DEMAND : 0);

		if (rereg_cmd(s->rc.d->ctx, s->mr, IBV_REREG_MR_CHANGE_TRANSLATION |
			      IBV_REREG_MR_CHANGE_ACCESS, s->buf[to], BUF, (uintptr_t)s->buf[to],
			      NULL, acc, NULL, NULL)) {
			atomic_store(&s->stop, 3);
			break;
		}
		s->cur = to;
		s->reregs++;
		break;
	}
	case 4: {
		/* The windows' MR: refused while a window is bound to it. */
		int any = 0;

		for (int w = 0; w < NW / 2; w++)
			any |= s->bound[w];
		st = rereg_cmd(s->rc.d->ctx, s->wmr[0], IBV_REREG_MR_CHANGE_ACCESS, NULL, 0, 0,
			       NULL, MR_ACCESS, NULL, NULL);
		if (st == -EBUSY)
			s->busy++;
		else if (st || any)
			/* A bound window let it through, or an unexpected error. */
			atomic_store(&s->stop, 4);
		else
			s->reregs++;
		break;
	}
	}
}

static void *churn(void *arg)
{
	struct shared *s = arg;
	unsigned int seed = 11;

	while (!atomic_load(&s->stop)) {
		pthread_mutex_lock(&s->lock);
		churn_one(s, &seed);
		pthread_mutex_unlock(&s->lock);
		usleep(rand_r(&seed) % 300);
	}
	return NULL;
}

FIXTURE(slow) {};
FIXTURE_SETUP(slow) { ensure_netdevs(); }
FIXTURE_TEARDOWN(slow) {}

TEST_F_TIMEOUT(slow, windows_and_reregistration_change_under_traffic, 600)
{
	long seconds = getenv("RODP_STRESS_SECONDS") ? atol(getenv("RODP_STRESS_SECONDS")) : 60;
	long slab0, refs0, writes = 0, refused = 0, bad = 0, end;
	struct shared s = { .lock = PTHREAD_MUTEX_INITIALIZER };
	unsigned int seed = 5;
	pthread_t thread;
	struct dev d;
	char *src;

	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	refs0 = module_refcnt("rodp");
	slab0 = kmalloc_objects();
	ASSERT_EQ(0, dev_open(&d, "rodp0"));
	ASSERT_EQ(0, rc_pair_open(&s.rc, &d, NULL, SLOT, &rc_default));
	src = s.rc.buf[0];
	s.mem = mmap(NULL, NW * SLOT, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	s.buf[0] = mmap(NULL, 2 * BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, s.mem);
	ASSERT_NE(MAP_FAILED, s.buf[0]);
	s.buf[1] = s.buf[0] + BUF;
	s.wmr[0] = ibv_reg_mr(d.pd, s.mem, HALF, MR_ACCESS);
	s.wmr[1] = ibv_reg_mr(d.pd, s.mem + HALF, HALF, MR_ACCESS | IBV_ACCESS_ON_DEMAND);
	s.mr = ibv_reg_mr(d.pd, s.buf[0], BUF, ALL_ACCESS);
	ASSERT_NE(NULL, s.wmr[0]);
	ASSERT_NE(NULL, s.wmr[1]);
	ASSERT_NE(NULL, s.mr);
	for (int i = 0; i < NW; i++) {
		s.mw[i] = ibv_alloc_mw(d.pd, i % 2 ? IBV_MW_TYPE_2 : IBV_MW_TYPE_1);
		ASSERT_NE(NULL, s.mw[i]);
		s.key[i] = s.mw[i]->rkey;
	}
	ASSERT_EQ(0, pthread_create(&thread, NULL, churn, &s));

	end = now_ms() + seconds * 1000;
	while (now_ms() < end && !bad && !atomic_load(&s.stop)) {
		int w = rand_r(&seed) % (NW + 2);	/* NW, NW + 1: the re-registered MR */
		uint64_t off = (rand_r(&seed) % (SLOT / 8)) * 8;
		uint32_t len = 8 + (rand_r(&seed) % (SLOT / 8 - 1)) * 8, rkey;
		char *dst[2] = { NULL, NULL };
		uint64_t raddr;
		int st;

		pthread_mutex_lock(&s.lock);
		if (s.need_reset) {
			ASSERT_EQ(0, rc_reset_pair(&s.rc));
			s.need_reset = 0;
		}
		if (w < NW) {
			raddr = (uintptr_t)slot(&s, w) + off;
			rkey = s.key[w];
			dst[0] = slot(&s, w) + off;
		} else {
			off %= BUF;
			raddr = (uintptr_t)s.buf[s.cur] + off;
			rkey = s.mr->rkey;
			/* A re-registration may move it before it lands: either buffer. */
			dst[0] = s.buf[0] + off;
			dst[1] = s.buf[1] + off;
		}
		pthread_mutex_unlock(&s.lock);
		if (off + len > (w < NW ? SLOT : BUF))
			len = (w < NW ? SLOT : BUF) - off;
		for (uint32_t b = 0; b < len; b += 8)
			*(uint64_t *)(src + b) = (uint64_t)(writes + 1) << 32 | b;
		st = rc_xfer(&s.rc, IBV_WR_RDMA_WRITE, 0, len, raddr, rkey);
		/* Posted and completed, whatever the status. */
		ASSERT_LE(0, st);
		writes++;
		if (st == IBV_WC_SUCCESS) {
			/* Where it was aimed (the window's slot, or one of the MR's buffers). */
			if (memcmp(src, dst[0], len) && (!dst[1] || memcmp(src, dst[1], len)) &&
			    bad++ < 5)
				TH_LOG("write %ld (%u bytes to %d) not found", writes, len, w);
			continue;
		}
		if (st != IBV_WC_REM_ACCESS_ERR && bad++ < 5)
			TH_LOG("write %ld to %d: status %d", writes, w, st);
		refused++;
		pthread_mutex_lock(&s.lock);
		ASSERT_EQ(0, rc_reset_pair(&s.rc));
		s.need_reset = 0;
		pthread_mutex_unlock(&s.lock);
	}
	if (!atomic_load(&s.stop))
		atomic_store(&s.stop, 1);
	pthread_join(thread, NULL);
	TH_LOG("%ld writes (%ld refused by a stale key), %ld binds, %ld invalidates, %ld reallocs, "
	       "%ld re-registrations, %ld refused with EBUSY", writes, refused, s.binds,
	       s.invalidates, s.reallocs, s.reregs, s.busy);
	EXPECT_EQ(1, atomic_load(&s.stop));
	EXPECT_EQ(0, bad);
	EXPECT_LT(100, writes - refused);
	EXPECT_LT(50, s.binds);
	EXPECT_LT(10, s.reregs);
	EXPECT_LT(0, s.busy);

	for (int i = 0; i < NW; i++)
		EXPECT_EQ(0, ibv_dealloc_mw(s.mw[i]));
	EXPECT_EQ(0, ibv_dereg_mr(s.wmr[0]));
	EXPECT_EQ(0, ibv_dereg_mr(s.wmr[1]));
	EXPECT_EQ(0, ibv_dereg_mr(s.mr));
	EXPECT_EQ(0, read_long("/sys/kernel/debug/rodp/rodp0/odp_stats/num_odp_mr_pages"));
	rc_pair_close(&s.rc);
	dev_close(&d);
	munmap(s.mem, NW * SLOT);
	munmap(s.buf[0], 2 * BUF);
	EXPECT_GT(SLAB_SLACK, kmalloc_settled(slab0, SLAB_SLACK) - slab0);
	EXPECT_EQ(refs0, module_refcnt("rodp"));
	link_delete("rodp0");
}

TEST_HARNESS_MAIN
