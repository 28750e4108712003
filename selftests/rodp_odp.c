// SPDX-License-Identifier: GPL-2.0
/*
 * rodp ODP: explicit and implicit on-demand-paging MRs. An RC pair on rodp0: QP 0 owns a pinned
 * buffer, QP 1 an ODP MR over memory the test maps, changes and unmaps under it. Each test
 * checks the data and the exact fault and invalidation counts the device reports, in sysfs,
 * debugfs and rdma netlink.
 */
#include "rodp_verbs.h"
#include "rodp_harness.h"
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

#define PAGE 4096
#define NPAGES 64
#define LEN (NPAGES * PAGE)
#define ODP_ACCESS (ALL_ACCESS | IBV_ACCESS_ON_DEMAND)
#define GiB (1ull << 30)

FIXTURE(odp) {
	struct dev d;
	struct rc_pair rc;
	char *pin, *odp;
	struct ibv_mr *pin_mr, *odp_mr;
};

static long counter(const char *name)
{
	/* ib_core serves a value read within a jiffy of the last one from its cache. */
	usleep(50 * 1000);
	return hw_counter("rodp0", name);
}

FIXTURE_SETUP(odp)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, dev_open(&self->d, "rodp0"));
	ASSERT_EQ(0, rc_pair_open(&self->rc, &self->d, NULL, LEN, &rc_default));
	/* QP 0's pinned buffer: what rc_xfer() writes from and reads into. */
	self->pin = self->rc.buf[0];
	self->pin_mr = self->rc.mr[0];
	/* Never touched: no page of it exists until the device faults it in. */
	self->odp = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->odp);
	self->odp_mr = ibv_reg_mr(self->d.pd, self->odp, LEN, ODP_ACCESS);
	ASSERT_NE(NULL, self->odp_mr);
}

FIXTURE_TEARDOWN(odp)
{
	if (self->odp_mr)
		ibv_dereg_mr(self->odp_mr);
	rc_pair_close(&self->rc);
	munmap(self->odp, LEN);
	dev_close(&self->d);
	link_delete("rodp0");
}

/* QP 0 runs op between its pinned buffer and the ODP MR at off; returns the status. */
static int rdma(FIXTURE_DATA(odp) *self, enum ibv_wr_opcode op, size_t off, uint32_t len)
{
	return rc_xfer(&self->rc, op, off, len, (uintptr_t)self->odp + off, self->odp_mr->rkey);
}

TEST_F(odp, device_reports_explicit_odp)
{
	struct ibv_device_attr_ex a;
	uint32_t rc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
		      IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV |
		      ODP_SUPPORT_FLUSH | ODP_SUPPORT_ATOMIC_WRITE;

	ASSERT_EQ(0, ibv_query_device_ex(self->d.ctx, NULL, &a));
	EXPECT_TRUE(a.odp_caps.general_caps & IBV_ODP_SUPPORT);
	EXPECT_TRUE(a.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT);
	EXPECT_EQ(rc, a.odp_caps.per_transport_caps.rc_odp_caps);
	EXPECT_EQ(IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV,
		  a.odp_caps.per_transport_caps.ud_odp_caps);
}

/* The same totals in <ibdev>/odp_stats/ (sysfs, read-only). */
static long odp_stat(const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), "/sys/class/infiniband/rodp0/odp_stats/%s", name);
	return read_long(path);
}

TEST_F(odp, first_touch_faults_each_page_once)
{
	long faults = counter("num_page_faults");
	long pages = counter("num_page_fault_pages");
	long sys_pages = odp_stat("num_page_fault_pages");

	EXPECT_LE(0, sys_pages);
	EXPECT_EQ(-1, open("/sys/class/infiniband/rodp0/odp_stats/num_page_faults", O_WRONLY));

	fill(self->pin, LEN, 1);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_WRITE, 0, LEN));
	EXPECT_EQ(0, memcmp(self->pin, self->odp, LEN));
	/* One message, one batch: every page of it faulted in once. */
	EXPECT_EQ(NPAGES, counter("num_page_fault_pages") - pages);
	EXPECT_EQ(NPAGES, odp_stat("num_page_fault_pages") - sys_pages);
	EXPECT_EQ(1, counter("num_page_faults") - faults);
	/* Mapped now: the same range again faults nothing. */
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_WRITE, 0, LEN));
	EXPECT_EQ(NPAGES, counter("num_page_fault_pages") - pages);
}

