// SPDX-License-Identifier: GPL-2.0
/*
 * Ring mappings and multicast as an unprivileged user (rodp.rst, "Ring mappings and
 * multicast"): a process keeping its rings mapped loses them when the device goes (rdma link
 * delete, rmmod), a mapping keeps its ring alive past the object, and the multicast limits
 * hold per user.
 */
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include "rodp_verbs.h"
#include "rodp_harness.h"

/* struct rxe_queue_buf: index_mask, written by the kernel when it creates the ring. */
#define RING_INDEX_MASK 4
#define MAGIC 0x5a5aa5a5c3c33c3cULL

struct ring {
	unsigned long start, end, pgoff;
};

/* The process's mappings of the uverbs device file: its rings. */
static int rings(struct ring *r, int max)
{
	char line[512];
	int n = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	if (!f)
		return -1;
	while (n < max && fgets(line, sizeof(line), f)) {
		if (!strstr(line, "/dev/infiniband/uverbs"))
			continue;
		if (sscanf(line, "%lx-%lx %*s %lx", &r[n].start, &r[n].end, &r[n].pgoff) == 3)
			n++;
	}
	fclose(f);
	return n;
}

static volatile uint32_t *word(unsigned long addr)
{
	return (volatile uint32_t *)addr;
}

static volatile uint64_t *last_word(const struct ring *r)
{
	return (volatile uint64_t *)(r->end - 8);
}

/* vmalloc areas rodp holds: its rings. */
static long rodp_vmallocs(void)
{
	char out[64];

	sh(out, sizeof(out), "grep -c rodp /proc/vmallocinfo");
	return atol(out);
}

/* Reads one byte from fd, waiting at most 60 s. */
static int wait_byte(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	if (poll(&p, 1, 60000) != 1)
		return -1;
	return read(fd, &c, 1) == 1 ? 0 : -1;
}

/* A child running fn(arg, ready, go), which signals on ready and waits on go. */
struct child {
	pid_t pid;
	int ready, go;
};

static int spawn(struct child *c, int (*fn)(void *arg, int ready, int go), void *arg)
{
	int ready[2], go[2];

	if (pipe(ready) || pipe(go))
		return -1;
	c->pid = fork();
	if (c->pid < 0)
		return -1;
	if (!c->pid) {
		close(ready[0]);
		close(go[1]);
		_exit(fn(arg, ready[1], go[0]));
	}
	close(ready[1]);
	close(go[0]);
	c->ready = ready[0];
	c->go = go[1];
	return 0;
}

static void child_close(struct child *c)
{
	close(c->ready);
	close(c->go);
}

/* What the child reports by exit status. */
enum {
	HOLD_OK,
	HOLD_SETUP,		/* nobody, open, CQ/QP/SRQ creation */
	HOLD_NO_RINGS,		/* fewer mappings than rings */
	HOLD_NOT_SHARED,	/* the kernel's header not seen through the mapping */
	HOLD_SYNC,
	HOLD_STILL_MAPPED,	/* a ring's old contents still visible after the device went */
};

/*
 * The child: as nobody, opens rodp0 and creates a CQ, an SRQ and an RC QP (a send and a
 * receive ring), writes a mark at the end of each ring, then waits while the parent removes
 * the device. Afterwards no ring's old contents may be visible through the mapping: neither
 * the kernel's header nor the mark.
 */
