// SPDX-License-Identifier: GPL-2.0
/*
 * rodp on the network: a rodp device binds the RoCEv2 port (UDP 4791, IPv4 and IPv6) of its
 * netdev's namespace, shared by the devices there and released with the last one before
 * `rdma link delete` returns (rdma_rxe can bind it afterwards); every datagram to the port
 * that arrives on the device's netdev (or a VLAN on it) counts in rcvd_pkts, and one that is
 * no RoCEv2 packet (zeros, as here) in rcvd_dropped_pkts; such datagrams are only ever counted.
 *
 * The test kernel has neither network namespaces nor policy routing, and what this host sends
 * to its own addresses arrives on lo; so datagrams that arrive on veth0 are injected as
 * Ethernet frames on veth1 through a packet socket (root only): 10.0.0.2 -> 10.0.0.1 (IPv4),
 * fe80 link-local (IPv6), and VLAN 7 tagged.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <time.h>
#include "rodp_test.h"
#include "rodp_harness.h"

#define ROCE_PORT 4791
#define CNT "/sys/class/infiniband/rodp0/ports/1/hw_counters/"

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

static int read_mac(const char *ifname, unsigned char mac[6])
{
	char path[128];
	unsigned int m[6];
	FILE *f;
	int ok;

	snprintf(path, sizeof(path), "/sys/class/net/%s/address", ifname);
	f = fopen(path, "r");
	if (!f)
		return -1;
	ok = fscanf(f, "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) == 6;
	fclose(f);
	for (int i = 0; i < 6; i++)
		mac[i] = m[i];
	return ok ? 0 : -1;
}

static unsigned short ip_csum(const unsigned char *p, int n)
{
	unsigned long s = 0;

	for (int i = 0; i < n; i += 2)
		s += (p[i] << 8) | p[i + 1];
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return htons(~s & 0xffff);
}

/*
 * Injects n frames on veth1 for veth0: UDP to port 4791 with len payload bytes, over IPv4
 * (10.0.0.2 -> 10.0.0.1), or IPv6 (veth1's link-local -> veth0's, UDP checksum 0 as RoCEv2
 * senders use), tagged with VLAN vid when nonzero; 0 when every frame was sent.
 */
static int inject(int v6, int vid, int n, size_t len)
{
	unsigned char f[2048], *p = f;
	unsigned char dmac[6], smac[6];
	struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_halen = 6 };
	int fd, ret = 0;
	size_t iplen = v6 ? 40 : 20;

	if (len > 1400 || read_mac("veth0", dmac) || read_mac("veth1", smac))
		return -1;
	memcpy(p, dmac, 6);
	memcpy(p + 6, smac, 6);
	p += 12;
	if (vid) {
		*p++ = 0x81, *p++ = 0x00, *p++ = vid >> 8, *p++ = vid & 0xff;
	}
	*p++ = v6 ? 0x86 : 0x08, *p++ = v6 ? 0xdd : 0x00;
	memset(p, 0, iplen);
	if (v6) {
		p[0] = 0x60;
		p[4] = (8 + len) >> 8, p[5] = (8 + len) & 0xff;
		p[6] = 17, p[7] = 64;
		/* fe80::/64 with the modified EUI-64 of each MAC. */
		for (int k = 0; k < 2; k++) {
			unsigned char *a = p + 8 + 16 * k, *m = k ? dmac : smac;

			a[0] = 0xfe, a[1] = 0x80;
			a[8] = m[0] ^ 2, a[9] = m[1], a[10] = m[2], a[11] = 0xff, a[12] = 0xfe;
			a[13] = m[3], a[14] = m[4], a[15] = m[5];
		}
	} else {
		unsigned short c;

		p[0] = 0x45;
		p[2] = (20 + 8 + len) >> 8, p[3] = (20 + 8 + len) & 0xff;
		p[6] = 0x40, p[8] = 64, p[9] = 17;
		p[12] = 10, p[15] = 2, p[16] = 10, p[19] = 1;
		c = ip_csum(p, 20);
		memcpy(p + 10, &c, 2);
	}
	p += iplen;
	p[0] = 0xc0, p[1] = 0x00, p[2] = ROCE_PORT >> 8, p[3] = ROCE_PORT & 0xff;
	p[4] = (8 + len) >> 8, p[5] = (8 + len) & 0xff;
	p[6] = p[7] = 0;
	p += 8;
	for (size_t i = 0; i < len; i++)
		*p++ = (unsigned char)(i * 7 + 0x40);
	fd = socket(AF_PACKET, SOCK_RAW, 0);
	if (fd < 0)
		return -1;
	sll.sll_ifindex = if_nametoindex("veth1");
	memcpy(sll.sll_addr, dmac, 6);
	for (int i = 0; i < n && !ret; i++)
		if (sendto(fd, f, p - f, 0, (struct sockaddr *)&sll, sizeof(sll)) != p - f)
			ret = -1;
	close(fd);
	return ret;
}

