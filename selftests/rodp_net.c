// SPDX-License-Identifier: GPL-2.0
/*
 * rodp on the network: a rodp device binds the RoCEv2 port (UDP 4791, IPv4 and IPv6) of its
 * netdev's namespace, shared by the devices there and released with the last one before
 * `rdma link delete` returns (rdma_rxe can bind it afterwards); every datagram to the port
 * that arrives on the device's netdev (or a VLAN on it) counts in rcvd_pkts and, until the
 * transport exists, in rcvd_dropped_pkts; what anyone sends there is only ever counted.
 *
 * The test kernel has no network namespaces, so datagrams from this host are made to arrive
 * on veth0 by policy routing: the local table's rule moves from priority 0 to 1000, and a rule
 * at 100 sends what this host itself sends to 198.18.0.1 / fd52::1 (on veth0) and 198.19.0.1
 * (VLAN 7 on veth0) out of veth1 / veth1.7 instead (neighbours static), so it comes back in
 * on veth0 as from another host. The teardown puts the rules back.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include "rodp_test.h"
#include "kselftest_harness.h"

#define ROCE_PORT 4791
#define CNT "/sys/class/infiniband/rodp0/ports/1/hw_counters/"

static const char *const peer_up[] = {
	"ip link add link veth0 name veth0.7 type vlan id 7",
	"ip link add link veth1 name veth1.7 type vlan id 7",
	"ip link set veth0.7 up && ip link set veth1.7 up",
	"ip addr add 198.18.0.1/32 dev veth0 && ip addr add 198.18.0.2/32 dev veth1",
	"ip addr add 198.19.0.1/32 dev veth0.7 && ip addr add 198.19.0.2/32 dev veth1.7",
	"ip -6 addr add fd52::1/128 dev veth0 nodad && ip -6 addr add fd52::2/128 dev veth1 nodad",
	"for c in veth0.7 veth1.7; do sysctl -qw net.ipv4.conf.$c.accept_local=1"
	" net.ipv4.conf.$c.rp_filter=0; done",
	"M=$(cat /sys/class/net/veth0/address) && ip neigh replace 198.18.0.1 lladdr $M dev veth1"
	" && ip neigh replace 198.19.0.1 lladdr $M dev veth1.7"
	" && ip -6 neigh replace fd52::1 lladdr $M dev veth1",
	"ip route add 198.18.0.1/32 dev veth1 src 198.18.0.2 table 4791",
	"ip route add 198.19.0.1/32 dev veth1.7 src 198.19.0.2 table 4791",
	"ip -6 route add fd52::1/128 dev veth1 src fd52::2 table 4791",
	"ip rule add pref 1000 lookup local && ip rule del pref 0 lookup local",
	"ip -6 rule add pref 1000 lookup local && ip -6 rule del pref 0 lookup local",
	"ip rule add pref 100 iif lo to 198.18.0.1 lookup 4791",
	"ip rule add pref 100 iif lo to 198.19.0.1 lookup 4791",
	"ip -6 rule add pref 100 iif lo to fd52::1 lookup 4791",
	"ip route get 198.18.0.1 | grep -q 'dev veth1 '",
	"ip route get 198.19.0.1 | grep -q 'dev veth1.7 '",
	"ip -6 route get fd52::1 | grep -q 'dev veth1 '",
};

static void del_peer(void)
{
	sh(NULL, 0, "ip rule | grep -q '^0:.*lookup local' || ip rule add pref 0 lookup local;"
		    "ip -6 rule | grep -q '^0:.*lookup local' || ip -6 rule add pref 0 lookup local;"
		    "while ip rule del pref 1000 lookup local; do :; done;"
		    "while ip -6 rule del pref 1000 lookup local; do :; done;"
		    "while ip rule del pref 100; do :; done; while ip -6 rule del pref 100; do :; done;"
		    "ip route flush table 4791; ip -6 route flush table 4791;"
		    "ip link del veth0.7; ip link del veth1.7;"
		    "ip addr del 198.18.0.1/32 dev veth0; ip addr del 198.18.0.2/32 dev veth1;"
		    "ip -6 addr del fd52::1/128 dev veth0; ip -6 addr del fd52::2/128 dev veth1;"
		    "ip neigh del 198.18.0.1 dev veth1; ip -6 neigh del fd52::1 dev veth1");
}

/* The addresses and routes above; on failure says which command failed and how. */
static int make_peer(struct __test_metadata *_metadata)
{
	char out[512];

	ensure_netdevs();
	del_peer();
	for (size_t i = 0; i < sizeof(peer_up) / sizeof(peer_up[0]); i++) {
		if (sh(out, sizeof(out), "%s", peer_up[i])) {
			TH_LOG("%s: %s", peer_up[i], out);
			return -1;
		}
	}
	return 0;
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

/* Sends n datagrams of len bytes (a byte pattern) to ip:4791, as nobody if asked; 0 when every
 * send succeeded. */
static int send_to(const char *ip, int n, size_t len, int nobody)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		struct sockaddr_storage ss;
		socklen_t sl;
		char *buf = calloc(1, len + 1);
		int fd;

		if (!buf)
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
	ASSERT_EQ(0, make_peer(_metadata));
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
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
	ASSERT_EQ(0, link_add("rodp1", "veth1"));
	ASSERT_EQ(0, sh(NULL, 0, "rdma link delete rodp0"));
	EXPECT_EQ(EADDRINUSE, bind_errno(AF_INET));
	ASSERT_EQ(0, sh(NULL, 0, "rdma link delete rodp1"));
	EXPECT_EQ(0, bind_errno(AF_INET));
	EXPECT_EQ(0, bind_errno(AF_INET6));
	/* And the next device binds it again. */
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	EXPECT_EQ(EADDRINUSE, bind_errno(AF_INET));
}

