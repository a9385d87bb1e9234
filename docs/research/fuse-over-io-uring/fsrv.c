// Minimal FUSE server for a round-trip latency experiment: classic /dev/fuse
// read/write transport vs FUSE-over-io_uring (Linux >= 6.14).
//
// Namespace: "/" (ino 1) and "/f" (ino 2, 4096 bytes of 'x').
// Entry and attr timeouts are 0 so every stat/fstat is a round trip.
//
// usage: fsrv MOUNTPOINT classic|uring [opts]
//   env: QDEPTH=n   ring entries per queue (default 2)
//        NOPIN=1    do not pin queue thread q to CPU q
//        RFLAGS=hex extra io_uring setup flags (e.g. SINGLE_ISSUER|DEFER_TASKRUN = 0x3000)
//        THREADS=n  classic: n reader threads on the one fd (default 1)
//        NQ=n       register only queues 0..n-1 (to show the ring never becomes ready)
//        DEBUG=1    log requests
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- FUSE-over-io_uring uapi (include/uapi/linux/fuse.h, 7.42+) ---- */
#ifndef FUSE_OVER_IO_URING
#define FUSE_OVER_IO_URING (1ULL << 41)
#endif
#define FUSE_URING_IN_OUT_HEADER_SZ 128
#define FUSE_URING_OP_IN_OUT_SZ 128
struct fuse_uring_ent_in_out {
	uint64_t flags;
	uint64_t commit_id;
	uint32_t payload_sz;
	uint32_t padding;
	uint64_t reserved;
};
struct fuse_uring_req_header {
	char in_out[FUSE_URING_IN_OUT_HEADER_SZ];
	char op_in[FUSE_URING_OP_IN_OUT_SZ];
	struct fuse_uring_ent_in_out ring_ent_in_out;
};
enum fuse_uring_cmd {
	FUSE_IO_URING_CMD_INVALID = 0,
	FUSE_IO_URING_CMD_REGISTER = 1,
	FUSE_IO_URING_CMD_COMMIT_AND_FETCH = 2,
};
struct fuse_uring_cmd_req {
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;
	uint8_t padding[6];
};
_Static_assert(sizeof(struct fuse_uring_req_header) == 288, "hdr");
_Static_assert(sizeof(struct fuse_uring_cmd_req) == 24, "cmd");

#define MAX_WRITE (128 * 1024)
#define FILESZ 4096

static int devfd;
static int debug;
static const char *mnt;
static int nr_queues;
static int qdepth = 2;
static int nopin;
static unsigned rflags;
static size_t payload_sz;

static void fill_attr(struct fuse_attr *a, uint64_t ino)
{
	memset(a, 0, sizeof(*a));
	a->ino = ino;
	a->nlink = 1;
	a->blksize = 4096;
	if (ino == 1) {
		a->mode = S_IFDIR | 0755;
		a->nlink = 2;
	} else {
		a->mode = S_IFREG | 0644;
		a->size = FILESZ;
		a->blocks = FILESZ / 512;
	}
}

/*
 * Handle one request. in: fuse_in_header; arg: the op arguments (classic
 * layout: everything after the in header, concatenated). Writes the reply
 * args into out (max MAX_WRITE+) and returns their length, or a negative
 * errno. Returns INT32_MIN for "no reply" (FORGET).
 */
