#ifndef TC_POSTGRES_SHIM_H
#define TC_POSTGRES_SHIM_H
#include <libpq-fe.h>
#endif
