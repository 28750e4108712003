// SPDX-License-Identifier: GPL-2.0
/*
 * rodp's shared engine cannot be stalled by one user (issue 12, finding 2).
 *
 * stalled_fuse_source: an unprivileged attacker registers an ODP MR over a MAP_SHARED mapping
 * of a file on a FUSE file system whose daemon (a thread of this root test, speaking the raw
 * /dev/fuse protocol, no readahead) can stop answering READ, and keeps sending RDMA WRITEs and
 * SENDs to its connected peer, a victim QP owned by root. First it sends only the first half
 * of the file, while the test's main thread (never the daemon thread) drops the file's page
 * cache now and then (FUSE_NOTIFY_INVAL_INODE, which invalidates the ODP pages), also while a
 * copy is under way; the daemon answers every READ at once in this phase, so an invalidation
 * waiting for a page under READ ends. Then the invalidations stop for good, the daemon stops
 * answering READ and the attacker is told (shared memory) to send the second half, never read
 * before: its fault sends a READ the daemon holds. While it waits (the daemon holds >= 1 READ)
 * it must block the attacker's own worker only: the victim's modify_qp to ERR and destroy_qp,
 * and a transfer on an unrelated QP pair, finish within seconds. Then the daemon answers again
 * and the attacker gets a completion (its peer is gone: an error) and exits 0.
 * The daemon and the mount run as root; the attacker (uid 65534) opens and maps the file
 * itself (allow_other) and registers the ODP MR.
 *
 * Nothing here may hang the guest: a READ held for a dead daemon would keep the attacker's
 * fault (a kernel worker) waiting for ever, and with it rdma link delete and rmmod. So the
 * teardown first aborts the FUSE connection (fusectl's abort file, which fails every held
 * request), and a watchdog process (its own process group, without the /dev/fuse descriptor)
 * aborts it if the test process dies or has not finished within WATCHDOG_MS.
 *
 * stalled_fuse_target: the reverse. The attacker (uid 65534) owns the responder: two RC QPs and
 * an ODP MR (remote write and read) over a MAP_PRIVATE writable mapping of the FUSE file, never
 * read, so that a fault of it (copy-on-write needs the file's page first) sends a READ the
 * stalled daemon holds. Root's victim WRITEs into the attacker's rkey and READs from it. While
 * the attacker's fault waits, the victim's dereg_mr of its own MR, modify_qp to ERR and
 * destroy_qp, and the unrelated pair's transfer finish within seconds (the responder's fault
 * runs on the attacker QP's own work, not the victim's requester). After the daemon answers,
 * a second victim QP (connected to the attacker's second QP) writes and reads the attacker's
 * memory correctly.
 *
 * stalled_fuse_ud_target: the attacker is a UD receiver whose buffer is over the stalled file:
 * the victim's datagram to it is lost (its send completes), and the victim's next datagram, to an
 * honest receiver, is delivered within seconds.
 *
 * stalled_fuse_target_runs_out_of_rnr_retries: a victim QP with rnr_retry 3 waiting for the
 * attacker's stalled fault gets RNR_RETRY_EXC_ERR after 3 RNR retries (as on the wire, where
 * the faulting responder answers with RNR NAKs).
 *
 * stalled_faults_of_many_qps: an attacker's 1056 QPs each fault a page of the stalled file from
 * their own requester (more than the 1024 work items the engine's workqueue runs at once); one
 * user holds at most its share of the workers, so root's unrelated pair still writes within
 * seconds.
 *
 * long_chain_does_not_starve: a QP with a chain of 1 MiB writes does not delay the small
 * writes of another QP (a requester run ends after 1 MiB and is queued again).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mount.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <linux/fuse.h>
#include "rodp_verbs.h"
#include "rodp_harness.h"

#define MNT "/tmp/rodp_fault_fuse"
#define FSIZE (256 << 10)
#define FILE_INO 2
#define HALF (FSIZE / 2)
#define STALL_MS 5000
#define WATCHDOG_MS 240000	/* less than the test's harness time-out */
#define FUSECTL "/sys/fs/fuse/connections"

/* The byte at offset off of the FUSE file. */
static unsigned char file_byte(uint64_t off)
{
	return (unsigned char)(off * 7 + (off >> 12) + 1);
}

/* What the root parent and the attacker share (MAP_SHARED anonymous memory). */
struct shared {
	atomic_int stop;	/* parent: attacker, stop posting */
	atomic_int second;	/* parent: attacker, send the file's second half from now on */
	atomic_int finished;	/* parent: watchdog, the test is over; exit */
	atomic_int result;	/* attacker: 1 + status of its last completion, or -errno */
	atomic_int ops;		/* attacker: completions seen */
	uint32_t qpn[2];	/* victim, attacker */
	union ibv_gid gid;
	uint64_t addr;		/* victim buffer */
	uint32_t rkey;
	/* stalled_fuse_target: the attacker's QPs and MR, the second victim, the connection. */
	uint32_t tqpn[2];
	uint64_t taddr;
	uint32_t trkey;
	uint32_t vqpn2;
	atomic_int connected;
};

/* The daemon: answers every request at once, but READs while stalled are kept for later. */
struct daemon {
	int fd;
	pthread_t thread;
	pthread_mutex_t lock;
	int stall;
	int pending;			/* READs held */
	uint64_t unique[64];
	uint64_t off[64];
	uint32_t size[64];
	atomic_int reads;		/* READs answered */
};

static int reply(int fd, uint64_t unique, int error, const void *arg, size_t len)
{
	struct fuse_out_header h = { .len = sizeof(h) + len, .error = error, .unique = unique };
	struct iovec v[2] = { { &h, sizeof(h) }, { (void *)arg, len } };

	return writev(fd, v, len ? 2 : 1) == (ssize_t)h.len ? 0 : -1;
}

static void file_attr(struct fuse_attr *a, uint64_t ino)
{
	memset(a, 0, sizeof(*a));
	a->ino = ino;
	a->nlink = 1;
	a->blksize = 4096;
	if (ino == FUSE_ROOT_ID) {
		a->mode = S_IFDIR | 0755;
	} else {
		a->mode = S_IFREG | 0444;
		a->size = FSIZE;
		a->blocks = FSIZE / 512;
	}
}

static int answer_read(int fd, uint64_t unique, uint64_t off, uint32_t size)
{
	static unsigned char data[FSIZE];
	uint32_t n = off >= FSIZE ? 0 : (uint32_t)(FSIZE - off < size ? FSIZE - off : size);

	for (uint32_t i = 0; i < n; i++)
		data[i] = file_byte(off + i);
	return reply(fd, unique, 0, data, n);
}

