// SPDX-License-Identifier: GPL-2.0
/*
 * rodp and rdma_cm: connections set up through the kernel's connection manager, which talks to
 * rodp's GSI QP (QP1) through ib_mad. A server process listens on veth0's address; a client
 * connects from rodp0 or rodp1, both sides exchange a checked message, and disconnect. Also:
 * a rejected request, a port nobody listens on, and deleting the link under an established
 * connection (both sides see DEVICE_REMOVAL, the deletion completes, nothing leaks).
 */
#include "rodp_verbs.h"
#include "rodp_harness.h"
#include <rdma/rdma_cma.h>
#include <netinet/in.h>

#define MSG 4096
#define TIMEOUT_MS 60000

struct end {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id, *listen;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char *buf;
};

/* The next event on the channel within the timeout, acked; its type, or -1. */
static int next_event(struct end *e, struct rdma_cm_id **id)
{
	struct pollfd p = { .fd = e->ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	long t0 = now_ms();
	int type;

	if (poll(&p, 1, TIMEOUT_MS) != 1 || rdma_get_cm_event(e->ch, &ev)) {
		printf("# no connection manager event within %d ms\n", TIMEOUT_MS);
		return -1;
	}
	type = ev->event;
	/* Slow steps (address resolution, the CM retrying an unanswered request) show here. */
	if (now_ms() - t0 > 2000)
		printf("# %s after %ld ms\n", rdma_event_str(type), now_ms() - t0);
	if (id)
		*id = ev->id;
	rdma_ack_cm_event(ev);
	return type;
}

static void addr_of(struct sockaddr_in *a, const char *ip, int port)
{
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_port = htons(port);
	inet_pton(AF_INET, ip, &a->sin_addr);
}

/* PD, CQ, QP and a registered buffer on e->id's device. */
static int make_resources(struct end *e)
{
	struct ibv_qp_init_attr qa = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.sq_sig_all = 1,
	};

	e->pd = ibv_alloc_pd(e->id->verbs);
	e->cq = e->pd ? ibv_create_cq(e->id->verbs, 8, NULL, NULL, 0) : NULL;
	e->buf = calloc(1, 2 * MSG);
	e->mr = e->cq && e->buf ? ibv_reg_mr(e->pd, e->buf, 2 * MSG, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!e->mr)
		return -1;
	qa.send_cq = qa.recv_cq = e->cq;
	return rdma_create_qp(e->id, e->pd, &qa);
}

static void release(struct end *e)
{
	if (e->id && e->id->qp)
		rdma_destroy_qp(e->id);
	if (e->mr)
		ibv_dereg_mr(e->mr);
	if (e->cq)
		ibv_destroy_cq(e->cq);
	if (e->pd)
		ibv_dealloc_pd(e->pd);
	if (e->id)
		rdma_destroy_id(e->id);
	if (e->listen)
		rdma_destroy_id(e->listen);
	if (e->ch)
		rdma_destroy_event_channel(e->ch);
	free(e->buf);
	memset(e, 0, sizeof(*e));
}

enum mode { ACCEPT, REJECT, HOLD };

/*
 * The server: listens on ip:port, writes one byte to ready, and serves one request as mode
 * says. HOLD keeps the connection until the device goes away. Returns 0 when all went right.
 */
static int server(const char *ip, int port, enum mode mode, int ready)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	struct end e = {};
	struct sockaddr_in a;
	int ret = -1, ev;

	addr_of(&a, ip, port);
	e.ch = rdma_create_event_channel();
	if (!e.ch || rdma_create_id(e.ch, &e.listen, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(e.listen, (struct sockaddr *)&a) || rdma_listen(e.listen, 4))
		goto out;
	if (write(ready, "r", 1) != 1 || next_event(&e, &e.id) != RDMA_CM_EVENT_CONNECT_REQUEST)
		goto out;
	if (mode == REJECT) {
		ret = rdma_reject(e.id, NULL, 0);
		goto out;
	}
	if (make_resources(&e) || post_recv(e.id->qp, e.buf + MSG, MSG, e.mr->lkey, 1) ||
	    rdma_accept(e.id, &cp) || next_event(&e, NULL) != RDMA_CM_EVENT_ESTABLISHED)
		goto out;
	if (mode == HOLD) {
		ev = next_event(&e, NULL);
		ret = ev == RDMA_CM_EVENT_DEVICE_REMOVAL || ev == RDMA_CM_EVENT_DISCONNECTED ? 0 : -1;
		goto out;
	}
	{
		struct ibv_wc wc;
		char expect[MSG];

		/* The receive was posted before accepting: the client may send at once. */
		if (poll1(e.cq, &wc, TIMEOUT_MS) != 1 || wc.status || wc.byte_len != MSG)
			goto out;
		fill(expect, MSG, 7);
		if (memcmp(expect, e.buf + MSG, MSG))
			goto out;
		fill(e.buf, MSG, 8);
		if (post_send(e.id->qp, IBV_WR_SEND, e.buf, MSG, e.mr->lkey, 0, 0, 0, 2) ||
		    poll1(e.cq, &wc, TIMEOUT_MS) != 1 || wc.status)
			goto out;
	}
	ret = next_event(&e, NULL) == RDMA_CM_EVENT_DISCONNECTED ? 0 : -1;
out:
	release(&e);
	return ret;
}

