// SPDX-License-Identifier: GPL-2.0
/*
 * rodp on the network: a rodp device binds the RoCEv2 port (UDP 4791, IPv4 and IPv6) of its
 * netdev's namespace, shared by the devices there and released with the last one before
 * `rdma link delete` returns (rdma_rxe can bind it afterwards); every datagram to the port
 * that arrives on the device's netdev (or a VLAN on it) counts in rcvd_pkts and, until the
 * transport exists, in rcvd_dropped_pkts; what anyone sends there is only ever counted.
 *
 * The peer is a network namespace, rodp_net, holding rnet1, the other end of rnet0 (the
 * device's netdev): datagrams from there really arrive on rnet0. Addresses: 198.18.0.1/.2,
 * fd52::1/::2, and on VLAN 7 198.19.0.1/.2.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <time.h>
#include "rodp_test.h"
#include "kselftest_harness.h"

#define ROCE_PORT 4791
#define NS "rodp_net"
#define CNT "/sys/class/infiniband/rodp0/ports/1/hw_counters/"

/* The peer namespace and the veth pair (and VLAN 7 on it), neighbours resolved statically. */
static int make_peer(void)
{
	char mac[64] = "";

	sh(NULL, 0, "ip netns del " NS);
	if (sh(NULL, 0, "ip netns add " NS) ||
	    sh(NULL, 0, "ip link add rnet0 type veth peer name rnet1 netns " NS) ||
	    sh(NULL, 0, "ip link add link rnet0 name rnet0.7 type vlan id 7") ||
	    sh(NULL, 0, "ip addr add 198.18.0.1/24 dev rnet0 && ip addr add 198.19.0.1/24 dev rnet0.7"
			" && ip -6 addr add fd52::1/64 dev rnet0 nodad"
			" && ip link set rnet0 up && ip link set rnet0.7 up") ||
	    sh(NULL, 0, "ip netns exec " NS " sh -c 'ip link set lo up && ip link set rnet1 up"
			" && ip link add link rnet1 name rnet1.7 type vlan id 7 && ip link set rnet1.7 up"
			" && ip addr add 198.18.0.2/24 dev rnet1 && ip addr add 198.19.0.2/24 dev rnet1.7"
			" && ip -6 addr add fd52::2/64 dev rnet1 nodad'") ||
	    sh(mac, sizeof(mac), "cat /sys/class/net/rnet0/address"))
		return -1;
	mac[strcspn(mac, "\n")] = 0;
	return sh(NULL, 0, "ip netns exec " NS " sh -c 'ip neigh replace 198.18.0.1 lladdr %s dev rnet1"
			   " && ip neigh replace 198.19.0.1 lladdr %s dev rnet1.7"
			   " && ip -6 neigh replace fd52::1 lladdr %s dev rnet1'", mac, mac, mac);
}

static void del_peer(void)
{
	/* rnet1 goes with the namespace, and rnet0 (and its VLAN) with it. */
	sh(NULL, 0, "ip netns del " NS "; ip link del rnet0");
}

static int fill_addr(const char *ip, struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (strchr(ip, ':')) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons(ROCE_PORT);
		*len = sizeof(*a6);
		return inet_pton(AF_INET6, ip, &a6->sin6_addr) == 1 ? 0 : -1;
	}
	a4->sin_family = AF_INET;
	a4->sin_port = htons(ROCE_PORT);
	*len = sizeof(*a4);
	return inet_pton(AF_INET, ip, &a4->sin_addr) == 1 ? 0 : -1;
}

/*
 * Sends n datagrams of len bytes (a byte pattern) to ip:4791 from the peer namespace, as
 * nobody if asked; 0 when every send succeeded.
 */
