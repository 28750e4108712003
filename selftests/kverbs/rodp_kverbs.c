// SPDX-License-Identifier: GPL-2.0
/*
 * rodp_kverbs: the kernel verbs rules user space cannot reach, as a test module. Loading it
 * with dev=NAME test=TEST runs that one test against the RDMA device NAME (rodp's or any
 * other, rxe's included) and the load fails with the test's error: 0 passed, EIO a wrong
 * result (the kernel log says which), other codes a failed verb. The module stays loaded
 * after a pass; selftests/rodp_kverbs.c loads and unloads it once per test.
 *
 * Each test makes its own PD, two RC QPs connected to each other on the device's IPv4 GID,
 * a CQ each (IB_POLL_DIRECT, polled here) and a kmalloc'ed buffer reached through the PD's
 * local DMA lkey, and frees all of it.
 */
#include <linux/delay.h>
#include <linux/module.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_verbs.h>

static char *dev = "rodp0";
module_param(dev, charp, 0444);
MODULE_PARM_DESC(dev, "RDMA device to test");
static char *test = "";
module_param(test, charp, 0444);
MODULE_PARM_DESC(test, "test to run");

#define BUF 65536
#define POLL_MS 30000

#define check(cond, fmt, ...)                                                          \
	do {                                                                           \
		if (!(cond)) {                                                         \
			pr_err("rodp_kverbs: %s: %s:%d: " fmt "\n", test, __func__,    \
			       __LINE__, ##__VA_ARGS__);                               \
			ret = -EIO;                                                    \
			goto out;                                                      \
		}                                                                      \
	} while (0)

#define try(call)                                                                      \
	do {                                                                           \
		ret = (call);                                                          \
		if (ret) {                                                             \
			pr_err("rodp_kverbs: %s: %s:%d: %s: %d\n", test, __func__,     \
			       __LINE__, #call, ret);                                  \
			goto out;                                                      \
		}                                                                      \
	} while (0)

/* Three separate pages mapped as one range: 3584 bytes from offset 512 of the first, all of
 * the second, 1000 bytes of the third. */
#define PIECES 3
static const u32 piece_off[PIECES] = { 512, 0, 0 };
static const u32 piece_len[PIECES] = { 3584, 4096, 1000 };
#define RANGE (3584 + 4096 + 1000)

struct pages {
	struct page *p[PIECES];
	struct scatterlist sg[PIECES];
	int mapped;
};

struct t {
	struct ib_device *dev;
	struct ib_pd *pd;
	struct ib_cq *cq[3];	/* one per QP; [2]: a test's own, if it makes one */
	struct ib_qp *qp[2];
	union ib_gid gid;
	u32 gid_index;
	u8 *buf;	/* [0, BUF/2): QP 0's, [BUF/2, BUF): QP 1's */
	u32 max_send_wr;	/* as the device rounded it */
	struct pages pg;	/* a fast registration test's pages and MR (frwr_mr) */
	struct ib_mr *mr;
};

/* ---- the device, found through a client ---------------------------------------------- */

static struct ib_device *found;

static int client_add(struct ib_device *d)
{
	if (!strcmp(dev_name(&d->dev), dev))
		found = d;
	return 0;
}

static void client_remove(struct ib_device *d, void *data)
{
}

static struct ib_client client = {
	.name = "rodp_kverbs",
	.add = client_add,
	.remove = client_remove,
};

/* ---- setup ------------------------------------------------------------------------- */

/* The first IPv4-mapped GID of port 1 (::ffff:a.b.c.d), as the user-space tests use. */
static int find_gid(struct t *t)
{
	for (u32 i = 0; i < 16; i++) {
		union ib_gid g;

		if (rdma_query_gid(t->dev, 1, i, &g))
			continue;
		if (ipv6_addr_v4mapped((struct in6_addr *)g.raw)) {
			t->gid = g;
			t->gid_index = i;
			return 0;
		}
	}
	return -ENODEV;
}

static int to_rts(struct t *t, struct ib_qp *qp, u32 dqpn)
{
	struct ib_qp_attr a = {};
	int ret;

	a.qp_state = IB_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ |
			    IB_ACCESS_REMOTE_ATOMIC;
	ret = ib_modify_qp(qp, &a, IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT |
			   IB_QP_ACCESS_FLAGS);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTR;
	a.path_mtu = IB_MTU_1024;
	a.dest_qp_num = dqpn;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	a.ah_attr.type = RDMA_AH_ATTR_TYPE_ROCE;
	rdma_ah_set_port_num(&a.ah_attr, 1);
	rdma_ah_set_grh(&a.ah_attr, &t->gid, 0, t->gid_index, 64, 0);
	ret = ib_modify_qp(qp, &a, IB_QP_STATE | IB_QP_AV | IB_QP_PATH_MTU | IB_QP_DEST_QPN |
			   IB_QP_RQ_PSN | IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_MIN_RNR_TIMER);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	return ib_modify_qp(qp, &a, IB_QP_STATE | IB_QP_TIMEOUT | IB_QP_RETRY_CNT |
			    IB_QP_RNR_RETRY | IB_QP_SQ_PSN | IB_QP_MAX_QP_RD_ATOMIC);
}

/* QP i back to RTS after an error (through RESET): PSNs from 0 again, so its peer must be
 * reset too before they talk. */
static int reset_rts(struct t *t, int i)
{
	struct ib_qp_attr a = { .qp_state = IB_QPS_RESET };
	int ret = ib_modify_qp(t->qp[i], &a, IB_QP_STATE);

	return ret ? ret : to_rts(t, t->qp[i], t->qp[!i]->qp_num);
}

/* Both QPs back to RTS. */
static int reset_both(struct t *t)
{
	int ret = reset_rts(t, 0);

	return ret ? ret : reset_rts(t, 1);
}

static void pages_put(struct t *t, struct pages *pg);

static void teardown(struct t *t)
{
	for (int i = 0; i < 2; i++)
		if (!IS_ERR_OR_NULL(t->qp[i]))
			ib_destroy_qp(t->qp[i]);
	for (int i = 0; i < 3; i++)
		if (!IS_ERR_OR_NULL(t->cq[i]))
			ib_free_cq(t->cq[i]);
	if (t->mr)
		ib_dereg_mr(t->mr);
	if (t->dev)
		pages_put(t, &t->pg);
	if (!IS_ERR_OR_NULL(t->pd))
		ib_dealloc_pd(t->pd);
	kfree(t->buf);
}

static int setup(struct t *t, enum ib_poll_context poll)
{
	int ret;

	t->dev = found;
	t->pd = ib_alloc_pd(t->dev, 0);
	if (IS_ERR(t->pd))
		return PTR_ERR(t->pd);
	t->buf = kzalloc(BUF, GFP_KERNEL);
	if (!t->buf)
		return -ENOMEM;
	for (int i = 0; i < 2; i++) {
		struct ib_qp_init_attr init = {
			.qp_type = IB_QPT_RC,
			.sq_sig_type = IB_SIGNAL_ALL_WR,
			.cap = { .max_send_wr = 32, .max_recv_wr = 32,
				 .max_send_sge = 2, .max_recv_sge = 2 },
		};

		t->cq[i] = ib_alloc_cq(t->dev, NULL, 128, 0, poll);
		if (IS_ERR(t->cq[i]))
			return PTR_ERR(t->cq[i]);
		init.send_cq = init.recv_cq = t->cq[i];
		t->qp[i] = ib_create_qp(t->pd, &init);
		if (IS_ERR(t->qp[i]))
			return PTR_ERR(t->qp[i]);
		t->max_send_wr = init.cap.max_send_wr;
	}
	ret = find_gid(t);
	if (ret)
		return ret;
	ret = to_rts(t, t->qp[0], t->qp[1]->qp_num);
	return ret ? ret : to_rts(t, t->qp[1], t->qp[0]->qp_num);
}

/* ---- work requests ------------------------------------------------------------------- */

/* The next completion of QP i's CQ. */
static int poll_one(struct t *t, int i, struct ib_wc *wc)
{
	unsigned long end = jiffies + msecs_to_jiffies(POLL_MS);

	do {
		int n = ib_poll_cq(t->cq[i], 1, wc);

		if (n)
			return n < 0 ? n : 0;
		usleep_range(200, 400);
	} while (time_before(jiffies, end));
	pr_err("rodp_kverbs: %s: no completion on CQ %d\n", test, i);
	return -ETIMEDOUT;
}

/* Polls QP i's next completion and checks its status and opcode. */
static int expect(struct t *t, int i, enum ib_wc_status status, enum ib_wc_opcode op,
		  struct ib_wc *out)
{
	struct ib_wc wc;
	int ret = poll_one(t, i, &wc);

	if (ret)
		return ret;
	if (out)
		*out = wc;
	if (wc.status != status || (status == IB_WC_SUCCESS && wc.opcode != op)) {
		pr_err("rodp_kverbs: %s: CQ %d: status %s opcode %d, expected %s opcode %d\n",
		       test, i, ib_wc_status_msg(wc.status), wc.opcode,
		       ib_wc_status_msg(status), op);
		return -EIO;
	}
	return 0;
}

/* The buffer at off as an SGE through the local DMA lkey (the mapping of a virtual-DMA
 * device, rodp's and rxe's, needs no unmapping). */
static struct ib_sge sge(struct t *t, size_t off, u32 len)
{
	return (struct ib_sge){
		.addr = ib_dma_map_single(t->dev, t->buf + off, len, DMA_BIDIRECTIONAL),
		.length = len,
		.lkey = t->pd->local_dma_lkey,
	};
}

/* An RDMA WRITE or READ of len bytes at buffer offset off through rkey at raddr, from QP i. */
static int rdma(struct t *t, int i, enum ib_wr_opcode op, size_t off, u32 len, u64 raddr,
		u32 rkey)
{
	struct ib_sge s = sge(t, off, len);
	struct ib_rdma_wr w = {
		.wr = { .opcode = op, .sg_list = &s, .num_sge = 1,
			.send_flags = IB_SEND_SIGNALED },
		.remote_addr = raddr,
		.rkey = rkey,
	};

	return ib_post_send(t->qp[i], &w.wr, NULL);
}

/* A fast registration of mr under its current key with rights acc, posted on QP i. */
static int reg(struct t *t, int i, struct ib_mr *mr, int acc)
{
	struct ib_reg_wr w = {
		.wr = { .opcode = IB_WR_REG_MR, .send_flags = IB_SEND_SIGNALED },
		.mr = mr,
		.key = mr->rkey,
		.access = acc,
	};

	return ib_post_send(t->qp[i], &w.wr, NULL);
}

static int local_inv(struct t *t, int i, u32 key)
{
	struct ib_send_wr w = {
		.opcode = IB_WR_LOCAL_INV,
		.send_flags = IB_SEND_SIGNALED,
		.ex.invalidate_rkey = key,
	};

	return ib_post_send(t->qp[i], &w, NULL);
}

static int pages_get(struct t *t, struct pages *pg)
{
	sg_init_table(pg->sg, PIECES);
	for (int i = 0; i < PIECES; i++) {
		pg->p[i] = alloc_page(GFP_KERNEL | __GFP_ZERO);
		if (!pg->p[i])
			return -ENOMEM;
		sg_set_page(&pg->sg[i], pg->p[i], piece_len[i], piece_off[i]);
	}
	pg->mapped = ib_dma_map_sg(t->dev, pg->sg, PIECES, DMA_BIDIRECTIONAL);
	return pg->mapped == PIECES ? 0 : -ENOMEM;
}

static void pages_put(struct t *t, struct pages *pg)
{
	if (pg->mapped)
		ib_dma_unmap_sg(t->dev, pg->sg, PIECES, DMA_BIDIRECTIONAL);
	for (int i = 0; i < PIECES; i++)
		if (pg->p[i])
			__free_page(pg->p[i]);
}

/* Byte off of the mapped range. */
static u8 *range_byte(struct pages *pg, u32 off)
{
	for (int i = 0; i < PIECES; i++) {
		if (off < piece_len[i])
			return (u8 *)page_address(pg->p[i]) + piece_off[i] + off;
		off -= piece_len[i];
	}
	return NULL;
}

/* An MR of ib_alloc_mr with the pages mapped (key byte advanced), not registered yet. */
static struct ib_mr *fast_mr(struct t *t, struct pages *pg, u32 max)
{
	struct ib_mr *mr = ib_alloc_mr(t->pd, IB_MR_TYPE_MEM_REG, max);
	int n;

	if (IS_ERR(mr))
		return mr;
	n = ib_map_mr_sg(mr, pg->sg, PIECES, NULL, PAGE_SIZE);
	if (n != PIECES) {
		pr_err("rodp_kverbs: %s: ib_map_mr_sg mapped %d of %d\n", test, n, PIECES);
		ib_dereg_mr(mr);
		return ERR_PTR(n < 0 ? n : -EIO);
	}
	ib_update_fast_reg_key(mr, ib_inc_rkey(mr->rkey));
	return mr;
}

/* The test's pages and, with room for max blocks, an MR of ib_alloc_mr mapping them (fast_mr)
 * in t->mr; teardown frees both. */
static int frwr_mr(struct t *t, u32 max)
{
	int ret = pages_get(t, &t->pg);

	if (ret)
		return ret;
	t->mr = fast_mr(t, &t->pg, max);
	if (IS_ERR(t->mr)) {
		ret = PTR_ERR(t->mr);
		t->mr = NULL;
	}
	return ret;
}

/*
 * A receive into r posted on QP 0, then a SEND with invalidate of key, 16 bytes from the buffer's
 * second half, posted on QP 1.
 */
static int send_with_inv(struct t *t, struct ib_sge r, u32 key)
{
	struct ib_sge s = sge(t, BUF / 2, 16);
	struct ib_recv_wr rw = { .sg_list = &r, .num_sge = 1 };
	struct ib_send_wr sw = { .opcode = IB_WR_SEND_WITH_INV, .sg_list = &s, .num_sge = 1,
				 .send_flags = IB_SEND_SIGNALED, .ex.invalidate_rkey = key };
	int ret = ib_post_recv(t->qp[0], &rw, NULL);

	return ret ?: ib_post_send(t->qp[1], &sw, NULL);
}

/* ---- tests --------------------------------------------------------------------------- */

/*
 * WRITE, READ and FETCH_ADD through a fast registration of three separate pages, byte for
 * byte where the mapping puts them; then a SEND with invalidate ends it at the receiver, which
 * sees the key in its completion, and a WRITE through the key fails.
 */
static int frwr_rdma(struct t *t)
{
	const int acc = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
			IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC;
	struct ib_mr *mr;
	struct ib_wc wc;
	u8 *src = t->buf + BUF / 2, *dst = t->buf;
	u64 *word;
	int ret;

	try(frwr_mr(t, 8));
	mr = t->mr;
	check(mr->iova == (u64)(uintptr_t)page_address(t->pg.p[0]) + 512 && mr->length == RANGE,
	      "iova %llx length %llu", mr->iova, mr->length);
	try(reg(t, 0, mr, acc));
	try(expect(t, 0, IB_WC_SUCCESS, IB_WC_REG_MR, NULL));

	for (u32 i = 0; i < RANGE; i++)
		src[i] = (u8)(i * 7 + 3);
	/* 100 bytes in, across both page boundaries. */
	try(rdma(t, 1, IB_WR_RDMA_WRITE, BUF / 2, RANGE - 100, mr->iova + 100, mr->rkey));
	try(expect(t, 1, IB_WC_SUCCESS, IB_WC_RDMA_WRITE, NULL));
	for (u32 i = 0; i < RANGE - 100; i++)
		check(*range_byte(&t->pg, 100 + i) == src[i], "byte %u of the range", 100 + i);
	for (u32 i = 0; i < 100; i++)
		check(*range_byte(&t->pg, i) == 0, "byte %u before the write", i);
	check(*((u8 *)page_address(t->pg.p[0]) + 511) == 0, "byte before the mapping");

	memset(dst, 0, RANGE);
	try(rdma(t, 1, IB_WR_RDMA_READ, 0, RANGE - 7, mr->iova + 7, mr->rkey));
	try(expect(t, 1, IB_WC_SUCCESS, IB_WC_RDMA_READ, NULL));
	for (u32 i = 0; i < RANGE - 7; i++)
		check(dst[i] == *range_byte(&t->pg, 7 + i), "read byte %u", 7 + i);

	/* An atomic at the start of the second page (8-byte aligned). */
	word = (u64 *)page_address(t->pg.p[1]);
	*word = 40;
	{
		struct ib_sge s = sge(t, 0, 8);
		struct ib_atomic_wr w = {
			.wr = { .opcode = IB_WR_ATOMIC_FETCH_AND_ADD, .sg_list = &s,
				.num_sge = 1, .send_flags = IB_SEND_SIGNALED },
			.remote_addr = mr->iova + piece_len[0],
			.compare_add = 2,
			.rkey = mr->rkey,
		};

		try(ib_post_send(t->qp[1], &w.wr, NULL));
	}
	try(expect(t, 1, IB_WC_SUCCESS, IB_WC_FETCH_ADD, NULL));
	check(*(u64 *)dst == 40 && *word == 42, "fetch-add: got %llu, word %llu",
	      *(u64 *)dst, *word);

	/* SEND with invalidate from QP 1 to QP 0. */
	try(send_with_inv(t, sge(t, 0, 64), mr->rkey));
	try(expect(t, 1, IB_WC_SUCCESS, IB_WC_SEND, NULL));
	try(expect(t, 0, IB_WC_SUCCESS, IB_WC_RECV, &wc));
	check(wc.wc_flags & IB_WC_WITH_INVALIDATE, "no IB_WC_WITH_INVALIDATE (flags %x)",
	      wc.wc_flags);
	check(wc.ex.invalidate_rkey == mr->rkey, "invalidated %x, expected %x",
	      wc.ex.invalidate_rkey, mr->rkey);
	check(wc.byte_len == 16, "byte_len %u", wc.byte_len);
	/* Invalid now: a WRITE through the key is refused, and nothing changes. */
	try(rdma(t, 1, IB_WR_RDMA_WRITE, BUF / 2, 8, mr->iova, mr->rkey));
	try(expect(t, 1, IB_WC_REM_ACCESS_ERR, 0, NULL));
	check(*range_byte(&t->pg, 0) == 0, "a write after the invalidation landed");
	ret = 0;
out:
	return ret;
}

/*
 * A SEND with invalidate whose key names the very registration its receive buffer is in: the
 * data lands, the completion says the key was invalidated, and it comes at once (the
 * receiver's own access to the buffer has left before the invalidation waits for accesses to
 * leave; it once waited for itself, the gate's whole 10 s, in the worker every QP shares).
 */
static int frwr_send_with_inv_of_its_receive_buffer(struct t *t)
{
	const int acc = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE;
	u8 *src = t->buf + BUF / 2;
	unsigned long start;
	struct ib_mr *mr;
	struct ib_wc wc;
	int ret;

	try(frwr_mr(t, 8));
	mr = t->mr;
	try(reg(t, 0, mr, acc));
	try(expect(t, 0, IB_WC_SUCCESS, IB_WC_REG_MR, NULL));
	for (u32 i = 0; i < 16; i++)
		src[i] = (u8)(i + 1);
	start = jiffies;
	try(send_with_inv(t, (struct ib_sge){ .addr = mr->iova, .length = 64, .lkey = mr->lkey },
			  mr->rkey));
	try(expect(t, 0, IB_WC_SUCCESS, IB_WC_RECV, &wc));
	check(time_before(jiffies, start + 5 * HZ), "the receive took %u ms",
	      jiffies_to_msecs(jiffies - start));
	try(expect(t, 1, IB_WC_SUCCESS, IB_WC_SEND, NULL));
	check(wc.wc_flags & IB_WC_WITH_INVALIDATE, "no IB_WC_WITH_INVALIDATE (flags %x)",
	      wc.wc_flags);
	check(wc.ex.invalidate_rkey == mr->rkey, "invalidated %x, expected %x",
	      wc.ex.invalidate_rkey, mr->rkey);
	for (u32 i = 0; i < 16; i++)
		check(*range_byte(&t->pg, i) == i + 1, "received byte %u", i);
	/* Invalid now: a WRITE through the key is refused. */
	try(rdma(t, 1, IB_WR_RDMA_WRITE, BUF / 2, 8, mr->iova, mr->rkey));
	try(expect(t, 1, IB_WC_REM_ACCESS_ERR, 0, NULL));
	ret = 0;
out:
	return ret;
}

/*
 * A local invalidate ends a registration: a WRITE through its key fails and changes nothing.
 * Invalidating it again succeeds; a stale key byte fails (IB_WC_LOC_QP_OP_ERR, rxe's status).
 */
static int frwr_local_invalidate(struct t *t)
{
	const int acc = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE;
	struct ib_mr *mr;
	int ret;

	try(frwr_mr(t, 4));
	mr = t->mr;
	try(reg(t, 0, mr, acc));
	try(expect(t, 0, IB_WC_SUCCESS, IB_WC_REG_MR, NULL));
	memset(t->buf + BUF / 2, 0x5a, 16);
	try(rdma(t, 1, IB_WR_RDMA_WRITE, BUF / 2, 16, mr->iova, mr->rkey));
	try(expect(t, 1, IB_WC_SUCCESS, IB_WC_RDMA_WRITE, NULL));
	check(*range_byte(&t->pg, 15) == 0x5a, "first write");

	try(local_inv(t, 0, mr->rkey));
	try(expect(t, 0, IB_WC_SUCCESS, IB_WC_LOCAL_INV, NULL));
	/* Invalidating an invalid registration succeeds (as in rxe). */
	try(local_inv(t, 0, mr->rkey));
	try(expect(t, 0, IB_WC_SUCCESS, IB_WC_LOCAL_INV, NULL));
	/* A key that names no registration fails (and QP 0 enters the error state). */
	try(local_inv(t, 0, mr->rkey ^ 0x80));
	try(expect(t, 0, IB_WC_LOC_QP_OP_ERR, 0, NULL));
	try(reset_both(t));
	/* Invalid: a WRITE through the key is refused, and nothing changes. */
	memset(t->buf + BUF / 2, 0x6b, 16);
	try(rdma(t, 1, IB_WR_RDMA_WRITE, BUF / 2, 16, mr->iova, mr->rkey));
	try(expect(t, 1, IB_WC_REM_ACCESS_ERR, 0, NULL));
	check(*range_byte(&t->pg, 0) == 0x5a, "a write after the invalidation landed");
	ret = 0;
out:
	return ret;
}

/* Key rotation: registered, invalidated, registered under the next key byte. */
static int frwr_key_rotation(struct t *t)
{
	const int acc = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE;
	struct ib_mr *mr;
	u32 old;
	int ret;

	try(frwr_mr(t, 4));
	mr = t->mr;
	for (int round = 0; round < 3; round++) {
		try(reg(t, 0, mr, acc));
		try(expect(t, 0, IB_WC_SUCCESS, IB_WC_REG_MR, NULL));
		memset(t->buf + BUF / 2, 0x10 + round, 16);
		try(rdma(t, 1, IB_WR_RDMA_WRITE, BUF / 2, 16, mr->iova + 16 * round, mr->rkey));
		try(expect(t, 1, IB_WC_SUCCESS, IB_WC_RDMA_WRITE, NULL));
		check(*range_byte(&t->pg, 16 * round + 15) == 0x10 + round, "round %d", round);
		try(local_inv(t, 0, mr->rkey));
		try(expect(t, 0, IB_WC_SUCCESS, IB_WC_LOCAL_INV, NULL));
		old = mr->rkey;
		ib_update_fast_reg_key(mr, ib_inc_rkey(mr->rkey));
		check(mr->rkey != old && (mr->rkey >> 8) == (old >> 8), "key %x after %x",
		      mr->rkey, old);
	}
	/* Registered under the newest key: the previous one reaches nothing. */
	try(reg(t, 0, mr, acc));
	try(expect(t, 0, IB_WC_SUCCESS, IB_WC_REG_MR, NULL));
	try(rdma(t, 1, IB_WR_RDMA_WRITE, BUF / 2, 16, mr->iova, old));
	try(expect(t, 1, IB_WC_REM_ACCESS_ERR, 0, NULL));
	check(*range_byte(&t->pg, 0) == 0x10, "a write through the old key landed");
	ret = 0;
out:
	return ret;
}

/* A registration over a valid one fails, and the QP goes to the error state. */
static int frwr_reg_twice(struct t *t)
{
	const int acc = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE;
	struct ib_mr *mr;
	int ret;

	try(frwr_mr(t, 4));
	mr = t->mr;
	try(reg(t, 0, mr, acc));
	try(expect(t, 0, IB_WC_SUCCESS, IB_WC_REG_MR, NULL));
	try(reg(t, 0, mr, acc));
	try(expect(t, 0, IB_WC_LOC_QP_OP_ERR, 0, NULL));
	try(reset_both(t));
	/* The first registration stands. */
	memset(t->buf + BUF / 2, 0x77, 8);
	try(rdma(t, 1, IB_WR_RDMA_WRITE, BUF / 2, 8, mr->iova, mr->rkey));
	try(expect(t, 1, IB_WC_SUCCESS, IB_WC_RDMA_WRITE, NULL));
	check(*range_byte(&t->pg, 7) == 0x77, "write through the first registration");
	ret = 0;
out:
	return ret;
}

/* A page list longer than the MR's room maps only what fits. */
static int frwr_map_past_capacity(struct t *t)
{
	struct ib_mr *mr;
	int ret, n;

	try(pages_get(t, &t->pg));
	mr = ib_alloc_mr(t->pd, IB_MR_TYPE_MEM_REG, 2);
	if (IS_ERR(mr)) {
		ret = PTR_ERR(mr);
		goto out;
	}
	t->mr = mr;
	n = ib_map_mr_sg(mr, t->pg.sg, PIECES, NULL, PAGE_SIZE);
	check(n == 2, "mapped %d of %d into room for 2", n, PIECES);
	check(mr->length == piece_len[0] + piece_len[1], "length %llu", mr->length);
	ret = 0;
out:
	return ret;
}

/*
 * Registrations the rules refuse, each with IB_WC_LOC_QP_OP_ERR (the QP is reset between
 * them): remote write without local write (IBA's rule for every registration; rxe takes it),
 * a length past the page list, an MR of another PD. None registered anything: the key still
 * reaches nothing.
 */
static int frwr_reg_refused(struct t *t)
{
	const int acc = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE;
	struct ib_mr *mr, *other = NULL;
	struct ib_pd *pd2 = NULL;
	int ret, n;

	try(frwr_mr(t, 4));
	mr = t->mr;
	try(reg(t, 0, mr, IB_ACCESS_REMOTE_WRITE));
	try(expect(t, 0, IB_WC_LOC_QP_OP_ERR, 0, NULL));
	try(reset_rts(t, 0));

	/* The page list holds 3 x 4096 - 512 bytes from the iova. */
	mr->length = 3 * 4096 - 512 + 1;
	ret = reg(t, 0, mr, acc);
	mr->length = RANGE;
	try(ret);
	try(expect(t, 0, IB_WC_LOC_QP_OP_ERR, 0, NULL));
	try(reset_rts(t, 0));

	pd2 = ib_alloc_pd(t->dev, 0);
	if (IS_ERR(pd2)) {
		ret = PTR_ERR(pd2);
		pd2 = NULL;
		goto out;
	}
	other = ib_alloc_mr(pd2, IB_MR_TYPE_MEM_REG, 4);
	if (IS_ERR(other)) {
		ret = PTR_ERR(other);
		other = NULL;
		goto out;
	}
	n = ib_map_mr_sg(other, t->pg.sg, PIECES, NULL, PAGE_SIZE);
	check(n == PIECES, "mapped %d", n);
	try(reg(t, 0, other, acc));
	try(expect(t, 0, IB_WC_LOC_QP_OP_ERR, 0, NULL));
	try(reset_rts(t, 0));

	try(rdma(t, 1, IB_WR_RDMA_WRITE, BUF / 2, 8, mr->iova, mr->rkey));
	try(expect(t, 1, IB_WC_REM_ACCESS_ERR, 0, NULL));
	ret = 0;
out:
	if (other)
		ib_dereg_mr(other);
	if (pd2)
		ib_dealloc_pd(pd2);
	return ret;
}

/* What the device reports: fast registration, and room for the page lists used here. */
static int frwr_caps(struct t *t)
{
	int ret;

	check(t->dev->attrs.device_cap_flags & IB_DEVICE_MEM_MGT_EXTENSIONS,
	      "no IB_DEVICE_MEM_MGT_EXTENSIONS");
	check(t->dev->attrs.max_fast_reg_page_list_len >= 8, "max_fast_reg_page_list_len %u",
	      t->dev->attrs.max_fast_reg_page_list_len);
	/* Only the memory-registration type. */
	{
		struct ib_mr *mr = ib_alloc_mr(t->pd, IB_MR_TYPE_SG_GAPS, 4);

		if (!IS_ERR(mr))
			ib_dereg_mr(mr);
		check(IS_ERR(mr), "an SG_GAPS MR without IB_DEVICE_SG_GAPS_REG");
	}
	ret = 0;
out:
	return ret;
}

/* ---- posting and draining ----------------------------------------------------------- */

/*
 * A bad work request in a chain: ib_post_send fails with EINVAL and points bad_wr at it; the
 * requests before it run, those after it are not posted.
 */
static int post_bad_wr(struct t *t)
{
	struct ib_sge r = sge(t, 0, 64), s = sge(t, BUF / 2, 16);
	struct ib_recv_wr rw = { .sg_list = &r, .num_sge = 1 };
	struct ib_send_wr w[3] = {
		{ .opcode = IB_WR_SEND, .sg_list = &s, .num_sge = 1,
		  .send_flags = IB_SEND_SIGNALED, .wr_id = 1 },
		{ .opcode = 0x7f, .send_flags = IB_SEND_SIGNALED, .wr_id = 2 },
		{ .opcode = IB_WR_SEND, .sg_list = &s, .num_sge = 1,
		  .send_flags = IB_SEND_SIGNALED, .wr_id = 3 },
	};
	const struct ib_send_wr *bad = NULL;
	struct ib_wc wc;
	int ret;

	w[0].next = &w[1];
	w[1].next = &w[2];
	try(ib_post_recv(t->qp[1], &rw, NULL));
	ret = ib_post_send(t->qp[0], w, &bad);
	check(ret == -EINVAL && bad == &w[1], "returned %d, bad_wr %p (the second is %p)", ret,
	      bad, &w[1]);
	try(expect(t, 0, IB_WC_SUCCESS, IB_WC_SEND, &wc));
	check(wc.wr_id == 1, "wr_id %llu", wc.wr_id);
	try(expect(t, 1, IB_WC_SUCCESS, IB_WC_RECV, NULL));
	msleep(300);
	check(ib_poll_cq(t->cq[0], 1, &wc) == 0, "a completion for wr_id %llu", wc.wr_id);
	/* A receive with more SGEs than the QP has. */
	{
		struct ib_sge many[3] = { r, r, r };
		struct ib_recv_wr big = { .sg_list = many, .num_sge = 3 };
		const struct ib_recv_wr *rbad = NULL;

		ret = ib_post_recv(t->qp[1], &big, &rbad);
		check(ret == -EINVAL && rbad == &big, "receive: %d", ret);
	}
	ret = 0;
out:
	return ret;
}

/*
 * A chain longer than the send queue has room for: ENOMEM at the first request that finds it
 * full, bad_wr there. A SEND the peer has no receive for (an RNR wait) holds the head of the
 * queue meanwhile. Once it goes, the requests before the refused one run in order: a local
 * invalidate of a key that names nothing fails, the QP enters the error state and flushes the
 * rest.
 */
static int post_full_ring(struct t *t)
{
	struct ib_sge r = sge(t, 0, 64), s = sge(t, BUF / 2, 16);
	struct ib_recv_wr rw = { .sg_list = &r, .num_sge = 1 };
	struct ib_send_wr head = { .opcode = IB_WR_SEND, .sg_list = &s, .num_sge = 1,
				   .send_flags = IB_SEND_SIGNALED, .wr_id = 1000 };
	struct ib_send_wr *w = NULL;
	const struct ib_send_wr *bad = NULL;
	struct ib_wc wc;
	u32 n = t->max_send_wr;
	int ret;

	check(n >= 32 && n < 1024, "max_send_wr %u", n);
	w = kcalloc(n, sizeof(*w), GFP_KERNEL);
	if (!w) {
		ret = -ENOMEM;
		goto out;
	}
	try(ib_post_send(t->qp[0], &head, NULL));
	msleep(100);
	for (u32 i = 0; i < n; i++) {
		w[i].opcode = IB_WR_LOCAL_INV;
		w[i].send_flags = IB_SEND_SIGNALED;
		w[i].ex.invalidate_rkey = 0;
		w[i].wr_id = i;
		w[i].next = i + 1 < n ? &w[i + 1] : NULL;
	}
	ret = ib_post_send(t->qp[0], w, &bad);
	check(ret == -ENOMEM && bad == &w[n - 1], "returned %d, bad_wr at %ld of %u", ret,
	      bad ? (long)(bad - w) : -1L, n);
	try(ib_post_recv(t->qp[1], &rw, NULL));
	try(expect(t, 0, IB_WC_SUCCESS, IB_WC_SEND, &wc));
	check(wc.wr_id == 1000, "first completion: wr_id %llu", wc.wr_id);
	try(expect(t, 0, IB_WC_LOC_QP_OP_ERR, 0, &wc));
	check(wc.wr_id == 0, "second completion: wr_id %llu", wc.wr_id);
	for (u32 i = 1; i + 1 < n; i++) {
		try(expect(t, 0, IB_WC_WR_FLUSH_ERR, 0, &wc));
		check(wc.wr_id == i, "flush %u: wr_id %llu", i, wc.wr_id);
	}
	ret = 0;
out:
	kfree(w);
	return ret;
}

struct counted {
	struct ib_cqe cqe;
	atomic_t flushed, other;
};

static void count_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct counted *c = container_of(wc->wr_cqe, struct counted, cqe);

	atomic_inc(wc->status == IB_WC_WR_FLUSH_ERR ? &c->flushed : &c->other);
}

/*
 * ib_drain_qp with the CQs polled by ib_core (a workqueue or softirq): receives waiting and a
 * SEND the peer cannot take (no receive, RNR retries for ever) are flushed, each completion
 * handled before the drain's own, which comes last.
 */
static int drain(struct t *t)
{
	struct counted c = { .cqe.done = count_done };
	struct ib_sge r = sge(t, 0, 64), s = sge(t, BUF / 2, 16);
	int ret;

	atomic_set(&c.flushed, 0);
	atomic_set(&c.other, 0);
	for (int i = 0; i < 4; i++) {
		struct ib_recv_wr rw = { .sg_list = &r, .num_sge = 1, .wr_cqe = &c.cqe };

		try(ib_post_recv(t->qp[0], &rw, NULL));
	}
	for (int i = 0; i < 2; i++) {
		struct ib_send_wr sw = { .opcode = IB_WR_SEND, .sg_list = &s, .num_sge = 1,
					 .send_flags = IB_SEND_SIGNALED, .wr_cqe = &c.cqe };

		try(ib_post_send(t->qp[0], &sw, NULL));
	}
	/* The SENDs wait for a receive at the peer. */
	msleep(200);
	ib_drain_qp(t->qp[0]);
	check(atomic_read(&c.flushed) == 6 && atomic_read(&c.other) == 0,
	      "%d flushed, %d other before the drain completed", atomic_read(&c.flushed),
	      atomic_read(&c.other));
	ret = 0;
out:
	return ret;
}

/* ---- the shared CQ pool ------------------------------------------------------------ */

struct pooled {
	struct ib_cqe cqe;
	atomic_t ok, bad;
	struct ib_cq *cq;	/* the CQ of the last completion */
};

static void pooled_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct pooled *p = container_of(wc->wr_cqe, struct pooled, cqe);

	WRITE_ONCE(p->cq, cq);
	atomic_inc(wc->status == IB_WC_SUCCESS ? &p->ok : &p->bad);
}

