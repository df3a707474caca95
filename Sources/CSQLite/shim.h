#ifndef TRIBUTARY_CSQLITE_SHIM_H
#define TRIBUTARY_CSQLITE_SHIM_H
#include <sqlite3.h>
#endif