TEST_F(odp, prefetch_faults_ahead_and_checks_its_arguments)
{
	struct ibv_sge sge = { (uintptr_t)self->odp, LEN, self->odp_mr->lkey };
	struct ibv_sge g = { (uintptr_t)self->odp, PAGE, 0 };
	long handled = counter("num_prefetches_handled");
	long pages = counter("num_page_fault_pages");
	struct ibv_mr *ro;
	struct ibv_pd *pd2;

	ASSERT_EQ(0, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
				   IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1));
	EXPECT_EQ(1, counter("num_prefetches_handled") - handled);
	EXPECT_EQ(NPAGES, counter("num_page_fault_pages") - pages);
	/* The transfer then finds every page present. */
	fill(self->pin, LEN, 9);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_WRITE, 0, LEN));
	EXPECT_EQ(0, memcmp(self->pin, self->odp, LEN));
	EXPECT_EQ(NPAGES, counter("num_page_fault_pages") - pages);
	/* Without the flush flag the work is deferred: it shows up in the counters later. */
	handled = counter("num_prefetches_handled");
	EXPECT_EQ(0, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1));
	EXPECT_EQ(0, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &sge, 1));
	for (int i = 0; i < 100 && counter("num_prefetches_handled") - handled < 2; i++)
		;
	EXPECT_EQ(2, counter("num_prefetches_handled") - handled);
	/* A range past the MR, a pinned MR. */
	sge.length = LEN + PAGE;
	EXPECT_EQ(EFAULT, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1));
	sge = (struct ibv_sge){ (uintptr_t)self->pin, PAGE, self->pin_mr->lkey };
	EXPECT_EQ(EINVAL, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1));
	/* A writable prefetch of an MR without local write, another PD's MR, unknown flags. */
	ro = ibv_reg_mr(self->d.pd, self->odp, LEN, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ON_DEMAND);
	pd2 = ibv_alloc_pd(self->d.ctx);
	ASSERT_NE(NULL, ro);
	ASSERT_NE(NULL, pd2);
	g.lkey = ro->lkey;
	EXPECT_EQ(EACCES, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
					IBV_ADVISE_MR_FLAG_FLUSH, &g, 1));
	EXPECT_EQ(0, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH,
				   IBV_ADVISE_MR_FLAG_FLUSH, &g, 1));
	g.lkey = self->odp_mr->lkey;
	/* As mlx5: a key another PD's MR holds is unknown to this PD. */
	EXPECT_EQ(ENOENT, ibv_advise_mr(pd2, IBV_ADVISE_MR_ADVICE_PREFETCH,
					IBV_ADVISE_MR_FLAG_FLUSH, &g, 1));
	EXPECT_NE(0, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0x80, &g, 1));
	ibv_dereg_mr(ro);
	ibv_dealloc_pd(pd2);
	/* A deferred prefetch of an MR deregistered at once is harmless; the key is then unknown. */
	sge = (struct ibv_sge){ (uintptr_t)self->odp, LEN, self->odp_mr->lkey };
	EXPECT_EQ(0, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &sge, 1));
	ASSERT_EQ(0, ibv_dereg_mr(self->odp_mr));
	self->odp_mr = NULL;
	EXPECT_EQ(ENOENT, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1));
}

TEST_F(odp, munmap_and_mmap_at_the_same_address_uses_the_new_pages)
{
	long inval = counter("num_invalidations");
	long inval_pages = counter("num_invalidation_pages");

	fill(self->pin, LEN, 2);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_WRITE, 0, LEN));
	ASSERT_EQ(0, munmap(self->odp, LEN));
	ASSERT_EQ(self->odp, mmap(self->odp, LEN, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
	fill(self->odp, LEN, 3);
	EXPECT_LE(1, counter("num_invalidations") - inval);
	EXPECT_EQ(NPAGES, counter("num_invalidation_pages") - inval_pages);
	memset(self->pin, 0, LEN);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_READ, 0, LEN));
	EXPECT_EQ(0, memcmp(self->pin, self->odp, LEN));
}

TEST_F(odp, madv_dontneed_then_access_reads_zeroes)
{
	static char zero[LEN];

	fill(self->pin, LEN, 4);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_WRITE, 0, LEN));
	ASSERT_EQ(0, madvise(self->odp, LEN, MADV_DONTNEED));
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_READ, 0, LEN));
	EXPECT_EQ(0, memcmp(self->pin, zero, LEN));
}

/* Discards the ODP buffer's pages in a loop until told to stop. */
struct discarder {
	void *addr;
	atomic_int stop;
	atomic_long rounds;
};

static void *discard_main(void *arg)
{
	struct discarder *x = arg;

	while (!x->stop) {
		madvise(x->addr, LEN, MADV_DONTNEED);
		x->rounds++;
	}
	return NULL;
}

/*
 * A responder that discards its ODP pages (MADV_DONTNEED) in a loop while a requester WRITEs
 * into them: each fault of the responder succeeds and its pages go again before the retried
 * delivery. The requester's QP has an infinite transport timer (timeout 0), so only the limit
 * of such rounds ends it: every WQE completes, with success (the responder won a race) or
 * with REM_ACCESS_ERR, as a fault that kept losing to invalidations always ended; never not.
 */
TEST_F_TIMEOUT(odp, a_responder_discarding_its_pages_does_not_hold_a_write_for_ever, 200)
{
	struct discarder x = { .addr = self->odp };
	struct ibv_wc wc = { .status = IBV_WC_SUCCESS };
	pthread_t t;
	long t0 = now_ms();
	int n = 0, hung = 0;

	/* The transport timer is set on the way to RTS. */
	self->rc.o.timeout = 0;
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	fill(self->pin, LEN, 8);
	ASSERT_EQ(0, pthread_create(&t, NULL, discard_main, &x));
	while (wc.status == IBV_WC_SUCCESS && now_ms() - t0 < 5000) {
		if (post_send(self->rc.qp[0], IBV_WR_RDMA_WRITE, self->pin, LEN, self->pin_mr->lkey,
			      (uintptr_t)self->odp, self->odp_mr->rkey, 0, n))
			break;
		if (poll1(self->rc.cq[0], &wc, 60000) != 1) {
			hung = 1;
			break;
		}
		n++;
	}
	x.stop = 1;
	pthread_join(t, NULL);
	TH_LOG("%d writes, %ld discards, last status %d", n, (long)x.rounds, wc.status);
	ASSERT_EQ(0, hung) TH_LOG("a write never completed");
	EXPECT_TRUE(wc.status == IBV_WC_SUCCESS || wc.status == IBV_WC_REM_ACCESS_ERR);
	EXPECT_LT(0, n);
}