TEST_F(net, datagrams_counted_exactly)
{
	long rcvd = read_long(CNT "rcvd_pkts");
	long dropped = read_long(CNT "rcvd_dropped_pkts");

	ASSERT_LE(0, rcvd);
	ASSERT_LE(0, dropped);
	ASSERT_EQ(0, send_to("198.18.0.1", 40, 100, 0));
	EXPECT_EQ(rcvd + 40, settle("rcvd_pkts", rcvd + 40));
	ASSERT_EQ(0, send_to("fd52::1", 30, 100, 0));
	EXPECT_EQ(rcvd + 70, settle("rcvd_pkts", rcvd + 70));
	/* Through a VLAN on the device's netdev. */
	ASSERT_EQ(0, send_to("198.19.0.1", 20, 100, 0));
	EXPECT_EQ(rcvd + 90, settle("rcvd_pkts", rcvd + 90));
	EXPECT_EQ(dropped + 90, read_long(CNT "rcvd_dropped_pkts"));
}

TEST_F(net, datagrams_of_another_netdev_count_nowhere)
{
	long rcvd;

	/* rodp0 lives on veth1 now; veth0 has no device. */
	ASSERT_EQ(0, sh(NULL, 0, "rdma link delete rodp0"));
	ASSERT_EQ(0, link_add("rodp0", "veth1"));
	rcvd = read_long(CNT "rcvd_pkts");
	ASSERT_LE(0, rcvd);
	ASSERT_EQ(0, send_to("198.18.0.1", 10, 100, 0));
	usleep(500000);
	EXPECT_EQ(rcvd, read_long(CNT "rcvd_pkts"));
}

TEST_F(net, unprivileged_garbage_is_only_counted)
{
	long rcvd = read_long(CNT "rcvd_pkts");
	long dropped = read_long(CNT "rcvd_dropped_pkts");

	ASSERT_LE(0, rcvd);
	ASSERT_EQ(0, send_to("198.18.0.1", 10, 0, 1));
	ASSERT_EQ(0, send_to("198.18.0.1", 10, 1, 1));
	ASSERT_EQ(0, send_to("198.18.0.1", 3, 65507, 1));
	ASSERT_EQ(0, send_to("fd52::1", 10, 0, 1));
	ASSERT_EQ(0, send_to("fd52::1", 3, 65527, 1));
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
