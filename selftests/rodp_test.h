/* SPDX-License-Identifier: GPL-2.0 */
/* Shared helpers for rodp's kselftests: shell commands, device lookup, module state. */
#ifndef RODP_TEST_H
#define RODP_TEST_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <grp.h>
#include <ifaddrs.h>
#include <stdbool.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>
#include <infiniband/verbs.h>

/* Runs a shell command; returns its exit status and, in out (if given), its stdout+stderr. */
static inline int sh(char *out, size_t outlen, const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;
	FILE *p;
	size_t n = 0;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	strncat(cmd, " 2>&1", sizeof(cmd) - strlen(cmd) - 1);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	if (out && outlen) {
		n = fread(out, 1, outlen - 1, p);
		out[n] = 0;
	} else {
		char buf[256];

		while (fread(buf, 1, sizeof(buf), p) > 0)
			;
	}
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/*
 * The security tests' attacker: from here on, this process is uid/gid 65534 (nobody) with no
 * supplementary groups and no capabilities. Call it in a forked child, before opening the
 * device; returns 0 or -1.
 */
static inline int become_nobody(void)
{
	if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
		return -1;
	return getuid() == 65534 && geteuid() == 65534 ? 0 : -1;
}

/* Opens the verbs device called name, or returns NULL. */
static inline struct ibv_context *open_dev(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;

	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	return ctx;
}

static inline int dev_listed(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	int found = 0;

	for (int i = 0; list && list[i]; i++)
		found |= !strcmp(ibv_get_device_name(list[i]), name);
	ibv_free_device_list(list);
	return found;
}

/* The number in a one-number file (sysfs, procfs), or -1. */
static inline long read_long(const char *path)
{
	long v = -1;
	FILE *f = fopen(path, "r");

	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

/* The first word of a small file (sysfs, procfs) in buf, or "" (returns false). */
static inline bool read_word(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	char fmt[16];
	bool ok = false;

	buf[0] = 0;
	snprintf(fmt, sizeof(fmt), "%%%zus", len - 1);
	if (f) {
		ok = fscanf(f, fmt, buf) == 1;
		fclose(f);
	}
	return ok;
}

/* Whether the veth ends hold the addresses 10.0.0.1 (veth0) and 10.0.0.2 (veth1). */
static inline bool netdev_addrs_ready(void)
{
	struct ifaddrs *ifa, *i;
	int found = 0;

	if (getifaddrs(&ifa))
		return false;
	for (i = ifa; i; i = i->ifa_next) {
		struct sockaddr_in *sin = (struct sockaddr_in *)i->ifa_addr;

		if (!sin || sin->sin_family != AF_INET)
			continue;
		if (!strcmp(i->ifa_name, "veth0") && sin->sin_addr.s_addr == htonl(0x0a000001))
			found |= 1;
		if (!strcmp(i->ifa_name, "veth1") && sin->sin_addr.s_addr == htonl(0x0a000002))
			found |= 2;
	}
	freeifaddrs(ifa);
	return found == 3;
}

/*
 * Whether ensure_netdevs' setup holds, read from sysfs and procfs without starting a program:
 * nearly every test calls it, and under TCG its shell (a dozen programs) took 3 to 4 s.
 * Both ends up, their addresses, the four sysctls, and the permanent neighbour entries
 * (ATF_PERM in /proc/net/arp) with the other end's current MAC.
 */
static inline bool netdevs_ready(void)
{
	static const char *const confs[] = { "all", "default", "veth0", "veth1" };
	char path[96], mac[2][32], line[256], ip[64], hw[32], dev[32];
	unsigned int flags, seen = 0;
	size_t c;
	FILE *f;

	for (c = 0; c < 2; c++) {
		snprintf(path, sizeof(path), "/sys/class/net/veth%zu/flags", c);
		if (!read_word(path, line, sizeof(line)) || !(strtoul(line, NULL, 16) & 1))
			return false; /* missing or not IFF_UP */
		snprintf(path, sizeof(path), "/sys/class/net/veth%zu/address", c);
		if (!read_word(path, mac[c], sizeof(mac[c])))
			return false;
	}
	for (c = 0; c < sizeof(confs) / sizeof(confs[0]); c++) {
		snprintf(path, sizeof(path), "/proc/sys/net/ipv4/conf/%s/accept_local", confs[c]);
		if (read_long(path) != 1)
			return false;
		snprintf(path, sizeof(path), "/proc/sys/net/ipv4/conf/%s/rp_filter", confs[c]);
		if (read_long(path) != 0)
			return false;
	}
	if (!netdev_addrs_ready())
		return false;
	f = fopen("/proc/net/arp", "r");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%63s %*s %x %31s %*s %31s", ip, &flags, hw, dev) == 4 &&
		    (flags & 0x4)) {
			if (!strcmp(ip, "10.0.0.1") && !strcmp(dev, "veth1") && !strcmp(hw, mac[0]))
				seen |= 1;
			if (!strcmp(ip, "10.0.0.2") && !strcmp(dev, "veth0") && !strcmp(hw, mac[1]))
				seen |= 2;
		}
	fclose(f);
	return seen == 3;
}

/* The veth pair the guest script creates; tests make sure it exists (set up again if not). */
static inline void ensure_netdevs(void)
{
	if (netdevs_ready())
		return;
	sh(NULL, 0, "ip link show veth0 || ip link add veth0 type veth peer name veth1;"
		    "ip addr add 10.0.0.1/24 dev veth0 2>/dev/null;"
		    "ip addr add 10.0.0.2/24 dev veth1 2>/dev/null;"
		    "ip link set veth0 up; ip link set veth1 up;"
		    "for c in all default veth0 veth1; do"
		    " sysctl -qw net.ipv4.conf.$c.accept_local=1 net.ipv4.conf.$c.rp_filter=0; done;"
		    /* guest/lib.sh's local_arp says why */
		    "ip neigh replace 10.0.0.1 dev veth1 nud permanent"
		    " lladdr $(cat /sys/class/net/veth0/address);"
		    "ip neigh replace 10.0.0.2 dev veth0 nud permanent"
		    " lladdr $(cat /sys/class/net/veth1/address)");
}

/*
 * Whether an RDMA device of this name is registered, from sysfs: cheap enough for every
 * link_add. Tests ask dev_listed() instead, which sees what an application sees (libibverbs'
 * device list).
 */
static inline bool ib_dev_exists(const char *dev)
{
	char path[128];

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s", dev);
	return !access(path, F_OK);
}

/*
 * RDMA netlink (what `rdma link` speaks), for the fixtures' device creation and deletion: under
 * TCG the rdma tool took about 0.4 s to start, twice in nearly every test. Tests of the tool
 * itself still run it.
 */
struct rdma_nl_dev {
	const char *name;
	int index;
};

/* A dump's message: the index of the device whose name is wanted, if this is it. */
static inline void rdma_nl_dev_index(struct nlmsghdr *h, struct rdma_nl_dev *d)
{
	struct nlattr *a = (struct nlattr *)((char *)NLMSG_DATA(h));
	int left = h->nlmsg_len - NLMSG_HDRLEN, index = -1;
	bool match = false;

	while (left >= (int)sizeof(*a) && a->nla_len >= sizeof(*a) && a->nla_len <= left) {
		void *v = (char *)a + NLA_HDRLEN;
		int vlen = a->nla_len - NLA_HDRLEN;

		if (a->nla_type == RDMA_NLDEV_ATTR_DEV_INDEX && vlen == 4)
			memcpy(&index, v, 4);
		if (a->nla_type == RDMA_NLDEV_ATTR_DEV_NAME)
			match = strnlen(v, vlen) == strlen(d->name) && !strncmp(v, d->name, vlen);
		left -= NLA_ALIGN(a->nla_len);
		a = (struct nlattr *)((char *)a + NLA_ALIGN(a->nla_len));
	}
	if (match)
		d->index = index;
}

/* Appends a netlink attribute (len bytes of v) to the request in req. */
static inline void rdma_nl_put(struct nlmsghdr *req, int type, const void *v, int len)
{
	struct nlattr *a = (struct nlattr *)((char *)req + NLMSG_ALIGN(req->nlmsg_len));

	a->nla_type = type;
	a->nla_len = NLA_HDRLEN + len;
	memcpy((char *)a + NLA_HDRLEN, v, len);
	req->nlmsg_len = NLMSG_ALIGN(req->nlmsg_len) + NLA_ALIGN(a->nla_len);
}

/*
 * Sends an NLDEV request (op, with the attributes put into req) and reads the answer: 0 or the
 * kernel's negative errno; a dump (d given) looks for d->name's index.
 */
static inline int rdma_nl(struct nlmsghdr *req, int op, struct rdma_nl_dev *d)
{
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	char buf[32768]; /* a dump reads at most 32 KiB at a time; on the stack for threads */
	int fd, ret = -EIO;
	ssize_t n;

	req->nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op);
	req->nlmsg_flags = NLM_F_REQUEST | (d ? NLM_F_DUMP : NLM_F_ACK);
	req->nlmsg_seq = 1;
	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA);
	if (fd < 0)
		return -errno;
	if (sendto(fd, req, req->nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
		ret = -errno;
		goto out;
	}
	while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
		struct nlmsghdr *h;
		int left = n;

		for (h = (struct nlmsghdr *)buf; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
			if (h->nlmsg_type == NLMSG_ERROR) {
				ret = ((struct nlmsgerr *)NLMSG_DATA(h))->error;
				goto out;
			}
			if (h->nlmsg_type == NLMSG_DONE) {
				ret = 0;
				goto out;
			}
			if (d)
				rdma_nl_dev_index(h, d);
		}
	}
