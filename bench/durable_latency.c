// Durable small writes with a latency timeline (docs/BENCHMARKS.md, background checkpoints).
// Usage: durable_latency DIR THREADS SECONDS
// Each thread creates new files in DIR (open O_CREAT|O_EXCL, one 4 KiB write, fsync, close)
// until SECONDS have passed. Prints the writes per second, the longest create-to-close time,
// how many 100 ms intervals saw no write complete (a stall), and the fewest that did.
// Build: gcc -O2 -Wall -pthread -o durable_latency bench/durable_latency.c
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define THREADS_MAX 64
#define SLOTS_MAX 100000 /* 100 ms slots: at most 10,000 s */

static const char *dir;
static double duration_s, start_s;
static char buf[4096];
static long slots[SLOTS_MAX];
static double latency_max_s[THREADS_MAX];
static long writes[THREADS_MAX];

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *work(void *arg) {
    long t = (long)arg;
    char path[4096];
    for (long i = 0;; i++) {
        double begin = now_s();
        if (begin - start_s > duration_s) break;
        snprintf(path, sizeof path, "%s/t%ld-%ld", dir, t, i);
        int fd = open(path, O_CREAT | O_WRONLY | O_EXCL, 0644);
        if (fd < 0) { perror(path); exit(1); }
        if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) { perror("write"); exit(1); }
        if (fsync(fd)) { perror("fsync"); exit(1); }
        if (close(fd)) { perror("close"); exit(1); }
        double end = now_s();
        if (end - begin > latency_max_s[t]) latency_max_s[t] = end - begin;
        writes[t]++;
        long slot = (long)((end - start_s) * 10);
        if (slot < SLOTS_MAX) __sync_fetch_and_add(&slots[slot], 1);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s DIR THREADS SECONDS\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    int threads = atoi(argv[2]);
    duration_s = atof(argv[3]);
    if (threads < 1 || threads > THREADS_MAX || duration_s <= 0 || duration_s >= SLOTS_MAX / 10) {
        fprintf(stderr, "THREADS must be 1..%d and SECONDS in (0, %d)\n", THREADS_MAX, SLOTS_MAX / 10);
        return 2;
    }
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (char)rand(); /* not compressible */
    pthread_t th[THREADS_MAX];
    start_s = now_s();
    for (long t = 0; t < threads; t++) pthread_create(&th[t], 0, work, (void *)t);
    for (int t = 0; t < threads; t++) pthread_join(th[t], 0);
    long total = 0;
    double latency_max = 0;
    for (int t = 0; t < threads; t++) {
        total += writes[t];
        if (latency_max_s[t] > latency_max) latency_max = latency_max_s[t];
    }
    int empty = 0;
    long fewest = -1;
    for (long s = 0; s < (long)(duration_s * 10); s++) {
        if (slots[s] == 0) empty++;
        if (fewest < 0 || slots[s] < fewest) fewest = slots[s];
    }
    printf("writes/s %.0f  max latency %.1f ms  empty 100ms slots %d  min per slot %ld\n",
           total / duration_s, latency_max * 1e3, empty, fewest);
    return 0;
}
