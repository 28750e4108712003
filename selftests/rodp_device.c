// SPDX-License-Identifier: GPL-2.0
/*
 * rodp device tests: the device as rdma-core sees it, rdma link add/delete, and every bad
 * input of link creation answered with a clear errno.
 */
#include "rodp_test.h"
#include "rodp_harness.h"

FIXTURE(dev) {
	struct ibv_context *ctx;
};

FIXTURE_SETUP(dev)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	self->ctx = open_dev("rodp0");
	ASSERT_NE(NULL, self->ctx);
}

FIXTURE_TEARDOWN(dev)
{
	if (self->ctx)
		ibv_close_device(self->ctx);
	link_delete("rodp0");
}

TEST_F(dev, listed_with_rxe_provider)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	int found = 0;

	for (int i = 0; list && list[i]; i++) {
		if (strcmp(ibv_get_device_name(list[i]), "rodp0"))
			continue;
		found = 1;
		EXPECT_EQ(IBV_NODE_CA, list[i]->node_type);
		EXPECT_EQ(IBV_TRANSPORT_IB, list[i]->transport_type);
	}
	ibv_free_device_list(list);
	EXPECT_TRUE(found);
}

/* The modified EUI-64 of veth0's MAC (ff:fe in the middle, universal/local bit flipped). */
static int veth0_eui64(uint8_t eui[8])
{
	unsigned int m[6];
	char out[64];

	if (sh(out, sizeof(out), "cat /sys/class/net/veth0/address") ||
	    sscanf(out, "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) != 6)
		return -1;
	eui[0] = m[0] ^ 2;
	eui[1] = m[1];
	eui[2] = m[2];
	eui[3] = 0xff;
	eui[4] = 0xfe;
	eui[5] = m[3];
	eui[6] = m[4];
	eui[7] = m[5];
	return 0;
}

TEST_F(dev, query_device_is_honest)
{
	struct ibv_device_attr a;
	uint8_t eui[8];

	ASSERT_EQ(0, ibv_query_device(self->ctx, &a));
	/* The node GUID (network byte order) is the netdev MAC's EUI-64, as rxe makes it. */
	ASSERT_EQ(0, veth0_eui64(eui));
	EXPECT_EQ(0, memcmp(&a.node_guid, eui, 8));
	EXPECT_EQ(65536, a.max_pd);
	EXPECT_EQ(1, a.phys_port_cnt);
	EXPECT_EQ(1, a.max_pkeys);
	EXPECT_NE(0, a.node_guid);
	EXPECT_EQ(a.node_guid, a.sys_image_guid);
	/* The data path's limits (each enforced; see rodp_data and rodp_objects). */
	EXPECT_EQ(65536, a.max_qp);
	EXPECT_EQ(16384, a.max_qp_wr);
	EXPECT_EQ(32, a.max_sge);
	EXPECT_EQ(65536, a.max_cq);
	EXPECT_EQ(32767, a.max_cqe);
	EXPECT_EQ(8388607, a.max_mr);
	EXPECT_EQ(8388608, a.max_mw);
	EXPECT_EQ(65536, a.max_srq);
	EXPECT_EQ(32767, a.max_ah);
	EXPECT_EQ(128, a.max_qp_rd_atom);
	EXPECT_EQ(IBV_ATOMIC_HCA, a.atomic_cap);
	EXPECT_TRUE(a.device_cap_flags & IBV_DEVICE_RC_RNR_NAK_GEN);
	EXPECT_TRUE(a.device_cap_flags & IBV_DEVICE_SRQ_RESIZE);
	/* Memory windows of both types (rodp_mw); fast registration for kernel consumers
	 * (rodp_kverbs). */
	EXPECT_TRUE(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
	EXPECT_TRUE(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
	EXPECT_EQ(8192, a.max_mcast_grp);
	EXPECT_EQ(56, a.max_mcast_qp_attach);
	EXPECT_EQ(8192 * 56, a.max_total_mcast_qp_attach);
	EXPECT_TRUE(a.device_cap_flags & IBV_DEVICE_MEM_MGT_EXTENSIONS);
}

TEST_F(dev, query_port_roce)
{
	struct ibv_port_attr p;
	union ibv_gid gid;
	uint16_t pkey;

	ASSERT_EQ(0, ibv_query_port(self->ctx, 1, &p));
	EXPECT_EQ(IBV_LINK_LAYER_ETHERNET, p.link_layer);
	EXPECT_EQ(IBV_PORT_ACTIVE, p.state);
	EXPECT_EQ(128, p.gid_tbl_len);
	EXPECT_EQ(1, p.pkey_tbl_len);
	EXPECT_EQ(IBV_MTU_4096, p.max_mtu);
	EXPECT_EQ(IBV_MTU_1024, p.active_mtu); /* veth MTU 1500 */
	EXPECT_NE(0, p.port_cap_flags & IBV_PORT_CM_SUP);
	/* GID 0: the link-local address ib_core derived from veth0's MAC. */
	ASSERT_EQ(0, ibv_query_gid(self->ctx, 1, 0, &gid));
	EXPECT_EQ(0xfe, gid.raw[0]);
	EXPECT_EQ(0x80, gid.raw[1]);
	ASSERT_EQ(0, ibv_query_pkey(self->ctx, 1, 0, &pkey));
	EXPECT_EQ(0xffff, pkey);
	EXPECT_NE(0, ibv_query_pkey(self->ctx, 1, 1, &pkey));
	EXPECT_NE(0, ibv_query_port(self->ctx, 2, &p));
}

/* ib_core adds a RoCE GID for each address of the netdev, and removes it with the address. */
static int has_ipv4_gid(struct ibv_context *ctx, const uint8_t ip[4])
{
	union ibv_gid gid;

	for (int i = 0; i < 16; i++) {
		if (ibv_query_gid(ctx, 1, i, &gid))
			break;
		if (!memcmp(gid.raw, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12) && !memcmp(gid.raw + 12, ip, 4))
			return 1;
	}
	return 0;
}

TEST_F(dev, gids_follow_netdev_addresses)
{
	static const uint8_t ip[4] = { 10, 9, 8, 7 };

	ASSERT_EQ(0, sh(NULL, 0, "ip addr add 10.9.8.7/24 dev veth0"));
	/* GID updates run on ib_core's workqueue. */
	for (int i = 0; i < 50 && !has_ipv4_gid(self->ctx, ip); i++)
		usleep(100000);
	EXPECT_TRUE(has_ipv4_gid(self->ctx, ip));
	ASSERT_EQ(0, sh(NULL, 0, "ip addr del 10.9.8.7/24 dev veth0"));
	for (int i = 0; i < 50 && has_ipv4_gid(self->ctx, ip); i++)
		usleep(100000);
	EXPECT_FALSE(has_ipv4_gid(self->ctx, ip));
}

TEST_F(dev, port_follows_netdev)
{
	struct ibv_port_attr p;

	ASSERT_EQ(0, sh(NULL, 0, "ip link set veth0 down"));
	ASSERT_EQ(0, ibv_query_port(self->ctx, 1, &p));
	EXPECT_EQ(IBV_PORT_DOWN, p.state);
	ASSERT_EQ(0, sh(NULL, 0, "ip link set veth0 up"));
	ASSERT_EQ(0, ibv_query_port(self->ctx, 1, &p));
	EXPECT_EQ(IBV_PORT_ACTIVE, p.state);
}

TEST_F(dev, active_mtu_follows_netdev_mtu)
{
	/* Below what RoCE headers need, the port still reports the smallest IB MTU. */
	static const struct { int eth; enum ibv_mtu ib; } cases[] = {
		{ 9000, IBV_MTU_4096 }, { 200, IBV_MTU_256 }, { 1500, IBV_MTU_1024 },
	};
	struct ibv_port_attr p;

	for (unsigned int i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ASSERT_EQ(0, sh(NULL, 0, "ip link set veth0 mtu %d", cases[i].eth));
		ASSERT_EQ(0, ibv_query_port(self->ctx, 1, &p));
		EXPECT_EQ(cases[i].ib, p.active_mtu) TH_LOG("netdev MTU %d", cases[i].eth);
	}
}

TEST_F(dev, rdma_tool_shows_netdev)
{
	char out[4096];

	ASSERT_EQ(0, sh(out, sizeof(out), "rdma link show rodp0/1"));
	EXPECT_NE(NULL, strstr(out, "netdev veth0"));
	ASSERT_EQ(0, sh(out, sizeof(out), "rdma dev show rodp0"));
	EXPECT_NE(NULL, strstr(out, "node_type ca"));
	ASSERT_EQ(0, sh(out, sizeof(out), "ibv_devinfo -v -d rodp0"));
	EXPECT_NE(NULL, strstr(out, "PORT_ACTIVE"));
}

TEST_F(dev, pd_alloc_dealloc)
{
	struct ibv_pd *pd = ibv_alloc_pd(self->ctx);

	ASSERT_NE(NULL, pd);
	EXPECT_EQ(0, ibv_dealloc_pd(pd));
}

TEST_F(dev, mmap_unknown_offset_fails)
{
	void *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, self->ctx->cmd_fd, 0);

	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EINVAL, errno);
}

TEST_F(dev, link_delete_while_open_disassociates)
{
	struct ibv_pd *pd;

	ASSERT_EQ(0, sh(NULL, 0, "rdma link delete rodp0"));
	EXPECT_FALSE(dev_listed("rodp0"));
	pd = ibv_alloc_pd(self->ctx);
	EXPECT_EQ(NULL, pd);
	if (pd)
		ibv_dealloc_pd(pd);
}

/* rdma link add fails and prints strerror(err); no device of that name appears. */
static int add_fails_with(const char *dev, const char *ndev, int err)
{
	char out[1024];

	if (sh(out, sizeof(out), "rdma link add %s type rodp netdev %s", dev, ndev) == 0)
		return 0;
	if (!strstr(out, strerror(err))) {
		fprintf(stderr, "# expected '%s', got: %s", strerror(err), out);
		return 0;
	}
	return 1;
}

TEST(link_add_missing_netdev)
{
	EXPECT_TRUE(add_fails_with("rodp9", "nosuchnetdev", ENODEV));
	EXPECT_FALSE(dev_listed("rodp9"));
}

TEST(link_add_duplicate_name)
{
	ensure_netdevs();
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	EXPECT_TRUE(add_fails_with("rodp0", "veth1", EEXIST));
	link_delete("rodp0");
}

TEST(link_add_same_netdev_twice)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	EXPECT_TRUE(add_fails_with("rodp1", "veth0", EEXIST));
	EXPECT_FALSE(dev_listed("rodp1"));
	link_delete("rodp0");
}

TEST(link_add_name_too_long)
{
	char name[80];

	ensure_netdevs();
	memset(name, 'r', sizeof(name) - 1);
	name[sizeof(name) - 1] = 0;
	/* nldev's attribute policy refuses names over IB_DEVICE_NAME_MAX. */
	EXPECT_TRUE(add_fails_with(name, "veth0", EINVAL));
	EXPECT_FALSE(dev_listed(name));
}

TEST(link_add_on_vlan_refused)
{
	ensure_netdevs();
	ASSERT_EQ(0, sh(NULL, 0, "ip link add link veth0 name veth0.5 type vlan id 5"));
	/* A RoCE device belongs on the real netdev; its VLANs appear as GIDs. */
	EXPECT_TRUE(add_fails_with("rodp7", "veth0.5", EPERM));
	EXPECT_FALSE(dev_listed("rodp7"));
	sh(NULL, 0, "ip link delete veth0.5");
}

/*
 * Under TCG each add/delete pair takes one to two seconds; every fixture of the suite adds and
 * deletes links too, so ten cycles in a row here are enough to see a count or a name left
 * behind.
 */
FIXTURE(slow) {};
FIXTURE_SETUP(slow) { ensure_netdevs(); }
FIXTURE_TEARDOWN(slow) {}

TEST_F_TIMEOUT(slow, link_add_delete_10, 600)
{
	for (int i = 0; i < 10; i++) {
		/*
		 * Over netlink. The rdma tool itself deletes a link above and fails to add
		 * them in add_fails_with(); tools.sh and pyverbs.sh add links with it.
		 */
		ASSERT_EQ(0, link_add("rodp0", "veth0"));
		ASSERT_EQ(0, link_delete("rodp0"));
	}
	EXPECT_FALSE(dev_listed("rodp0"));
}

/*
 * The fixtures' netlink helpers refuse what they cannot do: a name their request has no room
 * for, and a device that does not exist (the kernel's answer to a DELLINK needs an index).
 */
TEST(link_helpers_refuse_bad_names)
{
	char longname[65];

	memset(longname, 'r', 64);
	longname[64] = 0;
	EXPECT_EQ(-ENAMETOOLONG, link_add(longname, "veth0"));
	EXPECT_EQ(-ENAMETOOLONG, link_add("rodp0", "a_netdev_name_too_long"));
	EXPECT_EQ(-ENODEV, link_delete("rodp_none"));
	EXPECT_FALSE(dev_listed(longname));
}

TEST(two_devices_two_netdevs)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, link_add("rodp1", "veth1"));
	EXPECT_TRUE(dev_listed("rodp0"));
	EXPECT_TRUE(dev_listed("rodp1"));
	link_delete("rodp0");
	link_delete("rodp1");
}

