// SPDX-License-Identifier: GPL-2.0
/*
 * rodp ODP memory cost (security model, "Memory an ODP registration costs"): an unprivileged
 * user in its own memory cgroup registers ODP MRs far larger than anything it maps. The
 * registrations cost no memory in proportion to their length (one past the explicit bound
 * fails with EINVAL, never a warning), the translation tables grow with the 2 MiB regions the
 * device maps, charged to the user's cgroup even when a worker does the mapping, and
 * deregistration gives the memory back.
 */
#include "rodp_verbs.h"
#include "rodp_harness.h"
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define ODP_ACCESS (ALL_ACCESS | IBV_ACCESS_ON_DEMAND)
/* The longest explicit ODP MR (Documentation/rodp.rst). */
#define MAX_EXPLICIT (16 * GiB)
/* 2 MiB regions touched: one page in each, 4 GiB apart at the ends. */
#define SLOTS 2048
#define SPAN (SLOTS * 2 * MiB)
/*
 * One chunk of a translation table: 512 entries of 8 bytes. KASAN's redzone and metadata make
 * the slab object, and so the charge, up to twice that.
 */
#define CHUNK (4 * KiB)
/* What a few per-CPU charge batches and small objects may add to a measurement. */
#define NOISE (2 * MiB)
#define CG "/sys/fs/cgroup/rodp_odp_cost"

/* What the unprivileged child measured, in bytes of its cgroup's memory.current. */
struct cost {
	int step;		/* the step that failed, or 0 */
	int big_errno;		/* errno of the 1 TiB explicit registration (0: it succeeded) */
	long reg;		/* registering a 16 GiB explicit and an implicit MR */
	long one;		/* one page through the implicit MR */
	long implicit;		/* one page in each of SLOTS regions through the implicit MR */
	long explicit_;		/* the same pages through the explicit MR, by the module's worker */
	long dereg;		/* given back by deregistering both */
};

static long current_bytes(void)
{
	return read_long(CG "/memory.current");
}

/* The device's handled prefetches (ib_core caches a value read within a jiffy). */
static long prefetches(void)
{
	usleep(50 * 1000);
	return hw_counter("rodp0", "num_prefetches_handled");
}

/* Prefetches (reads) the page at addr through mr; deferred to the module's worker or not. */
static int touch(struct ibv_pd *pd, struct ibv_mr *mr, char *addr, int deferred)
{
	struct ibv_sge sge = { (uintptr_t)addr, 4096, mr->lkey };

	return ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH,
			     deferred ? 0 : IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1);
}

/* Waits (up to a minute) until the device has handled `until` prefetches. */
static int prefetched(long until)
{
	for (int i = 0; i < 1200; i++)
		if (prefetches() >= until)
			return 0;
	return -1;
}

/* The attacker: runs in CG as nobody and fills in c; returns the step that failed, or 0. */
static int measure(struct cost *c)
{
	struct ibv_mr *big, *emr, *imr;
	struct dev d;
	long m, done;
	char *map, *base;

	if (become_nobody())
		return 1;
	if (dev_open(&d, "rodp0"))
		return 2;
	/* Readable and never written: the device maps the zero page, which costs nothing. */
	map = mmap(NULL, SPAN + 2 * MiB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		   -1, 0);
	if (map == MAP_FAILED)
		return 3;
	base = (char *)(((uintptr_t)map + 2 * MiB - 1) & ~(2 * MiB - 1));

	m = current_bytes();
	big = ibv_reg_mr(d.pd, base, 1ull << 40, ODP_ACCESS);
	c->big_errno = big ? 0 : errno;
	if (big)
		ibv_dereg_mr(big);
	emr = ibv_reg_mr(d.pd, base, MAX_EXPLICIT, ODP_ACCESS);
	imr = ibv_reg_mr(d.pd, NULL, SIZE_MAX, ODP_ACCESS);
	if (!emr || !imr)
		return 4;
	c->reg = current_bytes() - m;

	m = current_bytes();
	if (touch(d.pd, imr, base, 0))
		return 5;
	c->one = current_bytes() - m;

	m = current_bytes();
	for (int i = 1; i < SLOTS; i++)
		if (touch(d.pd, imr, base + i * 2 * MiB, 0))
			return 6;
	c->implicit = current_bytes() - m;

	/* The same pages again, now by the module's worker, for the explicit MR. */
	m = current_bytes();
	done = prefetches();
	for (int i = 0; i < SLOTS; i++)
		if (touch(d.pd, emr, base + i * 2 * MiB, 1))
			return 7;
	if (prefetched(done + SLOTS))
		return 8;
	c->explicit_ = current_bytes() - m;

	m = current_bytes();
	if (ibv_dereg_mr(emr) || ibv_dereg_mr(imr))
		return 9;
	/* ib_core may free the MRs after a grace period. */
	for (int i = 0; i < 50 && m - current_bytes() < c->explicit_; i++)
		usleep(100 * 1000);
	c->dereg = m - current_bytes();
	munmap(map, SPAN + 2 * MiB);
	dev_close(&d);
	return 0;
}