/*
 * CQs from ib_core's shared pool (ib_cq_pool_get, as nvme-rdma and nvmet-rdma take them for
 * their queues; polled in softirq): two QPs, one on each pool CQ, send each other 8 SENDs of
 * 16 bytes, each completion on its own QP's CQ, the data in the receives in order; then
 * ib_drain_qp of both and the CQs back to the pool.
 */
#define POOL_N 8
static int cq_pool(struct t *t)
{
	struct pooled sent[2], recvd[2];
	struct ib_cq *cq[2] = {};
	struct ib_qp *q[2] = {};
	int ret;

	for (int i = 0; i < 2; i++) {
		sent[i] = (struct pooled){ .cqe.done = pooled_done };
		recvd[i] = (struct pooled){ .cqe.done = pooled_done };
		atomic_set(&sent[i].ok, 0);
		atomic_set(&sent[i].bad, 0);
		atomic_set(&recvd[i].ok, 0);
		atomic_set(&recvd[i].bad, 0);
	}
	for (int i = 0; i < 2; i++) {
		cq[i] = ib_cq_pool_get(t->dev, 2 * POOL_N + 2, -1, IB_POLL_SOFTIRQ);
		if (IS_ERR(cq[i])) {
			ret = PTR_ERR(cq[i]);
			cq[i] = NULL;
			goto out;
		}
	}
	for (int i = 0; i < 2; i++) {
		struct ib_qp_init_attr init = {
			.qp_type = IB_QPT_RC, .sq_sig_type = IB_SIGNAL_ALL_WR,
			.send_cq = cq[i], .recv_cq = cq[i],
			.cap = { .max_send_wr = POOL_N + 1, .max_recv_wr = POOL_N + 1,
				 .max_send_sge = 1, .max_recv_sge = 1 },
		};

		q[i] = ib_create_qp(t->pd, &init);
		if (IS_ERR(q[i])) {
			ret = PTR_ERR(q[i]);
			q[i] = NULL;
			goto out;
		}
	}
	try(to_rts(t, q[0], q[1]->qp_num));
	try(to_rts(t, q[1], q[0]->qp_num));
	/* QP i receives into [i BUF/2, i BUF/2 + 64 POOL_N), sends from i BUF/2 + 4096. */
	memset(t->buf, 0, BUF);
	for (int i = 0; i < 2; i++)
		for (int n = 0; n < POOL_N; n++) {
			struct ib_sge r = sge(t, i * (BUF / 2) + 64 * n, 64);
			struct ib_recv_wr rw = { .sg_list = &r, .num_sge = 1,
						 .wr_cqe = &recvd[i].cqe };

			try(ib_post_recv(q[i], &rw, NULL));
		}
	for (int n = 0; n < POOL_N; n++)
		for (int i = 0; i < 2; i++) {
			size_t off = i * (BUF / 2) + 4096 + 16 * n;
			struct ib_sge s = sge(t, off, 16);
			struct ib_send_wr sw = { .opcode = IB_WR_SEND, .sg_list = &s, .num_sge = 1,
						 .send_flags = IB_SEND_SIGNALED,
						 .wr_cqe = &sent[i].cqe };

			memset(t->buf + off, 0x40 + 16 * i + n, 16);
			try(ib_post_send(q[i], &sw, NULL));
		}
	for (int w = 0; w < POLL_MS / 10; w++) {
		if (atomic_read(&sent[0].ok) + atomic_read(&sent[1].ok) +
		    atomic_read(&recvd[0].ok) + atomic_read(&recvd[1].ok) == 4 * POOL_N)
			break;
		msleep(10);
	}
	for (int i = 0; i < 2; i++) {
		check(atomic_read(&sent[i].ok) == POOL_N && atomic_read(&recvd[i].ok) == POOL_N &&
		      !atomic_read(&sent[i].bad) && !atomic_read(&recvd[i].bad),
		      "QP %d: %d sent, %d received, %d + %d failed", i, atomic_read(&sent[i].ok),
		      atomic_read(&recvd[i].ok), atomic_read(&sent[i].bad),
		      atomic_read(&recvd[i].bad));
		check(READ_ONCE(sent[i].cq) == cq[i] && READ_ONCE(recvd[i].cq) == cq[i],
		      "QP %d: completions on another CQ", i);
		/* QP i's receive n holds the peer's SEND n. */
		for (int n = 0; n < POOL_N; n++) {
			u8 *b = t->buf + i * (BUF / 2) + 64 * n;

			check(b[0] == 0x40 + 16 * (1 - i) + n && b[15] == b[0] && !b[16],
			      "QP %d, receive %d: %#x %#x %#x", i, n, b[0], b[15], b[16]);
		}
	}
	for (int i = 0; i < 2; i++)
		ib_drain_qp(q[i]);
	ret = 0;
out:
	for (int i = 0; i < 2; i++) {
		if (q[i])
			ib_destroy_qp(q[i]);
		if (cq[i])
			ib_cq_pool_put(cq[i], 2 * POOL_N + 2);
	}
	return ret;
}