static int hold_rings(void *arg, int ready, int go)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq;
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	struct ring r[8];
	struct dev d;
	int n;

	if (become_nobody() || dev_open(&d, "rodp0"))
		return HOLD_SETUP;
	cq = ibv_create_cq(d.ctx, 256, NULL, NULL, 0);
	srq = ibv_create_srq(d.pd, &sa);
	qp = cq ? make_qp(&d, cq, cq, IBV_QPT_RC, NULL) : NULL;
	if (!cq || !srq || !qp)
		return HOLD_SETUP;
	n = rings(r, 8);
	if (n < 4)
		return HOLD_NO_RINGS;
	for (int i = 0; i < n; i++) {
		if (!*word(r[i].start + RING_INDEX_MASK))
			return HOLD_NOT_SHARED;
		*last_word(&r[i]) = MAGIC;
	}
	if (write(ready, "r", 1) != 1 || wait_byte(go))
		return HOLD_SYNC;
	/* Read everything before writing anything: the zapped VMAs may share one page. */
	for (int i = 0; i < n; i++)
		if (*word(r[i].start + RING_INDEX_MASK) || *last_word(&r[i]) == MAGIC)
			return HOLD_STILL_MAPPED;
	/* Writing is harmless too. */
	*last_word(&r[0]) = MAGIC;
	/* The device is gone: these fail or not, and free what the provider holds. */
	ibv_destroy_qp(qp);
	ibv_destroy_srq(srq);
	ibv_destroy_cq(cq);
	dev_close(&d);
	return HOLD_OK;
}

/* Runs hold_rings in a child, removes the device with cmd while it holds its rings. */
static void remove_under_rings(struct __test_metadata *_metadata, const char *cmd)
{
	long vm_none, vm_dev;
	struct child c;
	char out[512];
	int st;

	link_delete("rodp0");
	vm_none = rodp_vmallocs();
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	vm_dev = rodp_vmallocs();
	ASSERT_EQ(0, spawn(&c, hold_rings, NULL));
	if (wait_byte(c.ready)) {
		waitpid(c.pid, &st, 0);
		ASSERT_TRUE(WIFEXITED(st));
		ASSERT_EQ(HOLD_OK, WEXITSTATUS(st));
		ASSERT_TRUE(0) TH_LOG("the child did not get ready");
	}
	/* The child's rings are rodp's vmalloc areas now. */
	EXPECT_LT(vm_dev, rodp_vmallocs());
	EXPECT_EQ(0, sh(out, sizeof(out), "%s", cmd)) TH_LOG("%s: %s", cmd, out);
	EXPECT_FALSE(dev_listed("rodp0"));
	/* Released with the device although the child still has the VMAs. */
	EXPECT_EQ(vm_none, rodp_vmallocs());
	EXPECT_EQ(1, write(c.go, "g", 1));
	ASSERT_EQ(c.pid, waitpid(c.pid, &st, 0));
	EXPECT_TRUE(WIFEXITED(st)) TH_LOG("child killed by signal %d", WTERMSIG(st));
	if (WIFEXITED(st))
		EXPECT_EQ(HOLD_OK, WEXITSTATUS(st));
	child_close(&c);
	EXPECT_EQ(vm_none, rodp_vmallocs());
	/* The module goes (if cmd did not unload it) and comes back with the next link. */
	if (module_refcnt("rodp") >= 0)
		EXPECT_EQ(0, sh(out, sizeof(out), "rmmod rodp")) TH_LOG("%s", out);
	EXPECT_EQ(-1, module_refcnt("rodp"));
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	link_delete("rodp0");
}

TEST(link_delete_zaps_rings)
{
	remove_under_rings(_metadata, "rdma link delete rodp0");
}

TEST(rmmod_zaps_rings)
{
	remove_under_rings(_metadata, "rmmod rodp");
}

/*
 * A second mapping of a CQ's ring (the offset as /proc/self/maps shows it) sees the same
 * memory and keeps it after the CQ is destroyed; the offset is gone then, private mappings are
 * refused, a split mapping keeps working, and unmapping the rest frees the ring.
 */
