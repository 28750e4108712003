// SPDX-License-Identifier: GPL-2.0
/*
 * rodp's kernel verbs tests: each test loads the test module rodp_kverbs.ko (selftests/kverbs,
 * installed beside this program) with that test's name against rodp0 and expects the load to
 * succeed; a failing test's reason is in the kernel log ("rodp_kverbs: TEST: ..."). Fast
 * registration (FRWR): WRITE, READ and atomics through a registration of separate pages, byte
 * for byte; SEND with invalidate and local invalidation; key rotation; the registrations the
 * rules refuse; the page list's capacity; the capabilities reported. Posting: a bad work
 * request in a chain (EINVAL, bad_wr), a full send queue (ENOMEM). ib_drain_qp with the CQs
 * polled from a workqueue, an unbound workqueue and softirq.
 */
#include <fcntl.h>
#include <sys/syscall.h>
#include "rodp_test.h"
#include "rodp_harness.h"

/* Loads rodp_kverbs.ko with dev and test, unloads it after a pass; returns 0 or the errno. */
static int kverbs(const char *dev, const char *test)
{
	char path[4096], params[256];
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 32);
	int fd, r, err;

	if (n < 0)
		return errno;
	path[n] = 0;
	strcpy(strrchr(path, '/') + 1, "rodp_kverbs.ko");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	snprintf(params, sizeof(params), "dev=%s test=%s", dev, test);
	r = syscall(SYS_finit_module, fd, params, 0);
	err = r ? errno : 0;
	close(fd);
	if (!r && syscall(SYS_delete_module, "rodp_kverbs", O_NONBLOCK))
		return errno;
	return err;
}

FIXTURE(kv) {
	int unused;
};

FIXTURE_SETUP(kv)
{
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
}

FIXTURE_TEARDOWN(kv)
{
}

#define KVERBS(name)                                                                   \
	TEST_F_TIMEOUT(kv, name, 120)                                                  \
	{                                                                              \
		int e = kverbs("rodp0", #name);                                        \
		ASSERT_EQ(0, e) TH_LOG("%s: %s (the kernel log says why)", #name,      \
				      strerror(e));                                   \
	}

KVERBS(frwr_caps)
KVERBS(frwr_rdma)
KVERBS(frwr_send_with_inv_of_its_receive_buffer)
KVERBS(frwr_local_invalidate)
KVERBS(frwr_key_rotation)
KVERBS(frwr_reg_twice)
KVERBS(frwr_map_past_capacity)
KVERBS(frwr_reg_refused)
KVERBS(post_bad_wr)
KVERBS(post_full_ring)
KVERBS(drain_workqueue)
KVERBS(drain_softirq)
KVERBS(drain_unbound_workqueue)
KVERBS(srq)
KVERBS(cq_pool)

TEST_HARNESS_MAIN
