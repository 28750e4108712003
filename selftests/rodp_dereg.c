// SPDX-License-Identifier: GPL-2.0
/*
 * rodp dereg: ibv_dereg_mr, IB_USER_VERBS_CMD_REREG_MR (a new, one-page translation) and
 * ibv_dealloc_mw (type 1 and type 2B windows) racing a long RDMA WRITE into, or READ from, the
 * victim's memory by an unprivileged peer (uid 65534, its own process and context, its QP
 * connected to the victim's). The victim runs the verb while the transfer is visibly under way
 * (the first bytes have moved, the last have not), then at once reuses the old memory (fills it
 * with its own pattern, last page first, against the engine's ascending copy). After the verb
 * returns no access through the old key or translation may happen: the victim's pattern stays
 * as written, a READ never returns it, and the transfer completes with success (it resolved
 * the key before). The same key then fails with a remote access error, the memory untouched,
 * and the victim's QP works again after a reset.
 */
#include <poll.h>
#include <sys/resource.h>
#include "rodp_mw.h"
#include "rodp_harness.h"

/*
 * The transfer must last longer than the scheduler's tick (4 ms): the test looks at it from
 * the guest's one vCPU, which it gets back only then. 8 MiB was enough on one host; on a
 * faster one (its kernel built in 785 s instead of 1,592) a WRITE of 8 MiB was once over
 * before the test first looked in each of 3 attempts.
 */
#define LEN (16 << 20)
#define PAGE 4096
/* A transfer of LEN bytes under TCG with KASAN takes seconds at most, not minutes. */
#define XFER_MS 120000
#define ATTEMPTS 8

enum verb { DEREG, REREG, DEALLOC_MW1, DEALLOC_MW2 };

/* What the parent asks of the attacker. */
struct cmd {
	int op;			/* an ibv_wr_opcode, or one of the below */
	uint32_t len;
	uint64_t raddr;
	uint32_t rkey;
};

#define CMD_QUIT -1
#define CMD_RESET -2

FIXTURE(dereg) {
	struct dev d;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_mw *mw;
	char *v, *v2;		/* the victim's memory, and the new translation of a rereg */
	char *a;		/* the attacker's buffer, shared so the victim sees a READ arrive */
	char *p, *q;		/* the attacker's pattern, the victim's pattern */
	pid_t pid;
	int cmd, rep;		/* pipes to and from the attacker */
	uint32_t peer_qpn;
};

static char *map(size_t len, int shared)
{
	char *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS, -1, 0);

	return m == MAP_FAILED ? NULL : m;
}

static int rd(int fd, void *buf, size_t len, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	if (poll(&pfd, 1, ms) != 1)
		return -1;
	return read(fd, buf, len) == (ssize_t)len ? 0 : -1;
}

static int wr(int fd, const void *buf, size_t len)
{
	return write(fd, buf, len) == (ssize_t)len ? 0 : -1;
}

/*
 * The attacker, as nobody: its own context, PD, CQ and RC QP connected to the victim's, and
 * an MR over the shared buffer. Runs the parent's commands, answering each with the
 * completion status (-1: none).
 */