out:
	close(fd);
	return ret;
}

/* A netlink request with room for a few attributes. */
struct rdma_nl_req {
	struct nlmsghdr h;
	char attrs[256];
};

/* Deletes the RDMA device dev (rodp's or rxe's), as `rdma link delete` does: 0 or -errno. */
static inline int link_delete(const char *dev)
{
	struct rdma_nl_req req = { .h.nlmsg_len = NLMSG_HDRLEN };
	struct rdma_nl_dev d = { .name = dev, .index = -1 };
	int ret = rdma_nl(&req.h, RDMA_NLDEV_CMD_GET, &d);

	if (ret)
		return ret;
	if (d.index < 0)
		return -ENODEV;
	req.h.nlmsg_len = NLMSG_HDRLEN;
	rdma_nl_put(&req.h, RDMA_NLDEV_ATTR_DEV_INDEX, &d.index, 4);
	return rdma_nl(&req.h, RDMA_NLDEV_CMD_DELLINK, NULL);
}

/* Loads rodp and creates dev on ndev (deleting an earlier one of that name): 0 or -errno. */
static inline int link_add(const char *dev, const char *ndev)
{
	struct rdma_nl_req req = { .h.nlmsg_len = NLMSG_HDRLEN };

	if (strlen(dev) >= 64 || strlen(ndev) >= 16)
		return -ENAMETOOLONG; /* IB_DEVICE_NAME_MAX, IFNAMSIZ: req has room for these */
	ensure_netdevs();
	if (ib_dev_exists(dev))
		link_delete(dev);
	rdma_nl_put(&req.h, RDMA_NLDEV_ATTR_DEV_NAME, dev, strlen(dev) + 1);
	rdma_nl_put(&req.h, RDMA_NLDEV_ATTR_LINK_TYPE, "rodp", 5);
	rdma_nl_put(&req.h, RDMA_NLDEV_ATTR_NDEV_NAME, ndev, strlen(ndev) + 1);
	return rdma_nl(&req.h, RDMA_NLDEV_CMD_NEWLINK, NULL);
}

