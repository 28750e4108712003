// SPDX-License-Identifier: GPL-2.0
/*
 * rodp verbs objects: CQs (resize, overflow, notification), SRQs (limit event, sharing, resize),
 * UD with address handles and Q_Keys, and the creation rules for QPs and MRs.
 */
#include "rodp_verbs.h"
#include "rodp_harness.h"

FIXTURE(obj) {
	struct dev d;
	char *buf;
	struct ibv_mr *mr;
};

FIXTURE_SETUP(obj)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, dev_open(&self->d, "rodp0"));
	self->buf = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			 -1, 0);
	ASSERT_NE(MAP_FAILED, self->buf);
	self->mr = ibv_reg_mr(self->d.pd, self->buf, 1 << 20, ALL_ACCESS);
	ASSERT_NE(NULL, self->mr);
}

FIXTURE_TEARDOWN(obj)
{
	if (self->mr)
		ibv_dereg_mr(self->mr);
	dev_close(&self->d);
	link_delete("rodp0");
}

TEST_F(obj, cq_depth_limits)
{
	struct ibv_cq *cq;

	EXPECT_EQ(NULL, ibv_create_cq(self->d.ctx, 0, NULL, NULL, 0));
	EXPECT_EQ(NULL, ibv_create_cq(self->d.ctx, 32768, NULL, NULL, 0));
	cq = ibv_create_cq(self->d.ctx, 32767, NULL, NULL, 0);
	ASSERT_NE(NULL, cq);
	EXPECT_LE(32767, cq->cqe);
	EXPECT_EQ(EINVAL, ibv_resize_cq(cq, 40000));
	EXPECT_EQ(0, ibv_destroy_cq(cq));
}

/* Sends n signaled zero-length RDMA writes from a loopback RC QP to itself. */
static int self_writes(struct dev *d, struct ibv_qp *qp, int n)
{
	for (int i = 0; i < n; i++)
		if (post_send(qp, IBV_WR_RDMA_WRITE, NULL, 0, 0, 0, 0, 0, 1000 + i))
			return -1;
	return 0;
}

static struct ibv_qp *loopback_qp(struct __test_metadata *_metadata, struct dev *d,
				  struct ibv_cq *cq)
{
	struct ibv_qp *qp = make_qp(d, cq, cq, IBV_QPT_RC, NULL);

	if (!qp)
		return NULL;
	if (rc_connect(qp, d, qp->qp_num, &d->gid, &rc_default)) {
		ibv_destroy_qp(qp);
		return NULL;
	}
	return qp;
}

TEST_F(obj, cq_resize_keeps_completions)
{
	struct ibv_cq *cq = ibv_create_cq(self->d.ctx, 8, NULL, NULL, 0);
	struct ibv_qp *qp;
	struct ibv_wc wc;

	ASSERT_NE(NULL, cq);
	qp = loopback_qp(_metadata, &self->d, cq);
	ASSERT_NE(NULL, qp);
	ASSERT_EQ(0, self_writes(&self->d, qp, 5));
	usleep(300 * 1000);
	/* Smaller than what is queued: refused. */
	EXPECT_EQ(EINVAL, ibv_resize_cq(cq, 3));
	ASSERT_EQ(0, ibv_resize_cq(cq, 100));
	EXPECT_LE(100, cq->cqe);
	for (int i = 0; i < 5; i++) {
		ASSERT_EQ(1, poll1(cq, &wc, 10000));
		EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
		EXPECT_EQ(1000 + i, wc.wr_id);
	}
	/* The resized ring keeps working. */
	ASSERT_EQ(0, self_writes(&self->d, qp, 20));
	for (int i = 0; i < 20; i++) {
		ASSERT_EQ(1, poll1(cq, &wc, 10000));
		EXPECT_EQ(1000 + i, wc.wr_id);
	}
	EXPECT_EQ(0, ibv_destroy_qp(qp));
	EXPECT_EQ(0, ibv_destroy_cq(cq));
}