/*
 * Waiting for the responder's fault is an RNR wait, as on the wire (where a faulting responder
 * answers with an RNR NAK): rnr_retry bounds it, not retry_cnt. With retry_cnt 0 and the
 * shortest transport timer a WRITE into never-touched ODP memory succeeds, having counted RNR
 * NAKs received; with rnr_retry 0 the first wait ends it in IBV_WC_RNR_RETRY_EXC_ERR.
 */
TEST_F(odp, a_responder_fault_is_waited_for_as_an_rnr_nak)
{
	long rnr = counter("rcvd_rnr_err"), rnr_exc = counter("retry_rnr_exceeded_err");
	long exc = counter("retry_exceeded_err");

	self->rc.o.timeout = 1;
	self->rc.o.retry_cnt = 0;
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	fill(self->pin, 4 * PAGE, 3);
	EXPECT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_WRITE, 0, 4 * PAGE));
	EXPECT_EQ(0, memcmp(self->pin, self->odp, 4 * PAGE));
	EXPECT_LE(rnr + 1, counter("rcvd_rnr_err"));
	EXPECT_EQ(exc, counter("retry_exceeded_err"));
	EXPECT_EQ(rnr_exc, counter("retry_rnr_exceeded_err"));

	self->rc.o.rnr_retry = 0;
	ASSERT_EQ(0, rc_reset_pair(&self->rc));
	rnr = counter("rcvd_rnr_err");
	fill(self->pin + 8 * PAGE, PAGE, 4);
	EXPECT_EQ(IBV_WC_RNR_RETRY_EXC_ERR, rdma(self, IBV_WR_RDMA_WRITE, 8 * PAGE, PAGE));
	EXPECT_EQ(rnr + 1, counter("rcvd_rnr_err"));
	EXPECT_EQ(rnr_exc + 1, counter("retry_rnr_exceeded_err"));
	EXPECT_EQ(exc, counter("retry_exceeded_err"));
}