/* ---- shared receive queues --------------------------------------------------------- */

static void srq_event(struct ib_event *e, void *ctx)
{
	if (e->event == IB_EVENT_SRQ_LIMIT_REACHED)
		atomic_inc(ctx);
}

/* A SEND of 16 bytes of the value v from QP i into whatever receive its peer takes. */
static int send16(struct t *t, int i, u8 v)
{
	struct ib_sge s = sge(t, BUF / 2 + 4096 * i, 16);
	struct ib_send_wr w = { .opcode = IB_WR_SEND, .sg_list = &s, .num_sge = 1,
				.send_flags = IB_SEND_SIGNALED };

	memset(t->buf + BUF / 2 + 4096 * i, v, 16);
	return ib_post_send(t->qp[i], &w, NULL);
}

/* Receive n of the SRQ test: 64 bytes at BUF/4 + 64 n, wr_id 100 + n. */
static struct ib_recv_wr srq_wr(struct t *t, struct ib_sge *r, u32 n)
{
	*r = sge(t, BUF / 4 + 64 * (n % 64), 64);
	return (struct ib_recv_wr){ .sg_list = r, .num_sge = 1, .wr_id = 100 + n };
}

/*
 * A kernel SRQ shared by two QPs (nvmet-rdma's use_srq=1): QP 0 and QP 1 each SEND to a QP of
 * their own on the SRQ; the receives are taken in the order they were posted, whichever QP
 * the message came to, and the data lands in the one taken. Then the SRQ's rules: too many
 * SGEs (EINVAL, bad_wr), a full SRQ (ENOMEM, bad_wr), the limit event, a resize keeping
 * the queued receives in order, and ib_drain_qp of a QP on the SRQ (its last-WQE event).
 */