TEST_F(obj, cq_overflow_is_an_async_event)
{
	struct ibv_cq *cq = ibv_create_cq(self->d.ctx, 1, NULL, NULL, 0);
	struct ibv_async_event ev;
	struct pollfd pfd = { .fd = self->d.ctx->async_fd, .events = POLLIN };
	struct ibv_qp *qp;

	ASSERT_NE(NULL, cq);
	qp = loopback_qp(_metadata, &self->d, cq);
	ASSERT_NE(NULL, qp);
	ASSERT_EQ(0, self_writes(&self->d, qp, cq->cqe + 2));
	ASSERT_EQ(1, poll(&pfd, 1, 10000));
	ASSERT_EQ(0, ibv_get_async_event(self->d.ctx, &ev));
	EXPECT_EQ(IBV_EVENT_CQ_ERR, ev.event_type);
	EXPECT_EQ(cq, ev.element.cq);
	ibv_ack_async_event(&ev);
	EXPECT_EQ(0, ibv_destroy_qp(qp));
	EXPECT_EQ(0, ibv_destroy_cq(cq));
}

TEST_F(obj, cq_notify_through_completion_channel)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(self->d.ctx);
	struct pollfd pfd;
	struct ibv_cq *cq, *evcq;
	struct ibv_qp *qp;
	struct ibv_wc wc;
	void *evctx;

	ASSERT_NE(NULL, ch);
	cq = ibv_create_cq(self->d.ctx, 16, (void *)0x1234, ch, 0);
	ASSERT_NE(NULL, cq);
	qp = loopback_qp(_metadata, &self->d, cq);
	ASSERT_NE(NULL, qp);
	pfd.fd = ch->fd;
	pfd.events = POLLIN;
	/* Not armed: a completion raises no event. */
	ASSERT_EQ(0, self_writes(&self->d, qp, 1));
	ASSERT_EQ(1, poll1(cq, &wc, 10000));
	EXPECT_EQ(0, poll(&pfd, 1, 300));
	/* Armed: the next completion does, once. */
	ASSERT_EQ(0, ibv_req_notify_cq(cq, 0));
	ASSERT_EQ(0, self_writes(&self->d, qp, 2));
	ASSERT_EQ(1, poll(&pfd, 1, 10000));
	ASSERT_EQ(0, ibv_get_cq_event(ch, &evcq, &evctx));
	EXPECT_EQ(cq, evcq);
	EXPECT_EQ((void *)0x1234, evctx);
	ibv_ack_cq_events(cq, 1);
	ASSERT_EQ(1, poll1(cq, &wc, 10000));
	ASSERT_EQ(1, poll1(cq, &wc, 10000));
	EXPECT_EQ(0, poll(&pfd, 1, 300));
	EXPECT_EQ(0, ibv_destroy_qp(qp));
	EXPECT_EQ(0, ibv_destroy_cq(cq));
	EXPECT_EQ(0, ibv_destroy_comp_channel(ch));
}

TEST_F(obj, cq_in_use_cannot_be_destroyed)
{
	struct ibv_cq *cq = ibv_create_cq(self->d.ctx, 16, NULL, NULL, 0);
	struct ibv_qp *qp;

	ASSERT_NE(NULL, cq);
	qp = make_qp(&self->d, cq, cq, IBV_QPT_RC, NULL);
	ASSERT_NE(NULL, qp);
	EXPECT_EQ(EBUSY, ibv_destroy_cq(cq));
	EXPECT_EQ(0, ibv_destroy_qp(qp));
	EXPECT_EQ(0, ibv_destroy_cq(cq));
}