/* Sends n UDP datagrams of len bytes to ip:4791 as nobody; 0 when every send succeeded. */
static int send_as_nobody(const char *ip, int n, size_t len)
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

		if (!buf || become_nobody() || fill_addr(ip, &ss, &sl))
			_exit(101);
		fd = socket(ss.ss_family, SOCK_DGRAM, 0);
		if (fd < 0)
			_exit(104);
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
	link_delete("rodp0");
	link_delete("rodp1");
	EXPECT_EQ(0, bind_errno(AF_INET));
	EXPECT_EQ(0, bind_errno(AF_INET6));
	EXPECT_FALSE(port_listed("udp"));
	EXPECT_FALSE(port_listed("udp6"));
}

/*
 * 120 s each: a link added or deleted, a VLAN and its link-local address take seconds under
 * TCG with KASAN; devices_of_a_namespace_share_the_port (three links added, two deleted) ran
 * past the harness's default 30 s on a machine twice as slow as usual (2026-11-27).
 */
FIXTURE(net) {};

FIXTURE_SETUP(net)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	/* VLAN 7 on veth0, its link-local address usable at once (no DAD). */
	ASSERT_EQ(0, sh(NULL, 0, "ip link show veth0.7 || (ip link add link veth0 name veth0.7"
				 " type vlan id 7 && echo 0 > /proc/sys/net/ipv6/conf/veth0.7/accept_dad"
				 " && ip link set veth0.7 up)"));
	ASSERT_EQ(0, sh(NULL, 0, "for i in $(seq 100); do ip -6 addr show dev veth0.7 scope link"
				 " | grep -v tentative | grep -q fe80 && exit 0; sleep 0.1; done; exit 1"));
}

FIXTURE_TEARDOWN(net)
{
	link_delete("rodp0");
	link_delete("rodp1");
	sh(NULL, 0, "ip link del veth0.7");
}

TEST_F_TIMEOUT(net, port_bound_then_released_by_delete, 120)
{
	EXPECT_EQ(EADDRINUSE, bind_errno(AF_INET));
	EXPECT_EQ(EADDRINUSE, bind_errno(AF_INET6));
	EXPECT_TRUE(port_listed("udp"));
	EXPECT_TRUE(port_listed("udp6"));
	ASSERT_EQ(0, link_delete("rodp0"));
	/* Released before the delete returned. */
	EXPECT_EQ(0, bind_errno(AF_INET));
	EXPECT_EQ(0, bind_errno(AF_INET6));
	EXPECT_FALSE(port_listed("udp"));
	EXPECT_FALSE(port_listed("udp6"));
}

TEST_F_TIMEOUT(net, devices_of_a_namespace_share_the_port, 120)
{
	ASSERT_EQ(0, link_add("rodp1", "veth1"));
	ASSERT_EQ(0, link_delete("rodp0"));
	EXPECT_EQ(EADDRINUSE, bind_errno(AF_INET));
	ASSERT_EQ(0, link_delete("rodp1"));
	EXPECT_EQ(0, bind_errno(AF_INET));
	EXPECT_EQ(0, bind_errno(AF_INET6));
	/* And the next device binds it again. */
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	EXPECT_EQ(EADDRINUSE, bind_errno(AF_INET));
}