static int srq(struct t *t)
{
	struct ib_srq_init_attr si = { .attr = { .max_wr = 8, .max_sge = 2 } };
	struct ib_qp *q[2] = {};
	struct ib_srq *srq = NULL;
	struct ib_sge r, many[3];
	struct ib_recv_wr rw, *chain = NULL;
	struct ib_sge *sgs = NULL;
	const struct ib_recv_wr *bad;
	struct ib_srq_attr a = {};
	atomic_t limit_events;
	struct ib_wc wc;
	u32 cap, next = 0, taken = 0, posted;
	unsigned long t0;
	int ret;

	/* The receives on the SRQ complete on a CQ of their own, polled as CQ 2. */
	t->cq[2] = ib_alloc_cq(t->dev, NULL, 128, 0, IB_POLL_DIRECT);
	if (IS_ERR(t->cq[2]))
		return PTR_ERR(t->cq[2]);
	atomic_set(&limit_events, 0);
	si.event_handler = srq_event;
	si.srq_context = &limit_events;
	srq = ib_create_srq(t->pd, &si);
	if (IS_ERR(srq)) {
		ret = PTR_ERR(srq);
		srq = NULL;
		goto out;
	}
	cap = si.attr.max_wr;
	check(cap >= 8 && cap < 64, "max_wr %u", cap);
	for (int i = 0; i < 2; i++) {
		struct ib_qp_init_attr init = {
			.qp_type = IB_QPT_RC, .sq_sig_type = IB_SIGNAL_ALL_WR, .srq = srq,
			.send_cq = t->cq[2], .recv_cq = t->cq[2],
			.cap = { .max_send_wr = 4, .max_send_sge = 1 },
		};
		struct ib_qp_attr reset = { .qp_state = IB_QPS_RESET };

		q[i] = ib_create_qp(t->pd, &init);
		if (IS_ERR(q[i])) {
			ret = PTR_ERR(q[i]);
			q[i] = NULL;
			goto out;
		}
		try(ib_modify_qp(t->qp[i], &reset, IB_QP_STATE));
		try(to_rts(t, t->qp[i], q[i]->qp_num));
		try(to_rts(t, q[i], t->qp[i]->qp_num));
	}
	/* Posted with interrupts off, as from a completion handler (any context). */
	for (int n = 0; n < 4; n++) {
		unsigned long flags;

		rw = srq_wr(t, &r, next++);
		local_irq_save(flags);
		ret = ib_post_srq_recv(srq, &rw, NULL);
		local_irq_restore(flags);
		try(ret);
	}
	/* 0x10 from QP 0, 0x11 from QP 1, 0x12 from QP 0, 0x13 from QP 1, one at a time. */
	for (int n = 0; n < 4; n++) {
		try(send16(t, n % 2, 0x10 + n));
		try(expect(t, n % 2, IB_WC_SUCCESS, IB_WC_SEND, NULL));
		try(expect(t, 2, IB_WC_SUCCESS, IB_WC_RECV, &wc));
		check(wc.wr_id == 100 + taken && wc.qp == q[n % 2] && wc.byte_len == 16,
		      "receive %d: wr_id %llu on QP %u, %u bytes", n, wc.wr_id, wc.qp->qp_num,
		      wc.byte_len);
		check(t->buf[BUF / 4 + 64 * taken] == 0x10 + n &&
		      t->buf[BUF / 4 + 64 * taken + 15] == 0x10 + n, "receive %d: data", n);
		taken++;
	}
	/* More SGEs than the SRQ has. */
	many[0] = many[1] = many[2] = sge(t, BUF / 4, 8);
	rw = (struct ib_recv_wr){ .sg_list = many, .num_sge = 3 };
	bad = NULL;
	ret = ib_post_srq_recv(srq, &rw, &bad);
	check(ret == -EINVAL && bad == &rw, "3 SGEs: %d", ret);
	/* cap + 1 receives: the last finds the SRQ full. */
	chain = kcalloc(cap + 1, sizeof(*chain), GFP_KERNEL);
	sgs = kcalloc(cap + 1, sizeof(*sgs), GFP_KERNEL);
	if (!chain || !sgs) {
		ret = -ENOMEM;
		goto out;
	}
	for (u32 n = 0; n <= cap; n++) {
		chain[n] = srq_wr(t, &sgs[n], next + n);
		chain[n].next = n < cap ? &chain[n + 1] : NULL;
	}
	bad = NULL;
	ret = ib_post_srq_recv(srq, chain, &bad);
	check(ret == -ENOMEM && bad == &chain[cap], "full: %d, bad_wr at %ld of %u", ret,
	      bad ? (long)(bad - chain) : -1L, cap);
	next += cap;
	/* The limit armed at cap: the next receive taken leaves cap - 1 and raises the event. */
	a.srq_limit = cap;
	try(ib_modify_srq(srq, &a, IB_SRQ_LIMIT));
	try(send16(t, 0, 0x20));
	try(expect(t, 0, IB_WC_SUCCESS, IB_WC_SEND, NULL));
	try(expect(t, 2, IB_WC_SUCCESS, IB_WC_RECV, &wc));
	check(wc.wr_id == 100 + taken, "after the limit: wr_id %llu", wc.wr_id);
	taken++;
	for (int i = 0; i < 100 && !atomic_read(&limit_events); i++)
		msleep(20);
	check(atomic_read(&limit_events) == 1, "%d limit events", atomic_read(&limit_events));
	/* Grown to twice the size: the cap - 1 receives queued are taken next, in order. */
	a.max_wr = 2 * cap;
	try(ib_modify_srq(srq, &a, IB_SRQ_MAX_WR));
	try(ib_query_srq(srq, &a));
	check(a.max_wr >= 2 * cap, "max_wr %u after the resize", a.max_wr);
	rw = srq_wr(t, &r, next++);
	try(ib_post_srq_recv(srq, &rw, NULL));
	/* Each receive moved with its own SGE: the data lands in the buffer of the one taken. */
	for (u32 n = 0; n < cap; n++) {
		try(send16(t, 1, 0x30 + n));
		try(expect(t, 1, IB_WC_SUCCESS, IB_WC_SEND, NULL));
		try(expect(t, 2, IB_WC_SUCCESS, IB_WC_RECV, &wc));
		check(wc.wr_id == 100 + taken && wc.qp == q[1], "after the resize %u: wr_id %llu",
		      n, wc.wr_id);
		check(t->buf[BUF / 4 + 64 * (taken % 64)] == 0x30 + n,
		      "after the resize %u: data %#x", n, t->buf[BUF / 4 + 64 * (taken % 64)]);
		taken++;
	}
	/* The new ring really holds max_wr receives: posting stops there, at ENOMEM. */
	for (posted = 0; posted <= a.max_wr; posted++) {
		rw = srq_wr(t, &r, next++);
		ret = ib_post_srq_recv(srq, &rw, NULL);
		if (ret)
			break;
	}
	check(ret == -ENOMEM && posted == a.max_wr, "the resized SRQ took %u of %u: %d", posted,
	      a.max_wr, ret);
	/* The limit fired once, and stays disarmed. */
	check(atomic_read(&limit_events) == 1, "%d limit events in all",
	      atomic_read(&limit_events));
	/* Draining a QP on an SRQ waits for its last-WQE event (60 s when none comes). */
	t0 = jiffies;
	ib_drain_qp(q[0]);
	check(time_before(jiffies, t0 + 10 * HZ), "ib_drain_qp took %u ms",
	      jiffies_to_msecs(jiffies - t0));
	ret = 0;
out:
	for (int i = 0; i < 2; i++)
		if (q[i])
			ib_destroy_qp(q[i]);
	if (srq)
		ib_destroy_srq(srq);
	kfree(chain);
	kfree(sgs);
	return ret;
}