TEST_F(obj, qp_creation_rules)
{
	struct ibv_cq *cq = ibv_create_cq(self->d.ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = 1, .max_recv_wr = 1,
					       .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp;

	ASSERT_NE(NULL, cq);
	a.cap.max_send_wr = 16385;
	EXPECT_EQ(NULL, ibv_create_qp(self->d.pd, &a));
	a.cap.max_send_wr = 1;
	a.cap.max_send_sge = 33;
	EXPECT_EQ(NULL, ibv_create_qp(self->d.pd, &a));
	a.cap.max_send_sge = 1;
	a.cap.max_inline_data = 513;
	EXPECT_EQ(NULL, ibv_create_qp(self->d.pd, &a));
	a.cap.max_inline_data = 0;
	/* Raw packet QPs are not implemented, and say so; UC QPs are. */
	a.qp_type = IBV_QPT_RAW_PACKET;
	errno = 0;
	EXPECT_EQ(NULL, ibv_create_qp(self->d.pd, &a));
	EXPECT_EQ(EOPNOTSUPP, errno);
	a.qp_type = IBV_QPT_UC;
	qp = ibv_create_qp(self->d.pd, &a);
	ASSERT_NE(NULL, qp);
	EXPECT_EQ(0, ibv_destroy_qp(qp));
	a.qp_type = IBV_QPT_RC;
	qp = ibv_create_qp(self->d.pd, &a);
	ASSERT_NE(NULL, qp);
	EXPECT_LE(1, a.cap.max_send_wr);
	EXPECT_EQ(IBV_QPS_RESET, qp_state(qp));
	EXPECT_EQ(0, ibv_destroy_qp(qp));
	EXPECT_EQ(0, ibv_destroy_cq(cq));
}

TEST_F(obj, mr_access_rules)
{
	struct ibv_mr *mr;

	/* Remote write without local write is refused by the core (IBA). */
	EXPECT_EQ(NULL, ibv_reg_mr(self->d.pd, self->buf, 4096, IBV_ACCESS_REMOTE_WRITE));
	/* Zero-based MRs are not implemented; windows may be bound to any MR that allows it. */
	EXPECT_EQ(NULL, ibv_reg_mr(self->d.pd, self->buf, 4096, IBV_ACCESS_ZERO_BASED));
	mr = ibv_reg_mr(self->d.pd, self->buf, 4096, IBV_ACCESS_MW_BIND);
	ASSERT_NE(NULL, mr);
	EXPECT_EQ(0, ibv_dereg_mr(mr));
	/* The whole address space is an implicit ODP MR (rodp_odp), never a pinned one. */
	EXPECT_EQ(NULL, ibv_reg_mr(self->d.pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE));
	/* Unmapped memory cannot be pinned. */
	EXPECT_EQ(NULL, ibv_reg_mr(self->d.pd, (void *)0x1000, 4096, IBV_ACCESS_LOCAL_WRITE));
}

TEST_F(obj, mr_on_read_only_memory)
{
	void *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr;

	ASSERT_NE(MAP_FAILED, ro);
	/* Writable registration of read-only memory fails; a read-only one works. */
	EXPECT_EQ(NULL, ibv_reg_mr(self->d.pd, ro, 4096, IBV_ACCESS_LOCAL_WRITE));
	mr = ibv_reg_mr(self->d.pd, ro, 4096, IBV_ACCESS_REMOTE_READ);
	ASSERT_NE(NULL, mr);
	EXPECT_EQ(0, ibv_dereg_mr(mr));
	munmap(ro, 4096);
}

FIXTURE(ud) {
	struct dev d;
	struct ibv_cq *cq;
	struct ibv_qp *qp[2];
	struct ibv_ah *ah;
	char *buf;
	struct ibv_mr *mr;
};

FIXTURE_SETUP(ud)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, dev_open(&self->d, "rodp0"));
	self->cq = ibv_create_cq(self->d.ctx, 64, NULL, NULL, 0);
	ASSERT_NE(NULL, self->cq);
	for (int i = 0; i < 2; i++) {
		self->qp[i] = make_qp(&self->d, self->cq, self->cq, IBV_QPT_UD, NULL);
		ASSERT_NE(NULL, self->qp[i]);
		ASSERT_EQ(0, ud_ready(self->qp[i], 0x11111111));
	}
	self->buf = malloc(65536);
	ASSERT_NE(NULL, self->buf);
	self->mr = ibv_reg_mr(self->d.pd, self->buf, 65536, IBV_ACCESS_LOCAL_WRITE);
	ASSERT_NE(NULL, self->mr);
	self->ah = make_ah(&self->d, self->d.pd, self->d.gid_index);
	ASSERT_NE(NULL, self->ah);
}