static inline long module_refcnt(const char *mod)
{
	char path[128];

	snprintf(path, sizeof(path), "/sys/module/%s/refcnt", mod);
	return read_long(path);
}

/* Monotonic time in milliseconds. */
static inline long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Active objects in all kmalloc caches: a leak of verbs objects shows up here. Shrinking the
 * caches first empties KASAN's quarantine, which otherwise keeps freed objects counted.
 */
static inline long kmalloc_objects(void)
{
	char line[512], name[64];
	long total = 0, active;
	FILE *f = fopen("/proc/slabinfo", "r");

	if (!f)
		return -1;
	sh(NULL, 0, "sync; echo 3 > /proc/sys/vm/drop_caches;"
		    "for s in /sys/kernel/slab/kmalloc-*/shrink; do echo 1 > $s; done");
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%63s %ld", name, &active) == 2 && !strncmp(name, "kmalloc-", 8))
			total += active;
	fclose(f);
	return total;
}

/*
 * kmalloc objects after a burst of frees, given a baseline and the growth a test allows: uverbs
 * frees objects after an RCU grace period, so wait (up to 20 s under TCG) while the count is
 * `slack` or more above the baseline. Waiting on once the count is within the slack could not
 * change the caller's verdict (its check is "below baseline + slack"). Says on stderr (a TAP
 * comment) where the count ended and how long it took.
 */
static inline long kmalloc_settled(long baseline, long slack)
{
	long t0 = now_ms(), now = kmalloc_objects();

	for (int i = 0; i < 20 && now - baseline >= slack; i++) {
		sleep(1);
		now = kmalloc_objects();
	}
	fprintf(stderr, "# kmalloc objects %+ld against the baseline (slack %ld) after %ld ms\n",
		now - baseline, slack, now_ms() - t0);
	return now;
}

#endif
