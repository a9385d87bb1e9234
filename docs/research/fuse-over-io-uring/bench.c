// Client: N fstat() (GETATTR round trips, attr timeout 0) or pread() (READ, direct_io)
// on MNT/f; prints ns per op and RES/CAL IPI deltas (system-wide, both CPUs).
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
static void ipis(unsigned long long *res, unsigned long long *cal) {
	FILE *f = fopen("/proc/interrupts", "r"); char line[512];
	*res = *cal = 0;
	while (fgets(line, sizeof line, f)) {
		char *p = line; while (*p == ' ') p++;
		unsigned long long a, b;
		if (!strncmp(p, "RES:", 4) && sscanf(p + 4, "%llu %llu", &a, &b) == 2) *res = a + b;
		if (!strncmp(p, "CAL:", 4) && sscanf(p + 4, "%llu %llu", &a, &b) == 2) *cal = a + b;
	}
	fclose(f);
}
int main(int argc, char **argv) {
	if (argc < 4) { fprintf(stderr, "usage: bench FILE fstat|pread N\n"); return 2; }
	int fd = open(argv[1], O_RDONLY); if (fd < 0) { perror("open"); return 1; }
	int mode = !strcmp(argv[2], "pread"); long n = atol(argv[3]);
	struct stat st; char buf[64];
	for (int i = 0; i < 1000; i++) mode ? pread(fd, buf, 1, 0) : fstat(fd, &st); /* warm-up */
	unsigned long long r0, c0, r1, c1; struct rusage u0, u1; struct timespec t0, t1;
	ipis(&r0, &c0); getrusage(RUSAGE_SELF, &u0); clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < n; i++) {
		if (mode) { if (pread(fd, buf, 1, 0) != 1) { perror("pread"); return 1; } }
		else if (fstat(fd, &st)) { perror("fstat"); return 1; }
	}
	clock_gettime(CLOCK_MONOTONIC, &t1); getrusage(RUSAGE_SELF, &u1); ipis(&r1, &c1);
	double ns = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n;
	printf("%s n=%ld ns/op=%.0f ops/s=%.0f RES/op=%.2f CAL/op=%.2f vcsw/op=%.2f ivcsw/op=%.2f\n",
	       argv[2], n, ns, 1e9 / ns, (double)(r1 - r0) / n, (double)(c1 - c0) / n,
	       (double)(u1.ru_nvcsw - u0.ru_nvcsw) / n, (double)(u1.ru_nivcsw - u0.ru_nivcsw) / n);
	return 0;
}