static void *daemon_main(void *arg)
{
	struct daemon *dm = arg;
	static char buf[1 << 18];

	for (;;) {
		ssize_t n = read(dm->fd, buf, sizeof(buf));
		struct fuse_in_header *h = (void *)buf;
		void *in = buf + sizeof(*h);

		if (n < 0 && (errno == EINTR || errno == ENOENT))
			continue;
		if (n < (ssize_t)sizeof(*h))
			break;	/* ENODEV: unmounted or aborted */
		switch (h->opcode) {
		case FUSE_INIT: {
			/* No readahead: a fault reads its own page only. */
			struct fuse_init_out o = {
				.major = FUSE_KERNEL_VERSION, .minor = FUSE_KERNEL_MINOR_VERSION,
				.max_readahead = 0, .max_write = 4096,
				.time_gran = 1,
			};

			reply(dm->fd, h->unique, 0, &o, sizeof(o));
			break;
		}
		case FUSE_LOOKUP: {
			struct fuse_entry_out o = { .nodeid = FILE_INO, .generation = 1,
						    .entry_valid = 3600, .attr_valid = 3600 };

			if (h->nodeid != FUSE_ROOT_ID || strcmp(in, "f")) {
				reply(dm->fd, h->unique, -ENOENT, NULL, 0);
				break;
			}
			file_attr(&o.attr, FILE_INO);
			reply(dm->fd, h->unique, 0, &o, sizeof(o));
			break;
		}
		case FUSE_GETATTR: {
			struct fuse_attr_out o = { .attr_valid = 3600 };

			file_attr(&o.attr, h->nodeid);
			reply(dm->fd, h->unique, 0, &o, sizeof(o));
			break;
		}
		case FUSE_OPEN:
		case FUSE_OPENDIR: {
			struct fuse_open_out o = { .fh = 1, .open_flags = FOPEN_KEEP_CACHE };

			reply(dm->fd, h->unique, 0, &o, sizeof(o));
			break;
		}
		case FUSE_READ: {
			struct fuse_read_in *r = in;
			int held = 0;

			pthread_mutex_lock(&dm->lock);
			if (dm->stall && dm->pending < 64) {
				dm->unique[dm->pending] = h->unique;
				dm->off[dm->pending] = r->offset;
				dm->size[dm->pending] = r->size;
				dm->pending++;
				held = 1;
			}
			pthread_mutex_unlock(&dm->lock);
			if (!held) {
				answer_read(dm->fd, h->unique, r->offset, r->size);
				dm->reads++;
			}
			break;
		}
		case FUSE_FLUSH:
		case FUSE_RELEASE:
		case FUSE_RELEASEDIR:
			reply(dm->fd, h->unique, 0, NULL, 0);
			break;
		case FUSE_FORGET:
		case FUSE_BATCH_FORGET:
		case FUSE_INTERRUPT:
			break;	/* no reply */
		default:
			reply(dm->fd, h->unique, -ENOSYS, NULL, 0);
		}
	}
	return NULL;
}

/*
 * Drops the file's page cache: its pages leave every mapping (and ODP MR) of it. It waits for
 * a page under READ: only while the daemon answers every READ, never from the daemon thread.
 */
static void inval(struct daemon *dm)
{
	struct fuse_notify_inval_inode_out o = { .ino = FILE_INO, .off = 0, .len = 0 };

	reply(dm->fd, 0, FUSE_NOTIFY_INVAL_INODE, &o, sizeof(o));
}

static int pending(struct daemon *dm)
{
	int n;

	pthread_mutex_lock(&dm->lock);
	n = dm->pending;
	pthread_mutex_unlock(&dm->lock);
	return n;
}

/*
 * What a failed attack left to see: the attacker's progress, the daemon's, rodp's ODP counters,
 * the QPs, and three samples of the stacks of the tasks in rodp, hmm or FUSE.
 */
static void diag(struct daemon *dm, struct shared *sh)
{
	fprintf(stderr, "# attacker: %d completions, last result %d; daemon: %d READs answered\n",
		sh->ops, sh->result, dm->reads);
	if (system("(grep -r . /sys/kernel/debug/rodp; rdma -d res show qp; "
		   "rdma statistic show link rodp0/1; for i in 1 2 3; do "
		   "for p in /proc/[0-9]*; do grep -q -e rodp -e hmm -e fuse $p/stack 2>/dev/null && "
		   "{ echo \"$p $(cat $p/comm)\"; cat $p/stack; }; done; sleep 0.3; done) 2>&1 | "
		   "sed 's/^/# /' >&2"))
		fprintf(stderr, "# diagnostics incomplete\n");
}

/* Answers the READs held and stops holding new ones. */
static void unstall(struct daemon *dm)
{
	pthread_mutex_lock(&dm->lock);
	dm->stall = 0;
	for (int i = 0; i < dm->pending; i++)
		answer_read(dm->fd, dm->unique[i], dm->off[i], dm->size[i]);
	dm->pending = 0;
	pthread_mutex_unlock(&dm->lock);
}

static int write_str(const char *path, const char *str)
{
	int fd = open(path, O_WRONLY);
	int ret;

	if (fd < 0)
		return -1;
	ret = write(fd, str, strlen(str)) == (ssize_t)strlen(str) ? 0 : -1;
	close(fd);
	return ret;
}

/* Fails every request of FUSE connection conn (every connection if conn < 0). */
static void fuse_abort(int conn)
{
	char path[320];
	struct dirent *e;
	DIR *dir;

	if (conn >= 0) {
		snprintf(path, sizeof(path), FUSECTL "/%d/abort", conn);
		if (!write_str(path, "1"))
			return;
	}
	dir = opendir(FUSECTL);
	if (!dir)
		return;
	while ((e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), FUSECTL "/%s/abort", e->d_name);
		write_str(path, "1");
	}
	closedir(dir);
}