static void attacker(int cmd, int rep, char *buf)
{
	struct dev d;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint32_t vqpn, qpn;
	struct cmd c;
	int st = -1;

	if (become_nobody() || dev_open(&d, "rodp0"))
		_exit(wr(rep, &st, sizeof(st)) ? 2 : 1);
	mr = ibv_reg_mr(d.pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
	cq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	qp = cq ? make_qp(&d, cq, cq, IBV_QPT_RC, NULL) : NULL;
	if (!mr || !qp)
		_exit(wr(rep, &st, sizeof(st)) ? 2 : 1);
	qpn = qp->qp_num;
	if (wr(rep, &qpn, sizeof(qpn)) || rd(cmd, &vqpn, sizeof(vqpn), 60000) ||
	    rc_connect(qp, &d, vqpn, &d.gid, &rc_default))
		_exit(1);
	st = 0;
	if (wr(rep, &st, sizeof(st)))
		_exit(1);
	while (!rd(cmd, &c, sizeof(c), -1) && c.op != CMD_QUIT) {
		struct ibv_qp_attr r = { .qp_state = IBV_QPS_RESET };
		struct ibv_wc wc;

		if (c.op == CMD_RESET) {
			st = ibv_modify_qp(qp, &r, IBV_QP_STATE) ||
			     rc_connect(qp, &d, vqpn, &d.gid, &rc_default);
		} else if (post_send(qp, c.op, buf, c.len, mr->lkey, c.raddr, c.rkey, 0, 1)) {
			st = -1;
		} else {
			st = poll1(cq, &wc, XFER_MS) == 1 ? (int)wc.status : -1;
		}
		if (wr(rep, &st, sizeof(st)))
			break;
	}
	_exit(0);
}

FIXTURE_SETUP(dereg)
{
	struct rlimit unlimited = { RLIM_INFINITY, RLIM_INFINITY };
	int to[2], from[2], st = -1;

	self->pid = -1;
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	/* The attacker pins LEN bytes; as nobody it keeps the limit it inherits. */
	ASSERT_EQ(0, setrlimit(RLIMIT_MEMLOCK, &unlimited));
	ASSERT_NE(NULL, self->v = map(LEN, 0));
	ASSERT_NE(NULL, self->v2 = map(PAGE, 0));
	ASSERT_NE(NULL, self->a = map(LEN, 1));
	ASSERT_NE(NULL, self->p = map(LEN, 0));
	ASSERT_NE(NULL, self->q = map(LEN, 0));
	fill(self->p, LEN, 3);
	/* Every byte differs from the attacker's. */
	for (size_t i = 0; i < LEN; i++)
		self->q[i] = self->p[i] ^ 0x5a;
	ASSERT_EQ(0, pipe(to));
	ASSERT_EQ(0, pipe(from));
	self->pid = fork();
	ASSERT_LE(0, self->pid);
	if (!self->pid) {
		close(to[1]);
		close(from[0]);
		attacker(to[0], from[1], self->a);
	}
	close(to[0]);
	close(from[1]);
	self->cmd = to[1];
	self->rep = from[0];
	ASSERT_EQ(0, dev_open(&self->d, "rodp0"));
	ASSERT_NE(NULL, self->cq = ibv_create_cq(self->d.ctx, 16, NULL, NULL, 0));
	ASSERT_NE(NULL, self->qp = make_qp(&self->d, self->cq, self->cq, IBV_QPT_RC, NULL));
	ASSERT_EQ(0, rd(self->rep, &self->peer_qpn, sizeof(self->peer_qpn), 60000));
	ASSERT_EQ(0, rc_connect(self->qp, &self->d, self->peer_qpn, &self->d.gid, &rc_default));
	ASSERT_EQ(0, wr(self->cmd, &self->qp->qp_num, sizeof(uint32_t)));
	ASSERT_EQ(0, rd(self->rep, &st, sizeof(st), 60000));
	ASSERT_EQ(0, st);
}

FIXTURE_TEARDOWN(dereg)
{
	struct cmd quit = { .op = CMD_QUIT };
	int status;

	if (self->pid > 0) {
		wr(self->cmd, &quit, sizeof(quit));
		close(self->cmd);
		waitpid(self->pid, &status, 0);
	}
	if (self->mw)
		ibv_dealloc_mw(self->mw);
	if (self->mr)
		ibv_dereg_mr(self->mr);
	if (self->qp)
		ibv_destroy_qp(self->qp);
	if (self->cq)
		ibv_destroy_cq(self->cq);
	dev_close(&self->d);
	link_delete("rodp0");
}

/* The attacker runs op over len bytes at raddr through rkey; returns its status. */
static int attack(FIXTURE_DATA(dereg) *self, int op, uint32_t len, uint64_t raddr,
		  uint32_t rkey)
{
	struct cmd c = { .op = op, .len = len, .raddr = raddr, .rkey = rkey };
	int st = -1;

	if (wr(self->cmd, &c, sizeof(c)) || rd(self->rep, &st, sizeof(st), XFER_MS + 10000))
		return -1;
	return st;
}

/* Both QPs back to RTS after an error completion. */
static int reset_pair(FIXTURE_DATA(dereg) *self)
{
	struct ibv_qp_attr r = { .qp_state = IBV_QPS_RESET };
	struct ibv_wc wc;

	while (ibv_poll_cq(self->cq, 1, &wc) > 0)
		;
	if (ibv_modify_qp(self->qp, &r, IBV_QP_STATE) ||
	    rc_connect(self->qp, &self->d, self->peer_qpn, &self->d.gid, &rc_default))
		return -1;
	return attack(self, CMD_RESET, 0, 0, 0);
}

/* A fresh MR over the victim's memory and, for the window verbs, a window over all of it;
 * returns the key the attacker gets (0: failed). */
static uint32_t expose(FIXTURE_DATA(dereg) *self, enum verb verb)
{
	int type2 = verb == DEALLOC_MW2;
	uint32_t key;

	if (self->mr)
		ibv_dereg_mr(self->mr);
	self->mr = ibv_reg_mr(self->d.pd, self->v, LEN, ALL_ACCESS | IBV_ACCESS_MW_BIND);
	if (!self->mr)
		return 0;
	if (verb != DEALLOC_MW1 && verb != DEALLOC_MW2)
		return self->mr->rkey;
	self->mw = ibv_alloc_mw(self->d.pd, type2 ? IBV_MW_TYPE_2 : IBV_MW_TYPE_1);
	if (!self->mw)
		return 0;
	if (!type2)
		return bind1(self->qp, self->cq, self->mw, self->mr, self->v, LEN, WIN_RIGHTS) ?
		       0 : self->mw->rkey;
	key = next_key(self->mw->rkey);
	return bind2(self->qp, self->cq, self->mw, key, self->mr, (uintptr_t)self->v, LEN,
		     WIN_RIGHTS) ? 0 : key;
}

/* Runs verb on what expose() made: 0 or the error. */
static int run_verb(FIXTURE_DATA(dereg) *self, enum verb verb)
{
	int ret;

	switch (verb) {
	case DEREG:
		ret = ibv_dereg_mr(self->mr);
		if (!ret)
			self->mr = NULL;
		return ret;
	case REREG:
		/*
		 * One page: pinning a new translation as large as the old one takes longer than
		 * the transfer, which would end before the swap even without the wait.
		 */
		return rereg_cmd(self->d.ctx, self->mr, IBV_REREG_MR_CHANGE_TRANSLATION, self->v2,
				 PAGE, (uintptr_t)self->v2, NULL, 0, NULL, NULL);
	default:
		ret = ibv_dealloc_mw(self->mw);
		if (!ret)
			self->mw = NULL;
		return ret;
	}
}

/* The victim reuses its memory: its own pattern, last page first. */
static void reuse(FIXTURE_DATA(dereg) *self)
{
	for (size_t off = LEN; off > 0; off -= PAGE)
		memcpy(self->v + off - PAGE, self->q + off - PAGE, PAGE);
}

/*
 * The race for one verb and one operation: expose the memory, start the attacker's transfer,
 * run the verb once its first bytes have moved and before its last have, then reuse the
 * memory. Retried (up to ATTEMPTS) when the transfer was over before the verb ran.
 */
static void race(struct __test_metadata *_metadata, FIXTURE_DATA(dereg) *self,
		 enum verb verb, int op)
{
	volatile char *moved = op == IBV_WR_RDMA_WRITE ? self->v : self->a;
	char *last = (char *)moved + LEN - PAGE;
	int in_flight = 0, st = -1;
	uint32_t key = 0;

	for (int attempt = 0; attempt < ATTEMPTS && !in_flight; attempt++) {
		struct cmd c = { .op = op, .len = LEN };
		struct pollfd done = { .fd = self->rep, .events = POLLIN };
		long end = now_ms() + XFER_MS;

		memset(self->v, 0, LEN);
		memset(self->a, 0, LEN);
		/* The data the transfer moves: the attacker's for a WRITE, the victim's for a READ. */
		memcpy(op == IBV_WR_RDMA_WRITE ? self->a : self->v, self->p, LEN);
		ASSERT_NE(0, key = expose(self, verb));
		c.raddr = (uintptr_t)self->v;
		c.rkey = key;
		ASSERT_EQ(0, wr(self->cmd, &c, sizeof(c)));
		while (!moved[0] && now_ms() < end && !poll(&done, 1, 0))
			;
		ASSERT_NE(0, moved[0]) TH_LOG("the transfer never started");
		in_flight = memcmp(last, self->p + LEN - PAGE, PAGE) != 0;
		if (!in_flight)
			TH_LOG("attempt %d: the transfer was over before the verb ran", attempt + 1);
		ASSERT_EQ(0, run_verb(self, verb));
		reuse(self);
		ASSERT_EQ(0, rd(self->rep, &st, sizeof(st), XFER_MS + 10000));
		/* It had resolved the key: it finishes, before the verb returned. */
		ASSERT_EQ(IBV_WC_SUCCESS, st);
		usleep(200000);
		if (op == IBV_WR_RDMA_WRITE) {
			ASSERT_EQ(0, memcmp(self->v, self->q, LEN))
				TH_LOG("a WRITE landed after the verb returned");
		} else {
			ASSERT_EQ(0, memcmp(self->a, self->p, LEN))
				TH_LOG("a READ returned memory written after the verb returned");
		}
	}
	ASSERT_TRUE(in_flight);
	/* The old key reaches nothing now (a rereg moved it to v2), the memory is untouched. */
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, attack(self, op, LEN, (uintptr_t)self->v, key));
	EXPECT_EQ(0, memcmp(self->v, self->q, LEN));
	/* The victim still works: a write through a new MR lands. */
	ASSERT_EQ(0, reset_pair(self));
	if (self->mw)
		ibv_dealloc_mw(self->mw);
	self->mw = NULL;
	ASSERT_NE(0, key = expose(self, DEREG));
	memcpy(self->a, self->p, PAGE);
	EXPECT_EQ(IBV_WC_SUCCESS, attack(self, IBV_WR_RDMA_WRITE, PAGE, (uintptr_t)self->v, key));
	EXPECT_EQ(0, memcmp(self->v, self->p, PAGE));
}