TEST_F(odp, send_recv_read_atomic_through_odp)
{
	uint64_t *word = (uint64_t *)(self->odp + 8 * PAGE);
	struct ibv_wc wc;

	/* A receive buffer in never-touched ODP memory. */
	ASSERT_EQ(0, post_recv(self->rc.qp[1], self->odp + PAGE, 3 * PAGE, self->odp_mr->lkey, 5));
	fill(self->pin, 3 * PAGE, 5);
	ASSERT_EQ(0, post_send(self->rc.qp[0], IBV_WR_SEND, self->pin, 3 * PAGE, self->pin_mr->lkey,
			       0, 0, 0, 6));
	ASSERT_EQ(1, poll1(self->rc.cq[0], &wc, 20000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	ASSERT_EQ(1, poll1(self->rc.cq[1], &wc, 20000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(0, memcmp(self->pin, self->odp + PAGE, 3 * PAGE));
	/* Read back what the process wrote itself. */
	fill(self->odp + 16 * PAGE, 2 * PAGE, 6);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_READ, 16 * PAGE, 2 * PAGE));
	EXPECT_EQ(0, memcmp(self->pin + 16 * PAGE, self->odp + 16 * PAGE, 2 * PAGE));
	/* Fetch-and-add on a page the device faults in. */
	ASSERT_EQ(0, post_atomic(self->rc.qp[0], IBV_WR_ATOMIC_FETCH_AND_ADD, self->pin,
				 self->pin_mr->lkey, (uintptr_t)word, self->odp_mr->rkey, 5, 0));
	ASSERT_EQ(1, poll1(self->rc.cq[0], &wc, 20000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(5, *word);
}

TEST_F(odp, remote_write_to_read_only_memory_fails)
{
	fill(self->pin, PAGE, 7);
	ASSERT_EQ(0, mprotect(self->odp, LEN, PROT_READ));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rdma(self, IBV_WR_RDMA_WRITE, 0, PAGE));
}

TEST_F(odp, a_hole_in_a_remote_range_is_an_access_error)
{
	ASSERT_EQ(0, munmap(self->odp + 4 * PAGE, PAGE));
	fill(self->pin, LEN, 8);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rdma(self, IBV_WR_RDMA_WRITE, 0, 8 * PAGE));
}

TEST_F(odp, a_hole_under_a_local_sge_is_a_protection_error)
{
	struct ibv_wc wc;

	ASSERT_EQ(0, munmap(self->odp + 4 * PAGE, PAGE));
	ASSERT_EQ(0, post_send(self->rc.qp[1], IBV_WR_SEND, self->odp, 8 * PAGE, self->odp_mr->lkey,
			       0, 0, 0, 9));
	ASSERT_EQ(1, poll1(self->rc.cq[1], &wc, 20000));
	EXPECT_EQ(IBV_WC_LOC_PROT_ERR, wc.status);
}

TEST_F(odp, srq_receive_into_odp_memory)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(self->d.pd, &sa);
	struct ibv_cq *cq = ibv_create_cq(self->d.ctx, 16, NULL, NULL, 0);
	struct ibv_qp *tx, *rx;
	long pages = counter("num_page_fault_pages");
	struct ibv_wc wc;

	ASSERT_NE(NULL, srq);
	ASSERT_NE(NULL, cq);
	tx = make_qp(&self->d, cq, cq, IBV_QPT_RC, NULL);
	rx = make_qp(&self->d, cq, cq, IBV_QPT_RC, srq);
	ASSERT_NE(NULL, tx);
	ASSERT_NE(NULL, rx);
	ASSERT_EQ(0, rc_connect(tx, &self->d, rx->qp_num, &self->d.gid, &rc_default));
	ASSERT_EQ(0, rc_connect(rx, &self->d, tx->qp_num, &self->d.gid, &rc_default));
	/* Never-touched ODP memory behind the shared receive queue's WQE. */
	ASSERT_EQ(0, post_srq_recv(srq, self->odp + 3 * PAGE + 17, 2 * PAGE, self->odp_mr->lkey, 4));
	fill(self->pin, 2 * PAGE, 33);
	ASSERT_EQ(0, post_send(tx, IBV_WR_SEND, self->pin, 2 * PAGE, self->pin_mr->lkey, 0, 0, 0, 5));
	for (int i = 0; i < 2; i++) {
		ASSERT_EQ(1, poll1(cq, &wc, 20000));
		EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	}
	EXPECT_EQ(0, memcmp(self->odp + 3 * PAGE + 17, self->pin, 2 * PAGE));
	EXPECT_EQ(3, counter("num_page_fault_pages") - pages);
	ibv_destroy_qp(tx);
	ibv_destroy_qp(rx);
	ibv_destroy_srq(srq);
	ibv_destroy_cq(cq);
}

TEST_F(odp, ud_send_from_and_receive_into_odp_memory)
{
	struct ibv_cq *cq = ibv_create_cq(self->d.ctx, 16, NULL, NULL, 0);
	struct ibv_qp *ud[2];
	struct ibv_ah *ah = make_ah(&self->d, self->d.pd, self->d.gid_index);
	struct ibv_sge sge = { (uintptr_t)self->odp + 40 * PAGE, 1000, self->odp_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 6, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;
	int received = 0;

	ASSERT_NE(NULL, cq);
	ASSERT_NE(NULL, ah);
	for (int i = 0; i < 2; i++) {
		ud[i] = make_qp(&self->d, cq, cq, IBV_QPT_UD, NULL);
		ASSERT_NE(NULL, ud[i]);
		ASSERT_EQ(0, ud_ready(ud[i], 0x1234));
	}
	/*
	 * The receive buffer (GRH first) and the message both in never-touched ODP memory. A
	 * datagram that finds the receive buffer unmapped is lost (its send completes, the
	 * receiver's fault is queued: a receiver never holds up a UD sender, as on mlx5); one
	 * sent after that fault arrives.
	 */
	ASSERT_EQ(0, post_recv(ud[1], self->odp + 50 * PAGE, 40 + 1000, self->odp_mr->lkey, 7));
	fill(self->odp + 40 * PAGE, 1000, 34);
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = ud[1]->qp_num;
	wr.wr.ud.remote_qkey = 0x1234;
	for (int tries = 0; tries < 10 && !received; tries++) {
		ASSERT_EQ(0, ibv_post_send(ud[0], &wr, &bad));
		while (!received && poll1(cq, &wc, 2000) == 1) {
			EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
			received = wc.wr_id == 7;
		}
	}
	ASSERT_TRUE(received) TH_LOG("no datagram arrived");
	EXPECT_EQ(0, memcmp(self->odp + 50 * PAGE + 40, self->odp + 40 * PAGE, 1000));
	for (int i = 0; i < 2; i++)
		ibv_destroy_qp(ud[i]);
	ibv_destroy_ah(ah);
	ibv_destroy_cq(cq);
}

/* The ODP counters rodp keeps in debugfs, <debugfs>/rodp/rodp0/odp_stats/. */
static long dbg_stat(const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), "/sys/kernel/debug/rodp/rodp0/odp_stats/%s", name);
	return read_long(path);
}

/*
 * The line `rdma` prints for the MR with lkey: `rdma -dd resource show mr` (with the driver's
 * details) or, given its mrn, `rdma statistic mr mrn N`. Returns 0 if found.
 */
