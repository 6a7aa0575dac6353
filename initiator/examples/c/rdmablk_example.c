/*
 * rdmablk_example.c - the C API end to end, with data verification.
 *
 *   cc -Wall -Iinitiator-c/include initiator/examples/c/rdmablk_example.c \
 *      -Lbuild/debug -lrdmablk_c -Wl,-rpath,$PWD/build/debug -o rdmablk_example
 *   ./rdmablk_example soft://127.0.0.1:4420/nqn.2026-11.io.rdmablk:quickstart
 *
 * Writes and reads back patterns with the synchronous calls (plain memory and registered
 * buffers), Write Zeroes, Discard, Flush, then a full queue of asynchronous writes and reads
 * with tags, and checks the error model (errno, message, a full queue). Exits 0 and prints
 * "rdmablk_example: ok" when every check passed. Run by initiator-c/tests/c_example.rs, once
 * under AddressSanitizer.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdmablk.h"

#define CHECK(call)                                                                  \
	do {                                                                         \
		int rc_ = (call);                                                    \
		if (rc_ < 0) {                                                       \
			fprintf(stderr, "%s:%d: %s = %d (%s)\n", __FILE__, __LINE__, \
				#call, rc_, rdmablk_errmsg());                      \
			exit(1);                                                     \
		}                                                                    \
	} while (0)

#define EXPECT(cond)                                                              \
	do {                                                                      \
		if (!(cond)) {                                                    \
			fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, \
				#cond);                                           \
			exit(1);                                                  \
		}                                                                 \
	} while (0)

/* Byte i of a pattern for byte offset `off` of the namespace, pass `pass`. */
static uint8_t pattern_byte(uint64_t off, uint8_t pass)
{
	return (uint8_t)((off ^ (off >> 9) ^ (off >> 17)) ^ (uint8_t)(pass * 0x5B));
}

static void fill(uint8_t *p, size_t len, uint64_t off, uint8_t pass)
{
	for (size_t i = 0; i < len; i++)
		p[i] = pattern_byte(off + i, pass);
}

static int matches(const uint8_t *p, size_t len, uint64_t off, uint8_t pass)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != pattern_byte(off + i, pass))
			return 0;
	return 1;
}

static void sync_calls(rdmablk_ctrl *ctrl, rdmablk_ns *ns, const rdmablk_ns_info *info)
{
	size_t bs = info->block_size;
	uint64_t off = 0;

	/* Plain memory, one block to 1 MiB (split into commands by the library). */
	for (size_t len = bs; len <= (1u << 20); len *= 4) {
		uint8_t *w = malloc(len), *r = malloc(len);
		EXPECT(w && r);
		fill(w, len, off, 1);
		CHECK(rdmablk_ns_write(ns, off, w, len));
		memset(r, 0, len);
		CHECK(rdmablk_ns_read(ns, off, r, len));
		EXPECT(matches(r, len, off, 1));
		free(w);
		free(r);
		off += len;
	}

	/* Registered buffers: zero copy. */
	rdmablk_buf *b;
	CHECK(rdmablk_buf_alloc(ctrl, 64 * 1024, &b));
	EXPECT(rdmablk_buf_len(b) == 64 * 1024);
	EXPECT(((uintptr_t)rdmablk_buf_data(b) & 4095) == 0);
	fill(rdmablk_buf_data(b), 64 * 1024, off, 2);
	CHECK(rdmablk_ns_write_buf(ns, off, b));
	memset(rdmablk_buf_data(b), 0, 64 * 1024);
	CHECK(rdmablk_ns_read_buf(ns, off, b));
	EXPECT(matches(rdmablk_buf_data(b), 64 * 1024, off, 2));

	/* Write Zeroes reads back as zeroes; Discard and Flush succeed. */
	CHECK(rdmablk_ns_write_zeroes(ns, off, 8 * bs));
	CHECK(rdmablk_ns_read_buf(ns, off, b));
	for (size_t i = 0; i < 8 * bs; i++)
		EXPECT(((uint8_t *)rdmablk_buf_data(b))[i] == 0);
	EXPECT(matches((uint8_t *)rdmablk_buf_data(b) + 8 * bs, 64 * 1024 - 8 * bs, off + 8 * bs, 2));
	CHECK(rdmablk_ns_discard(ns, off + 8 * bs, 4 * bs));
	CHECK(rdmablk_ns_flush(ns));
	CHECK(rdmablk_buf_free(b));
}

