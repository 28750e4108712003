// SPDX-License-Identifier: GPL-2.0
/*
 * waitfor: the guest scripts' waits for a server, as one program that polls every 20 ms.
 * A shell loop starts a sleep(1) (and often a grep) at each poll: under TCG each start took
 * about 0.2 s of the guest's one vCPU, the vCPU the awaited server needed (a Python start with
 * such a loop beside it took 30 to 100 % longer).
 *
 *   waitfor SECS listen PORT [PID]   a TCP socket (IPv4 or IPv6) listens on PORT
 *   waitfor SECS file PATH [PID]     PATH exists and is not empty
 *   waitfor SECS size PATH BYTES [PID]
 *                                    PATH exists and holds at least BYTES
 *   waitfor SECS data PATH OFFSET [PID]
 *                                    the 4 KiB block of PATH at OFFSET holds a byte that is
 *                                    not zero (random data written there may start with one)
 *   waitfor SECS line PATH WORD [PID]
 *                                    a line of PATH begins with WORD
 *   waitfor SECS exit PID            process PID has ended
 *
 * Exits 0 once the condition holds, 1 after SECS seconds or once process PID has ended (the
 * server that would have made it hold), 2 on bad arguments.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* A socket of /proc/net/tcp or tcp6 in state LISTEN (0A) on port. */
static bool listening(unsigned int port)
{
	static const char *const files[] = { "/proc/net/tcp", "/proc/net/tcp6" };
	char line[512], local[128];
	unsigned int st;

	for (size_t i = 0; i < 2; i++) {
		FILE *f = fopen(files[i], "r");

		if (!f)
			continue;
		while (fgets(line, sizeof(line), f)) {
			char *colon;

			/* "sl local_address rem_address st ...", addresses as HEXADDR:HEXPORT */
			if (sscanf(line, "%*s %127s %*s %x", local, &st) != 2 || st != 0x0a)
				continue;
			colon = strrchr(local, ':');
			if (colon && strtoul(colon + 1, NULL, 16) == port) {
				fclose(f);
				return true;
			}
		}
		fclose(f);
	}
	return false;
}

static bool has_bytes(const char *path, long long bytes)
{
	struct stat s;

	return !stat(path, &s) && s.st_size >= bytes;
}

static bool has_data(const char *path, long long offset)
{
	FILE *f = fopen(path, "r");
	unsigned char block[4096];
	size_t n = 0;

	if (!f)
		return false;
	if (!fseeko(f, offset, SEEK_SET))
		n = fread(block, 1, sizeof(block), f);
	fclose(f);
	for (size_t i = 0; i < n; i++)
		if (block[i])
			return true;
	return false;
}

static bool has_line(const char *path, const char *word)
{
	char line[512];
	bool found = false;
	FILE *f = fopen(path, "r");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = !strncmp(line, word, strlen(word));
	fclose(f);
	return found;
}

/* Whether process pid has ended: gone, or a zombie its parent has not reaped yet. */
static bool ended(int pid)
{
	char path[64], state = 0;
	FILE *f;

	if (kill(pid, 0) && errno == ESRCH)
		return true;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return true;
	/* "pid (comm) S ...": comm may hold spaces and parentheses, the last ')' ends it */
	if (fgets(path, sizeof(path), f)) {
		char *p = strrchr(path, ')');

		if (p && p[1] == ' ')
			state = p[2];
	}
	fclose(f);
	return state == 'Z';
}

static double seconds(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int usage(void)
{
	fprintf(stderr, "usage: waitfor SECS listen PORT [PID] | file PATH [PID] | "
			"size PATH BYTES [PID] | data PATH OFFSET [PID] | line PATH WORD [PID] | "
			"exit PID\n");
	return 2;
}

int main(int argc, char **argv)
{
	const struct timespec tick = { .tv_nsec = 20 * 1000 * 1000 };
	double until;
	int need, pid = 0;

	if (argc < 4)
		return usage();
	until = seconds() + atof(argv[1]);
	if (!strcmp(argv[2], "listen") || !strcmp(argv[2], "file"))
		need = 4;
	else if (!strcmp(argv[2], "size") || !strcmp(argv[2], "data") || !strcmp(argv[2], "line"))
		need = 5;
	else if (!strcmp(argv[2], "exit"))
		need = 4;
	else
		return usage();
	if (argc < need || argc > need + 1 || (argc > need && !strcmp(argv[2], "exit")))
		return usage();
	if (argc == need + 1)
		pid = atoi(argv[need]);
	for (;;) {
		const char *m = argv[2];
		bool done;

		if (!strcmp(m, "listen"))
			done = listening(strtoul(argv[3], NULL, 10));
		else if (!strcmp(m, "file"))
			done = has_bytes(argv[3], 1);
		else if (!strcmp(m, "size"))
			done = has_bytes(argv[3], atoll(argv[4]));
		else if (!strcmp(m, "data"))
			done = has_data(argv[3], atoll(argv[4]));
		else if (!strcmp(m, "line"))
			done = has_line(argv[3], argv[4]);
		else
			done = ended(atoi(argv[3]));
		if (done)
			return 0;
		/* A server that ended will never get there. */
		if (pid > 0 && ended(pid))
			return 1;
		if (seconds() >= until)
			return 1;
		nanosleep(&tick, NULL);
	}
}
