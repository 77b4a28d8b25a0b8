// SQLITE_TRANSIENT is a cast of -1 to a function pointer, which Swift cannot import.
#ifndef TRANSCODERD_CSQLITE_SHIM_H
#define TRANSCODERD_CSQLITE_SHIM_H
#include <sqlite3.h>
static inline sqlite3_destructor_type tc_sqlite_transient(void) { return SQLITE_TRANSIENT; }
#endif
