#ifndef TRIBUTARY_CLMDB_SHIM_H
#define TRIBUTARY_CLMDB_SHIM_H
#include <lmdb.h>
#endif
