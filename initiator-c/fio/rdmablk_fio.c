/*
 * rdmablk_fio.c - fio external ioengine on the rdmablk C API (librdmablk_c).
 *
 *   make -C initiator-c/fio                 # -> build/fio-engine/librdmablk_fio.so
 *   fio --name=t --ioengine=external:build/fio-engine/librdmablk_fio.so \
 *       --filename='soft\://127.0.0.1\:4420/nqn.2026-11.io.rdmablk\:quickstart/1' \
 *       --rw=randread --bs=4k --iodepth=32 --time_based --runtime=10
 *
 * The file name is the target URL (colons escaped for fio) with the namespace ID as its
 * last path segment (default 1); or set rdmablk_url= (and rdmablk_nsid=). Connect options
 * ride in the URL's query (?io_queues=2&push=0 ...; NVMe/TCP over TLS: ?psk_file=/path).
 *
 * Each job connects its own controller (in the job's process or thread) and takes one I/O
 * queue for reads, writes and flushes (queued in a send batch that commit transmits, one
 * write per batch on the soft provider; reaped by getevents); trims run
 * as synchronous Dataset Management on the controller's other queue. The I/O memory fio
 * carves into io_u buffers is one registered buffer allocated by the iomem_alloc hook and
 * split into per-io_u pieces (zero copy); when the pieces would not be 4 KiB aligned (a
 * max block size that is not a multiple of 4 KiB), each io_u bounces through its own
 * registered buffer instead.
 *
 * Built against the headers of fio 3.33 (Debian 12's fio), configured for config-host.h.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fio.h"
#include "optgroup.h"

#include "rdmablk.h"

#define PAGE 4096u

struct rb_options {
	void *pad; /* fio's convention: options never live at offset 0 */
	char *url;
	unsigned int nsid;
};

static struct fio_option options[] = {
	{
		.name = "rdmablk_url",
		.lname = "rdmablk target URL",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct rb_options, url),
		.help = "soft://HOST:PORT/SUBNQN, rdma://IP:PORT/SUBNQN or tcp://HOST:PORT/SUBNQN (default: the file name)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "rdmablk_nsid",
		.lname = "rdmablk namespace ID",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct rb_options, nsid),
		.def = "0",
		.help = "Namespace ID (default: the file name's last segment, else 1)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{ .name = NULL },
};

struct rb_data {
	rdmablk_ctrl *ctrl;
	rdmablk_ns *ns;
	rdmablk_queue *q;
	rdmablk_buf *mem;       /* iomem_alloc's region (its first piece once split) */
	rdmablk_buf **io_buf;   /* per io_u index */
	rdmablk_buf **spare;    /* pieces of the region no io_u uses */
	unsigned int nr_io_buf, nr_spare;
	int zero_copy;
	rdmablk_completion *done;
	struct io_u **events;
	unsigned int depth;
	int batch_open;         /* rdmablk_batch_begin'd by queue; see rb_commit */
	unsigned int in_flight; /* submitted, not yet returned by getevents */
	int busy_open;          /* requests were in flight when the open batch began */
};

/* Transmits what the open send batch holds (fio's commit, and before any wait). */
static void end_batch(struct rb_data *d)
{
	if (d->batch_open) {
		rdmablk_batch_end();
		d->batch_open = 0;
	}
}

/*
 * When the open batch is sent. fio's defaults commit after every io_u and reap one
 * completion per getevents, so sending at each commit is one socket write (and one wake-up
 * of the target, on the soft provider) per I/O. Instead:
 * - a batch opened on an idle queue goes at its commit: the request's latency is its own;
 * - a batch opened while requests are in flight stays open across commits; getevents
 *   returns what has already finished without sending it, and sends it before it would
 *   wait (or return nothing). The io_us fio queues while it reaps a burst of completions
 *   therefore leave in one write, and nothing waits on a request that was not sent: fio
 *   reaps (getevents) before it can wait on anything else, and the batch also goes at
 *   cleanup.
 */
static int rb_commit(struct thread_data *td)
{
	struct rb_data *d = td->io_ops_data;

	if (!d->busy_open)
		end_batch(d);
	return 0;
}