#define NOREPLY INT32_MIN
static int handle(const struct fuse_in_header *in, const char *arg, char *out)
{
	if (debug)
		fprintf(stderr, "op=%u unique=%llu nodeid=%llu len=%u\n", in->opcode,
			(unsigned long long)in->unique, (unsigned long long)in->nodeid, in->len);
	switch (in->opcode) {
	case FUSE_LOOKUP: {
		const char *name = arg;
		if (in->nodeid != 1 || strcmp(name, "f") != 0)
			return -ENOENT;
		struct fuse_entry_out *e = (void *)out;
		memset(e, 0, sizeof(*e));
		e->nodeid = 2;
		e->generation = 1;
		fill_attr(&e->attr, 2);
		return sizeof(*e);
	}
	case FUSE_GETATTR: {
		struct fuse_attr_out *a = (void *)out;
		memset(a, 0, sizeof(*a));
		fill_attr(&a->attr, in->nodeid);
		return sizeof(*a);
	}
	case FUSE_OPEN:
	case FUSE_OPENDIR: {
		struct fuse_open_out *o = (void *)out;
		memset(o, 0, sizeof(*o));
		o->fh = in->nodeid;
		o->open_flags = in->opcode == FUSE_OPEN ? FOPEN_DIRECT_IO : 0;
		return sizeof(*o);
	}
	case FUSE_READ: {
		const struct fuse_read_in *r = (const void *)arg;
		if (r->offset >= FILESZ)
			return 0;
		size_t n = r->size;
		if (r->offset + n > FILESZ)
			n = FILESZ - r->offset;
		memset(out, 'x', n);
		return n;
	}
	case FUSE_READDIR:
		return 0; /* empty directory listing (no . / ..) */
	case FUSE_RELEASE:
	case FUSE_RELEASEDIR:
	case FUSE_FLUSH:
		return 0;
	case FUSE_STATFS: {
		struct fuse_statfs_out *s = (void *)out;
		memset(s, 0, sizeof(*s));
		s->st.bsize = 4096;
		s->st.frsize = 4096;
		s->st.namelen = 255;
		return sizeof(*s);
	}
	case FUSE_FORGET:
	case FUSE_BATCH_FORGET:
		return NOREPLY;
	case FUSE_INTERRUPT:
		return NOREPLY;
	default:
		return -ENOSYS;
	}
}

/* ---------------- classic transport ---------------- */
static void classic_loop(void)
{
	char *rbuf = malloc(MAX_WRITE + 4096);
	char *obuf = malloc(MAX_WRITE + 4096);
	for (;;) {
		ssize_t n = read(devfd, rbuf, MAX_WRITE + 4096);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == ENOENT)
				continue;
			if (errno != ENODEV)
				perror("read /dev/fuse");
			return;
		}
		struct fuse_in_header *in = (void *)rbuf;
		int r = handle(in, rbuf + sizeof(*in), obuf + sizeof(struct fuse_out_header));
		if (r == NOREPLY)
			continue;
		struct fuse_out_header *oh = (void *)obuf;
		oh->unique = in->unique;
		oh->error = r < 0 ? r : 0;
		oh->len = sizeof(*oh) + (r > 0 ? r : 0);
		if (write(devfd, obuf, oh->len) < 0 && errno != ENOENT)
			perror("write /dev/fuse");
	}
}

/* ---------------- io_uring transport ---------------- */
struct ent {
	struct fuse_uring_req_header *hdr;
	char *payload;
	struct iovec iov[2];
	int qid;
	uint64_t commit_id;
};

static void prep_cmd(struct io_uring_sqe *sqe, struct ent *e, uint32_t op, uint64_t commit_id)
{
	memset(sqe, 0, 128); /* SQE128: 64-byte sqe + 64 more bytes of cmd area */
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = devfd;
	sqe->cmd_op = op;
	sqe->user_data = (uint64_t)(uintptr_t)e;
	if (op == FUSE_IO_URING_CMD_REGISTER) {
		sqe->addr = (uint64_t)(uintptr_t)e->iov;
		sqe->len = 2;
	}
	struct fuse_uring_cmd_req *c = (void *)sqe->cmd; /* 80 bytes at offset 48 */
	c->qid = e->qid;
	c->commit_id = commit_id;
	c->flags = 0;
}