static int mr_line(uint32_t lkey, char *line, size_t len, int stats)
{
	char out[16384], key[64], *p, *e;

	if (sh(out, sizeof(out), "rdma -dd resource show mr"))
		return -1;
	snprintf(key, sizeof(key), "lkey 0x%x ", lkey);
	p = strstr(out, key);
	if (!p)
		return -1;
	while (p > out && p[-1] != '\n')
		p--;
	/* Driver attributes follow on indented lines; join them into one. */
	for (e = strchr(p, '\n'); e && e[1] == ' '; e = strchr(e + 1, '\n'))
		*e = ' ';
	snprintf(line, len, "%.*s ", e ? (int)(e - p) : (int)strlen(p), p);
	if (stats) {
		long mrn = -1;
		char *m = strstr(line, "mrn ");

		if (!m || sscanf(m, "mrn %ld", &mrn) != 1 ||
		    sh(out, sizeof(out), "rdma statistic mr mrn %ld", mrn)) {
			fprintf(stderr, "# rdma statistic mr: %s\n", out);
			return -1;
		}
		snprintf(line, len, "%.*s", (int)len - 1, out);
	}
	return 0;
}

/* The number after " name " in line, or -1. */
static long field(const char *line, const char *name)
{
	char key[64];
	const char *p;

	snprintf(key, sizeof(key), " %s ", name);
	p = strstr(line, key);
	return p ? strtol(p + strlen(key), NULL, 0) : -1;
}

TEST_F(odp, debugfs_and_netlink_show_the_odp_state)
{
	char line[1024];
	long mrs = dbg_stat("num_odp_mrs"), mapped = dbg_stat("num_odp_mr_pages");
	long notfound = dbg_stat("num_mrs_not_found"), failed = dbg_stat("num_failed_resolutions");

	/* The fixture's ODP MR; nothing mapped yet. */
	EXPECT_LE(1, mrs);
	ASSERT_EQ(0, mr_line(self->odp_mr->lkey, line, sizeof(line), 0));
	EXPECT_NE(NULL, strstr(line, " drv_odp explicit ")) TH_LOG("%s", line);
	ASSERT_EQ(0, mr_line(self->pin_mr->lkey, line, sizeof(line), 0));
	EXPECT_EQ(NULL, strstr(line, " drv_odp ")) TH_LOG("%s", line);

	fill(self->pin, LEN, 21);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_WRITE, 0, 10 * PAGE));
	EXPECT_EQ(10, dbg_stat("num_odp_mr_pages") - mapped);
	ASSERT_EQ(0, mr_line(self->odp_mr->lkey, line, sizeof(line), 1));
	EXPECT_EQ(10, field(line, "page_faults")) TH_LOG("%s", line);
	EXPECT_EQ(1, field(line, "page_faults_handled")) TH_LOG("%s", line);
	EXPECT_EQ(0, field(line, "page_invalidations")) TH_LOG("%s", line);
	EXPECT_EQ(0, field(line, "page_prefetch")) TH_LOG("%s", line);

	ASSERT_EQ(0, madvise(self->odp + 2 * PAGE, 3 * PAGE, MADV_DONTNEED));
	EXPECT_EQ(7, dbg_stat("num_odp_mr_pages") - mapped);
	ASSERT_EQ(0, mr_line(self->odp_mr->lkey, line, sizeof(line), 1));
	EXPECT_EQ(3, field(line, "page_invalidations")) TH_LOG("%s", line);
	EXPECT_LE(1, field(line, "page_invalidations_handled")) TH_LOG("%s", line);

	struct ibv_sge sge = { (uintptr_t)self->odp + 32 * PAGE, 4 * PAGE, self->odp_mr->lkey };

	ASSERT_EQ(0, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH,
				   IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1));
	ASSERT_EQ(0, mr_line(self->odp_mr->lkey, line, sizeof(line), 1));
	EXPECT_EQ(4, field(line, "page_prefetch")) TH_LOG("%s", line);
	EXPECT_EQ(11, dbg_stat("num_odp_mr_pages") - mapped);

	/*
	 * A key with no MR, and a hole. Index bit 12 flipped: the index stays below the windows'
	 * (2^23 on), where adding 0x1000 to a random MR index could land, 1 time in 2,048, and
	 * a window key is no MR lookup.
	 */
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 8,
						 (uintptr_t)self->odp,
						 self->odp_mr->rkey ^ 0x100000));
	EXPECT_EQ(1, dbg_stat("num_mrs_not_found") - notfound);
	EXPECT_EQ(0, dbg_stat("num_failed_resolutions") - failed);

	/* Deregistration gives every page back. */
	ASSERT_EQ(0, ibv_dereg_mr(self->odp_mr));
	self->odp_mr = NULL;
	EXPECT_EQ(mrs - 1, dbg_stat("num_odp_mrs"));
	EXPECT_EQ(mapped, dbg_stat("num_odp_mr_pages"));
}

TEST_F(odp, a_failed_fault_counts_as_a_failed_resolution)
{
	long failed = dbg_stat("num_failed_resolutions");

	ASSERT_EQ(0, munmap(self->odp, PAGE));
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rdma(self, IBV_WR_RDMA_WRITE, 0, PAGE));
	EXPECT_EQ(1, dbg_stat("num_failed_resolutions") - failed);
}