FIXTURE(cost) {
	struct cost *c;
};

FIXTURE_SETUP(cost)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	if (access("/sys/fs/cgroup/cgroup.controllers", F_OK))
		mount("cgroup2", "/sys/fs/cgroup", "cgroup2", 0, NULL);
	if (access("/sys/fs/cgroup/cgroup.controllers", F_OK))
		SKIP(return, "no cgroup2 hierarchy");
	sh(NULL, 0, "echo +memory > /sys/fs/cgroup/cgroup.subtree_control");
	rmdir(CG);
	ASSERT_EQ(0, mkdir(CG, 0755));
	if (access(CG "/memory.current", F_OK))
		SKIP(return, "no memory controller");
	self->c = mmap(NULL, sizeof(*self->c), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		       -1, 0);
	ASSERT_NE(MAP_FAILED, self->c);
	memset(self->c, 0, sizeof(*self->c));
}

FIXTURE_TEARDOWN(cost)
{
	rmdir(CG);
	link_delete("rodp0");
}

TEST_F(cost, follows_mapped_memory_and_is_charged_to_the_caller)
{
	struct cost *c = self->c;
	int st;
	pid_t pid = fork();

	ASSERT_LE(0, pid);
	if (!pid) {
		char me[32];
		int fd = open(CG "/cgroup.procs", O_WRONLY);

		/* Into the cgroup while still root; then the attacker. */
		snprintf(me, sizeof(me), "%d", getpid());
		if (fd < 0 || write(fd, me, strlen(me)) < 0)
			_exit(100);
		close(fd);
		c->step = measure(c);
		_exit(0);
	}
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	ASSERT_TRUE(WIFEXITED(st) && !WEXITSTATUS(st));
	ASSERT_EQ(0, c->step);
	TH_LOG("bytes charged: registering %ld, one page %ld, %d regions %ld implicit, %ld explicit;"
	       " given back %ld", c->reg, c->one, SLOTS, c->implicit, c->explicit_, c->dereg);
	/* Past the bound: refused, and nothing warned (the run checks the kernel log). */
	EXPECT_EQ(EINVAL, c->big_errno);
	/* 16 GiB and the whole address space registered: nothing in proportion to that. */
	EXPECT_GT(NOISE, c->reg);
	EXPECT_GT(NOISE, c->one);
	/*
	 * Per region the implicit MR maps, a chunk of its table (and the process's own page
	 * table); for the explicit MR, whose pages are already in the page tables, the chunks
	 * alone, charged although the worker mapped them.
	 */
	EXPECT_LE((long)(SLOTS * CHUNK * 9 / 10), c->implicit);
	EXPECT_GE((long)(SLOTS * 4 * CHUNK + NOISE), c->implicit);
	EXPECT_LE((long)(SLOTS * CHUNK * 9 / 10), c->explicit_);
	EXPECT_GE((long)(SLOTS * 3 * CHUNK + NOISE), c->explicit_);
	/* Deregistration frees both MRs' tables. */
	EXPECT_LE((long)(2 * SLOTS * CHUNK * 9 / 10), c->dereg);
}

TEST_HARNESS_MAIN