static void *queue_thread(void *arg)
{
	int qid = (int)(intptr_t)arg;
	if (!nopin) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(qid, &set);
		if (sched_setaffinity(0, sizeof(set), &set))
			perror("sched_setaffinity");
	}
	struct io_uring ring;
	struct io_uring_params p = {0};
	p.flags = IORING_SETUP_SQE128 | rflags;
	int rc = io_uring_queue_init_params(qdepth * 2, &ring, &p);
	if (rc) {
		fprintf(stderr, "io_uring_queue_init q%d: %s\n", qid, strerror(-rc));
		exit(1);
	}
	struct ent *ents = calloc(qdepth, sizeof(*ents));
	for (int i = 0; i < qdepth; i++) {
		struct ent *e = &ents[i];
		e->qid = qid;
		e->hdr = aligned_alloc(4096, 4096);
		e->payload = aligned_alloc(4096, payload_sz);
		memset(e->hdr, 0, 4096);
		e->iov[0] = (struct iovec){e->hdr, sizeof(*e->hdr)};
		e->iov[1] = (struct iovec){e->payload, payload_sz};
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
		if (!sqe)
			abort();
		prep_cmd(sqe, e, FUSE_IO_URING_CMD_REGISTER, 0);
	}
	rc = io_uring_submit(&ring);
	if (rc != qdepth) {
		fprintf(stderr, "register submit q%d: %d\n", qid, rc);
		exit(1);
	}
	if (debug)
		fprintf(stderr, "q%d registered %d entries (payload %zu)\n", qid, qdepth, payload_sz);
	for (;;) {
		struct io_uring_cqe *cqe;
		rc = io_uring_submit_and_wait(&ring, 1);
		if (rc < 0 && rc != -EINTR) {
			fprintf(stderr, "submit_and_wait q%d: %s\n", qid, strerror(-rc));
			return NULL;
		}
		unsigned head, n = 0;
		io_uring_for_each_cqe(&ring, head, cqe) {
			n++;
			struct ent *e = (void *)(uintptr_t)cqe->user_data;
			if (cqe->res != 0) {
				if (cqe->res != -ENOTCONN || debug)
					fprintf(stderr, "q%d cqe res %d (%s)\n", qid, cqe->res, strerror(-cqe->res));
				io_uring_cq_advance(&ring, n);
				return NULL; /* teardown */
			}
			struct fuse_in_header *in = (void *)e->hdr->in_out;
			struct fuse_uring_ent_in_out *io = &e->hdr->ring_ent_in_out;
			/*
			 * Reassemble classic arg layout for handle(): op header
			 * (op_in, size by opcode) followed by payload. For the
			 * ops used here: READ has only op_in; LOOKUP has zero-size
			 * arg0 so the name is in the payload.
			 */
			const char *arg;
			char tmp[256];
			if (in->opcode == FUSE_LOOKUP)
				arg = e->payload;
			else {
				memcpy(tmp, e->hdr->op_in, 128);
				arg = tmp;
			}
			if (debug)
				fprintf(stderr, "q%d cpu%d commit_id=%llu payload_sz=%u\n", qid,
					sched_getcpu(), (unsigned long long)io->commit_id,
					io->payload_sz);
			uint64_t commit_id = io->commit_id;
			int r = handle(in, arg, e->payload);
			struct fuse_out_header *oh = (void *)e->hdr->in_out;
			uint64_t unique = in->unique;
			oh->unique = unique;
			oh->error = r < 0 ? r : 0;
			oh->len = sizeof(*oh) + (r > 0 ? r : 0);
			io->payload_sz = r > 0 ? r : 0;
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			if (!sqe)
				abort(); /* cannot happen: one SQE slot per entry */
			prep_cmd(sqe, e, FUSE_IO_URING_CMD_COMMIT_AND_FETCH, commit_id);
		}
		io_uring_cq_advance(&ring, n);
	}
}

