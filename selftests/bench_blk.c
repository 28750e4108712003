// SPDX-License-Identifier: GPL-2.0
/*
 * bench_blk: storage throughput for `make bench` (selftests/guest/bench2.sh), in place of fio,
 * which the guest does not have. Direct I/O (O_DIRECT) through the kernel's native AIO, so
 * that the queue depth is real:
 *
 *   bench_blk randread PATH MB SECONDS   4 KiB reads at random 4 KiB offsets, 32 in flight
 *   bench_blk read PATH MB SECONDS       1 MiB reads in order (wrapping), 4 in flight
 *   bench_blk write PATH MB SECONDS      1 MiB writes in order (wrapping), 4 in flight
 *
 * over the first MB MiB of PATH (a block device, or a file, created if need be), for SECONDS.
 * Prints "IOPS MiB/s"; exits non-zero on any failed or short I/O.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_QD 32

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	struct iocb cb[MAX_QD], *cbp[MAX_QD];
	struct io_event ev[MAX_QD];
	aio_context_t ctx = 0;
	uint64_t size, next = 0, done = 0, bytes = 0, seed = 88172645463325252ull;
	size_t bs;
	int qd, fd, write, random;
	double secs, t0, end;

	if (argc != 5) {
		fprintf(stderr, "usage: %s randread|read|write PATH MB SECONDS\n", argv[0]);
		return 2;
	}
	random = !strcmp(argv[1], "randread");
	write = !strcmp(argv[1], "write");
	if (!random && !write && strcmp(argv[1], "read")) {
		fprintf(stderr, "unknown mode %s\n", argv[1]);
		return 2;
	}
	bs = random ? 4096 : 1 << 20;
	qd = random ? 32 : 4;
	size = strtoull(argv[3], NULL, 0) << 20;
	secs = atof(argv[4]);
	if (size < (uint64_t)bs * qd || secs <= 0) {
		fprintf(stderr, "bad size or time\n");
		return 2;
	}
	fd = open(argv[2], (write ? O_RDWR | O_CREAT : O_RDONLY) | O_DIRECT, 0644);
	if (fd < 0 || syscall(SYS_io_setup, qd, &ctx)) {
		perror(argv[2]);
		return 1;
	}
	for (int i = 0; i < qd; i++) {
		void *buf;

		if (posix_memalign(&buf, 4096, bs))
			return 1;
		memset(buf, 0x5a + i, bs);
		memset(&cb[i], 0, sizeof(cb[i]));
		cb[i].aio_fildes = fd;
		cb[i].aio_lio_opcode = write ? IOCB_CMD_PWRITE : IOCB_CMD_PREAD;
		cb[i].aio_buf = (uintptr_t)buf;
		cb[i].aio_nbytes = bs;
		cb[i].aio_data = i;
		cbp[i] = &cb[i];
	}
	t0 = now();
	end = t0 + secs;
	/* Each request goes out again as soon as it completes, until the time is up. */
	for (int i = 0; i < qd; i++) {
		if (random) {
			seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
			cb[i].aio_offset = (seed % (size / bs)) * bs;
		} else {
			cb[i].aio_offset = next;
			next = (next + bs) % size;
		}
	}
	if (syscall(SYS_io_submit, ctx, qd, cbp) != qd) {
		perror("io_submit");
		return 1;
	}
	for (int inflight = qd; inflight > 0;) {
		long n = syscall(SYS_io_getevents, ctx, 1, qd, ev, NULL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			perror("io_getevents");
			return 1;
		}
		for (long k = 0; k < n; k++) {
			struct iocb *c = (struct iocb *)(uintptr_t)ev[k].obj;

			if (ev[k].res != (int64_t)bs) {
				fprintf(stderr, "I/O at %llu: %lld\n",
					(unsigned long long)c->aio_offset, (long long)ev[k].res);
				return 1;
			}
			done++;
			bytes += bs;
			inflight--;
			if (now() >= end)
				continue;
			if (random) {
				seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
				c->aio_offset = (seed % (size / bs)) * bs;
			} else {
				c->aio_offset = next;
				next = (next + bs) % size;
			}
			if (syscall(SYS_io_submit, ctx, 1, &c) != 1) {
				perror("io_submit");
				return 1;
			}
			inflight++;
		}
	}
	secs = now() - t0;
	printf("%.0f %.1f\n", done / secs, bytes / secs / (1 << 20));
	return 0;
}