TEST(mapping_outlives_cq)
{
	struct ring r[8], ring;
	unsigned long len;
	struct ibv_cq *cq;
	long vm_dev;
	uint8_t *p;
	struct dev d;
	int n;

	link_delete("rodp0");
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	vm_dev = rodp_vmallocs();
	ASSERT_EQ(0, dev_open(&d, "rodp0"));
	ASSERT_EQ(0, rings(r, 8));
	cq = ibv_create_cq(d.ctx, 256, NULL, NULL, 0);
	ASSERT_NE(NULL, cq);
	n = rings(r, 8);
	ASSERT_EQ(1, n);
	ring = r[0];
	len = ring.end - ring.start;
	ASSERT_LT(4096, len);
	EXPECT_EQ(MAP_FAILED, mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE,
				   d.ctx->cmd_fd, ring.pgoff << 12));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(MAP_FAILED, mmap(NULL, len - 4096, PROT_READ, MAP_SHARED, d.ctx->cmd_fd,
				   ring.pgoff << 12));
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, d.ctx->cmd_fd, ring.pgoff << 12);
	ASSERT_NE(MAP_FAILED, p);
	*last_word(&ring) = MAGIC;
	EXPECT_EQ(MAGIC, *(volatile uint64_t *)(p + len - 8));
	EXPECT_EQ(*word(ring.start + RING_INDEX_MASK), *(volatile uint32_t *)(p + RING_INDEX_MASK));
	EXPECT_EQ(vm_dev + 1, rodp_vmallocs());
	ASSERT_EQ(0, ibv_destroy_cq(cq));
	/* The provider's mapping is gone, ours keeps the ring. */
	EXPECT_EQ(1, rings(r, 8));
	EXPECT_EQ(MAGIC, *(volatile uint64_t *)(p + len - 8));
	EXPECT_EQ(vm_dev + 1, rodp_vmallocs());
	EXPECT_EQ(MAP_FAILED, mmap(NULL, len, PROT_READ, MAP_SHARED, d.ctx->cmd_fd,
				   ring.pgoff << 12));
	/* Split: the first page goes, the rest stays mapped and holds the ring. */
	ASSERT_EQ(0, munmap(p, 4096));
	EXPECT_EQ(MAGIC, *(volatile uint64_t *)(p + len - 8));
	EXPECT_EQ(vm_dev + 1, rodp_vmallocs());
	ASSERT_EQ(0, munmap(p + 4096, len - 4096));
	EXPECT_EQ(vm_dev, rodp_vmallocs());
	EXPECT_EQ(0, rings(r, 8));
	dev_close(&d);
	link_delete("rodp0");
}

/* ::ffff:239.x.y.z, the i-th test group. */
static union ibv_gid group(unsigned int i)
{
	union ibv_gid g = { .raw = { [10] = 0xff, [11] = 0xff, 239, i >> 16, i >> 8, i } };

	return g;
}

/* ff15::x:y:z, the i-th test group as an IPv6 one (site-local scope, transient). */
static union ibv_gid group6(unsigned int i)
{
	union ibv_gid g = { .raw = { 0xff, 0x15, [13] = i >> 16, i >> 8, i } };

	return g;
}