static void async_queue(rdmablk_ctrl *ctrl, const rdmablk_ns_info *info)
{
	rdmablk_queue *q;
	CHECK(rdmablk_queue_open(ctrl, info->nsid, &q));
	uint32_t depth = rdmablk_queue_depth(q);
	EXPECT(depth >= 2);
	size_t len = 16 * 1024;
	uint64_t base = 8u << 20;
	rdmablk_buf **bufs = calloc(depth + 1, sizeof(*bufs));
	rdmablk_completion *done = calloc(depth, sizeof(*done));
	EXPECT(bufs && done);
	for (uint32_t i = 0; i <= depth; i++)
		CHECK(rdmablk_buf_alloc(ctrl, len, &bufs[i]));

	for (int pass = 0; pass < 2; pass++) {
		uint32_t op = pass == 0 ? RDMABLK_OP_WRITE : RDMABLK_OP_READ;
		for (uint32_t i = 0; i < depth; i++) {
			if (op == RDMABLK_OP_WRITE)
				fill(rdmablk_buf_data(bufs[i]), len, base + i * len, 3);
			else
				memset(rdmablk_buf_data(bufs[i]), 0, len);
			CHECK(rdmablk_queue_submit(q, op, base + i * len, len, bufs[i], 1000 + i));
		}
		/* A full queue is a value, and a buffer in flight cannot be submitted or freed. */
		EXPECT(rdmablk_queue_submit(q, op, base, len, bufs[depth], 1) == -EAGAIN);
		EXPECT(rdmablk_queue_submit(q, op, base, len, bufs[0], 1) == -EBUSY);
		EXPECT(rdmablk_buf_free(bufs[0]) == -EBUSY);
		uint32_t seen = 0;
		while (seen < depth) {
			int n = rdmablk_queue_wait(q, done, depth, 1);
			CHECK(n);
			for (int k = 0; k < n; k++) {
				rdmablk_completion *c = &done[k];
				uint32_t i = (uint32_t)(c->tag - 1000);
				EXPECT(i < depth && c->buf == bufs[i] && c->op == op);
				EXPECT(c->result == 0 && c->nvme_status == 0);
				EXPECT(c->offset == base + i * len && c->len == len);
				if (op == RDMABLK_OP_READ)
					EXPECT(matches(rdmablk_buf_data(c->buf), len, c->offset, 3));
			}
			seen += (uint32_t)n;
		}
		EXPECT(rdmablk_queue_in_flight(q) == 0);
	}

	/* Flush through the queue; then leave one read in flight: free waits for it. */
	CHECK(rdmablk_queue_submit(q, RDMABLK_OP_FLUSH, 0, 0, bufs[0], 7));
	EXPECT(rdmablk_queue_wait(q, done, 1, 1) == 1 && done[0].tag == 7 && done[0].result == 0);
	CHECK(rdmablk_queue_submit(q, RDMABLK_OP_READ, base, len, bufs[1], 8));
	rdmablk_queue_free(q);
	for (uint32_t i = 0; i <= depth; i++)
		CHECK(rdmablk_buf_free(bufs[i]));
	free(bufs);
	free(done);
}

static void errors(rdmablk_ctrl *ctrl, rdmablk_ns *ns, const rdmablk_ns_info *info)
{
	uint8_t block[4096];
	rdmablk_ctrl *none = NULL;
	rdmablk_ns *no_ns = NULL;

	EXPECT(rdmablk_ns_read(ns, info->capacity_bytes, block, info->block_size) == -ERANGE);
	EXPECT(strstr(rdmablk_errmsg(), "past the end") != NULL);
	EXPECT(rdmablk_ns_read(ns, 1, block, info->block_size) == -EINVAL);
	EXPECT(rdmablk_ns_open(ctrl, 999, &no_ns) == -ENODEV && no_ns == NULL);
	EXPECT(rdmablk_connect("http://nowhere", NULL, &none) == -EINVAL && none == NULL);
	EXPECT(strstr(rdmablk_errmsg(), "invalid target URL") != NULL);
	rdmablk_opts *o = rdmablk_opts_new();
	EXPECT(rdmablk_opts_set(o, "no_such_option", "1") == -EINVAL);
	EXPECT(rdmablk_opts_set(o, "queue_size", "many") == -EINVAL);
	rdmablk_opts_free(o);
	EXPECT(rdmablk_queue_submit(NULL, RDMABLK_OP_READ, 0, 0, NULL, 0) == -EINVAL);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s URL   (soft://127.0.0.1:4420/NQN)\n", argv[0]);
		return 2;
	}
	printf("librdmablk_c %s\n", rdmablk_version());
	rdmablk_opts *opts = rdmablk_opts_new();
	EXPECT(opts != NULL);
	CHECK(rdmablk_opts_set(opts, "io_queues", "2"));
	CHECK(rdmablk_opts_set(opts, "queue_size", "32"));
	CHECK(rdmablk_opts_set(opts, "kato_ms", "5000"));
	CHECK(rdmablk_opts_set(opts, "push", "1"));
	rdmablk_ctrl *ctrl;
	CHECK(rdmablk_connect(argv[1], opts, &ctrl));
	rdmablk_opts_free(opts);

	rdmablk_ns *ns;
	rdmablk_ns_info info;
	CHECK(rdmablk_ns_open(ctrl, 1, &ns));
	CHECK(rdmablk_ns_get_info(ns, &info));
	printf("namespace %" PRIu32 ": %" PRIu64 " bytes, %" PRIu32 "-byte blocks, "
	       "%" PRIu32 " bytes per command\n",
	       info.nsid, info.capacity_bytes, info.block_size, info.max_transfer_bytes);
	EXPECT(info.capacity_bytes >= (16u << 20));

	sync_calls(ctrl, ns, &info);
	async_queue(ctrl, &info);
	errors(ctrl, ns, &info);

	rdmablk_ns_free(ns);
	rdmablk_ctrl_free(ctrl);
	printf("rdmablk_example: ok\n");
	return 0;
}