/* Whether pid lives and is not a zombie (a dead leader whose other threads still exit). */
static int alive(pid_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	if (kill(pid, 0))
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

/*
 * The watchdog: aborts the FUSE connection if the test process dies or is not finished within
 * WATCHDOG_MS. Its own process group, so that the harness's time-out kill leaves it running.
 * A dead test ran no teardown (the harness skips it after a failed setup too): it unmounts.
 */
static void watchdog(struct shared *sh, pid_t test, int conn)
{
	long t0 = now_ms();

	setpgid(0, 0);
	while (!sh->finished) {
		if (!alive(test)) {
			fuse_abort(conn);
			umount2(MNT, MNT_DETACH);
			rmdir(MNT);
			_exit(1);
		}
		if (now_ms() - t0 > WATCHDOG_MS) {
			fuse_abort(conn);
			_exit(1);
		}
		usleep(100000);
	}
	_exit(0);
}

/*
 * The attacker (uid 65534): its QP connected to the victim, an ODP MR over the FUSE file
 * mapped MAP_SHARED; alternates WRITEs and SENDs of half of the file (the first half until
 * told to send the second) to the victim until told to stop or a completion fails. Exits with
 * 0 once it saw a completion after being told to stop.
 */
static int attacker(struct shared *sh, int fuse_fd)
{
	struct ibv_wc wc;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct dev d;
	void *map;
	int fd;

	close(fuse_fd);
	if (become_nobody())
		return 10;
	fd = open(MNT "/f", O_RDONLY);
	if (fd < 0)
		return 11;
	map = mmap(NULL, FSIZE, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED || madvise(map, FSIZE, MADV_RANDOM))
		return 12;
	if (dev_open(&d, "rodp0"))
		return 13;
	cq = ibv_create_cq(d.ctx, 64, NULL, NULL, 0);
	qp = cq ? make_qp(&d, cq, cq, IBV_QPT_RC, NULL) : NULL;
	mr = ibv_reg_mr(d.pd, map, FSIZE, IBV_ACCESS_ON_DEMAND);
	if (!qp || !mr)
		return 14;
	sh->qpn[1] = qp->qp_num;
	while (!sh->qpn[0])
		usleep(1000);
	if (rc_connect(qp, &d, sh->qpn[0], &sh->gid, &rc_default))
		return 15;
	for (int i = 0;; i++) {
		int stop = sh->stop;
		char *src = (char *)map + (sh->second ? HALF : 0);

		if (post_send(qp, i % 2 ? IBV_WR_SEND : IBV_WR_RDMA_WRITE, src, HALF, mr->lkey,
			      sh->addr, sh->rkey, 0, i))
			return 16;
		/* Long enough for a stalled fault to be answered (the parent's limit is less). */
		if (poll1(cq, &wc, 120000) != 1)
			return 17;
		sh->ops++;
		sh->result = 1 + wc.status;
		if (stop || wc.status != IBV_WC_SUCCESS)
			break;
	}
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	dev_close(&d);
	munmap(map, FSIZE);
	close(fd);
	return 0;
}

/*
 * The attacker as a responder (uid 65534): two RC QPs (to the two victims) and an ODP MR over a
 * private writable mapping of the FUSE file; posts nothing, waits until told to stop.
 */
static int target(struct shared *sh, int fuse_fd)
{
	struct ibv_qp *qp[2];
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct dev d;
	void *map;
	int fd;

	close(fuse_fd);
	if (become_nobody())
		return 10;
	fd = open(MNT "/f", O_RDONLY);
	if (fd < 0)
		return 11;
	map = mmap(NULL, FSIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED || madvise(map, FSIZE, MADV_RANDOM))
		return 12;
	if (dev_open(&d, "rodp0"))
		return 13;
	cq = ibv_create_cq(d.ctx, 64, NULL, NULL, 0);
	qp[0] = cq ? make_qp(&d, cq, cq, IBV_QPT_RC, NULL) : NULL;
	qp[1] = cq ? make_qp(&d, cq, cq, IBV_QPT_RC, NULL) : NULL;
	mr = ibv_reg_mr(d.pd, map, FSIZE, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE |
			IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!qp[0] || !qp[1] || !mr)
		return 14;
	sh->taddr = (uintptr_t)map;
	sh->trkey = mr->rkey;
	sh->tqpn[0] = qp[0]->qp_num;
	sh->tqpn[1] = qp[1]->qp_num;
	sh->qpn[1] = qp[1]->qp_num;
	while (!sh->qpn[0] && !sh->stop)
		usleep(1000);
	if (rc_connect(qp[0], &d, sh->qpn[0], &sh->gid, &rc_default) ||
	    rc_connect(qp[1], &d, sh->vqpn2, &sh->gid, &rc_default))
		return 15;
	sh->connected = 1;
	while (!sh->stop)
		usleep(10000);
	ibv_destroy_qp(qp[0]);
	ibv_destroy_qp(qp[1]);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	dev_close(&d);
	munmap(map, FSIZE);
	close(fd);
	return 0;
}

/*
 * The attacker as a UD receiver (uid 65534): a UD QP (Q_Key UD_QKEY) whose one receive is in
 * an ODP MR over a private writable mapping of the FUSE file, never read; waits until told to
 * stop.
 */
#define UD_QKEY 0x1234
static int ud_target(struct shared *sh, int fuse_fd)
{
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct dev d;
	void *map;
	int fd;

	close(fuse_fd);
	if (become_nobody())
		return 10;
	fd = open(MNT "/f", O_RDONLY);
	if (fd < 0)
		return 11;
	map = mmap(NULL, FSIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED || madvise(map, FSIZE, MADV_RANDOM))
		return 12;
	if (dev_open(&d, "rodp0"))
		return 13;
	cq = ibv_create_cq(d.ctx, 64, NULL, NULL, 0);
	qp = cq ? make_qp(&d, cq, cq, IBV_QPT_UD, NULL) : NULL;
	mr = ibv_reg_mr(d.pd, map, FSIZE, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE);
	if (!qp || !mr)
		return 14;
	if (ud_ready(qp, UD_QKEY) || post_recv(qp, map, 40 + 4096, mr->lkey, 1))
		return 15;
	sh->tqpn[0] = qp->qp_num;
	sh->connected = 1;
	while (!sh->stop)
		usleep(10000);
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	dev_close(&d);
	munmap(map, FSIZE);
	close(fd);
	return 0;
}

/* stalled_faults_of_many_qps: more QPs than the engine has workers. */
#define CROWD 1056

/*
 * The attacker of stalled_faults_of_many_qps (uid 65534): CROWD RC QPs, each connected to
 * itself, each posting one RDMA WRITE of a page of the FUSE file's second half (never read:
 * the daemon stalls before), so that each requester's fault of its own memory blocks. Waits
 * until told to stop, then tears down (the parent answers the READs first).
 */
static int crowd(struct shared *sh, int fuse_fd)
{
	static struct ibv_qp *qp[CROWD];
	struct ibv_mr *mr, *dst_mr;
	struct ibv_cq *cq;
	struct dev d;
	char *dst;
	void *map;
	int fd;

	close(fuse_fd);
	if (become_nobody())
		return 10;
	fd = open(MNT "/f", O_RDONLY);
	if (fd < 0)
		return 11;
	map = mmap(NULL, FSIZE, PROT_READ, MAP_SHARED, fd, 0);
	dst = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (map == MAP_FAILED || dst == MAP_FAILED || madvise(map, FSIZE, MADV_RANDOM))
		return 12;
	if (dev_open(&d, "rodp0"))
		return 13;
	cq = ibv_create_cq(d.ctx, 2 * CROWD, NULL, NULL, 0);
	mr = ibv_reg_mr(d.pd, map, FSIZE, IBV_ACCESS_ON_DEMAND);
	dst_mr = ibv_reg_mr(d.pd, dst, 4096, ALL_ACCESS);
	if (!cq || !mr || !dst_mr)
		return 14;
	for (int i = 0; i < CROWD; i++) {
		qp[i] = make_qp(&d, cq, cq, IBV_QPT_RC, NULL);
		if (!qp[i] || rc_connect(qp[i], &d, qp[i]->qp_num, &d.gid, &rc_default))
			return 15;
	}
	for (int i = 0; i < CROWD; i++) {
		char *src = (char *)map + HALF + (i % (HALF / 4096)) * 4096;

		if (post_send(qp[i], IBV_WR_RDMA_WRITE, src, 4096, mr->lkey, (uintptr_t)dst,
			      dst_mr->rkey, IBV_SEND_SIGNALED, i))
			return 16;
		sh->ops++;
	}
	while (!sh->stop)
		usleep(10000);
	for (int i = 0; i < CROWD; i++)
		ibv_destroy_qp(qp[i]);
	ibv_dereg_mr(mr);
	ibv_dereg_mr(dst_mr);
	ibv_destroy_cq(cq);
	dev_close(&d);
	return 0;
}

FIXTURE(fault) {
	struct dev d;
	struct daemon dm;
	int mounted, daemon_started, fusectl_mounted, conn;
	struct shared *sh;
	pid_t child, watchdog;
	struct ibv_cq *cq;
	struct ibv_qp *victim;
	char *buf;
	struct ibv_mr *mr;
	struct rc_pair other;
	/* stalled_fuse_target's second victim */
	struct ibv_cq *cq2;
	struct ibv_qp *victim2;
	char *buf2;
	struct ibv_mr *mr2;
};

FIXTURE_SETUP(fault)
{
	char opts[128], path[128];
	struct stat st;
	pid_t test;

	/*
	 * The FUSE device first: a lower descriptor, closed first if the test dies, which ends
	 * every held READ before the verbs objects are torn down.
	 */
	self->conn = -1;
	pthread_mutex_init(&self->dm.lock, NULL);
	self->sh = mmap(NULL, sizeof(*self->sh), PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->sh);
	mkdir(MNT, 0755);
	self->dm.fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, self->dm.fd) TH_LOG("/dev/fuse: %s (CONFIG_FUSE_FS?)", strerror(errno));
	snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other",
		 self->dm.fd);
	ASSERT_EQ(0, mount("rodp_fault", MNT, "fuse", MS_NOSUID | MS_NODEV, opts))
		TH_LOG("mount: %s", strerror(errno));
	self->mounted = 1;
	ASSERT_EQ(0, pthread_create(&self->dm.thread, NULL, daemon_main, &self->dm));
	self->daemon_started = 1;
	/* The connection's abort file: fusectl's directory named by the mount's device minor. */
	ASSERT_EQ(0, stat(MNT, &st)) TH_LOG("stat: %s", strerror(errno));
	self->conn = minor(st.st_dev);
	snprintf(path, sizeof(path), FUSECTL "/%d/abort", self->conn);
	if (access(path, W_OK)) {
		ASSERT_EQ(0, mount("none", FUSECTL, "fusectl", 0, NULL))
			TH_LOG("fusectl: %s", strerror(errno));
		self->fusectl_mounted = 1;
	}
	ASSERT_EQ(0, access(path, W_OK)) TH_LOG("%s: %s", path, strerror(errno));
	test = getpid();
	self->watchdog = fork();
	ASSERT_LE(0, self->watchdog);
	if (!self->watchdog) {
		close(self->dm.fd);
		watchdog(self->sh, test, self->conn);
	}
	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, dev_open(&self->d, "rodp0"));
}