static double seconds(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Limits of rodp.rst's Multicast section (mcast.rs). */
#define MAX_GROUPS 8192
#define MAX_USER_ATTACH 1024
#define MAX_USER_QP_ATTACH 28
#define QPS (MAX_USER_QP_ATTACH + 1)

struct mcast_result {
	int in_group, in_group_err;	/* QPs nobody attached to group 0, then the errno */
	int groups, groups_err;		/* groups nobody's first QP then joined, then the errno */
	double detach;			/* nobody detaching everything */
	int destroyed;			/* QPs then destroyed */
};

/* Attaches QP after QP to group 0, then the first QP to group after group, until refused. */
static int fill_as_nobody(void *arg, int ready, int go)
{
	struct mcast_result *r = arg;
	struct ibv_qp *qp[QPS];
	struct ibv_cq *cq;
	union ibv_gid g;
	struct dev d;
	double t;
	int ret = 0;

	if (become_nobody() || dev_open(&d, "rodp0"))
		return 1;
	cq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	if (!cq)
		return 1;
	for (int i = 0; i < QPS; i++)
		if (!(qp[i] = make_qp(&d, cq, cq, IBV_QPT_UD, NULL)))
			return 1;
	g = group(0);
	for (r->in_group = 0; r->in_group < QPS; r->in_group++)
		if ((ret = ibv_attach_mcast(qp[r->in_group], &g, 0)))
			break;
	r->in_group_err = ret;
	for (r->groups = 0; r->groups < 2 * MAX_USER_ATTACH; r->groups++) {
		g = group(1 + r->groups);
		if ((ret = ibv_attach_mcast(qp[0], &g, 0)))
			break;
	}
	r->groups_err = ret;
	if (write(ready, "r", 1) != 1 || wait_byte(go))
		return 1;
	/* ib_core refuses to destroy a QP still attached (EBUSY): detach first. */
	t = seconds();
	g = group(0);
	for (int i = 0; i < r->in_group; i++)
		ibv_detach_mcast(qp[i], &g, 0);
	for (int i = 0; i < r->groups; i++) {
		g = group(1 + i);
		ibv_detach_mcast(qp[0], &g, 0);
	}
	r->detach = seconds() - t;
	for (int i = 0; i < QPS; i++)
		r->destroyed += !ibv_destroy_qp(qp[i]);
	ibv_destroy_cq(cq);
	dev_close(&d);
	return 0;
}

/* Another unprivileged user joins nobody's full group and a new one. */
static int join_as_other_user(void)
{
	union ibv_gid g0 = group(0), g1 = group(0x10000);
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	struct dev d;
	int ret;

	if (setgroups(0, NULL) || setgid(65533) || setuid(65533) || dev_open(&d, "rodp0"))
		return -1;
	cq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	qp = cq ? make_qp(&d, cq, cq, IBV_QPT_UD, NULL) : NULL;
	if (!qp)
		return -1;
	ret = ibv_attach_mcast(qp, &g0, 0) ?: ibv_attach_mcast(qp, &g1, 0);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	dev_close(&d);
	return ret;
}

/*
 * nobody takes half of a group and its per-user total of attachments (ENOMEM past each);
 * another user still joins that group and a new one; destroying nobody's QPs detaches them all
 * at once.
 */
TEST(mcast_per_user_limits)
{
	struct mcast_result *r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE,
				      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct child c;
	pid_t other;
	int st;

	ASSERT_NE(MAP_FAILED, r);
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, spawn(&c, fill_as_nobody, r));
	EXPECT_EQ(0, wait_byte(c.ready));
	other = fork();
	ASSERT_LE(0, other);
	if (!other)
		_exit(join_as_other_user() ? 1 : 0);
	ASSERT_EQ(other, waitpid(other, &st, 0));
	EXPECT_TRUE(WIFEXITED(st) && !WEXITSTATUS(st));
	EXPECT_EQ(1, write(c.go, "g", 1));
	ASSERT_EQ(c.pid, waitpid(c.pid, &st, 0));
	ASSERT_TRUE(WIFEXITED(st) && !WEXITSTATUS(st));
	EXPECT_EQ(MAX_USER_QP_ATTACH, r->in_group);
	EXPECT_EQ(ENOMEM, r->in_group_err);
	EXPECT_EQ(MAX_USER_ATTACH - MAX_USER_QP_ATTACH, r->groups);
	EXPECT_EQ(ENOMEM, r->groups_err);
	EXPECT_EQ(QPS, r->destroyed);
	TH_LOG("detaching %d attachments one by one: %.3f s", MAX_USER_ATTACH, r->detach);
	child_close(&c);
	munmap(r, sizeof(*r));
	link_delete("rodp0");
}