FIXTURE_VARIANT(dereg) {
	enum verb verb;
	int op;
};

FIXTURE_VARIANT_ADD(dereg, dereg_mr_during_a_write) {
	.verb = DEREG, .op = IBV_WR_RDMA_WRITE,
};

FIXTURE_VARIANT_ADD(dereg, dereg_mr_during_a_read) {
	.verb = DEREG, .op = IBV_WR_RDMA_READ,
};

FIXTURE_VARIANT_ADD(dereg, rereg_mr_during_a_write_to_the_old_translation) {
	.verb = REREG, .op = IBV_WR_RDMA_WRITE,
};

FIXTURE_VARIANT_ADD(dereg, rereg_mr_during_a_read_from_the_old_translation) {
	.verb = REREG, .op = IBV_WR_RDMA_READ,
};

FIXTURE_VARIANT_ADD(dereg, dealloc_mw_during_a_write_through_a_type1_window) {
	.verb = DEALLOC_MW1, .op = IBV_WR_RDMA_WRITE,
};

FIXTURE_VARIANT_ADD(dereg, dealloc_mw_during_a_read_through_a_type2_window) {
	.verb = DEALLOC_MW2, .op = IBV_WR_RDMA_READ,
};

TEST_F_TIMEOUT(dereg, returns_after_the_transfer_under_way, 600)
{
	race(_metadata, self, variant->verb, variant->op);
}

TEST_HARNESS_MAIN