static void reply_init(void)
{
	char buf[MAX_WRITE + 4096];
	ssize_t n = read(devfd, buf, sizeof(buf));
	if (n < 0) {
		perror("read INIT");
		exit(1);
	}
	struct fuse_in_header *in = (void *)buf;
	struct fuse_init_in *ii = (void *)(buf + sizeof(*in));
	if (in->opcode != FUSE_INIT) {
		fprintf(stderr, "expected INIT, got %u\n", in->opcode);
		exit(1);
	}
	uint64_t kflags = ii->flags | ((uint64_t)ii->flags2 << 32);
	if (debug)
		fprintf(stderr, "INIT %u.%u flags=%#llx\n", ii->major, ii->minor,
			(unsigned long long)kflags);
	struct {
		struct fuse_out_header oh;
		struct fuse_init_out io;
	} r;
	memset(&r, 0, sizeof(r));
	uint64_t want = FUSE_INIT_EXT | FUSE_MAX_PAGES;
	if (nr_queues) {
		if (!(kflags & FUSE_OVER_IO_URING)) {
			fprintf(stderr, "kernel does not offer FUSE_OVER_IO_URING (enable_uring=N?)\n");
			exit(1);
		}
		want |= FUSE_OVER_IO_URING;
	}
	want &= kflags;
	r.io.major = FUSE_KERNEL_VERSION;
	r.io.minor = FUSE_KERNEL_MINOR_VERSION;
	r.io.max_readahead = ii->max_readahead;
	r.io.flags = (uint32_t)want;
	r.io.flags2 = (uint32_t)(want >> 32);
	r.io.max_background = 16;
	r.io.congestion_threshold = 12;
	r.io.max_write = MAX_WRITE;
	r.io.max_pages = MAX_WRITE / 4096;
	r.oh.unique = in->unique;
	r.oh.len = sizeof(r);
	if (write(devfd, &r, sizeof(r)) != sizeof(r)) {
		perror("write INIT");
		exit(1);
	}
}

static void *dev_reader(void *arg)
{
	(void)arg;
	classic_loop();
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s MNT classic|uring\n", argv[0]);
		return 2;
	}
	mnt = argv[1];
	int uring = !strcmp(argv[2], "uring");
	debug = getenv("DEBUG") != NULL;
	nopin = getenv("NOPIN") != NULL;
	if (getenv("QDEPTH"))
		qdepth = atoi(getenv("QDEPTH"));
	if (getenv("RFLAGS"))
		rflags = strtoul(getenv("RFLAGS"), NULL, 16);
	/* kernel: ring->nr_queues = num_possible_cpus(); max_payload =
	 * max(FUSE_MIN_READ_BUFFER=8192, max_write, max_pages*PAGE_SIZE) */
	nr_queues = uring ? (int)sysconf(_SC_NPROCESSORS_CONF) : 0;
	payload_sz = MAX_WRITE > 8192 ? MAX_WRITE : 8192;
	if (getenv("PAYLOAD")) /* pitfall test: smaller than the kernel max_payload_sz */
		payload_sz = atoi(getenv("PAYLOAD"));

	devfd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (devfd < 0) {
		perror("open /dev/fuse");
		return 1;
	}
	char opts[128];
	snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other",
		 devfd);
	if (mount("fsrv", mnt, "fuse.fsrv", MS_NOSUID | MS_NODEV, opts)) {
		perror("mount");
		return 1;
	}
	reply_init(); /* fc->initialized is set once this write returns */
	pthread_t t;
	if (!uring) {
		int nthr = getenv("THREADS") ? atoi(getenv("THREADS")) : 1;
		for (int i = 1; i < nthr; i++)
			pthread_create(&t, NULL, dev_reader, NULL);
		classic_loop();
		return 0;
	}
	int nq = getenv("NQ") ? atoi(getenv("NQ")) : nr_queues; /* NQ<nr_queues: pitfall test */
	pthread_t qt[64];
	for (int q = 0; q < nq && q < 64; q++)
		pthread_create(&qt[q], NULL, queue_thread, (void *)(intptr_t)q);
	/* FORGET / INTERRUPT (and anything sent before the ring is ready)
	 * still arrive through read(/dev/fuse). */
	classic_loop();
	if (debug)
		fprintf(stderr, "read(/dev/fuse) loop ended; joining queue threads\n");
	for (int q = 0; q < nq && q < 64; q++)
		pthread_join(qt[q], NULL);
	if (debug)
		fprintf(stderr, "all queue threads ended\n");
	return 0;
}