static const struct {
	const char *name;
	int (*fn)(struct t *t);
	enum ib_poll_context poll;
} tests[] = {
	{ "frwr_rdma", frwr_rdma, IB_POLL_DIRECT },
	{ "frwr_send_with_inv_of_its_receive_buffer", frwr_send_with_inv_of_its_receive_buffer,
	  IB_POLL_DIRECT },
	{ "frwr_local_invalidate", frwr_local_invalidate, IB_POLL_DIRECT },
	{ "frwr_key_rotation", frwr_key_rotation, IB_POLL_DIRECT },
	{ "frwr_reg_twice", frwr_reg_twice, IB_POLL_DIRECT },
	{ "frwr_map_past_capacity", frwr_map_past_capacity, IB_POLL_DIRECT },
	{ "frwr_reg_refused", frwr_reg_refused, IB_POLL_DIRECT },
	{ "frwr_caps", frwr_caps, IB_POLL_DIRECT },
	{ "post_bad_wr", post_bad_wr, IB_POLL_DIRECT },
	{ "post_full_ring", post_full_ring, IB_POLL_DIRECT },
	{ "drain_workqueue", drain, IB_POLL_WORKQUEUE },
	{ "drain_softirq", drain, IB_POLL_SOFTIRQ },
	{ "drain_unbound_workqueue", drain, IB_POLL_UNBOUND_WORKQUEUE },
	{ "srq", srq, IB_POLL_DIRECT },
	{ "cq_pool", cq_pool, IB_POLL_DIRECT },
};

static int __init kverbs_init(void)
{
	struct t t = {};
	int ret = -ENOENT;

	ret = ib_register_client(&client);
	if (ret)
		return ret;
	if (!found) {
		pr_err("rodp_kverbs: no device %s\n", dev);
		ret = -ENODEV;
		goto out;
	}
	ret = -ENOENT;
	for (int i = 0; i < ARRAY_SIZE(tests); i++) {
		if (strcmp(tests[i].name, test))
			continue;
		ret = setup(&t, tests[i].poll);
		if (!ret)
			ret = tests[i].fn(&t);
		teardown(&t);
		pr_info("rodp_kverbs: %s on %s: %s (%d)\n", test, dev, ret ? "FAIL" : "pass", ret);
	}
out:
	ib_unregister_client(&client);
	found = NULL;
	return ret;
}

static void __exit kverbs_exit(void)
{
}

module_init(kverbs_init);
module_exit(kverbs_exit);
MODULE_DESCRIPTION("rodp: kernel verbs tests");
MODULE_LICENSE("GPL");