static void begin_batch(struct rb_data *d)
{
	if (!d->batch_open) {
		d->batch_open = rdmablk_batch_begin() == 0;
		d->busy_open = d->in_flight > 0;
	}
}

/* Splits "URL[/NSID][?query]" into the controller URL and the namespace ID. */
static int parse_target(struct thread_data *td, const char *name, char *url, size_t cap,
			uint32_t *nsid)
{
	struct rb_options *o = td->eo;
	const char *query = strchr(name, '?');
	size_t path_len = query ? (size_t)(query - name) : strlen(name);
	const char *scheme = strstr(name, "://");
	const char *slash = NULL;

	*nsid = 1;
	if (scheme) {
		const char *first = memchr(scheme + 3, '/', path_len - (scheme + 3 - name));
		for (const char *p = name + path_len; p > name; p--)
			if (p[-1] == '/') {
				slash = p - 1;
				break;
			}
		if (first && slash && slash != first && slash + 1 < name + path_len &&
		    strspn(slash + 1, "0123456789") == (size_t)(name + path_len - slash - 1)) {
			*nsid = (uint32_t)strtoul(slash + 1, NULL, 10);
			path_len = (size_t)(slash - name);
		}
	}
	if (o->nsid)
		*nsid = o->nsid;
	if (snprintf(url, cap, "%.*s%s", (int)path_len, name, query ? query : "") >= (int)cap) {
		log_err("rdmablk: URL too long: %s\n", name);
		return 1;
	}
	return 0;
}

static const char *target_name(struct thread_data *td)
{
	struct rb_options *o = td->eo;

	return o->url ? o->url : td->files[0]->file_name;
}

/* Connects with options sized for this job; queue and pool follow iodepth and bs. */
static int rb_connect(struct thread_data *td, int probe, rdmablk_ctrl **ctrl, uint32_t *nsid)
{
	char url[4096], v[32];
	unsigned long long max_bs = td_max_bs(td), io_max = 128 << 10;
	rdmablk_opts *opts = rdmablk_opts_new();
	int rc;

	if (!opts || parse_target(td, target_name(td), url, sizeof(url), nsid))
		return 1;
	if (max_bs > io_max)
		io_max = (max_bs + PAGE - 1) / PAGE * PAGE;
	snprintf(v, sizeof(v), "%u", td->o.iodepth < 2 ? 2 : td->o.iodepth);
	rc = rdmablk_opts_set(opts, "queue_size", v);
	snprintf(v, sizeof(v), "%llu", io_max);
	rc = rc ?: rdmablk_opts_set(opts, "max_io_bytes", v);
	/* Room for the io_u memory twice (it is split, or bounced) and the sync calls. */
	snprintf(v, sizeof(v), "%llu", 2 * (td->o.iodepth * (max_bs + PAGE) + PAGE) + (8 << 20));
	rc = rc ?: rdmablk_opts_set(opts, "buffer_pool_bytes", v);
	if (probe)
		rc = rc ?: rdmablk_opts_set(opts, "kato_ms", "0");
	rc = rc ?: rdmablk_connect(url, opts, ctrl);
	rdmablk_opts_free(opts);
	if (rc) {
		log_err("rdmablk: %s: %s\n", url, rdmablk_errmsg());
		td_verror(td, -rc, "rdmablk connect");
		return 1;
	}
	return 0;
}

/* Connects, reads the namespace's capacity, disconnects. */
static int rb_probe(struct thread_data *td, uint64_t *capacity)
{
	rdmablk_ctrl *ctrl;
	rdmablk_ns *ns = NULL;
	rdmablk_ns_info info;
	uint32_t nsid;
	int rc;

	if (rb_connect(td, 1, &ctrl, &nsid))
		return 1;
	rc = rdmablk_ns_open(ctrl, nsid, &ns);
	rc = rc ?: rdmablk_ns_get_info(ns, &info);
	if (rc)
		log_err("rdmablk: namespace %u: %s\n", nsid, rdmablk_errmsg());
	else
		*capacity = info.capacity_bytes;
	rdmablk_ns_free(ns);
	rdmablk_ctrl_free(ctrl);
	return rc ? 1 : 0;
}