static int send_from_peer(const char *ip, int n, size_t len, int nobody)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		struct sockaddr_storage ss;
		socklen_t sl;
		char *buf = calloc(1, len + 1);
		int nsfd = open("/run/netns/" NS, O_RDONLY);
		int fd;

		if (!buf || nsfd < 0 || setns(nsfd, CLONE_NEWNET))
			_exit(101);
		if (nobody && become_nobody())
			_exit(102);
		if (fill_addr(ip, &ss, &sl))
			_exit(103);
		fd = socket(ss.ss_family, SOCK_DGRAM, 0);
		if (fd < 0)
			_exit(104);
		for (size_t i = 0; i < len; i++)
			buf[i] = (char)(i * 7 + 0x40);
		for (int i = 0; i < n; i++)
			if (sendto(fd, buf, len, 0, (struct sockaddr *)&ss, sl) != (ssize_t)len)
				_exit(105);
		_exit(0);
	}
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Waits (up to 10 s) until the counter reaches want, then a little longer; returns its value. */
static long settle(const char *name, long want)
{
	char path[256];
	long v = -1;

	snprintf(path, sizeof(path), CNT "%s", name);
	for (int i = 0; i < 1000; i++) {
		v = read_long(path);
		if (v >= want)
			break;
		usleep(10000);
	}
	usleep(200000);
	return read_long(path);
}

/* errno of binding UDP port 4791 on the wildcard address of this namespace (0 on success). */
static int bind_errno(int family)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	int one = 1, err = 0;
	int fd = socket(family, SOCK_DGRAM, 0);

	if (fd < 0)
		return errno;
	fill_addr(family == AF_INET6 ? "::" : "0.0.0.0", &ss, &sl);
	if (family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, sl))
		err = errno;
	close(fd);
	return err;
}

/* Whether /proc/net/udp (or udp6) lists a socket on port 4791. */
static int port_listed(const char *file)
{
	char out[64];

	return sh(out, sizeof(out), "grep -c ':12B7 ' /proc/net/%s", file) == 0;
}

TEST(port_free_without_device)
{
	sh(NULL, 0, "rdma link delete rodp0; rdma link delete rodp1");
	EXPECT_EQ(0, bind_errno(AF_INET));
	EXPECT_EQ(0, bind_errno(AF_INET6));
	EXPECT_FALSE(port_listed("udp"));
	EXPECT_FALSE(port_listed("udp6"));
}

FIXTURE(net) {};

FIXTURE_SETUP(net)
{
	ASSERT_EQ(0, make_peer());
	ASSERT_EQ(0, link_add("rodp0", "rnet0"));
}

FIXTURE_TEARDOWN(net)
{
	sh(NULL, 0, "rdma link delete rodp0; rdma link delete rodp1");
	del_peer();
}

TEST_F(net, port_bound_then_released_by_delete)
{
	EXPECT_EQ(EADDRINUSE, bind_errno(AF_INET));
	EXPECT_EQ(EADDRINUSE, bind_errno(AF_INET6));
	EXPECT_TRUE(port_listed("udp"));
	EXPECT_TRUE(port_listed("udp6"));
	ASSERT_EQ(0, sh(NULL, 0, "rdma link delete rodp0"));
	/* Released before the delete returned. */
	EXPECT_EQ(0, bind_errno(AF_INET));
	EXPECT_EQ(0, bind_errno(AF_INET6));
	EXPECT_FALSE(port_listed("udp"));
	EXPECT_FALSE(port_listed("udp6"));
}

TEST_F(net, devices_of_a_namespace_share_the_port)
{
	ASSERT_EQ(0, link_add("rodp1", "veth0"));
	ASSERT_EQ(0, sh(NULL, 0, "rdma link delete rodp0"));
	EXPECT_EQ(EADDRINUSE, bind_errno(AF_INET));
	ASSERT_EQ(0, sh(NULL, 0, "rdma link delete rodp1"));
	EXPECT_EQ(0, bind_errno(AF_INET));
	EXPECT_EQ(0, bind_errno(AF_INET6));
	/* And the next device binds it again. */
	ASSERT_EQ(0, link_add("rodp0", "rnet0"));
	EXPECT_EQ(EADDRINUSE, bind_errno(AF_INET));
}