TEST_F(odp, an_iova_other_than_the_address_indexes_by_offset)
{
	const uint64_t iova = 0x5000000000ull;
	struct ibv_mr *mr = ibv_reg_mr_iova(self->d.pd, self->odp, LEN, iova, ODP_ACCESS);

	ASSERT_NE(NULL, mr);
	fill(self->pin, LEN, 22);
	ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 3 * PAGE,
					  iova + 5 * PAGE, mr->rkey));
	EXPECT_EQ(0, memcmp(self->odp + 5 * PAGE, self->pin, 3 * PAGE));
	fill(self->odp + 20 * PAGE + 100, 1000, 23);
	ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 1000,
					  iova + 20 * PAGE + 100, mr->rkey));
	EXPECT_EQ(0, memcmp(self->odp + 20 * PAGE + 100, self->pin, 1000));
	/* The address itself is not the iova: outside the MR. */
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 8,
						 (uintptr_t)self->odp, mr->rkey));
	ibv_dereg_mr(mr);
}

TEST_F(odp, fork_keeps_the_parents_pages_in_the_parents_mr)
{
	int to_child[2], to_parent[2];
	char same = 0;
	pid_t pid;

	fill(self->pin, LEN, 24);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_WRITE, 0, LEN));
	ASSERT_EQ(0, pipe(to_child));
	ASSERT_EQ(0, pipe(to_parent));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		char go, ok;

		/* The child's copies keep what was there at fork time; then it changes its own. */
		if (read(to_child[0], &go, 1) != 1)
			_exit(1);
		ok = !memcmp(self->odp, self->pin, LEN);
		memset(self->odp, 0x77, LEN);
		_exit(write(to_parent[1], &ok, 1) == 1 ? 0 : 1);
	}
	/* The device writes the parent's memory: copy-on-write gives the parent new pages. */
	fill(self->pin, LEN, 25);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_WRITE, 0, LEN));
	EXPECT_EQ(0, memcmp(self->odp, self->pin, LEN));
	ASSERT_EQ(1, write(to_child[1], "g", 1));
	ASSERT_EQ(1, read(to_parent[0], &same, 1));
	EXPECT_EQ(1, same);
	ASSERT_EQ(pid, waitpid(pid, NULL, 0));
	/* The child's writes went to its copy; the device reads what the parent sees. */
	memset(self->pin, 0, LEN);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_READ, 0, LEN));
	EXPECT_EQ(0, memcmp(self->pin, self->odp, LEN));
	EXPECT_NE(0x77, self->pin[0]);
	fill(self->odp, LEN / 2, 26);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma(self, IBV_WR_RDMA_READ, 0, LEN));
	EXPECT_EQ(0, memcmp(self->pin, self->odp, LEN));
	close(to_child[0]);
	close(to_child[1]);
	close(to_parent[0]);
	close(to_parent[1]);
}

TEST_F(odp, a_shared_memfd_mapping_is_seen_through_its_other_mapping)
{
	int fd = memfd_create("rodp_odp", 0);
	char *a, *b;
	struct ibv_mr *mr;

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, ftruncate(fd, LEN));
	a = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	b = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ASSERT_NE(MAP_FAILED, a);
	ASSERT_NE(MAP_FAILED, b);
	mr = ibv_reg_mr(self->d.pd, a, LEN, ODP_ACCESS);
	ASSERT_NE(NULL, mr);
	fill(self->pin, LEN, 27);
	ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, LEN, (uintptr_t)a,
					  mr->rkey));
	EXPECT_EQ(0, memcmp(b, self->pin, LEN));
	fill(b + PAGE, 2 * PAGE, 28);
	ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 4 * PAGE, (uintptr_t)a,
					  mr->rkey));
	EXPECT_EQ(0, memcmp(self->pin, b, 4 * PAGE));
	/* Punching a hole in the file invalidates; the device then reads zeroes. */
	ASSERT_EQ(0, fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, LEN));
	ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 4 * PAGE, (uintptr_t)a,
					  mr->rkey));
	for (int i = 0; i < 4 * PAGE; i++)
		ASSERT_EQ(0, self->pin[i]);
	ibv_dereg_mr(mr);
	munmap(a, LEN);
	munmap(b, LEN);
	close(fd);
}

/*
 * Writes 4 MiB of huge-page memory at h through an ODP MR (registered with extra access
 * flags) in 16 messages; checks it all.
 */
static void write_huge(struct __test_metadata *_metadata, FIXTURE_DATA(odp) *self, char *h,
		       int flags)
{
	const size_t huge = 4 << 20;
	struct ibv_mr *mr = ibv_reg_mr(self->d.pd, h, huge, ODP_ACCESS | flags);
	long pages = counter("num_page_fault_pages");

	ASSERT_NE(NULL, mr);
	for (size_t off = 0; off < huge; off += LEN) {
		fill(self->pin, LEN, off / LEN);
		ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, LEN,
						  (uintptr_t)h + off, mr->rkey));
		ASSERT_EQ(0, memcmp(h + off, self->pin, LEN));
	}
	/* Faults count base pages, whatever the page size behind them. */
	EXPECT_EQ(huge / PAGE, counter("num_page_fault_pages") - pages);
	memset(self->pin, 0, LEN);
	ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, LEN,
					  (uintptr_t)h + 3 * LEN, mr->rkey));
	EXPECT_EQ(0, memcmp(h + 3 * LEN, self->pin, LEN));
	ibv_dereg_mr(mr);
}