TEST_F_TIMEOUT(net, datagrams_counted_exactly, 120)
{
	long rcvd = read_long(CNT "rcvd_pkts");
	long dropped = read_long(CNT "rcvd_dropped_pkts");

	ASSERT_LE(0, rcvd);
	ASSERT_LE(0, dropped);
	ASSERT_EQ(0, inject(0, 0, 40, 100));
	EXPECT_EQ(rcvd + 40, settle("rcvd_pkts", rcvd + 40));
	ASSERT_EQ(0, inject(1, 0, 30, 100));
	EXPECT_EQ(rcvd + 70, settle("rcvd_pkts", rcvd + 70));
	/* Through a VLAN on the device's netdev (veth0.7 has no IPv4 address: IPv6 link-local). */
	ASSERT_EQ(0, inject(1, 7, 20, 100));
	EXPECT_EQ(rcvd + 90, settle("rcvd_pkts", rcvd + 90));
	/* Empty and 1-byte datagrams are packets too. */
	ASSERT_EQ(0, inject(0, 0, 10, 0));
	ASSERT_EQ(0, inject(0, 0, 10, 1));
	EXPECT_EQ(rcvd + 110, settle("rcvd_pkts", rcvd + 110));
	EXPECT_EQ(dropped + 110, read_long(CNT "rcvd_dropped_pkts"));
}

TEST_F_TIMEOUT(net, datagrams_of_another_netdev_count_nowhere, 120)
{
	long rcvd;

	/* rodp0 lives on veth1 now; veth0 has no device. */
	ASSERT_EQ(0, link_delete("rodp0"));
	ASSERT_EQ(0, link_add("rodp0", "veth1"));
	rcvd = read_long(CNT "rcvd_pkts");
	ASSERT_LE(0, rcvd);
	ASSERT_EQ(0, inject(0, 0, 10, 100));
	usleep(500000);
	EXPECT_EQ(rcvd, read_long(CNT "rcvd_pkts"));
}

/*
 * An unprivileged user can only send from this host, where datagrams to its own addresses
 * arrive on lo: no device's, so they are freed uncounted, of every size, whatever they hold.
 */
TEST_F_TIMEOUT(net, unprivileged_datagrams_are_harmless, 120)
{
	long rcvd = read_long(CNT "rcvd_pkts");

	ASSERT_LE(0, rcvd);
	ASSERT_EQ(0, send_as_nobody("10.0.0.1", 10, 0));
	ASSERT_EQ(0, send_as_nobody("10.0.0.1", 10, 1));
	ASSERT_EQ(0, send_as_nobody("10.0.0.1", 3, 65507));
	ASSERT_EQ(0, send_as_nobody("::1", 10, 0));
	ASSERT_EQ(0, send_as_nobody("::1", 3, 65527));
	usleep(500000);
	EXPECT_EQ(rcvd, read_long(CNT "rcvd_pkts"));
	EXPECT_TRUE(dev_listed("rodp0"));
}

/* rdma_rxe binds the same port: it can once the last rodp device is gone. */
FIXTURE(rxe) {};
FIXTURE_SETUP(rxe)
{
	ensure_netdevs();
	link_delete("rodp0");
	link_delete("rodp1");
}
FIXTURE_TEARDOWN(rxe)
{
	sh(NULL, 0, "rdma link delete rxe0; rmmod rdma_rxe");
}

/* Loading rdma_rxe takes tens of seconds under TCG with one vCPU (its first load in a boot). */
TEST_F_TIMEOUT(rxe, rxe_binds_the_port_after_rodp, 240)
{
	long t0 = now_ms();

	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, link_delete("rodp0"));
	TH_LOG("rodp0 added and deleted in %ld ms", now_ms() - t0);
	t0 = now_ms();
	ASSERT_EQ(0, sh(NULL, 0, "modprobe rdma_rxe"));
	TH_LOG("rdma_rxe loaded in %ld ms", now_ms() - t0);
	t0 = now_ms();
	ASSERT_EQ(0, sh(NULL, 0, "rdma link add rxe0 type rxe netdev veth0"));
	TH_LOG("rxe0 added in %ld ms", now_ms() - t0);
	EXPECT_EQ(EADDRINUSE, bind_errno(AF_INET));
	t0 = now_ms();
	ASSERT_EQ(0, link_delete("rxe0"));
	ASSERT_EQ(0, sh(NULL, 0, "rmmod rdma_rxe"));
	TH_LOG("rxe0 deleted and rdma_rxe unloaded in %ld ms", now_ms() - t0);
	/* And rodp again after rxe. */
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	EXPECT_EQ(EADDRINUSE, bind_errno(AF_INET));
	link_delete("rodp0");
}

TEST_HARNESS_MAIN