FIXTURE_TEARDOWN(ud)
{
	if (self->ah)
		ibv_destroy_ah(self->ah);
	for (int i = 0; i < 2; i++)
		if (self->qp[i])
			ibv_destroy_qp(self->qp[i]);
	if (self->mr)
		ibv_dereg_mr(self->mr);
	if (self->cq)
		ibv_destroy_cq(self->cq);
	free(self->buf);
	dev_close(&self->d);
	link_delete("rodp0");
}

static int ud_send(FIXTURE_DATA(ud) *self, uint32_t qkey, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)self->buf, len, self->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.wr.ud.ah = self->ah;
	wr.wr.ud.remote_qpn = self->qp[1]->qp_num;
	wr.wr.ud.remote_qkey = qkey;
	return ibv_post_send(self->qp[0], &wr, &bad);
}

TEST_F(ud, send_with_grh)
{
	struct ibv_wc wc[2];
	int got = 0;

	fill(self->buf, 1000, 11);
	ASSERT_EQ(0, post_recv(self->qp[1], self->buf + 4096, 2048, self->mr->lkey, 2));
	ASSERT_EQ(0, ud_send(self, 0x11111111, 1000));
	while (got < 2)
		ASSERT_EQ(1, poll1(self->cq, &wc[got++], 10000));
	for (int i = 0; i < 2; i++) {
		EXPECT_EQ(IBV_WC_SUCCESS, wc[i].status);
		if (wc[i].opcode != IBV_WC_RECV)
			continue;
		EXPECT_EQ(1040, wc[i].byte_len);
		EXPECT_TRUE(wc[i].wc_flags & IBV_WC_GRH);
		EXPECT_EQ(self->qp[0]->qp_num, wc[i].src_qp);
		EXPECT_EQ(self->qp[1]->qp_num, wc[i].qp_num);
	}
	/* RoCEv2 with IPv4 GIDs: 20 zero bytes, then the IPv4 header with the sender's address;
	 * the data follows. */
	EXPECT_EQ(0x45, (unsigned char)self->buf[4096 + 20]);
	EXPECT_EQ(0, memcmp(self->buf + 4096 + 32, self->d.gid.raw + 12, 4));
	EXPECT_EQ(0, memcmp(self->buf, self->buf + 4096 + 40, 1000));
}

/* Sends len bytes from qp[0] to QP qpn through ah. */
static int ud_send_to(FIXTURE_DATA(ud) *self, struct ibv_ah *ah, uint32_t qpn, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)self->buf, len, self->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = 0x11111111;
	return ibv_post_send(self->qp[0], &wr, &bad);
}

/*
 * How many times the netdevs of this namespace have joined the IP multicast group of the
 * multicast GID g (the Users column; 0 when not a member): /proc/net/igmp lists IPv4 groups as
 * the address's 32 bits in host order, then the users; /proc/net/igmp6 IPv6 groups as 32 hex
 * digits, then the users.
 */
static int ip_member(const union ibv_gid *g)
{
	int v4 = !memcmp(g->raw, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12), users = 0;
	FILE *f = fopen(v4 ? "/proc/net/igmp" : "/proc/net/igmp6", "r");
	char want[33], line[256], *at;
	uint32_t a;

	if (!f)
		return -1;
	if (v4) {
		memcpy(&a, g->raw + 12, 4);
		snprintf(want, sizeof(want), "%08X", a);
	} else {
		for (int i = 0; i < 16; i++)
			snprintf(want + 2 * i, 3, "%02x", g->raw[i]);
	}
	while (fgets(line, sizeof(line), f))
		if ((at = strstr(line, want)))
			users += atoi(at + strlen(want));
	fclose(f);
	return users;
}