TEST_F(odp, hugetlbfs_pages)
{
	char *h;

	sh(NULL, 0, "echo 4 > /proc/sys/vm/nr_hugepages");
	h = mmap(NULL, 4 << 20, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (h == MAP_FAILED)
		SKIP(return, "no 2 MiB huge pages in this guest");
	write_huge(_metadata, self, h, 0);
	/* IBV_ACCESS_HUGETLB is a hint rodp accepts (and translates 4 KiB pages all the same). */
	write_huge(_metadata, self, h, IBV_ACCESS_HUGETLB);
	munmap(h, 4 << 20);
}

TEST_F(odp, transparent_huge_pages)
{
	char *raw = mmap(NULL, 6 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *h = (char *)(((uintptr_t)raw + (2 << 20) - 1) & ~(uintptr_t)((2 << 20) - 1));
	char huge[64] = "";

	ASSERT_NE(MAP_FAILED, raw);
	sh(NULL, 0, "echo always > /sys/kernel/mm/transparent_hugepage/enabled");
	ASSERT_EQ(0, madvise(h, 4 << 20, MADV_HUGEPAGE));
	write_huge(_metadata, self, h, 0);
	sh(huge, sizeof(huge), "grep AnonHugePages /proc/%d/smaps_rollup | tr -s ' '", getpid());
	TH_LOG("THP after the device wrote: %s", huge);
	munmap(raw, 6 << 20);
}

/* Implicit ODP: one key for the whole address space. */
#define SPARSE (64 * GiB)
#define TOUCHES 16

TEST_F(odp, implicit_mr_covers_a_sparse_64_gib_range)
{
	char *big = mmap(NULL, SPARSE, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	long pages = counter("num_page_fault_pages"), mapped = dbg_stat("num_odp_mr_pages");
	long mrs = dbg_stat("num_odp_mrs");
	struct ibv_mr *imr;
	uint64_t slots[2 * TOUCHES];
	int nslots = 0;
	char line[1024];

	ASSERT_NE(MAP_FAILED, big);
	imr = ibv_reg_mr(self->d.pd, NULL, SIZE_MAX, ODP_ACCESS);
	ASSERT_NE(NULL, imr);
	EXPECT_EQ(mrs + 1, dbg_stat("num_odp_mrs"));
	ASSERT_EQ(0, mr_line(imr->lkey, line, sizeof(line), 0));
	EXPECT_NE(NULL, strstr(line, " drv_odp implicit ")) TH_LOG("%s", line);
	EXPECT_EQ(0, field(line, "drv_odp_children")) TH_LOG("%s", line);

	/* Two pages at each of 16 scattered places, 4 GiB apart, written and read back. */
	for (int i = 0; i < TOUCHES; i++) {
		char *at = big + i * (SPARSE / TOUCHES) + ((i * 7919ull) % (GiB / PAGE)) * PAGE;
		uint64_t s[2] = { (uintptr_t)at >> 30, ((uintptr_t)at + 2 * PAGE - 1) >> 30 };

		fill(self->pin, 2 * PAGE, 30 + i);
		ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 2 * PAGE,
						  (uintptr_t)at, imr->rkey));
		ASSERT_EQ(0, memcmp(at, self->pin, 2 * PAGE));
		memset(self->pin, 0, 2 * PAGE);
		ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 2 * PAGE,
						  (uintptr_t)at, imr->rkey));
		ASSERT_EQ(0, memcmp(at, self->pin, 2 * PAGE));
		for (int k = 0; k < 2; k++) {
			int seen = 0;

			for (int j = 0; j < nslots; j++)
				seen |= slots[j] == s[k];
			if (!seen)
				slots[nslots++] = s[k];
		}
	}
	EXPECT_EQ(2 * TOUCHES, counter("num_page_fault_pages") - pages);
	EXPECT_EQ(2 * TOUCHES, dbg_stat("num_odp_mr_pages") - mapped);
	ASSERT_EQ(0, mr_line(imr->lkey, line, sizeof(line), 0));
	EXPECT_EQ(nslots, field(line, "drv_odp_children")) TH_LOG("%s", line);
	ASSERT_EQ(0, mr_line(imr->lkey, line, sizeof(line), 1));
	EXPECT_EQ(2 * TOUCHES, field(line, "page_faults")) TH_LOG("%s", line);

	/* Unmapping invalidates every page; the children, empty, are reaped. */
	ASSERT_EQ(0, munmap(big, SPARSE));
	EXPECT_EQ(mapped, dbg_stat("num_odp_mr_pages"));
	for (int i = 0; i < 100; i++) {
		ASSERT_EQ(0, mr_line(imr->lkey, line, sizeof(line), 0));
		if (field(line, "drv_odp_children") == 0)
			break;
		usleep(50 * 1000);
	}
	EXPECT_EQ(0, field(line, "drv_odp_children")) TH_LOG("%s", line);
	ASSERT_EQ(0, mr_line(imr->lkey, line, sizeof(line), 1));
	EXPECT_EQ(2 * TOUCHES, field(line, "page_invalidations")) TH_LOG("%s", line);
	ASSERT_EQ(0, ibv_dereg_mr(imr));
	EXPECT_EQ(mrs, dbg_stat("num_odp_mrs"));
}