/* Starts the server in a child; returns its pid once it listens. */
static pid_t start_server(const char *ip, int port, enum mode mode)
{
	int p[2];
	char c;
	pid_t pid;

	if (pipe(p))
		return -1;
	pid = fork();
	if (!pid) {
		close(p[0]);
		_exit(server(ip, port, mode, p[1]) ? 1 : 0);
	}
	close(p[1]);
	if (pid < 0 || read(p[0], &c, 1) != 1) {
		close(p[0]);
		return -1;
	}
	close(p[0]);
	return pid;
}

static int server_result(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The client's side up to ESTABLISHED, from src (NULL: any) to dst:port. Returns the event
 * that ended the attempt. */
static int client_connect(struct end *e, const char *src, const char *dst, int port)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	struct sockaddr_in s, d;
	int ev;

	addr_of(&d, dst, port);
	if (src)
		addr_of(&s, src, 0);
	e->ch = rdma_create_event_channel();
	if (!e->ch || rdma_create_id(e->ch, &e->id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(e->id, src ? (struct sockaddr *)&s : NULL, (struct sockaddr *)&d,
			      TIMEOUT_MS)) {
		printf("# resolving the address: %s\n", strerror(errno));
		return -1;
	}
	ev = next_event(e, NULL);
	if (ev != RDMA_CM_EVENT_ADDR_RESOLVED)
		return ev;
	if (rdma_resolve_route(e->id, TIMEOUT_MS)) {
		printf("# resolving the route: %s\n", strerror(errno));
		return -1;
	}
	ev = next_event(e, NULL);
	if (ev != RDMA_CM_EVENT_ROUTE_RESOLVED)
		return ev;
	if (make_resources(e) || rdma_connect(e->id, &cp)) {
		printf("# connecting: %s\n", strerror(errno));
		return -1;
	}
	return next_event(e, NULL);
}

/* Waits until ib_core's GID management (asynchronous) put the netdev's IPv4 address in dev's
 * GID table, which rdma_cm needs to pick the device. */
static int wait_ipv4_gid(const char *dev)
{
	for (int i = 0; i < 100; i++) {
		if (!sh(NULL, 0, "grep -q '^0000:0000:0000:0000:0000:ffff:' "
				 "/sys/class/infiniband/%s/ports/1/gids/*", dev))
			return 0;
		usleep(50 * 1000);
	}
	return -1;
}

/*
 * Under TCG the first address resolution of a boot can take tens of seconds before any MAD is
 * sent, so each test gets three minutes and each event a minute.
 */
FIXTURE(cm) {};

FIXTURE_SETUP(cm)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, link_add("rodp1", "veth1"));
	ASSERT_EQ(0, wait_ipv4_gid("rodp0"));
	ASSERT_EQ(0, wait_ipv4_gid("rodp1"));
}

FIXTURE_TEARDOWN(cm)
{
	link_delete("rodp0");
	link_delete("rodp1");
}