TEST_F(ud, multicast_reaches_attached_qps)
{
	/* ::ffff:224.0.1.1, the group rdma_cm would join for 224.0.1.1 on RoCEv2. */
	union ibv_gid mgid = { .raw = { [10] = 0xff, [11] = 0xff, 224, 0, 1, 1 } };
	struct ibv_ah_attr a = { .is_global = 1, .port_num = 1 };
	struct ibv_qp *rc = make_qp(&self->d, self->cq, self->cq, IBV_QPT_RC, NULL);
	struct ibv_ah *mah;
	struct ibv_wc wc;
	int recvs = 0;

	/* Only UD QPs join, only multicast GIDs are groups, detaching twice fails. */
	ASSERT_NE(NULL, rc);
	EXPECT_NE(0, ibv_attach_mcast(rc, &mgid, 0));
	EXPECT_NE(0, ibv_attach_mcast(self->qp[1], &self->d.gid, 0));
	ibv_destroy_qp(rc);
	EXPECT_EQ(0, ip_member(&mgid));
	ASSERT_EQ(0, ibv_attach_mcast(self->qp[1], &mgid, 0));
	ASSERT_EQ(0, ibv_attach_mcast(self->qp[1], &mgid, 0));
	/* The netdev joined the IP group (for members on other hosts), once. */
	EXPECT_EQ(1, ip_member(&mgid));
	a.grh.dgid = mgid;
	a.grh.sgid_index = self->d.gid_index;
	a.grh.hop_limit = 1;
	mah = ibv_create_ah(self->d.pd, &a);
	ASSERT_NE(NULL, mah);
	fill(self->buf, 500, 21);
	ASSERT_EQ(0, post_recv(self->qp[1], self->buf + 4096, 2048, self->mr->lkey, 2));
	ASSERT_EQ(0, ud_send_to(self, mah, 0xffffff, 500));
	for (int i = 0; i < 2; i++) {
		ASSERT_EQ(1, poll1(self->cq, &wc, 10000));
		EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
		if (wc.opcode == IBV_WC_RECV) {
			recvs++;
			EXPECT_EQ(540, wc.byte_len);
			EXPECT_EQ(self->qp[1]->qp_num, wc.qp_num);
		}
	}
	EXPECT_EQ(1, recvs);
	/* Once: not again from the copy the send put on the wire (IP loops it back). */
	EXPECT_EQ(0, poll1(self->cq, &wc, 500));
	EXPECT_EQ(0, memcmp(self->buf, self->buf + 4096 + 40, 500));
	/* The group's address in the GRH's IPv4 header. */
	EXPECT_EQ(0, memcmp(self->buf + 4096 + 36, mgid.raw + 12, 4));
	/* Detached: the datagram reaches nobody, the send still completes. */
	EXPECT_EQ(0, ibv_detach_mcast(self->qp[1], &mgid, 0));
	EXPECT_NE(0, ibv_detach_mcast(self->qp[1], &mgid, 0));
	EXPECT_EQ(0, ip_member(&mgid));
	ASSERT_EQ(0, post_recv(self->qp[1], self->buf + 4096, 2048, self->mr->lkey, 3));
	ASSERT_EQ(0, ud_send_to(self, mah, 0xffffff, 500));
	ASSERT_EQ(1, poll1(self->cq, &wc, 10000));
	EXPECT_EQ(IBV_WC_SEND, wc.opcode);
	EXPECT_EQ(0, poll1(self->cq, &wc, 300));
	ibv_destroy_ah(mah);
}

/*
 * The netdev's IP membership follows the group: joined with the first attached QP (an IPv6
 * group here), kept while one is attached, left with the last; a process that exits attached
 * leaves it too (ib_core detaches for it).
 */