TEST_F(odp, implicit_mr_keys_work_in_every_operation)
{
	struct ibv_mr *imr = ibv_reg_mr(self->d.pd, NULL, SIZE_MAX, ODP_ACCESS);
	char *mem = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t *word = (uint64_t *)(mem + 9 * PAGE);
	struct ibv_wc wc;

	ASSERT_NE(NULL, imr);
	ASSERT_NE(MAP_FAILED, mem);
	/* Send from implicit memory into implicit memory (both local SGEs). */
	fill(mem, 3 * PAGE, 31);
	ASSERT_EQ(0, post_recv(self->rc.qp[0], mem + 16 * PAGE, 3 * PAGE, imr->lkey, 1));
	ASSERT_EQ(0, post_send(self->rc.qp[1], IBV_WR_SEND, mem, 3 * PAGE, imr->lkey, 0, 0, 0, 2));
	ASSERT_EQ(1, poll1(self->rc.cq[1], &wc, 20000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	ASSERT_EQ(1, poll1(self->rc.cq[0], &wc, 20000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(0, memcmp(mem, mem + 16 * PAGE, 3 * PAGE));
	/* Atomics on a word the device faults in. */
	ASSERT_EQ(0, post_atomic(self->rc.qp[0], IBV_WR_ATOMIC_FETCH_AND_ADD, self->pin,
				 self->pin_mr->lkey, (uintptr_t)word, imr->rkey, 9, 0));
	ASSERT_EQ(1, poll1(self->rc.cq[0], &wc, 20000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(9, *word);
	/*
	 * Memory the process has not mapped (PROT_NONE here): an access error, and the child made
	 * for it, which no invalidation will ever empty, is reaped at once.
	 */
	char line[1024], *none = mmap(NULL, 2 * GiB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t slot = ((uintptr_t)none + GiB - 1) & ~(GiB - 1);
	long kids = (((uintptr_t)mem + LEN - 1) >> 30) - ((uintptr_t)mem >> 30) + 1;

	ASSERT_NE(MAP_FAILED, none);
	ASSERT_EQ(0, mr_line(imr->lkey, line, sizeof(line), 0));
	EXPECT_EQ(kids, field(line, "drv_odp_children")) TH_LOG("%s", line);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_READ, 0, 8, slot + 8 * PAGE,
						 imr->rkey));
	for (int i = 0; i < 100; i++) {
		ASSERT_EQ(0, mr_line(imr->lkey, line, sizeof(line), 0));
		if (field(line, "drv_odp_children") == kids)
			break;
		usleep(50 * 1000);
	}
	EXPECT_EQ(kids, field(line, "drv_odp_children")) TH_LOG("%s", line);
	ibv_dereg_mr(imr);
	munmap(mem, LEN);
	munmap(none, 2 * GiB);
}

TEST_F(odp, implicit_mr_past_the_address_space_and_with_an_iova_is_refused)
{
	struct ibv_mr *imr = ibv_reg_mr(self->d.pd, NULL, SIZE_MAX, ODP_ACCESS);

	ASSERT_NE(NULL, imr);
	/* The parent's keys name user addresses: an iova is refused. */
	errno = 0;
	EXPECT_EQ(NULL, ibv_reg_mr_iova(self->d.pd, NULL, SIZE_MAX, 0x10000, ODP_ACCESS));
	EXPECT_EQ(EINVAL, errno);
	/* Implicit without ODP is just too large. */
	EXPECT_EQ(NULL, ibv_reg_mr(self->d.pd, NULL, SIZE_MAX, ALL_ACCESS));
	/* Kernel addresses are outside the process's address space. */
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, 8,
						 0xffff888000000000ull, imr->rkey));
	ibv_dereg_mr(imr);
}

TEST_F(odp, implicit_prefetch_faults_children_in)
{
	struct ibv_mr *imr = ibv_reg_mr(self->d.pd, NULL, SIZE_MAX, ODP_ACCESS);
	char *mem = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_sge sge = { (uintptr_t)mem, LEN, 0 };
	long pages = counter("num_page_fault_pages");
	char line[1024];

	ASSERT_NE(NULL, imr);
	sge.lkey = imr->lkey;
	/* Nothing present: no fault, nothing mapped. */
	ASSERT_EQ(0, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
				   IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1));
	ASSERT_EQ(0, ibv_advise_mr(self->d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
				   IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1));
	EXPECT_EQ(NPAGES, counter("num_page_fault_pages") - pages);
	ASSERT_EQ(0, mr_line(imr->lkey, line, sizeof(line), 1));
	EXPECT_EQ(NPAGES, field(line, "page_prefetch")) TH_LOG("%s", line);
	fill(self->pin, LEN, 32);
	ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->rc, IBV_WR_RDMA_WRITE, 0, LEN, (uintptr_t)mem,
					  imr->rkey));
	EXPECT_EQ(0, memcmp(mem, self->pin, LEN));
	EXPECT_EQ(NPAGES, counter("num_page_fault_pages") - pages);
	ibv_dereg_mr(imr);
	munmap(mem, LEN);
}

TEST_HARNESS_MAIN