FIXTURE_TEARDOWN(fault)
{
	/* First of all: no request of this mount waits any more, nothing below can hang. */
	if (self->mounted)
		fuse_abort(self->conn);
	if (self->daemon_started)
		unstall(&self->dm);
	if (self->child > 0) {
		self->sh->stop = 1;
		kill(self->child, SIGKILL);
		waitpid(self->child, NULL, 0);
	}
	if (self->victim)
		ibv_destroy_qp(self->victim);
	if (self->mr)
		ibv_dereg_mr(self->mr);
	if (self->cq)
		ibv_destroy_cq(self->cq);
	if (self->buf)
		munmap(self->buf, FSIZE);
	if (self->victim2)
		ibv_destroy_qp(self->victim2);
	if (self->mr2)
		ibv_dereg_mr(self->mr2);
	if (self->cq2)
		ibv_destroy_cq(self->cq2);
	if (self->buf2)
		munmap(self->buf2, FSIZE);
	rc_pair_close(&self->other);
	if (self->mounted)
		umount2(MNT, MNT_DETACH);
	if (self->daemon_started) {
		pthread_cancel(self->dm.thread);
		pthread_join(self->dm.thread, NULL);
	}
	close(self->dm.fd);
	rmdir(MNT);
	if (self->watchdog > 0) {
		self->sh->finished = 1;
		waitpid(self->watchdog, NULL, 0);
	}
	if (self->fusectl_mounted)
		umount2(FUSECTL, MNT_DETACH);
	dev_close(&self->d);
	link_delete("rodp0");
}

/* The victim's verbs, run aside so that a hang shows as a time-out, not a stuck test. */
struct victim_ops {
	struct ibv_qp *qp;
	atomic_int modified, destroyed;	/* 1 + return value */
};

static void *victim_main(void *arg)
{
	struct victim_ops *v = arg;

	v->modified = 1 + qp_to_err(v->qp);
	v->destroyed = 1 + ibv_destroy_qp(v->qp);
	return NULL;
}

