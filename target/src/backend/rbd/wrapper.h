/* What bindgen reads for the RBD backend (target/build.rs, feature `rbd`). */
#include <rados/librados.h>
#include <rbd/librbd.h>
