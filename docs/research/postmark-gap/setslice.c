#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
struct sched_attr { uint32_t size, sched_policy; uint64_t sched_flags; int32_t sched_nice; uint32_t sched_priority; uint64_t sched_runtime, sched_deadline, sched_period; uint32_t util_min, util_max; };
int main(int argc, char **argv) {
  uint64_t ns = strtoull(argv[1], 0, 10);
  for (int i = 2; i < argc; i++) {
    struct sched_attr a; memset(&a, 0, sizeof a); a.size = sizeof a; a.sched_policy = 0; a.sched_runtime = ns;
    if (syscall(SYS_sched_setattr, atoi(argv[i]), &a, 0)) { perror("sched_setattr"); return 1; }
  }
  return 0;
}