TEST_F_TIMEOUT(fault, stalled_fuse_source, 300)
{
	struct victim_ops v = { 0 };
	struct ibv_wc wc;
	pthread_t vt;
	long t0;
	int status, posted = 0;

	/* The victim: root's RC QP, a buffer for WRITEs and SENDs. */
	self->buf = mmap(NULL, FSIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->buf);
	self->mr = ibv_reg_mr(self->d.pd, self->buf, FSIZE, ALL_ACCESS);
	self->cq = ibv_create_cq(self->d.ctx, 256, NULL, NULL, 0);
	ASSERT_NE(NULL, self->mr);
	ASSERT_NE(NULL, self->cq);
	self->victim = make_qp(&self->d, self->cq, self->cq, IBV_QPT_RC, NULL);
	ASSERT_NE(NULL, self->victim);
	/* An unrelated pair of root's. */
	ASSERT_EQ(0, rc_pair_open(&self->other, &self->d, NULL, 4096, &rc_default));

	self->sh->gid = self->d.gid;
	self->sh->addr = (uintptr_t)self->buf;
	self->sh->rkey = self->mr->rkey;
	self->child = fork();
	ASSERT_LE(0, self->child);
	if (!self->child)
		_exit(attacker(self->sh, self->dm.fd));
	t0 = now_ms();
	while (!self->sh->qpn[1] && now_ms() - t0 < 30000)
		usleep(1000);
	ASSERT_NE(0, self->sh->qpn[1]) TH_LOG("the attacker did not set up (see its exit code)");
	ASSERT_EQ(0, rc_connect(self->victim, &self->d, self->sh->qpn[1], &self->d.gid,
				&rc_default));
	for (; posted < 32; posted++)
		ASSERT_EQ(0, post_recv(self->victim, self->buf, FSIZE, self->mr->lkey, posted));
	self->sh->qpn[0] = self->victim->qp_num;

	/*
	 * Let the attack run from the first half while its page cache keeps going away (also
	 * while the responder copies), the daemon answering every READ; check what the victim
	 * receives. The last invalidation has returned before the daemon stalls.
	 */
	t0 = now_ms();
	while ((now_ms() - t0 < 3000 || self->sh->ops < 8) && now_ms() - t0 < 60000 &&
	       self->sh->result <= 1) {
		inval(&self->dm);
		while (ibv_poll_cq(self->cq, 1, &wc) == 1) {
			ASSERT_EQ(IBV_WC_SUCCESS, wc.status);
			ASSERT_EQ(HALF, wc.byte_len);
			for (size_t i = 0; i < HALF; i += 4093)
				ASSERT_EQ(file_byte(i), (unsigned char)self->buf[i]);
			ASSERT_EQ(0, post_recv(self->victim, self->buf, FSIZE, self->mr->lkey,
					       posted++));
		}
		/* Now and then, at no fixed point of a transfer. */
		usleep(20000 + (now_ms() % 7) * 3000);
	}
	if (self->sh->result != 1)
		diag(&self->dm, self->sh);
	ASSERT_EQ(1, self->sh->result) TH_LOG("attacker completion status %d",
					      self->sh->result - 1);
	TH_LOG("%d transfers (%d receives), %d READs before the stall", self->sh->ops,
	       posted - 32, self->dm.reads);
	/* Stall, then send the second half: pages never read, their fault needs the daemon. */
	pthread_mutex_lock(&self->dm.lock);
	self->dm.stall = 1;
	pthread_mutex_unlock(&self->dm.lock);
	self->sh->second = 1;
	t0 = now_ms();
	while (!pending(&self->dm) && now_ms() - t0 < 30000)
		usleep(2000);
	ASSERT_LT(0, pending(&self->dm)) TH_LOG("no fault reached the stalled daemon");
	usleep(200000);

	/* While a fault of the attacker's memory waits for the daemon: */
	t0 = now_ms();
	EXPECT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->other, IBV_WR_RDMA_WRITE, 0, 64,
					  (uintptr_t)self->other.buf[1], self->other.mr[1]->rkey));
	EXPECT_GT(STALL_MS, now_ms() - t0) TH_LOG("an unrelated QP waited");
	v.qp = self->victim;
	ASSERT_EQ(0, pthread_create(&vt, NULL, victim_main, &v));
	t0 = now_ms();
	while ((!v.modified || !v.destroyed) && now_ms() - t0 < STALL_MS)
		usleep(1000);
	EXPECT_EQ(1, v.modified) TH_LOG("the victim's modify_qp to ERR hung or failed");
	EXPECT_EQ(1, v.destroyed) TH_LOG("the victim's destroy_qp hung or failed");
	EXPECT_LT(0, pending(&self->dm)) TH_LOG("the stall ended by itself");

	/* The daemon answers: everything finishes, the attacker gets its completion. */
	self->sh->stop = 1;
	unstall(&self->dm);
	pthread_join(vt, NULL);
	self->victim = NULL;
	ASSERT_EQ(self->child, waitpid(self->child, &status, 0));
	self->child = 0;
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(0, WEXITSTATUS(status)) TH_LOG("attacker exit code");
	TH_LOG("attacker's last completion: status %d", self->sh->result - 1);
	ASSERT_LT(0, self->sh->result);
	/* The unrelated pair still works. */
	ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->other, IBV_WR_RDMA_WRITE, 0, 64,
					  (uintptr_t)self->other.buf[1], self->other.mr[1]->rkey));
}

/* The victim's verbs of stalled_fuse_target: each one's duration, -1 until it returned. */
struct victim_ops2 {
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	atomic_long ms[3];	/* dereg_mr, modify_qp to ERR, destroy_qp */
	atomic_int ret[3];
};

static void *victim2_main(void *arg)
{
	struct victim_ops2 *v = arg;
	long t0 = now_ms();

	v->ret[0] = ibv_dereg_mr(v->mr);
	v->ms[0] = now_ms() - t0;
	t0 = now_ms();
	v->ret[1] = qp_to_err(v->qp);
	v->ms[1] = now_ms() - t0;
	t0 = now_ms();
	v->ret[2] = ibv_destroy_qp(v->qp);
	v->ms[2] = now_ms() - t0;
	return NULL;
}

#define TLEN (64 << 10)