TEST_F(ud, ip_membership_follows_the_group)
{
	union ibv_gid g6 = { .raw = { 0xff, 0x0e, [13] = 1, [15] = 2 } };
	union ibv_gid g4 = { .raw = { [10] = 0xff, [11] = 0xff, 239, 255, 18, 3 } };
	pid_t pid;
	int st;

	ASSERT_EQ(0, ip_member(&g6));
	ASSERT_EQ(0, ibv_attach_mcast(self->qp[0], &g6, 0));
	ASSERT_EQ(0, ibv_attach_mcast(self->qp[1], &g6, 0));
	EXPECT_EQ(1, ip_member(&g6));
	EXPECT_EQ(0, ibv_detach_mcast(self->qp[0], &g6, 0));
	EXPECT_EQ(1, ip_member(&g6));
	EXPECT_EQ(0, ibv_detach_mcast(self->qp[1], &g6, 0));
	EXPECT_EQ(0, ip_member(&g6));

	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		struct ibv_qp *qp;
		struct ibv_cq *cq;
		struct dev d;

		if (dev_open(&d, "rodp0"))
			_exit(1);
		cq = ibv_create_cq(d.ctx, 4, NULL, NULL, 0);
		qp = cq ? make_qp(&d, cq, cq, IBV_QPT_UD, NULL) : NULL;
		_exit(!qp || ibv_attach_mcast(qp, &g4, 0) || ip_member(&g4) != 1);
	}
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_TRUE(WIFEXITED(st) && !WEXITSTATUS(st));
	EXPECT_EQ(0, ip_member(&g4));
}

/*
 * rodp1 on veth1, the other end of rodp0's link, has a member of the group: a datagram rodp0
 * sends to the group reaches it once, directly; the copy that crosses the link reaches rodp1
 * too and is dropped (counted in its rcvd_dropped_pkts), since its source is a rodp device of
 * this host.
 */