static void connect_and_talk(struct __test_metadata *_metadata, const char *src,
			     const char *expect_dev, int port)
{
	struct end e = {};
	struct ibv_wc wc;
	static char expect[MSG];
	pid_t pid = start_server("10.0.0.1", port, ACCEPT);

	ASSERT_LT(0, pid);
	ASSERT_EQ(RDMA_CM_EVENT_ESTABLISHED, client_connect(&e, src, "10.0.0.1", port))
		system("cd /sys/class/infiniband_cm && grep -r . */1/cm_tx_msgs */1/cm_rx_msgs "
		       "*/1/cm_rx_duplicates */1/cm_tx_retries | grep -v ':0$' | sed 's/^/# /';"
		       "rdma statistic show | sed 's/^/# /'; rdma res show qp | sed 's/^/# /'");
	EXPECT_STREQ(expect_dev, ibv_get_device_name(e.id->verbs->device));
	/* The server checks a message built with seed 7 and answers with seed 8. */
	ASSERT_EQ(0, post_recv(e.id->qp, e.buf + MSG, MSG, e.mr->lkey, 1));
	fill(e.buf, MSG, 7);
	ASSERT_EQ(0, post_send(e.id->qp, IBV_WR_SEND, e.buf, MSG, e.mr->lkey, 0, 0, 0, 2));
	for (int i = 0; i < 2; i++) {
		ASSERT_EQ(1, poll1(e.cq, &wc, TIMEOUT_MS));
		ASSERT_EQ(IBV_WC_SUCCESS, wc.status);
	}
	fill(expect, MSG, 8);
	EXPECT_EQ(0, memcmp(expect, e.buf + MSG, MSG));
	EXPECT_EQ(0, rdma_disconnect(e.id));
	EXPECT_EQ(RDMA_CM_EVENT_DISCONNECTED, next_event(&e, NULL));
	release(&e);
	EXPECT_EQ(0, server_result(pid));
}

TEST_F_TIMEOUT(cm, connect_send_disconnect_one_device, 180)
{
	connect_and_talk(_metadata, NULL, "rodp0", 18515);
}

TEST_F_TIMEOUT(cm, connect_send_disconnect_two_devices, 180)
{
	connect_and_talk(_metadata, "10.0.0.2", "rodp1", 18516);
}

TEST_F_TIMEOUT(cm, rejected_request_reports_rejected, 180)
{
	struct end e = {};
	pid_t pid = start_server("10.0.0.1", 18517, REJECT);

	ASSERT_LT(0, pid);
	EXPECT_EQ(RDMA_CM_EVENT_REJECTED, client_connect(&e, "10.0.0.2", "10.0.0.1", 18517));
	release(&e);
	EXPECT_EQ(0, server_result(pid));
}

TEST_F_TIMEOUT(cm, nobody_listening_is_rejected_or_unreachable, 180)
{
	struct end e = {};
	int ev = client_connect(&e, "10.0.0.2", "10.0.0.1", 18518);

	EXPECT_TRUE(ev == RDMA_CM_EVENT_REJECTED || ev == RDMA_CM_EVENT_UNREACHABLE)
		TH_LOG("event %d", ev);
	release(&e);
}

TEST_F_TIMEOUT(cm, link_delete_under_a_connection, 180)
{
	struct end e = {};
	long ref = module_refcnt("rodp");
	pid_t pid = start_server("10.0.0.1", 18519, HOLD);
	int ev;

	ASSERT_LT(0, pid);
	ASSERT_EQ(RDMA_CM_EVENT_ESTABLISHED, client_connect(&e, "10.0.0.2", "10.0.0.1", 18519));
	/* The deletion waits for both sides to let go of their IDs; run it alongside. */
	ASSERT_EQ(0, sh(NULL, 0, "(rdma link delete rodp0; echo $? > /tmp/rodp_cm_del) &"));
	ev = next_event(&e, NULL);
	EXPECT_TRUE(ev == RDMA_CM_EVENT_DISCONNECTED || ev == RDMA_CM_EVENT_DEVICE_REMOVAL)
		TH_LOG("event %d", ev);
	release(&e);
	EXPECT_EQ(0, server_result(pid));
	for (int i = 0; i < 200 && dev_listed("rodp0"); i++)
		usleep(100 * 1000);
	EXPECT_FALSE(dev_listed("rodp0"));
	EXPECT_EQ(0, read_long("/tmp/rodp_cm_del"));
	link_delete("rodp1");
	/* ib_core's clients (ib_cm, rdma_cm) hold no module reference past the devices. */
	EXPECT_EQ(ref, module_refcnt("rodp"));
}

TEST_HARNESS_MAIN