/* Runs in fio's main process before the jobs fork: learns the namespace size. The probe
 * connects in a child process of its own, so this process never opens an RDMA device: a
 * verbs device file opened before fork() cannot be used by the forked job (the kernel
 * refuses a uverbs write from a process whose credentials are not the opener's: "changed
 * security contexts after opening file descriptor"), and librdmacm keeps the devices it
 * opened for the life of the process. */
static int rb_setup(struct thread_data *td)
{
	struct rb_options *o = td->eo;
	uint64_t capacity = 0;
	int p[2], status;
	ssize_t n;
	pid_t pid;

	if (!td->files_index) {
		if (!o->url) {
			log_err("rdmablk: give the target as --filename or rdmablk_url=\n");
			return 1;
		}
		add_file(td, o->url, 0, 0);
		td->o.nr_files = td->o.nr_files ?: 1;
		td->o.open_files++;
	}
	if (td->files_index != 1) {
		log_err("rdmablk: one target per job (got %u files)\n", td->files_index);
		return 1;
	}
	if (pipe(p)) {
		log_err("rdmablk: pipe: %s\n", strerror(errno));
		return 1;
	}
	pid = fork();
	if (pid < 0) {
		log_err("rdmablk: fork: %s\n", strerror(errno));
		close(p[0]);
		close(p[1]);
		return 1;
	}
	if (pid == 0) {
		close(p[0]);
		if (rb_probe(td, &capacity) ||
		    write(p[1], &capacity, sizeof(capacity)) != (ssize_t)sizeof(capacity))
			_exit(1);
		_exit(0);
	}
	close(p[1]);
	do
		n = read(p[0], &capacity, sizeof(capacity));
	while (n < 0 && errno == EINTR);
	close(p[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (n != (ssize_t)sizeof(capacity) || !WIFEXITED(status) || WEXITSTATUS(status))
		return 1; /* the probe printed why */
	td->files[0]->real_file_size = capacity;
	fio_file_set_size_known(td->files[0]);
	return 0;
}

static int rb_init(struct thread_data *td)
{
	struct rb_data *d = calloc(1, sizeof(*d));
	uint32_t nsid;
	int rc;

	if (!d)
		return 1;
	td->io_ops_data = d;
	if (rb_connect(td, 0, &d->ctrl, &nsid))
		return 1;
	rc = rdmablk_ns_open(d->ctrl, nsid, &d->ns);
	rc = rc ?: rdmablk_queue_open(d->ctrl, nsid, &d->q);
	if (rc) {
		log_err("rdmablk: namespace %u: %s\n", nsid, rdmablk_errmsg());
		td_verror(td, -rc, "rdmablk open");
		return 1;
	}
	d->depth = td->o.iodepth;
	d->done = calloc(d->depth, sizeof(*d->done));
	d->events = calloc(d->depth, sizeof(*d->events));
	d->io_buf = calloc(d->depth, sizeof(*d->io_buf));
	d->spare = calloc(d->depth + 2, sizeof(*d->spare));
	return !d->done || !d->events || !d->io_buf || !d->spare;
}

/* fio's I/O memory: one registered buffer, split per io_u in post_init. */
static int rb_iomem_alloc(struct thread_data *td, size_t total)
{
	struct rb_data *d = td->io_ops_data;
	int rc = rdmablk_buf_alloc(d->ctrl, total, &d->mem);

	if (rc) {
		log_err("rdmablk: I/O memory of %zu bytes: %s\n", total, rdmablk_errmsg());
		return 1;
	}
	td->orig_buffer = rdmablk_buf_data(d->mem);
	return 0;
}

/* Whether every io_u buffer starts on a page and they follow each other max_bs apart. */
static int can_split(struct thread_data *td, unsigned long long max_bs)
{
	char *base = td->orig_buffer;
	unsigned long long prev_end = 0;

	if (max_bs % PAGE)
		return 0;
	for (int i = 0; i < td->io_u_all.nr; i++) {
		unsigned long long off = (unsigned long long)((char *)td->io_u_all.io_us[i]->buf - base);

		if (off % PAGE || off < prev_end || off + max_bs > td->orig_buffer_size + PAGE)
			return 0;
		prev_end = off + max_bs;
	}
	return 1;
}

static int split_memory(struct thread_data *td, unsigned long long max_bs)
{
	struct rb_data *d = td->io_ops_data;
	rdmablk_buf *rest = d->mem;
	unsigned long long at = 0; /* offset of `rest` in the region */

	for (int i = 0; i < td->io_u_all.nr; i++) {
		struct io_u *io_u = td->io_u_all.io_us[i];
		unsigned long long off = (unsigned long long)((char *)io_u->buf - (char *)td->orig_buffer);
		rdmablk_buf *tail = NULL;

		if (off > at) { /* a gap (alignment): keep it aside */
			if (rdmablk_buf_split(rest, off - at, &tail))
				return 1;
			d->spare[d->nr_spare++] = rest;
			rest = tail;
			at = off;
		}
		if (rdmablk_buf_len(rest) > max_bs) {
			if (rdmablk_buf_split(rest, max_bs, &tail))
				return 1;
		} else {
			tail = NULL;
		}
		d->io_buf[io_u->index] = rest;
		rest = tail;
		at += max_bs;
	}
	if (rest)
		d->spare[d->nr_spare++] = rest;
	d->mem = NULL; /* now owned piece by piece */
	return 0;
}

static int rb_post_init(struct thread_data *td)
{
	struct rb_data *d = td->io_ops_data;
	unsigned long long max_bs = td_max_bs(td);

	if (!d->mem)
		return 0; /* no data transfer */
	d->zero_copy = can_split(td, max_bs);
	if (d->zero_copy) {
		if (split_memory(td, max_bs)) {
			log_err("rdmablk: splitting the I/O memory: %s\n", rdmablk_errmsg());
			return 1;
		}
	} else {
		log_info("rdmablk: max block size %llu is not a multiple of 4 KiB: bouncing\n", max_bs);
		for (int i = 0; i < td->io_u_all.nr; i++)
			if (rdmablk_buf_alloc(d->ctrl, max_bs, &d->io_buf[i])) {
				log_err("rdmablk: bounce buffer: %s\n", rdmablk_errmsg());
				return 1;
			}
	}
	d->nr_io_buf = td->io_u_all.nr;
	return 0;
}

static enum fio_q_status rb_queue(struct thread_data *td, struct io_u *io_u)
{
	struct rb_data *d = td->io_ops_data;
	rdmablk_buf *b = d->io_buf[io_u->index];
	uint32_t op;
	int rc;

	fio_ro_check(td, io_u);
	switch (io_u->ddir) {
	case DDIR_READ:
	case DDIR_WRITE:
		op = io_u->ddir == DDIR_READ ? RDMABLK_OP_READ : RDMABLK_OP_WRITE;
		if (d->zero_copy && io_u->xfer_buf != io_u->buf) {
			io_u->error = EINVAL; /* only after a short transfer, which never happens */
			return FIO_Q_COMPLETED;
		}
		if (!d->zero_copy && op == RDMABLK_OP_WRITE)
			memcpy(rdmablk_buf_data(b), io_u->xfer_buf, io_u->xfer_buflen);
		begin_batch(d);
		rc = rdmablk_queue_submit(d->q, op, io_u->offset, (uint32_t)io_u->xfer_buflen, b,
					  (uintptr_t)io_u);
		break;
	case DDIR_SYNC:
	case DDIR_DATASYNC:
		begin_batch(d);
		rc = rdmablk_queue_submit(d->q, RDMABLK_OP_FLUSH, 0, 0, b, (uintptr_t)io_u);
		break;
	case DDIR_TRIM:
		/* Synchronous, on its own command: what the batch holds goes first. */
		end_batch(d);
		rc = rdmablk_ns_discard(d->ns, io_u->offset, io_u->xfer_buflen);
		if (rc) {
			io_u->error = -rc;
			td_verror(td, io_u->error, rdmablk_errmsg());
		}
		return FIO_Q_COMPLETED;
	default:
		io_u->error = EINVAL;
		return FIO_Q_COMPLETED;
	}
	if (rc == -EAGAIN)
		return FIO_Q_BUSY;
	if (rc) {
		io_u->error = -rc;
		td_verror(td, io_u->error, rdmablk_errmsg());
		return FIO_Q_COMPLETED;
	}
	d->in_flight++;
	return FIO_Q_QUEUED;
}

static int rb_getevents(struct thread_data *td, unsigned int min, unsigned int max,
			const struct timespec *t)
{
	struct rb_data *d = td->io_ops_data;
	int n, m;

	(void)t; /* waits are bounded by the controller's I/O timeout */
	if (max > d->depth)
		max = d->depth;
	n = 0;
	if (d->batch_open) {
		/* What has finished goes back without sending the batch (see rb_commit). */
		n = rdmablk_queue_poll(d->q, d->done, max);
		if (n < 0) {
			td_verror(td, -n, rdmablk_errmsg());
			return n;
		}
	}
	if (n == 0 || (unsigned int)n < min) {
		end_batch(d);
		m = rdmablk_queue_wait(d->q, d->done + n, max - (unsigned int)n,
				       min - (unsigned int)n);
		if (m < 0) {
			if (n == 0) {
				td_verror(td, -m, rdmablk_errmsg());
				return m;
			}
			m = 0; /* deliver what was polled; the error comes back at the next call */
		}
		n += m;
	}
	d->in_flight -= (unsigned int)n;
	for (int i = 0; i < n; i++) {
		rdmablk_completion *c = &d->done[i];
		struct io_u *io_u = (struct io_u *)(uintptr_t)c->tag;

		io_u->error = c->result < 0 ? -c->result : 0;
		if (io_u->error)
			log_err("rdmablk: I/O at %llu failed: %s (NVMe status %#x)\n",
				io_u->offset, strerror(io_u->error), c->nvme_status);
		else if (!d->zero_copy && c->op == RDMABLK_OP_READ)
			memcpy(io_u->xfer_buf, rdmablk_buf_data(c->buf), c->len);
		d->events[i] = io_u;
	}
	return n;
}

static struct io_u *rb_event(struct thread_data *td, int ev)
{
	struct rb_data *d = td->io_ops_data;

	return d->events[ev];
}

static void free_buffers(struct rb_data *d)
{
	for (unsigned int i = 0; i < d->nr_io_buf; i++)
		rdmablk_buf_free(d->io_buf[i]);
	for (unsigned int i = 0; i < d->nr_spare; i++)
		rdmablk_buf_free(d->spare[i]);
	rdmablk_buf_free(d->mem);
	d->nr_io_buf = d->nr_spare = 0;
	d->mem = NULL;
}

static void rb_iomem_free(struct thread_data *td)
{
	struct rb_data *d = td->io_ops_data;

	if (d)
		free_buffers(d);
}

static void rb_cleanup(struct thread_data *td)
{
	struct rb_data *d = td->io_ops_data;

	if (!d)
		return;
	end_batch(d);
	rdmablk_queue_free(d->q); /* waits for requests in flight, first */
	free_buffers(d);
	rdmablk_ns_free(d->ns);
	rdmablk_ctrl_free(d->ctrl);
	free(d->done);
	free(d->events);
	free(d->io_buf);
	free(d->spare);
	free(d);
	td->io_ops_data = NULL;
}

static int rb_open_file(struct thread_data *td, struct fio_file *f)
{
	(void)td;
	(void)f;
	return 0;
}

static int rb_close_file(struct thread_data *td, struct fio_file *f)
{
	(void)td;
	(void)f;
	return 0;
}

static int rb_get_file_size(struct thread_data *td, struct fio_file *f)
{
	(void)td;
	fio_file_set_size_known(f); /* set by setup */
	return 0;
}

static int rb_invalidate(struct thread_data *td, struct fio_file *f)
{
	(void)td;
	(void)f;
	return 0;
}

struct ioengine_ops ioengine = {
	.name = "rdmablk",
	.version = FIO_IOOPS_VERSION,
	.flags = FIO_DISKLESSIO | FIO_NOEXTEND,
	.setup = rb_setup,
	.init = rb_init,
	.post_init = rb_post_init,
	.queue = rb_queue,
	.commit = rb_commit,
	.getevents = rb_getevents,
	.event = rb_event,
	.cleanup = rb_cleanup,
	.open_file = rb_open_file,
	.close_file = rb_close_file,
	.invalidate = rb_invalidate,
	.get_file_size = rb_get_file_size,
	.iomem_alloc = rb_iomem_alloc,
	.iomem_free = rb_iomem_free,
	.options = options,
	.option_struct_size = sizeof(struct rb_options),
};