TEST_F(ud, multicast_to_a_neighbour_device_arrives_once)
{
	union ibv_gid mgid = { .raw = { [10] = 0xff, [11] = 0xff, 239, 255, 18, 4 } };
	struct ibv_ah_attr a = { .is_global = 1, .port_num = 1 };
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_ah *mah;
	struct ibv_wc wc;
	struct dev d1;
	long dropped;

	ASSERT_EQ(0, link_add("rodp1", "veth1"));
	ASSERT_EQ(0, dev_open(&d1, "rodp1"));
	cq = ibv_create_cq(d1.ctx, 8, NULL, NULL, 0);
	ASSERT_NE(NULL, cq);
	qp = make_qp(&d1, cq, cq, IBV_QPT_UD, NULL);
	ASSERT_NE(NULL, qp);
	ASSERT_EQ(0, ud_ready(qp, 0x11111111));
	mr = ibv_reg_mr(d1.pd, self->buf + 8192, 8192, IBV_ACCESS_LOCAL_WRITE);
	ASSERT_NE(NULL, mr);
	ASSERT_EQ(0, ibv_attach_mcast(qp, &mgid, 0));
	EXPECT_EQ(1, ip_member(&mgid));
	for (int i = 0; i < 2; i++)
		ASSERT_EQ(0, post_recv(qp, self->buf + 8192 + 4096 * i, 4096, mr->lkey, i));
	a.grh.dgid = mgid;
	a.grh.sgid_index = self->d.gid_index;
	a.grh.hop_limit = 1;
	mah = ibv_create_ah(self->d.pd, &a);
	ASSERT_NE(NULL, mah);
	dropped = hw_counter("rodp1", "rcvd_dropped_pkts");
	ASSERT_EQ(0, ud_send_to(self, mah, 0xffffff, 300));
	ASSERT_EQ(1, poll1(self->cq, &wc, 10000));
	EXPECT_EQ(IBV_WC_SEND, wc.opcode);
	ASSERT_EQ(1, poll1(cq, &wc, 10000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(340, wc.byte_len);
	/* The wire's copy arrives within a second and is dropped, not received. */
	for (int i = 0; i < 20 && hw_counter("rodp1", "rcvd_dropped_pkts") == dropped; i++)
		usleep(50000);
	EXPECT_EQ(dropped + 1, hw_counter("rodp1", "rcvd_dropped_pkts"));
	EXPECT_EQ(0, poll1(cq, &wc, 300));
	EXPECT_EQ(0, ibv_detach_mcast(qp, &mgid, 0));
	ibv_destroy_ah(mah);
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	dev_close(&d1);
	link_delete("rodp1");
}

TEST_F(ud, wrong_qkey_is_dropped)
{
	struct ibv_wc wc;

	ASSERT_EQ(0, post_recv(self->qp[1], self->buf + 4096, 2048, self->mr->lkey, 2));
	ASSERT_EQ(0, ud_send(self, 0x22222222, 100));
	/* The send completes (datagrams are not acknowledged); nothing is received. */
	ASSERT_EQ(1, poll1(self->cq, &wc, 10000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(IBV_WC_SEND, wc.opcode);
	EXPECT_EQ(0, poll1(self->cq, &wc, 300));
}

TEST_F(ud, larger_than_mtu_is_a_length_error)
{
	struct ibv_wc wc;

	ASSERT_EQ(0, ud_send(self, 0x11111111, 8192));
	ASSERT_EQ(1, poll1(self->cq, &wc, 10000));
	EXPECT_EQ(IBV_WC_LOC_LEN_ERR, wc.status);
}

TEST_F(ud, ah_of_another_pd_is_refused)
{
	struct ibv_pd *pd2 = ibv_alloc_pd(self->d.ctx);
	struct ibv_ah *ah2;
	struct ibv_wc wc;

	ASSERT_NE(NULL, pd2);
	ah2 = make_ah(&self->d, pd2, self->d.gid_index);
	ASSERT_NE(NULL, ah2);
	ibv_destroy_ah(self->ah);
	self->ah = ah2;
	ASSERT_EQ(0, ud_send(self, 0x11111111, 100));
	ASSERT_EQ(1, poll1(self->cq, &wc, 10000));
	EXPECT_EQ(IBV_WC_LOC_QP_OP_ERR, wc.status);
	self->ah = NULL;
	ibv_destroy_ah(ah2);
	ibv_dealloc_pd(pd2);
}

TEST_F(ud, ah_with_bad_gid_index_is_refused)
{
	EXPECT_EQ(NULL, make_ah(&self->d, self->d.pd, 127));
}

FIXTURE(srq) {
	struct dev d;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	struct ibv_qp *tx, *rx[2];
	char *buf;
	struct ibv_mr *mr;
};

FIXTURE_SETUP(srq)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };

	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, dev_open(&self->d, "rodp0"));
	self->cq = ibv_create_cq(self->d.ctx, 256, NULL, NULL, 0);
	ASSERT_NE(NULL, self->cq);
	self->srq = ibv_create_srq(self->d.pd, &sa);
	ASSERT_NE(NULL, self->srq);
	self->buf = malloc(1 << 16);
	self->mr = ibv_reg_mr(self->d.pd, self->buf, 1 << 16, ALL_ACCESS);
	ASSERT_NE(NULL, self->mr);
	self->tx = make_qp(&self->d, self->cq, self->cq, IBV_QPT_UD, NULL);
	ASSERT_NE(NULL, self->tx);
	ASSERT_EQ(0, ud_ready(self->tx, 7));
	for (int i = 0; i < 2; i++) {
		self->rx[i] = make_qp(&self->d, self->cq, self->cq, IBV_QPT_UD, self->srq);
		ASSERT_NE(NULL, self->rx[i]);
		ASSERT_EQ(0, ud_ready(self->rx[i], 7));
	}
}

FIXTURE_TEARDOWN(srq)
{
	if (self->tx)
		ibv_destroy_qp(self->tx);
	for (int i = 0; i < 2; i++)
		if (self->rx[i])
			ibv_destroy_qp(self->rx[i]);
	if (self->srq)
		ibv_destroy_srq(self->srq);
	if (self->mr)
		ibv_dereg_mr(self->mr);
	if (self->cq)
		ibv_destroy_cq(self->cq);
	free(self->buf);
	dev_close(&self->d);
	link_delete("rodp0");
}

static int srq_send(FIXTURE_DATA(srq) *self, struct ibv_ah *ah, struct ibv_qp *to, int id)
{
	struct ibv_sge sge = { (uintptr_t)self->buf, 64, self->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = to->qp_num;
	wr.wr.ud.remote_qkey = 7;
	return ibv_post_send(self->tx, &wr, &bad);
}

TEST_F(srq, two_qps_share_receives_and_limit_fires)
{
	struct ibv_srq_attr attr = { .srq_limit = 3 };
	struct pollfd pfd = { .fd = self->d.ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev;
	int recvs[2] = { 0, 0 };
	struct ibv_ah *ah;
	struct ibv_wc wc;

	ah = make_ah(&self->d, self->d.pd, self->d.gid_index);
	ASSERT_NE(NULL, ah);
	for (int i = 0; i < 6; i++)
		ASSERT_EQ(0, post_srq_recv(self->srq, self->buf + 1024 * (i + 1), 1024,
					   self->mr->lkey, 100 + i));
	/* A limit above the queue size is refused; 3 arms the event. */
	attr.srq_limit = 100;
	EXPECT_EQ(EINVAL, ibv_modify_srq(self->srq, &attr, IBV_SRQ_LIMIT));
	attr.srq_limit = 3;
	ASSERT_EQ(0, ibv_modify_srq(self->srq, &attr, IBV_SRQ_LIMIT));
	for (int i = 0; i < 4; i++)
		ASSERT_EQ(0, srq_send(self, ah, self->rx[i % 2], i));
	for (int i = 0; i < 8; i++) {
		ASSERT_EQ(1, poll1(self->cq, &wc, 10000));
		EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
		if (wc.opcode == IBV_WC_RECV)
			recvs[wc.qp_num == self->rx[1]->qp_num]++;
	}
	EXPECT_EQ(2, recvs[0]);
	EXPECT_EQ(2, recvs[1]);
	/* 2 left < 3: the limit event fired, and the limit is disarmed. */
	ASSERT_EQ(1, poll(&pfd, 1, 10000));
	ASSERT_EQ(0, ibv_get_async_event(self->d.ctx, &ev));
	EXPECT_EQ(IBV_EVENT_SRQ_LIMIT_REACHED, ev.event_type);
	EXPECT_EQ(self->srq, ev.element.srq);
	ibv_ack_async_event(&ev);
	ASSERT_EQ(0, ibv_query_srq(self->srq, &attr));
	EXPECT_EQ(0, attr.srq_limit);
	EXPECT_LE(16, attr.max_wr);
	ibv_destroy_ah(ah);
}

TEST_F(srq, resize_keeps_queued_receives)
{
	struct ibv_srq_attr attr = { .max_wr = 64 };
	struct ibv_ah *ah;
	struct ibv_wc wc;
	int recv_ids = 0;

	ah = make_ah(&self->d, self->d.pd, self->d.gid_index);
	ASSERT_NE(NULL, ah);
	for (int i = 0; i < 5; i++)
		ASSERT_EQ(0, post_srq_recv(self->srq, self->buf + 1024 * (i + 1), 1024,
					   self->mr->lkey, 200 + i));
	ASSERT_EQ(0, ibv_modify_srq(self->srq, &attr, IBV_SRQ_MAX_WR));
	ASSERT_EQ(0, ibv_query_srq(self->srq, &attr));
	EXPECT_LE(64, attr.max_wr);
	for (int i = 0; i < 5; i++)
		ASSERT_EQ(0, srq_send(self, ah, self->rx[0], i));
	for (int i = 0; i < 10; i++) {
		ASSERT_EQ(1, poll1(self->cq, &wc, 10000));
		EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
		if (wc.opcode == IBV_WC_RECV)
			EXPECT_EQ(200 + recv_ids++, wc.wr_id);
	}
	EXPECT_EQ(5, recv_ids);
	/* Too small for what is queued: refused. */
	ASSERT_EQ(0, post_srq_recv(self->srq, self->buf, 64, self->mr->lkey, 1));
	ASSERT_EQ(0, post_srq_recv(self->srq, self->buf, 64, self->mr->lkey, 2));
	attr.max_wr = 1;
	EXPECT_EQ(EINVAL, ibv_modify_srq(self->srq, &attr, IBV_SRQ_MAX_WR));
	ibv_destroy_ah(ah);
}

TEST_F(srq, srq_in_use_cannot_be_destroyed)
{
	EXPECT_EQ(EBUSY, ibv_destroy_srq(self->srq));
}

TEST_HARNESS_MAIN