TEST_F_TIMEOUT(fault, stalled_fuse_target, 300)
{
	static const char *const what[3] = { "dereg_mr", "modify_qp to ERR", "destroy_qp" };
	struct victim_ops2 v = { .ms = { -1, -1, -1 } };
	struct ibv_wc wc;
	pthread_t vt;
	int status;
	long t0;

	/* The victim's buffers and QPs (the second one for after the stall). */
	self->buf = mmap(NULL, FSIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	self->buf2 = mmap(NULL, FSIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->buf);
	ASSERT_NE(MAP_FAILED, self->buf2);
	self->mr = ibv_reg_mr(self->d.pd, self->buf, FSIZE, ALL_ACCESS);
	self->mr2 = ibv_reg_mr(self->d.pd, self->buf2, FSIZE, ALL_ACCESS);
	self->cq = ibv_create_cq(self->d.ctx, 256, NULL, NULL, 0);
	self->cq2 = ibv_create_cq(self->d.ctx, 256, NULL, NULL, 0);
	ASSERT_NE(NULL, self->mr);
	ASSERT_NE(NULL, self->mr2);
	ASSERT_NE(NULL, self->cq);
	ASSERT_NE(NULL, self->cq2);
	self->victim = make_qp(&self->d, self->cq, self->cq, IBV_QPT_RC, NULL);
	self->victim2 = make_qp(&self->d, self->cq2, self->cq2, IBV_QPT_RC, NULL);
	ASSERT_NE(NULL, self->victim);
	ASSERT_NE(NULL, self->victim2);
	ASSERT_EQ(0, rc_pair_open(&self->other, &self->d, NULL, 4096, &rc_default));

	self->sh->gid = self->d.gid;
	self->child = fork();
	ASSERT_LE(0, self->child);
	if (!self->child)
		_exit(target(self->sh, self->dm.fd));
	t0 = now_ms();
	while (!self->sh->qpn[1] && now_ms() - t0 < 30000)
		usleep(1000);
	ASSERT_NE(0, self->sh->qpn[1]) TH_LOG("the attacker did not set up (see its exit code)");
	ASSERT_EQ(0, rc_connect(self->victim, &self->d, self->sh->tqpn[0], &self->d.gid,
				&rc_default));
	ASSERT_EQ(0, rc_connect(self->victim2, &self->d, self->sh->tqpn[1], &self->d.gid,
				&rc_default));
	self->sh->vqpn2 = self->victim2->qp_num;
	self->sh->qpn[0] = self->victim->qp_num;
	t0 = now_ms();
	while (!self->sh->connected && now_ms() - t0 < 30000)
		usleep(1000);
	ASSERT_TRUE(self->sh->connected);

	/* The daemon holds every READ: the attacker's pages were never read. */
	pthread_mutex_lock(&self->dm.lock);
	self->dm.stall = 1;
	pthread_mutex_unlock(&self->dm.lock);
	fill(self->buf, FSIZE, 3);
	ASSERT_EQ(0, post_send(self->victim, IBV_WR_RDMA_WRITE, self->buf, TLEN, self->mr->lkey,
			       self->sh->taddr, self->sh->trkey, 0, 1));
	ASSERT_EQ(0, post_send(self->victim, IBV_WR_RDMA_READ, self->buf + HALF, TLEN,
			       self->mr->lkey, self->sh->taddr + HALF, self->sh->trkey, 0, 2));
	t0 = now_ms();
	while (!pending(&self->dm) && now_ms() - t0 < 30000)
		usleep(2000);
	ASSERT_LT(0, pending(&self->dm)) TH_LOG("no fault reached the stalled daemon");
	usleep(200000);

	/* While the attacker's fault waits for the daemon: */
	t0 = now_ms();
	EXPECT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->other, IBV_WR_RDMA_WRITE, 0, 64,
					  (uintptr_t)self->other.buf[1], self->other.mr[1]->rkey));
	EXPECT_GT(STALL_MS, now_ms() - t0) TH_LOG("an unrelated QP waited");
	v.qp = self->victim;
	v.mr = self->mr;
	ASSERT_EQ(0, pthread_create(&vt, NULL, victim2_main, &v));
	t0 = now_ms();
	while (v.ms[2] < 0 && now_ms() - t0 < 3 * STALL_MS)
		usleep(1000);
	for (int i = 0; i < 3; i++) {
		EXPECT_LE(0, v.ms[i]) TH_LOG("the victim's %s hung", what[i]);
		EXPECT_GT(STALL_MS, v.ms[i]) TH_LOG("the victim's %s took %ld ms", what[i],
						    (long)v.ms[i]);
		EXPECT_EQ(0, v.ret[i]) TH_LOG("the victim's %s failed", what[i]);
	}
	EXPECT_LT(0, pending(&self->dm)) TH_LOG("the stall ended by itself");

	/* The daemon answers: the attacker's fault ends; the victim's verbs had returned. */
	unstall(&self->dm);
	pthread_join(vt, NULL);
	self->victim = NULL;
	self->mr = NULL;
	/* Whatever completed on the destroyed QP was flushed or failed, never a success. */
	while (ibv_poll_cq(self->cq, 1, &wc) == 1)
		EXPECT_NE(IBV_WC_SUCCESS, wc.status) TH_LOG("wr %lu", (unsigned long)wc.wr_id);

	/* A fresh transfer to the attacker's memory, then reads of it, are correct. */
	fill(self->buf2, TLEN, 5);
	ASSERT_EQ(0, post_send(self->victim2, IBV_WR_RDMA_WRITE, self->buf2, TLEN,
			       self->mr2->lkey, self->sh->taddr, self->sh->trkey, 0, 1));
	ASSERT_EQ(1, poll1(self->cq2, &wc, 60000));
	ASSERT_EQ(IBV_WC_SUCCESS, wc.status);
	ASSERT_EQ(0, post_send(self->victim2, IBV_WR_RDMA_READ, self->buf2 + TLEN, TLEN,
			       self->mr2->lkey, self->sh->taddr, self->sh->trkey, 0, 2));
	ASSERT_EQ(1, poll1(self->cq2, &wc, 60000));
	ASSERT_EQ(IBV_WC_SUCCESS, wc.status);
	ASSERT_EQ(0, memcmp(self->buf2, self->buf2 + TLEN, TLEN));
	ASSERT_EQ(0, post_send(self->victim2, IBV_WR_RDMA_READ, self->buf2 + HALF, TLEN,
			       self->mr2->lkey, self->sh->taddr + HALF, self->sh->trkey, 0, 3));
	ASSERT_EQ(1, poll1(self->cq2, &wc, 60000));
	ASSERT_EQ(IBV_WC_SUCCESS, wc.status);
	for (size_t i = 0; i < TLEN; i++)
		ASSERT_EQ(file_byte(HALF + i), (unsigned char)self->buf2[HALF + i]);

	self->sh->stop = 1;
	ASSERT_EQ(self->child, waitpid(self->child, &status, 0));
	self->child = 0;
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(0, WEXITSTATUS(status)) TH_LOG("attacker exit code");
	/* The unrelated pair still works. */
	ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->other, IBV_WR_RDMA_WRITE, 0, 64,
					  (uintptr_t)self->other.buf[1], self->other.mr[1]->rkey));
}

/*
 * stalled_fuse_ud_target: the attacker is a UD receiver whose receive buffer is in ODP memory
 * over the stalled FUSE file. The victim's datagram to it is lost (the send completes at once,
 * the attacker's fault is queued), and the victim's next datagram, to an honest receiver, is
 * delivered within seconds while the attacker's fault still waits.
 */