TEST_F(net, datagrams_counted_exactly)
{
	long rcvd = read_long(CNT "rcvd_pkts");
	long dropped = read_long(CNT "rcvd_dropped_pkts");

	ASSERT_LE(0, rcvd);
	ASSERT_LE(0, dropped);
	ASSERT_EQ(0, send_from_peer("198.18.0.1", 40, 100, 0));
	EXPECT_EQ(rcvd + 40, settle("rcvd_pkts", rcvd + 40));
	ASSERT_EQ(0, send_from_peer("fd52::1", 30, 100, 0));
	EXPECT_EQ(rcvd + 70, settle("rcvd_pkts", rcvd + 70));
	/* Through a VLAN on the device's netdev. */
	ASSERT_EQ(0, send_from_peer("198.19.0.1", 20, 100, 0));
	EXPECT_EQ(rcvd + 90, settle("rcvd_pkts", rcvd + 90));
	EXPECT_EQ(dropped + 90, read_long(CNT "rcvd_dropped_pkts"));
}

TEST_F(net, datagrams_of_another_netdev_count_nowhere)
{
	long rcvd;

	/* rodp0 lives on veth0 now; rnet0 has no device. */
	ASSERT_EQ(0, sh(NULL, 0, "rdma link delete rodp0"));
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	rcvd = read_long(CNT "rcvd_pkts");
	ASSERT_LE(0, rcvd);
	ASSERT_EQ(0, send_from_peer("198.18.0.1", 10, 100, 0));
	usleep(500000);
	EXPECT_EQ(rcvd, read_long(CNT "rcvd_pkts"));
}

TEST_F(net, unprivileged_garbage_is_only_counted)
{
	long rcvd = read_long(CNT "rcvd_pkts");
	long dropped = read_long(CNT "rcvd_dropped_pkts");

	ASSERT_LE(0, rcvd);
	ASSERT_EQ(0, send_from_peer("198.18.0.1", 10, 0, 1));
	ASSERT_EQ(0, send_from_peer("198.18.0.1", 10, 1, 1));
	ASSERT_EQ(0, send_from_peer("198.18.0.1", 3, 65507, 1));
	ASSERT_EQ(0, send_from_peer("fd52::1", 10, 0, 1));
	ASSERT_EQ(0, send_from_peer("fd52::1", 3, 65527, 1));
	EXPECT_EQ(rcvd + 36, settle("rcvd_pkts", rcvd + 36));
	EXPECT_EQ(dropped + 36, read_long(CNT "rcvd_dropped_pkts"));
	/* The device still works. */
	EXPECT_TRUE(dev_listed("rodp0"));
}

/* rdma_rxe binds the same port: it can once the last rodp device is gone. */
FIXTURE(rxe) {};
FIXTURE_SETUP(rxe)
{
	ensure_netdevs();
	sh(NULL, 0, "rdma link delete rodp0; rdma link delete rodp1");
}
FIXTURE_TEARDOWN(rxe)
{
	sh(NULL, 0, "rdma link delete rxe0; rmmod rdma_rxe");
}

TEST_F(rxe, rxe_binds_the_port_after_rodp)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, sh(NULL, 0, "rdma link delete rodp0"));
	ASSERT_EQ(0, sh(NULL, 0, "modprobe rdma_rxe"));
	ASSERT_EQ(0, sh(NULL, 0, "rdma link add rxe0 type rxe netdev veth0"));
	EXPECT_EQ(EADDRINUSE, bind_errno(AF_INET));
	ASSERT_EQ(0, sh(NULL, 0, "rdma link delete rxe0"));
	ASSERT_EQ(0, sh(NULL, 0, "rmmod rdma_rxe"));
	/* And rodp again after rxe. */
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	EXPECT_EQ(EADDRINUSE, bind_errno(AF_INET));
	sh(NULL, 0, "rdma link delete rodp0");
}

TEST_HARNESS_MAIN
