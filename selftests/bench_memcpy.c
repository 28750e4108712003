// SPDX-License-Identifier: GPL-2.0
/*
 * The guest's single-thread memcpy bandwidth, the ceiling for a software RDMA device that
 * copies each byte once: 64 KiB copies streaming through two 64 MiB buffers for about a second.
 * Prints MB/s (10^6 bytes per second, as perftest does).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BUF (64 << 20)
#define CHUNK (64 << 10)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(void)
{
	char *src = malloc(BUF), *dst = malloc(BUF);
	double start, t;
	size_t bytes = 0, off = 0;

	if (!src || !dst)
		return 1;
	memset(src, 1, BUF);
	memset(dst, 2, BUF);
	start = now();
	do {
		memcpy(dst + off, src + off, CHUNK);
		bytes += CHUNK;
		off = (off + CHUNK) % BUF;
	} while ((t = now() - start) < 1.0 || bytes < BUF);
	printf("%.2f\n", bytes / t / 1e6);
	return dst[12345] != 1;
}
