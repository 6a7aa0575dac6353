/* Input to bindgen (build.rs): the libibverbs and librdmacm APIs, and our shim. */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include "shim.h"