TEST_F_TIMEOUT(fault, stalled_fuse_ud_target, 300)
{
	struct ibv_send_wr wr = { .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_qp *honest;
	struct ibv_sge sge;
	struct ibv_ah *ah;
	struct ibv_wc wc;
	int status;
	long t0;

	self->buf = mmap(NULL, FSIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->buf);
	self->mr = ibv_reg_mr(self->d.pd, self->buf, FSIZE, ALL_ACCESS);
	self->cq = ibv_create_cq(self->d.ctx, 256, NULL, NULL, 0);
	self->cq2 = ibv_create_cq(self->d.ctx, 256, NULL, NULL, 0);
	ASSERT_NE(NULL, self->mr);
	ASSERT_NE(NULL, self->cq);
	ASSERT_NE(NULL, self->cq2);
	self->victim = make_qp(&self->d, self->cq, self->cq, IBV_QPT_UD, NULL);
	honest = make_qp(&self->d, self->cq2, self->cq2, IBV_QPT_UD, NULL);
	/* Destroyed by the teardown. */
	self->victim2 = honest;
	ASSERT_NE(NULL, self->victim);
	ASSERT_NE(NULL, honest);
	ASSERT_EQ(0, ud_ready(self->victim, UD_QKEY));
	ASSERT_EQ(0, ud_ready(honest, UD_QKEY));
	ah = make_ah(&self->d, self->d.pd, self->d.gid_index);
	ASSERT_NE(NULL, ah);
	ASSERT_EQ(0, post_recv(honest, self->buf + HALF, 40 + 4096, self->mr->lkey, 9));

	/* The daemon holds every READ: the attacker's receive buffer was never read. */
	pthread_mutex_lock(&self->dm.lock);
	self->dm.stall = 1;
	pthread_mutex_unlock(&self->dm.lock);
	self->child = fork();
	ASSERT_LE(0, self->child);
	if (!self->child)
		_exit(ud_target(self->sh, self->dm.fd));
	t0 = now_ms();
	while (!self->sh->connected && now_ms() - t0 < 30000)
		usleep(1000);
	ASSERT_TRUE(self->sh->connected) TH_LOG("the attacker did not set up (see its exit code)");

	fill(self->buf, 4096, 6);
	sge = (struct ibv_sge){ (uintptr_t)self->buf, 4096, self->mr->lkey };
	wr.sg_list = &sge;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qkey = UD_QKEY;
	/* To the attacker: lost, but the send completes. */
	wr.wr_id = 1;
	wr.wr.ud.remote_qpn = self->sh->tqpn[0];
	ASSERT_EQ(0, ibv_post_send(self->victim, &wr, &bad));
	t0 = now_ms();
	ASSERT_EQ(1, poll1(self->cq, &wc, STALL_MS)) TH_LOG("the datagram to the attacker waits");
	EXPECT_EQ(1, wc.wr_id);
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	/* Its fault reaches the stalled daemon. */
	while (!pending(&self->dm) && now_ms() - t0 < 30000)
		usleep(2000);
	ASSERT_LT(0, pending(&self->dm)) TH_LOG("no fault reached the stalled daemon");
	/* To the honest receiver: delivered. */
	wr.wr_id = 2;
	wr.wr.ud.remote_qpn = honest->qp_num;
	t0 = now_ms();
	ASSERT_EQ(0, ibv_post_send(self->victim, &wr, &bad));
	ASSERT_EQ(1, poll1(self->cq, &wc, STALL_MS)) TH_LOG("the victim's send queue is stuck");
	EXPECT_EQ(2, wc.wr_id);
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	ASSERT_EQ(1, poll1(self->cq2, &wc, STALL_MS)) TH_LOG("the honest receiver got nothing");
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	EXPECT_EQ(40 + 4096, wc.byte_len);
	EXPECT_GT(STALL_MS, now_ms() - t0);
	EXPECT_EQ(0, memcmp(self->buf, self->buf + HALF + 40, 4096));
	EXPECT_LT(0, pending(&self->dm)) TH_LOG("the stall ended by itself");

	unstall(&self->dm);
	self->sh->stop = 1;
	ASSERT_EQ(self->child, waitpid(self->child, &status, 0));
	self->child = 0;
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(0, WEXITSTATUS(status)) TH_LOG("attacker exit code");
	ibv_destroy_ah(ah);
}

static long counter(const char *name)
{
	/* ib_core serves a value read within a jiffy of the last one from its cache. */
	usleep(50 * 1000);
	return hw_counter("rodp0", name);
}

/*
 * stalled_fuse_target_runs_out_of_rnr_retries: a victim whose QP has rnr_retry 3 WRITEs into
 * the attacker's memory over the stalled FUSE file: waiting for the attacker's fault is an RNR
 * wait, as the RNR NAK a responder on another host answers while it faults; the WQE completes
 * with RNR_RETRY_EXC_ERR after rnr_retry RNR retries (each at least 1 ms, whatever the
 * attacker's min_rnr_timer) while the fault still waits, counted as 4 RNR NAKs received, one
 * RNR retry exceeded and no transport retry exceeded.
 */
TEST_F_TIMEOUT(fault, stalled_fuse_target_runs_out_of_rnr_retries, 300)
{
	struct rc_opts opts = rc_default;
	long rnr = counter("rcvd_rnr_err"), rnr_exc = counter("retry_rnr_exceeded_err");
	long exc = counter("retry_exceeded_err");
	struct ibv_wc wc;
	int status;
	long t0, ms;

	/* The transport timer and its retries do not bound this wait. */
	opts.timeout = 1;
	opts.retry_cnt = 0;
	opts.rnr_retry = 3;
	self->buf = mmap(NULL, FSIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->buf);
	self->mr = ibv_reg_mr(self->d.pd, self->buf, FSIZE, ALL_ACCESS);
	self->cq = ibv_create_cq(self->d.ctx, 256, NULL, NULL, 0);
	self->cq2 = ibv_create_cq(self->d.ctx, 256, NULL, NULL, 0);
	ASSERT_NE(NULL, self->mr);
	ASSERT_NE(NULL, self->cq);
	ASSERT_NE(NULL, self->cq2);
	self->victim = make_qp(&self->d, self->cq, self->cq, IBV_QPT_RC, NULL);
	self->victim2 = make_qp(&self->d, self->cq2, self->cq2, IBV_QPT_RC, NULL);
	ASSERT_NE(NULL, self->victim);
	ASSERT_NE(NULL, self->victim2);

	self->sh->gid = self->d.gid;
	self->child = fork();
	ASSERT_LE(0, self->child);
	if (!self->child)
		_exit(target(self->sh, self->dm.fd));
	t0 = now_ms();
	while (!self->sh->qpn[1] && now_ms() - t0 < 30000)
		usleep(1000);
	ASSERT_NE(0, self->sh->qpn[1]) TH_LOG("the attacker did not set up (see its exit code)");
	ASSERT_EQ(0, rc_connect(self->victim, &self->d, self->sh->tqpn[0], &self->d.gid, &opts));
	ASSERT_EQ(0, rc_connect(self->victim2, &self->d, self->sh->tqpn[1], &self->d.gid,
				&rc_default));
	self->sh->vqpn2 = self->victim2->qp_num;
	self->sh->qpn[0] = self->victim->qp_num;
	t0 = now_ms();
	while (!self->sh->connected && now_ms() - t0 < 30000)
		usleep(1000);
	ASSERT_TRUE(self->sh->connected);

	pthread_mutex_lock(&self->dm.lock);
	self->dm.stall = 1;
	pthread_mutex_unlock(&self->dm.lock);
	fill(self->buf, FSIZE, 3);
	t0 = now_ms();
	ASSERT_EQ(0, post_send(self->victim, IBV_WR_RDMA_WRITE, self->buf, TLEN, self->mr->lkey,
			       self->sh->taddr, self->sh->trkey, 0, 1));
	ASSERT_EQ(1, poll1(self->cq, &wc, 3 * STALL_MS)) TH_LOG("the wait is not bounded");
	ms = now_ms() - t0;
	EXPECT_EQ(IBV_WC_RNR_RETRY_EXC_ERR, wc.status);
	/* 3 RNR timers of at least 1 ms, with room for a slow emulated guest. */
	EXPECT_LE(3, ms);
	EXPECT_GT(STALL_MS / 2, ms) TH_LOG("took %ld ms", ms);
	EXPECT_EQ(rnr + 4, counter("rcvd_rnr_err"));
	EXPECT_EQ(rnr_exc + 1, counter("retry_rnr_exceeded_err"));
	EXPECT_EQ(exc, counter("retry_exceeded_err"));
	/* What it waited for: the attacker's fault, held by the daemon. */
	t0 = now_ms();
	while (!pending(&self->dm) && now_ms() - t0 < 30000)
		usleep(2000);
	EXPECT_LT(0, pending(&self->dm)) TH_LOG("no fault reached the stalled daemon");

	unstall(&self->dm);
	/* The attacker's other QP still serves an honest requester. */
	ASSERT_EQ(0, post_send(self->victim2, IBV_WR_RDMA_WRITE, self->buf, TLEN, self->mr->lkey,
			       self->sh->taddr, self->sh->trkey, 0, 2));
	ASSERT_EQ(1, poll1(self->cq2, &wc, 60000));
	EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
	self->sh->stop = 1;
	ASSERT_EQ(self->child, waitpid(self->child, &status, 0));
	self->child = 0;
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(0, WEXITSTATUS(status)) TH_LOG("attacker exit code");
}

#define CHAIN 32
#define CHUNK (1 << 20)

/*
 * One user's stalled faults hold at most its share of the engine's workers: an unprivileged
 * attacker's CROWD requesters (more than the 1024 items the workqueue runs at once) each fault
 * a page of the stalled FUSE file; root's unrelated pair still writes within seconds.
 */
TEST_F_TIMEOUT(fault, stalled_faults_of_many_qps, 300)
{
	long t0;
	int status;

	ASSERT_EQ(0, rc_pair_open(&self->other, &self->d, NULL, 4096, &rc_default));
	pthread_mutex_lock(&self->dm.lock);
	self->dm.stall = 1;
	pthread_mutex_unlock(&self->dm.lock);
	self->child = fork();
	ASSERT_LE(0, self->child);
	if (!self->child)
		_exit(crowd(self->sh, self->dm.fd));
	t0 = now_ms();
	while (self->sh->ops < CROWD && now_ms() - t0 < 120000) {
		if (waitpid(self->child, &status, WNOHANG) == self->child) {
			self->child = 0;
			ASSERT_TRUE(0) TH_LOG("the attacker exited with %d", WEXITSTATUS(status));
		}
		usleep(10000);
	}
	ASSERT_EQ(CROWD, self->sh->ops) TH_LOG("the attacker did not post in time");
	/* Every requester had time to start its fault (under TCG too). */
	while (!pending(&self->dm) && now_ms() - t0 < 150000)
		usleep(2000);
	ASSERT_LT(0, pending(&self->dm)) TH_LOG("no fault reached the stalled daemon");
	sleep(3);
	TH_LOG("%d READs held after %ld ms", pending(&self->dm), now_ms() - t0);

	t0 = now_ms();
	EXPECT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->other, IBV_WR_RDMA_WRITE, 0, 64,
					  (uintptr_t)self->other.buf[1], self->other.mr[1]->rkey));
	EXPECT_GT(STALL_MS, now_ms() - t0) TH_LOG("root's pair waited for a worker");
	EXPECT_LT(0, pending(&self->dm)) TH_LOG("the stall ended by itself");

	/* The daemon answers: the attacker's WRITEs run, it tears down and exits. */
	unstall(&self->dm);
	self->sh->stop = 1;
	ASSERT_EQ(self->child, waitpid(self->child, &status, 0));
	self->child = 0;
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(0, WEXITSTATUS(status)) TH_LOG("attacker exit code");
	ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&self->other, IBV_WR_RDMA_WRITE, 0, 64,
					  (uintptr_t)self->other.buf[1], self->other.mr[1]->rkey));
}