TEST(netdev_delete_removes_device)
{
	ensure_netdevs();
	ASSERT_EQ(0, sh(NULL, 0, "ip link add rdum0 type dummy && ip link set rdum0 up"));
	ASSERT_EQ(0, link_add("rodp5", "rdum0"));
	ASSERT_EQ(0, sh(NULL, 0, "ip link delete rdum0"));
	/* Unregistration is queued to a workqueue; give it a moment. */
	for (int i = 0; i < 50 && dev_listed("rodp5"); i++)
		usleep(100000);
	EXPECT_FALSE(dev_listed("rodp5"));
}

TEST(rxe_and_rodp_exclude_each_other)
{
	char out[1024];

	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	/* rdma_rxe would take rodp0 for its own device: its loading is refused. */
	EXPECT_NE(0, sh(out, sizeof(out), "modprobe rdma_rxe"));
	EXPECT_NE(NULL, strstr(out, strerror(EBUSY)));
	link_delete("rodp0");
	/* With rxe loaded, rodp refuses to create devices. */
	ASSERT_EQ(0, sh(NULL, 0, "modprobe rdma_rxe"));
	EXPECT_TRUE(add_fails_with("rodp0", "veth0", EBUSY));
	EXPECT_FALSE(dev_listed("rodp0"));
	EXPECT_EQ(0, sh(NULL, 0, "rmmod rdma_rxe"));
	EXPECT_EQ(0, link_add("rodp0", "veth0"));
	link_delete("rodp0");
}

TEST_HARNESS_MAIN