/*
 * The device-limit test's netdev: a dummy whose MTU (1279) is below IPv6's minimum, so it has
 * no IPv6 state at all. rodp's joins of IPv6 groups there fail at once (the group still works
 * on this host, and is not left), which keeps the kernel's IP group lists out of the times
 * measured: each join and leave of an IP group walks the netdev's list of them, so with a real
 * membership per group 8,192 joins took 165 s and their removal 259 s on a slow machine
 * (2026-11-27), and the lists, not rodp, set the ratio compared below. The IP joins themselves
 * are tested by mcast_per_user_limits here and by the two-guest phase's multicast cases.
 */
#define NOIP6 "rdmc0"

/*
 * rodp0 on NOIP6 with a context holding a UD QP joined to the first n groups: the time rdma
 * link delete takes, the core detaching every attachment on the way.
 */
static double delete_with_attachments(struct __test_metadata *_metadata, int n)
{
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	union ibv_gid g;
	struct dev d;
	double t;
	int i;

	ASSERT_EQ(0, link_add("rodp0", NOIP6));
	ASSERT_EQ(0, dev_open(&d, "rodp0"));
	cq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	ASSERT_NE(NULL, cq);
	qp = make_qp(&d, cq, cq, IBV_QPT_UD, NULL);
	ASSERT_NE(NULL, qp);
	t = seconds();
	for (i = 0; i < n; i++) {
		g = group6(i);
		if (ibv_attach_mcast(qp, &g, 0))
			break;
	}
	TH_LOG("%d attachments: %.3f s", i, seconds() - t);
	EXPECT_EQ(n, i);
	if (n == MAX_GROUPS) {
		/* The device's limit; detaching works one by one; ib_core keeps the QP (EBUSY). */
		g = group6(MAX_GROUPS);
		EXPECT_EQ(ENOMEM, ibv_attach_mcast(qp, &g, 0));
		g = group6(0);
		EXPECT_EQ(0, ibv_detach_mcast(qp, &g, 0));
		EXPECT_EQ(EINVAL, ibv_detach_mcast(qp, &g, 0));
		EXPECT_EQ(EBUSY, ibv_destroy_qp(qp));
		g = group6(MAX_GROUPS);
		EXPECT_EQ(0, ibv_attach_mcast(qp, &g, 0));
	}
	t = seconds();
	EXPECT_EQ(0, sh(NULL, 0, "rdma link delete rodp0"));
	t = seconds() - t;
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	dev_close(&d);
	return t;
}

/* A fixture for its netdev and its timeout (9,216 attachments, three removals). */
FIXTURE(slow) {
};

FIXTURE_SETUP(slow)
{
	sh(NULL, 0, "ip link delete " NOIP6);
	ASSERT_EQ(0, sh(NULL, 0, "ip link add " NOIP6 " mtu 1279 type dummy && "
			"ip link set " NOIP6 " up"));
	/* No IPv6 state: the premise of the times below. */
	ASSERT_NE(0, access("/proc/sys/net/ipv6/conf/" NOIP6, F_OK));
}

FIXTURE_TEARDOWN(slow)
{
	link_delete("rodp0");
	sh(NULL, 0, "ip link delete " NOIP6);
}

/*
 * Root is held to the device's limits only: one QP joins every one of the device's groups, one
 * more is ENOMEM. Removing the device then detaches all of them: 8 times as many attachments as
 * in a run with 1,024 cost less than 32 times as much more time than a removal without any (64
 * and more with a walk of every attachment per detach).
 */
TEST_F_TIMEOUT(slow, mcast_device_limit_and_fast_detach, 600)
{
	double none = delete_with_attachments(_metadata, 0);
	double some = delete_with_attachments(_metadata, MAX_GROUPS / 8) - none;
	double all = delete_with_attachments(_metadata, MAX_GROUPS) - none;

	TH_LOG("rdma link delete: %.3f s without attachments, %.3f s more with %d, %.3f s more "
	       "with %d", none, some, MAX_GROUPS / 8, all, MAX_GROUPS);
	EXPECT_GT(32 * some + 0.5, all);
}

TEST_HARNESS_MAIN