/* A chain of 1 MiB writes on one pair; small writes on another keep a bounded latency. */
TEST(long_chain_does_not_starve)
{
	struct rc_pair big, small;
	struct ibv_send_wr wr[CHAIN], *bad;
	struct ibv_sge sge[CHAIN];
	struct ibv_wc wc;
	struct dev d;
	long worst = 0;
	int done = 0, n = 0;

	ASSERT_EQ(0, link_add("rodp0", "veth0"));
	ASSERT_EQ(0, dev_open(&d, "rodp0"));
	ASSERT_EQ(0, rc_pair_open(&big, &d, NULL, 2 * CHUNK, &rc_default));
	ASSERT_EQ(0, rc_pair_open(&small, &d, NULL, 4096, &rc_default));
	fill(big.buf[0], CHUNK, 3);
	for (int i = 0; i < CHAIN; i++) {
		sge[i] = (struct ibv_sge){ (uintptr_t)big.buf[0], CHUNK, big.mr[0]->lkey };
		wr[i] = (struct ibv_send_wr){ .wr_id = i, .sg_list = &sge[i], .num_sge = 1,
					      .opcode = IBV_WR_RDMA_WRITE,
					      .send_flags = IBV_SEND_SIGNALED,
					      .next = i + 1 < CHAIN ? &wr[i + 1] : NULL };
		wr[i].wr.rdma.remote_addr = (uintptr_t)big.buf[1];
		wr[i].wr.rdma.rkey = big.mr[1]->rkey;
	}
	ASSERT_EQ(0, ibv_post_send(big.qp[0], wr, &bad));
	while (done < CHAIN) {
		long t0 = now_ms();

		ASSERT_EQ(IBV_WC_SUCCESS, rc_xfer(&small, IBV_WR_RDMA_WRITE, 0, 64,
						  (uintptr_t)small.buf[1], small.mr[1]->rkey));
		if (now_ms() - t0 > worst)
			worst = now_ms() - t0;
		n++;
		while (ibv_poll_cq(big.cq[0], 1, &wc) == 1) {
			ASSERT_EQ(IBV_WC_SUCCESS, wc.status);
			done++;
		}
	}
	ASSERT_EQ(0, memcmp(big.buf[0], big.buf[1], CHUNK));
	TH_LOG("%d small writes during the chain, slowest %ld ms", n, worst);
	EXPECT_GT(5000, worst);
	rc_pair_close(&big);
	rc_pair_close(&small);
	dev_close(&d);
	link_delete("rodp0");
}

TEST_HARNESS_MAIN
