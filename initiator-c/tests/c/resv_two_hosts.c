/* Two hosts (distinct host NQNs and host IDs) on one namespace through the C API: A takes
 * Write Exclusive, B's write gets Reservation Conflict (NVMe status 0x83) while its read goes
 * through, B preempts A, the report shows B holding, B clears. Usage: resv_two_hosts URL.
 * Prints "resv_two_hosts: ok" and exits 0, or names the failed step and exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdmablk.h"

#define CHECK(what, expr)                                                                  \
	do {                                                                               \
		if (!(expr)) {                                                             \
			fprintf(stderr, "resv_two_hosts: %s failed: %s (status 0x%x)\n", what,   \
				rdmablk_errmsg(), rdmablk_nvme_status());                         \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

static struct rdmablk_ns *open_as(const char *url, const char *hostnqn, const char *hostid,
				  struct rdmablk_ctrl **ctrl)
{
	struct rdmablk_opts *o = rdmablk_opts_new();
	struct rdmablk_ns *ns = NULL;
	CHECK("opts", o && rdmablk_opts_set(o, "hostnqn", hostnqn) == 0 &&
			      rdmablk_opts_set(o, "hostid", hostid) == 0);
	CHECK("connect", rdmablk_connect(url, o, ctrl) == 0);
	CHECK("open namespace 1", rdmablk_ns_open(*ctrl, 1, &ns) == 0);
	rdmablk_opts_free(o);
	return ns;
}

int main(int argc, char **argv)
{
	struct rdmablk_ctrl *ca, *cb;
	struct rdmablk_ns *a, *b;
	struct rdmablk_resv_status st;
	struct rdmablk_registrant regs[4];
	char block[4096];

	if (argc != 2) {
		fprintf(stderr, "usage: resv_two_hosts URL\n");
		return 2;
	}
	memset(block, 7, sizeof(block));
	a = open_as(argv[1], "nqn.2014-08.org.nvmexpress:uuid:72657376-0000-4000-8000-00000000000a",
		    "72657376-0000-4000-8000-00000000000a", &ca);
	b = open_as(argv[1], "nqn.2014-08.org.nvmexpress:uuid:72657376-0000-4000-8000-00000000000b",
		    "72657376-0000-4000-8000-00000000000b", &cb);

	CHECK("A registers", rdmablk_resv_register(a, 0, 0, 1, 0, 0) == 0);
	CHECK("A acquires", rdmablk_resv_acquire(a, 0, 1, 1, 0) == 0);
	CHECK("A writes", rdmablk_ns_write(a, 0, block, sizeof(block)) == 0);
	CHECK("B's write refused", rdmablk_ns_write(b, 0, block, sizeof(block)) != 0 &&
					   (rdmablk_nvme_status() & 0x7ff) == 0x83);
	CHECK("B reads", rdmablk_ns_read(b, 0, block, sizeof(block)) == 0);
	CHECK("B registers", rdmablk_resv_register(b, 0, 0, 2, 0, 0) == 0);
	CHECK("B preempts A", rdmablk_resv_acquire(b, 1, 1, 2, 1) == 0);
	CHECK("report", rdmablk_resv_report(a, &st, regs, 4) == 0);
	CHECK("B holds alone", st.rtype == 1 && st.registrants == 1 && regs[0].rkey == 2 &&
				       regs[0].holds && regs[0].hostid[15] == 0x0b);
	CHECK("A's write refused", rdmablk_ns_write(a, 0, block, sizeof(block)) != 0 &&
					   (rdmablk_nvme_status() & 0x7ff) == 0x83);
	CHECK("a bad action", rdmablk_resv_release(b, 5, 1, 2) != 0);
	CHECK("B clears", rdmablk_resv_release(b, 1, 0, 2) == 0);
	CHECK("report after the clear", rdmablk_resv_report(b, &st, NULL, 0) == 0 &&
						st.rtype == 0 && st.registrants == 0);
	CHECK("A writes again", rdmablk_ns_write(a, 0, block, sizeof(block)) == 0);

	rdmablk_ns_free(a);
	rdmablk_ns_free(b);
	rdmablk_ctrl_free(ca);
	rdmablk_ctrl_free(cb);
	printf("resv_two_hosts: ok\n");
	return 0;
}
